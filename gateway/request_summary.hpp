#pragma once
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace sluice::gateway {

// Counts of decisions per host, decision and reason, for `exec --json-summary` and the denial lines
// printed at exit. Hosts are bounded by what one command asks for; the map is capped all the same.
class request_summary {
public:
  struct key {
    std::string host, decision, reason, method;
    unsigned port = 0;
    auto operator<=>(const key &) const = default;
  };
  void record(std::string host, unsigned port, std::string decision, std::string reason,
              std::string method) {
    std::lock_guard lock(mutex_);
    key k{std::move(host), std::move(decision), std::move(reason), std::move(method), port};
    auto it = counts_.find(k);
    if (it != counts_.end()) {
      ++it->second;
    } else if (counts_.size() < 10'000) {
      counts_.emplace(std::move(k), 1);
    }
  }
  std::map<key, std::size_t> snapshot() const {
    std::lock_guard lock(mutex_);
    return counts_;
  }

private:
  mutable std::mutex mutex_;
  std::map<key, std::size_t> counts_;
};

} // namespace sluice::gateway
