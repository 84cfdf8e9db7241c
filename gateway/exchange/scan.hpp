#pragma once
// What leaves ([scan], docs/policy.md "What leaves"): the scanner on the one judging step. The
// judge scans a request's target and fields; a codec hands the body it sends (HTTP/1.1 bodies,
// h2 and gRPC DATA, WebSocket messages) to the request's `scan_step` piece by piece, before the
// piece leaves. A finding names the rule and where it matched, never the value.
#include "filters/policy.hpp"
#include "gateway/exchange/exchange.hpp"
#include "scan/body.hpp"
#include "scan/database.hpp"
#include "scan/grpc_fields.hpp"
#include "scan/scanner.hpp"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::gateway::exchange {

// What a run (exec) or a server (serve) adds to a policy's [scan]: the caller's own secrets (its
// environment's secret-looking variables the command was not given) and the run's canaries.
struct scan_inputs {
  std::vector<scan::secret> own_secrets;
  std::vector<scan::secret> canaries;
  // The database serves one run of sluice exec, compiled while its command starts: the streaming
  // database alone (scan::database_spec::block_database), 49 instead of 130 ms of CPU a run.
  bool one_run = false;
  // Where the policy's compiled rules are kept between runs (scan::database_spec::rules_cache_dir):
  // a directory of the caller's that the command cannot write. Empty: compiled here, kept nowhere.
  std::string rules_cache_dir;
};

// The compiled database for `pol`: its [scan] settings, sluice's rule set, the values of its
// [credentials] (each allowed to its credential's hosts; a regex host is asked by the step),
// `in`, and the credentials' placeholders (what the command holds: no finding). Null when
// [scan] is off. Throws scan::compile_error naming a rule that cannot be compiled.
scan::database_ptr compile_scan(const filters::policy &pol, const scan_inputs &in);

// What compile_scan's database depends on, hashed: the same value, the same database (a reload that
// changes neither [scan] nor a credential's value keeps the compiled one: compiling takes 0.1-0.2 s).
std::size_t scan_inputs_hash(const filters::policy &pol, const scan_inputs &in);

// The reason a finding refuses with: canary_detected for a canary, else secret_detected.
std::string_view scan_reason(const scan::finding &f);

// One request's scan. Created by the judge when a database is in force; the codec keeps it (in
// the verdict) while the body goes.
class scan_step {
public:
  // `o`: the request's outcome, where findings are written; it outlives the step.
  scan_step(scan::database_ptr db, const filters::policy &pol, std::string_view host, std::string_view scheme,
            unsigned port, outcome &o);
  scan_step(const scan_step &) = delete;
  scan_step &operator=(const scan_step &) = delete;

  // The target and the fields as the command sent them. Returns the refusal's reason (empty: go
  // on); the finding that decided (or a reported one) is written into `o`.
  std::string_view head(std::string_view target, const field_list &fields);
  // The body's next piece, before it leaves; `last`: nothing follows (matches that need the end
  // are found now, before the last piece leaves). Returns the refusal's reason, as head().
  std::string_view body(std::string_view piece, bool last);
  // A WebSocket message from the client, piece by piece (unmasked, as the application sent it);
  // `end`: its last piece. Each message is a location of its own ("message:N").
  std::string_view message(std::string_view piece, bool end);
  std::string_view refused() const { return refused_; }

private:
  std::string_view settle();
  outcome &o_;
  const filters::policy &pol_; // held by the request's codec while the request lives
  std::string host_;
  std::string scheme_;
  unsigned port_;
  scan::scanner scanner_;
  std::string content_encoding_;
  bool form_ = false; // Content-Type application/x-www-form-urlencoded: scanned percent-decoded too
  // Content-Type application/grpc: each message's fields scanned on their own too ("grpc:field"),
  // a compressed message (grpc-encoding gzip or deflate) inflated first ("grpc:message")
  std::unique_ptr<scan::grpc_messages> grpc_;
  std::string grpc_encoding_;
  void grpc_message(std::string_view message, bool compressed);
  std::uint64_t max_decoded_;
  std::unique_ptr<scan::body_scan> body_; // made for the first body piece (its decoder is ~20 KiB)
  std::size_t seen_ = 0;            // findings already weighed
  std::uint64_t messages_ = 0;
  std::string_view refused_;
};

} // namespace sluice::gateway::exchange
