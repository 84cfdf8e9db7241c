#include "metrics/metrics.hpp"

#include <prometheus/text_serializer.h>
#include <sstream>

namespace sluice::metrics {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

std::shared_ptr<prometheus::Registry> make_registry() {
  return std::make_shared<prometheus::Registry>();
}

std::string_view bounded_method(std::string_view m) {
  // Git over SSH's programs count under their own names (protocol "ssh").
  for (auto known : {"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "TRACE",
                     "git-upload-pack", "git-receive-pack", "git-upload-archive"}) {
    if (m == known) return m;
  }
  return "OTHER";
}

const Histogram::BucketBoundaries latency_buckets{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                  0.05,   0.1,   0.25,   0.5,   1,    2.5,
                                                  5,      10,    30,     60};

} // namespace

struct metrics::series {
  prometheus::Counter *requests = nullptr;
  prometheus::Counter *rule_requests = nullptr;
  prometheus::Counter *rule_bytes_in = nullptr;
  prometheus::Counter *rule_bytes_out = nullptr;
  prometheus::Histogram *rule_duration = nullptr; // allowed requests only
};

metrics::metrics(std::string skill)
    : registry_(make_registry()),
      connections_active(BuildGauge()
                             .Name("sluice_connections_active")
                             .Help("Client connections currently open")
                             .Register(*registry_)
                             .Add({})),
      request_duration(BuildHistogram()
                           .Name("sluice_request_duration_seconds")
                           .Help("Time from request head to the end of the response")
                           .Register(*registry_)
                           .Add({}, latency_buckets)),
      upstream_connect_duration(BuildHistogram()
                                    .Name("sluice_upstream_connect_duration_seconds")
                                    .Help("TCP connect plus TLS handshake to the upstream")
                                    .Register(*registry_)
                                    .Add({}, latency_buckets)),
      dns_lookup_duration(BuildHistogram()
                              .Name("sluice_dns_lookup_duration_seconds")
                              .Help("c-ares lookups, pinned names excluded")
                              .Register(*registry_)
                              .Add({}, latency_buckets)),
      certs_minted(BuildCounter()
                       .Name("sluice_certs_minted_total")
                       .Help("Leaf certificates signed by the gateway CA")
                       .Register(*registry_)
                       .Add({})),
      cert_cache_hits(BuildCounter()
                          .Name("sluice_cert_cache_hits_total")
                          .Help("TLS terminations served from the leaf cache")
                          .Register(*registry_)
                          .Add({})),
      upstream_reused(BuildCounter()
                          .Name("sluice_upstream_reused_total")
                          .Help("Requests sent on a pooled upstream connection")
                          .Register(*registry_)
                          .Add({})),
      accept_paused(BuildCounter()
                        .Name("sluice_accept_paused_total")
                        .Help("Times accepting paused because the process ran out of descriptors "
                              "(EMFILE/ENFILE)")
                        .Register(*registry_)
                        .Add({})),
      credential_refresh_failures(BuildCounter()
                                      .Name("sluice_credential_refresh_failures_total")
                                      .Help("Credentials whose source failed when read again for their ttl "
                                            "(the last value stayed in use)")
                                      .Register(*registry_)
                                      .Add({})),
      websocket_messages_in(BuildCounter()
                                .Name("sluice_websocket_messages_total")
                                .Help("WebSocket data messages relayed; in = from clients, out = to clients")
                                .Register(*registry_)
                                .Add({{"direction", "in"}})),
      websocket_messages_out(BuildCounter()
                                 .Name("sluice_websocket_messages_total")
                                 .Help("WebSocket data messages relayed; in = from clients, out = to clients")
                                 .Register(*registry_)
                                 .Add({{"direction", "out"}})),
      websocket_bytes_in(BuildCounter()
                             .Name("sluice_websocket_payload_bytes_total")
                             .Help("WebSocket frame payload bytes relayed; in = from clients, out = to clients")
                             .Register(*registry_)
                             .Add({{"direction", "in"}})),
      websocket_bytes_out(BuildCounter()
                              .Name("sluice_websocket_payload_bytes_total")
                              .Help("WebSocket frame payload bytes relayed; in = from clients, out = to clients")
                              .Register(*registry_)
                              .Add({{"direction", "out"}})),
      skill_(std::move(skill)),
      requests_(BuildCounter()
                    .Name("sluice_requests_total")
                    .Help("Requests and CONNECTs judged by the gateway")
                    .Register(*registry_)),
      rule_requests_(BuildCounter()
                         .Name("sluice_rule_requests_total")
                         .Help("Requests per policy entry (the rule as written; none: no entry "
                               "matched), decision and reason")
                         .Register(*registry_)),
      rule_bytes_(BuildCounter()
                      .Name("sluice_rule_bytes_total")
                      .Help("Payload bytes per policy entry; in = from clients, out = to clients")
                      .Register(*registry_)),
      rule_duration_(BuildHistogram()
                         .Name("sluice_rule_request_duration_seconds")
                         .Help("Request head to end of response per policy entry, allowed requests")
                         .Register(*registry_)),
      bytes_(BuildCounter()
                 .Name("sluice_bytes_total")
                 .Help("Payload bytes relayed; in = from clients, out = to clients")
                 .Register(*registry_)),
      tls_(BuildCounter()
               .Name("sluice_tls_handshakes_total")
               .Help("TLS handshakes by side (client = terminated, upstream) and result")
               .Register(*registry_)),
      bytes_in_(bytes_.Add({{"direction", "in"}})),
      bytes_out_(bytes_.Add({{"direction", "out"}})),
      agent_requests_(BuildCounter()
                          .Name("sluice_agent_requests_total")
                          .Help("Requests per agent listener ([listen.agents] of serve) and decision")
                          .Register(*registry_)),
      agent_refused_(BuildCounter()
                         .Name("sluice_agent_connections_refused_total")
                         .Help("Connections to an agent listener refused: not from one of its users")
                         .Register(*registry_)),
      websocket_closed_(BuildCounter()
                            .Name("sluice_websocket_connections_total")
                            .Help("WebSocket connections ended after their 101, by how: close "
                                  "(a close frame passed), message_too_large, protocol_error, idle, reset")
                            .Register(*registry_)),
      approvals_(BuildCounter()
                     .Name("sluice_approvals_total")
                     .Help("Requests held for a person's decision ([approvals]), by outcome: once, run, always, "
                           "deny, timeout, refused (no room to wait), gone (its client hung up first)")
                     .Register(*registry_)),
      scan_findings_(BuildCounter()
                         .Name("sluice_scan_findings_total")
                         .Help("Secrets found in what commands sent ([scan]), by kind (canary, own_secret, "
                               "format, custom), rule and action (block, report)")
                         .Register(*registry_)),
      decider_calls_(BuildCounter()
                         .Name("sluice_decider_calls_total")
                         .Help("Questions to the external decider ([decider]), by outcome: allow, deny, ask, "
                               "timeout, unavailable, cached (answered from the cache)")
                         .Register(*registry_)),
      decider_duration_(BuildHistogram()
                            .Name("sluice_decider_duration_seconds")
                            .Help("Time a request waited for the external decider's answer (cached answers included)")
                            .Register(*registry_)
                            .Add({}, latency_buckets)),
      mcp_calls_(BuildCounter()
                     .Name("sluice_mcp_calls_total")
                     .Help("tools/call requests on MCP routes, by rule, tool (a name or pattern of the rule's mcp "
                           "table, else other) and decision (allow, deny, would_deny)")
                     .Register(*registry_)) {}

