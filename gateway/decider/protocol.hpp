#pragma once
// What sluice asks a decider and what it understands back ([decider], docs/policy.md "An external
// decider"): the question is one JSON object built from the exchange (no I/O here); the answer is
// parsed into `answer`; answers are kept in a bounded cache keyed by what the decider said they
// depend on.
#include "filters/decider_config.hpp"
#include "gateway/exchange/exchange.hpp"

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sluice::gateway::decider {

// Who asks, besides the request: the client and its role (serve), the skill and command (exec).
struct asker {
  std::string_view client, role, skill, command_id, profile;
};

// The question: method, scheme, host, port, path, query, target, protocol, fields (all but
// Authorization, Proxy-Authorization and Cookie, names in lower case), the asker, and the file's
// own verdict ({decision, reason, rule}).
boost::json::object question(const exchange::request &r, const exchange::verdict &v, const exchange::outcome &o,
                             const asker &who);
// A CONNECT (or a captured connection) the allowlist does not name: host and port only. With
// `allowed_by` (when = "all"), a connection the file allows under that rule, whose bytes sluice
// does not read (an allowlist tunnel, `protocol` "connect", or relayed TCP, "tcp").
boost::json::object connect_question(const exchange::outcome &o, const asker &who, std::string_view protocol = "connect",
                                     const std::string *allowed_by = nullptr);
// The request's body, for a decider that asked for it: "body" as text where it is UTF-8, else
// "body_base64"; "body_bytes" its length either way.
void add_body(boost::json::object &question, std::string_view body);

struct answer {
  // body: ask again with the request's body (a request only; the answer to that must be another).
  enum kind_t { allow, deny, ask, timeout, unavailable, body } kind = unavailable;
  unsigned status = 0;  // deny: the status the client gets (a 4xx; 0: 403)
  std::string message;  // deny: shown to the client; unavailable: what went wrong (for the operator)
  std::vector<std::pair<std::string, std::string>> set; // allow: fields to set
  std::vector<std::string> remove;                       // allow: fields to take off
  std::chrono::seconds keep{0};                          // how long it may be cached
  std::vector<std::string> depends_on;                   // the question's keys it depends on
  bool cached = false;
};
std::string_view to_string(answer::kind_t k);
// The refusal reason of an answer that refuses: decider_denied, decider_timeout, decider_unavailable
// (empty for allow and ask). One place, for the gateway's requests, its CONNECTs and `sluice check`.
std::string_view refusal_of(answer::kind_t k);

// The decider's result: true (allow), false (deny), or an object with "decision" ("allow", "deny",
// "ask", "body"), "reason", "status", "set_fields", "remove_fields" and "cache" ({seconds, keys}). An
// answer sluice cannot use is `unavailable`, saying why.
answer parse_result(const boost::json::value &result);

// Answers kept for the time the decider allowed (at most cache_seconds), at most `entries` of them.
class answer_cache {
public:
  answer_cache(std::chrono::seconds longest, std::size_t entries) : longest_(longest), entries_(entries) {}
  std::optional<answer> find(const boost::json::object &q);
  void keep(const boost::json::object &q, const answer &a);

private:
  using clock = std::chrono::steady_clock;
  static std::string key_of(const std::vector<std::string> &keys, const boost::json::object &q);
  std::chrono::seconds longest_;
  std::size_t entries_;
  std::mutex mutex_;
  // The sets of keys answers depended on (few: a decider's rules name a handful), each tried in turn.
  std::vector<std::vector<std::string>> shapes_;
  std::unordered_map<std::string, std::pair<answer, clock::time_point>> kept_;
};

} // namespace sluice::gateway::decider
