#pragma once
#include <boost/json/object.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

namespace sluice::metrics {

// What the admin page shows: totals by decision, per-destination counts and the latest denials,
// kept in memory with fixed bounds (docs/metrics.md, "/api/stats").
class live_stats {
public:
  struct event {
    std::string_view method, host;
    unsigned port = 0;
    std::string_view path; // already redacted
    std::string_view rule, decision, reason;
    unsigned status = 0;
    std::uint64_t bytes_in = 0, bytes_out = 0;
    // What the scanner found in the request ([scan]): kind, rule id, where, action; never the value.
    std::string_view scan_kind{}, scan_rule{}, scan_location{}, scan_action{};
  };
  static constexpr std::size_t max_destinations = 1000; // later hosts count under "(other)"
  static constexpr std::size_t max_denials = 50;
  static constexpr std::size_t max_findings = 50;

  void record(const event &e);
  // The snapshot: {"totals":{...},"destinations":[...],"denials":[...],"findings":[...]}.
  boost::json::object snapshot() const;

private:
  struct destination {
    std::string rule;
    std::uint64_t allowed = 0, denied = 0, errors = 0, bytes_in = 0, bytes_out = 0;
    double last_seen = 0;
  };
  struct denial {
    double time;
    std::string method, host, path, rule, decision, reason;
    unsigned port, status;
  };
  struct finding {
    double time;
    std::string kind, rule, location, action, method, host, path, decision;
    unsigned port;
  };
  mutable std::mutex mutex_;
  std::deque<finding> findings_;                      // newest first
  std::map<std::string, std::uint64_t, std::less<>> findings_by_kind_; // canary, own_secret, format, custom
  std::uint64_t allowed_ = 0, denied_ = 0, errors_ = 0, bytes_in_ = 0, bytes_out_ = 0;
  std::map<std::string, destination> destinations_; // "host:port"
  std::deque<denial> denials_;                       // newest first
};

// A request target as logs show it: the query replaced by "?REDACTED" when `redact` is set.
std::string redact_target(std::string_view target, bool redact);

double unix_now();

} // namespace sluice::metrics