void metrics::mcp_call(std::string_view rule, std::string_view tool, std::string_view decision) {
  mcp_calls_.Add({{"rule", std::string(rule)}, {"tool", std::string(tool)}, {"decision", std::string(decision)}})
      .Increment();
}

void metrics::decider_call(std::string_view outcome, double seconds) {
  decider_calls_.Add({{"outcome", std::string(outcome)}}).Increment();
  decider_duration_.Observe(seconds);
}

void metrics::scan_finding(std::string_view kind, std::string_view rule, std::string_view action) {
  scan_findings_.Add({{"kind", std::string(kind)}, {"rule", std::string(rule)}, {"action", std::string(action)}})
      .Increment();
}

void metrics::approval(std::string_view outcome) { approvals_.Add({{"outcome", std::string(outcome)}}).Increment(); }

void metrics::websocket_closed(std::string_view how) {
  websocket_closed_.Add({{"how", std::string(how)}}).Increment();
}

metrics::~metrics() = default;

metrics::series &metrics::series_for(const request_sample &s) {
  auto m = bounded_method(s.method);
  std::string_view rule = s.rule.empty() ? no_rule : s.rule;
  thread_local std::string key; // kept by the thread: a series already seen allocates nothing
  key.clear();
  key.append(s.profile).append(1, '\n').append(s.decision).append(1, '\n').append(s.reason);
  key.append(1, '\n').append(m).append(1, '\n').append(rule).append(1, '\n').append(s.client);
  key.append(1, '\n').append(s.protocol);
  auto it = cache_.find(key);
  if (it != cache_.end()) return *it->second;
  auto out = std::make_unique<series>();
  std::string profile(s.profile), decision(s.decision), reason(s.reason), r(rule), protocol(s.protocol);
  // Clients are named in the policy file: a bounded label, left out where none identified.
  prometheus::Labels labels{{"profile", profile}, {"decision", decision}, {"reason", reason},
                            {"method", std::string(m)}, {"protocol", protocol}};
  if (!s.client.empty()) labels.emplace("client", std::string(s.client));
  out->requests = &requests_.Add(labels);
  out->rule_requests = &rule_requests_.Add({{"profile", profile},
                                            {"skill", skill_},
                                            {"rule", r},
                                            {"decision", decision},
                                            {"reason", reason},
                                            {"protocol", protocol}});
  out->rule_bytes_in =
      &rule_bytes_.Add({{"profile", profile}, {"skill", skill_}, {"rule", r}, {"direction", "in"}});
  out->rule_bytes_out =
      &rule_bytes_.Add({{"profile", profile}, {"skill", skill_}, {"rule", r}, {"direction", "out"}});
  if (s.decision == "allow") {
    out->rule_duration =
        &rule_duration_.Add({{"profile", profile}, {"skill", skill_}, {"rule", r}}, latency_buckets);
  }
  return *cache_.emplace(key, std::move(out)).first->second;
}

