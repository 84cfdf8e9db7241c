#pragma once
// The exchange: one request as every protocol hands it to the judging step, what the judge
// decided, and what the request turned into (docs/architecture.md, "The exchange"). A protocol's
// codec (HTTP/1.1 heads, h2 streams, WebSocket upgrades, a CONNECT, `sluice check`) fills a
// `request` the same way; `judge` (judge.hpp) is the one place a request is decided. Nothing here
// does I/O or knows a protocol's framing.
#include <boost/asio/ip/address.hpp>

#include <chrono>
#include <memory>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::filters {
struct mcp_rule; // filters/mcp_rule.hpp
} // namespace sluice::filters

namespace sluice::gateway::exchange {

class scan_step; // scan.hpp
class meter;     // limits.hpp

using clock = std::chrono::steady_clock;
using field_list = std::vector<std::pair<std::string_view, std::string_view>>;

// The authority a terminated tunnel (or a captured connection) was opened for; every request
// inside must name it.
struct tunnel_target {
  std::string host; // normalized
  unsigned port = 0;
  std::string_view scheme = "https"; // "http": a captured plain connection
};

// A request as its codec hands it over. The origin is named one of three ways: an absolute-form
// target ("http://host/path", HTTP/1.1 to a proxy, `sluice check`); a scheme and authority beside
// an origin-form target (h2's :scheme and :authority); or not at all (origin-form inside a
// tunnel, whose authority it is).
struct request {
  std::string_view method;
  std::string_view target;    // absolute-form, or origin-form (or "*")
  std::string_view scheme;    // named beside an origin-form target (h2), else empty
  std::string_view authority; // named beside an origin-form target (h2), else empty
  const field_list *fields = nullptr; // no pseudo-headers; an h2 host field is folded into authority
  unsigned version = 11;      // 10, 11, or 20 (h2)
  bool can_hold = false;      // the codec can hold the request for a person's decision ([approvals])
};

// What the judging step decided: a refusal (reason set), or leave with what goes with it.
struct verdict {
  std::string_view reason; // empty: allowed
  std::string rule;
  bool close = false;      // a refusal after which the connection (HTTP/1.1) closes
  std::optional<boost::asio::ip::address> ip; // the host is this literal address
  bool git_read = false;   // network-read: a fetch's POST to git-upload-pack; its body is checked next
  bool websocket = false;  // an upgrade the policy let through (o.protocol is "websocket")
  std::vector<std::pair<std::string, std::string>> set; // credential fields to set on the way out
  // An AWS request whose signature covers its body's hash: the body is read whole (bounded), then
  // signed again for credential aws_credential (credential_injector::sign_aws).
  bool aws_body = false;
  std::string aws_credential;
  // The body is read whole before the request leaves (and sent with its length).
  bool read_whole() const { return git_read || aws_body || (mcp && !websocket) || decider_body; }
  // network-read: a read method, which carries no body. HTTP/1.1 announces one in its framing
  // fields (refused by hygiene); an h2 stream may send DATA without content-length, so its end
  // is awaited before anything leaves, and a DATA byte refuses it (body_on_read_method).
  bool bodyless = false;
  bool ask = false; // host_not_allowlisted, but a person may be asked ([approvals])
  // [decider]: the decider is asked before this verdict holds (an allowlist miss; with when = "all"
  // also an allowed request). Its answer may allow a miss, refuse, hand the request to a person, and
  // set or remove fields (`remove`); it never widens a deny entry, an address rule or a method rule.
  bool decide = false;
  std::vector<std::string> remove; // fields the decider took off the request
  // The decider asked for the body ({"decision": "body"}): it is read whole, at most this many
  // bytes, and the decider asked again with it before anything leaves (0: not asked). What the file
  // had said waits in decider_pending meanwhile (an allowlist miss is not yet let through).
  std::size_t decider_body = 0;
  std::string_view decider_pending;
  // [scan]: the request's scan, which its body and messages go through before they leave (null:
  // no scanner in force).
  std::shared_ptr<scan_step> scan;
  // A POST on an MCP route: its body (JSON-RPC, bounded) is read whole and passes only as its
  // calls do (mcp.hpp). Null: not an MCP route.
  std::shared_ptr<const filters::mcp_rule> mcp;
};

// What one request turned into, for the access log, the metrics and the exec summary.
struct outcome {
  std::string method, scheme, host, target, rule;
  unsigned port = 0;
  std::string_view decision = "deny";
  std::string_view reason;
  unsigned status = 0;
  std::uint64_t bytes_in = 0, bytes_out = 0;
  clock::time_point start = clock::now();
  // Report mode: allowed, but enforce would have refused it for this reason (logged as would_deny).
  std::string_view would_deny;
  std::string_view protocol = "http/1.1"; // "websocket" for an upgrade the policy let through
  std::uint64_t ws_messages_in = 0, ws_messages_out = 0; // after the 101
  int ws_close_code = -1;
  int grpc_status = -1; // a gRPC call answered with a grpc-status (sluice's own refusals, for now)
  // Git over SSH (protocol "ssh"): the user the client named, its request, the exit status passed back.
  std::string ssh_user, ssh_command;
  std::string credential; // the credential whose value the gateway added, if any
  std::string_view approval; // held for a person: what was decided ("once", "run", "deny", "timeout")
  std::string decided_by;
  int exit_status = -1;
  // The scanner's finding ([scan]) that refused or was reported: rule id and where; never the value.
  std::string scan_rule, scan_location;
  std::string_view scan_kind, scan_action; // canary, own_secret, format, custom; block, report
  // A relayed TCP connection (protocol "tcp"): who ended it (client, server, idle, deadline,
  // error) and, for a database's cleartext start, its protocol, user and database; never a credential.
  std::string_view closed_by;
  std::string_view db_protocol;
  std::string db_user, db_name;
  // [decider]: what it said to a refusal (shown to the client) and the status it chose (0: 403).
  std::string decider_message;
  unsigned decider_status = 0;
  // [[limits.budget]]: the exchange's share of the budgets it falls under (limits.hpp; null: none),
  // charged with bytes_in and bytes_out as they pass and when the outcome is recorded; and a
  // refusal's text (rate_limited, budget_exhausted) with its Retry-After in seconds.
  std::shared_ptr<meter> charged;
  std::string limit_message;
  unsigned retry_after = 0;
  // A POST on an MCP route: its JSON-RPC methods and the tools it called, each comma-joined in
  // the body's order (a batch names several), and each tools/call's metric label
  // (filters::mcp_rule::tool_label: bounded by the policy).
  std::string mcp_method, mcp_tool;
  std::vector<std::string> mcp_tool_labels;
  // A WebSocket on an MCP route with websocket = true: the rule its client's messages are judged
  // by, each one a JSON-RPC body (mcp.hpp, mcp_messages), and how many of them were refused. On
  // such a connection mcp_method and mcp_tool name every method and tool seen, once each.
  std::shared_ptr<const filters::mcp_rule> mcp_messages;
  std::uint64_t mcp_refused = 0;
};

} // namespace sluice::gateway::exchange
