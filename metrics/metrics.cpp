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
  for (auto known : {"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "TRACE"}) {
    if (m == known) return m;
  }
  return "OTHER";
}

const Histogram::BucketBoundaries latency_buckets{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                  0.05,   0.1,   0.25,   0.5,   1,    2.5,
                                                  5,      10,    30,     60};

} // namespace

metrics::metrics()
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
      requests_(BuildCounter()
                    .Name("sluice_requests_total")
                    .Help("Requests and CONNECTs judged by the gateway")
                    .Register(*registry_)),
      rule_matches_(BuildCounter()
                        .Name("sluice_rule_matches_total")
                        .Help("Requests per matched allowlist entry")
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
      bytes_out_(bytes_.Add({{"direction", "out"}})) {}

void metrics::request(std::string_view profile, std::string_view decision, std::string_view reason,
                      std::string_view method, std::string_view rule) {
  auto m = bounded_method(method);
  std::string key;
  key.reserve(profile.size() + decision.size() + reason.size() + m.size() + rule.size() + 4);
  key.append(profile).append(1, '\n').append(decision).append(1, '\n').append(reason);
  key.append(1, '\n').append(m).append(1, '\n').append(rule);
  std::lock_guard lock(cache_mutex_);
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    auto *req = &requests_.Add({{"profile", std::string(profile)},
                                {"decision", std::string(decision)},
                                {"reason", std::string(reason)},
                                {"method", std::string(m)}});
    prometheus::Counter *by_rule = nullptr;
    if (!rule.empty()) {
      by_rule = &rule_matches_.Add({{"rule", std::string(rule)}, {"decision", std::string(decision)}});
    }
    it = cache_.emplace(std::move(key), std::make_pair(req, by_rule)).first;
  }
  it->second.first->Increment();
  if (it->second.second) it->second.second->Increment();
}

void metrics::bytes(std::uint64_t in, std::uint64_t out) {
  if (in) bytes_in_.Increment(static_cast<double>(in));
  if (out) bytes_out_.Increment(static_cast<double>(out));
}

void metrics::tls_handshake(std::string_view side, bool ok) {
  tls_.Add({{"side", std::string(side)}, {"result", ok ? "ok" : "error"}}).Increment();
}

std::string metrics::serialize() const {
  prometheus::TextSerializer s;
  std::ostringstream out;
  s.Serialize(out, registry_->Collect());
  return out.str();
}

} // namespace sluice::metrics