void metrics::request(const request_sample &s) {
  {
    std::lock_guard lock(cache_mutex_);
    auto &c = series_for(s);
    c.requests->Increment();
    c.rule_requests->Increment();
    if (s.bytes_in) c.rule_bytes_in->Increment(static_cast<double>(s.bytes_in));
    if (s.bytes_out) c.rule_bytes_out->Increment(static_cast<double>(s.bytes_out));
    if (c.rule_duration) c.rule_duration->Observe(s.seconds);
  }
  if (s.bytes_in) bytes_in_.Increment(static_cast<double>(s.bytes_in));
  if (s.bytes_out) bytes_out_.Increment(static_cast<double>(s.bytes_out));
  if (s.decision == "allow") request_duration.Observe(s.seconds);
}

void metrics::agent_request(std::string_view agent, std::string_view decision) {
  agent_requests_.Add({{"agent", std::string(agent)}, {"decision", std::string(decision)}}).Increment();
}

void metrics::agent_refused(std::string_view agent) {
  agent_refused_.Add({{"agent", std::string(agent)}}).Increment();
}

void metrics::tls_handshake(std::string_view side, bool ok) {
  tls_.Add({{"side", std::string(side)}, {"result", ok ? "ok" : "error"}}).Increment();
}

void metrics::exec_finished(std::string_view profile, std::string_view result, double seconds,
                            double end_unix_seconds) {
  static const Histogram::BucketBoundaries command_buckets{0.01, 0.05, 0.1, 0.5, 1,   5,
                                                           10,   30,   60,  300, 900, 3600};
  prometheus::Labels base{{"profile", std::string(profile)}, {"skill", skill_}};
  auto with_result = base;
  with_result.emplace("result", std::string(result));
  BuildCounter()
      .Name("sluice_exec_commands_total")
      .Help("sluice exec commands by how they ended: exit_zero, exit_nonzero, refused")
      .Register(*registry_)
      .Add(with_result)
      .Increment();
  BuildHistogram()
      .Name("sluice_exec_duration_seconds")
      .Help("Wall time of sluice exec commands, start of sluice to the command's end")
      .Register(*registry_)
      .Add(base, command_buckets)
      .Observe(seconds);
  BuildGauge()
      .Name("sluice_exec_last_end_timestamp_seconds")
      .Help("Unix time the last sluice exec command of this profile and skill ended")
      .Register(*registry_)
      .Add(base)
      .Set(end_unix_seconds);
}

std::string metrics::serialize() const {
  prometheus::TextSerializer s;
  std::ostringstream out;
  s.Serialize(out, registry_->Collect());
  return out.str();
}

} // namespace sluice::metrics
