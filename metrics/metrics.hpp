#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <string>
#include <string_view>
#include <unordered_map>

namespace sluice::metrics {

// What one judged request turned into, as the instruments count it.
struct request_sample {
  std::string_view profile;
  std::string_view decision; // allow, deny (policy), would_deny (report mode) or error (allowed, but it failed)
  std::string_view reason;
  std::string_view method;
  std::string_view rule; // the allowlist or denylist entry as written; empty: none matched
  std::uint64_t bytes_in = 0, bytes_out = 0;
  double seconds = 0;
  std::string_view client = {}; // serve: the [clients] name it identified as, else empty (no label)
  // What carried it, as the access log's `protocol`: http/1.1, h2, grpc, websocket, ssh.
  std::string_view protocol = "http/1.1";
};

// The named instruments of docs/metrics.md on one prometheus-cpp registry. Label values are bounded:
// reasons and rules come from code and config, methods outside the standard set count as OTHER, the
// skill is fixed per process.
class metrics {
public:
  // `skill`: the exec skill whose policy this gateway enforces; empty for serve.
  explicit metrics(std::string skill = {});
  ~metrics();
  metrics(const metrics &) = delete;
  metrics &operator=(const metrics &) = delete;

private:
  std::shared_ptr<prometheus::Registry> registry_; // first: the instruments below live in it

public:
  void request(const request_sample &s);
  void tls_handshake(std::string_view side, bool ok);
  // serve's agent listeners ([listen.agents.NAME]): a request judged on one, a connection refused
  // because its socket belonged to another user. Agents are named in the config: bounded labels.
  void agent_request(std::string_view agent, std::string_view decision);
  void agent_refused(std::string_view agent);
  // One `sluice exec` command ended: `result` is exit_zero, exit_nonzero (including 128+N, killed
  // by signal N) or refused (sluice refused or failed: exit 125 of its own).
  void exec_finished(std::string_view profile, std::string_view result, double seconds,
                     double end_unix_seconds);

  const std::string &skill() const { return skill_; }

  prometheus::Gauge &connections_active;
  prometheus::Histogram &request_duration;
  prometheus::Histogram &upstream_connect_duration;
  prometheus::Histogram &dns_lookup_duration;
  prometheus::Counter &certs_minted;
  prometheus::Counter &cert_cache_hits;
  prometheus::Counter &upstream_reused;
  prometheus::Counter &accept_paused; // accepting paused: the descriptor limit was reached
  // A credential read again (ttl) that failed: the last value stayed in use.
  prometheus::Counter &credential_refresh_failures;
  // WebSocket connections relayed after their 101: data messages and payload bytes each way
  // (in: from clients), and how each ended (close frames, limits, errors).
  prometheus::Counter &websocket_messages_in, &websocket_messages_out;
  prometheus::Counter &websocket_bytes_in, &websocket_bytes_out;
  void websocket_closed(std::string_view how);
  // A request held for a person ([approvals]), by outcome: once, run, always (written to the
  // policy file), deny, timeout, refused (the queue was full), gone (its client hung up first).
  void approval(std::string_view outcome);
  // A finding of the scanner ([scan]) in what a command sent: its kind (canary, own_secret,
  // format, custom), rule id and action (block, report).
  void scan_finding(std::string_view kind, std::string_view rule, std::string_view action);
  // A question to the external decider ([decider]): its outcome (allow, deny, ask, timeout,
  // unavailable, cached) and how long the request waited for it.
  void decider_call(std::string_view outcome, double seconds);
  // One tools/call on an MCP route: the route's rule, the tool's label (bounded by the policy:
  // filters::mcp_rule::tool_label) and the request's decision (allow, deny, would_deny).
  void mcp_call(std::string_view rule, std::string_view tool, std::string_view decision);

  // Prometheus text exposition of everything registered.
  std::string serialize() const;

private:
  struct series; // the counters one (profile, decision, reason, method, rule) feeds
  series &series_for(const request_sample &s);

  std::string skill_;
  prometheus::Family<prometheus::Counter> &requests_;
  prometheus::Family<prometheus::Counter> &rule_requests_;
  prometheus::Family<prometheus::Counter> &rule_bytes_;
  prometheus::Family<prometheus::Histogram> &rule_duration_;
  prometheus::Family<prometheus::Counter> &bytes_;
  prometheus::Family<prometheus::Counter> &tls_;
  prometheus::Counter &bytes_in_;
  prometheus::Counter &bytes_out_;
  prometheus::Family<prometheus::Counter> &agent_requests_;
  prometheus::Family<prometheus::Counter> &agent_refused_;
  prometheus::Family<prometheus::Counter> &websocket_closed_;
  prometheus::Family<prometheus::Counter> &approvals_;
  prometheus::Family<prometheus::Counter> &scan_findings_;
  prometheus::Family<prometheus::Counter> &decider_calls_;
  prometheus::Histogram &decider_duration_;
  prometheus::Family<prometheus::Counter> &mcp_calls_;
  // Series already created, by their joined label values: prometheus-cpp's Family::Add builds a
  // label map and takes a lock per call, which showed in the keep-alive profile.
  std::mutex cache_mutex_;
  std::unordered_map<std::string, std::unique_ptr<series>> cache_;
};

// The `rule` label value of a request that matched no entry.
inline constexpr std::string_view no_rule = "none";

} // namespace sluice::metrics
