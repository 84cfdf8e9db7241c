#pragma once
#include <memory>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <string>
#include <mutex>
#include <string_view>
#include <unordered_map>

namespace sluice::metrics {

// The named instruments of docs/metrics.md on one prometheus-cpp registry. Label values are bounded:
// reasons and rules come from code and config, methods outside the standard set count as OTHER.
class metrics {
public:
  metrics();

private:
  std::shared_ptr<prometheus::Registry> registry_; // first: the instruments below live in it

public:

  // `decision` is "allow", "deny" (policy) or "error" (allowed, but the upstream failed).
  void request(std::string_view profile, std::string_view decision, std::string_view reason,
               std::string_view method, std::string_view rule);
  void bytes(std::uint64_t in, std::uint64_t out);
  void tls_handshake(std::string_view side, bool ok);

  prometheus::Gauge &connections_active;
  prometheus::Histogram &request_duration;
  prometheus::Histogram &upstream_connect_duration;
  prometheus::Histogram &dns_lookup_duration;
  prometheus::Counter &certs_minted;
  prometheus::Counter &cert_cache_hits;
  prometheus::Counter &upstream_reused;
  prometheus::Counter &accept_paused; // accepting paused: the descriptor limit was reached

  // Prometheus text exposition of everything registered.
  std::string serialize() const;

private:
  prometheus::Family<prometheus::Counter> &requests_;
  prometheus::Family<prometheus::Counter> &rule_matches_;
  prometheus::Family<prometheus::Counter> &bytes_;
  prometheus::Family<prometheus::Counter> &tls_;
  prometheus::Counter &bytes_in_;
  prometheus::Counter &bytes_out_;
  // Counters already created, by their joined label values: prometheus-cpp's Family::Add builds a
  // label map and takes a lock per call, which showed in the keep-alive profile.
  std::mutex cache_mutex_;
  std::unordered_map<std::string, std::pair<prometheus::Counter *, prometheus::Counter *>> cache_;
};

} // namespace sluice::metrics
