#pragma once
#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <unordered_map>

namespace sluice::gateway {

// Per-client limits of [roles] (requests per second, bytes per second), shared by every worker:
// token buckets by client name. Names come from the policy file, so the table stays bounded.
class client_meters {
public:
  using clock = std::chrono::steady_clock;

  // Whether one more request of `client` fits `rate` a second (bursts up to one second's worth).
  bool admit(const std::string &client, double rate) {
    std::lock_guard lock(mutex_);
    auto &b = refill(requests_, client, rate, std::max(1.0, rate));
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    return true;
  }

  // Charges `bytes` to `client`'s budget of `rate` bytes a second; returns how long the relay
  // should wait before it goes on (zero while the budget lasts).
  clock::duration charge(const std::string &client, double rate, std::size_t bytes) {
    std::lock_guard lock(mutex_);
    auto &b = refill(bytes_, client, rate, rate);
    b.tokens -= static_cast<double>(bytes);
    if (b.tokens >= 0) return clock::duration::zero();
    return std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(-b.tokens / rate));
  }

private:
  struct bucket {
    double tokens = 0;
    clock::time_point last{};
  };
  static bucket &refill(std::unordered_map<std::string, bucket> &table, const std::string &client,
                        double rate, double burst) {
    auto now = clock::now();
    auto [it, fresh] = table.try_emplace(client);
    auto &b = it->second;
    if (fresh) {
      b.tokens = burst;
    } else {
      b.tokens = std::min(burst, b.tokens + std::chrono::duration<double>(now - b.last).count() * rate);
    }
    b.last = now;
    return b;
  }

  std::mutex mutex_;
  std::unordered_map<std::string, bucket> requests_, bytes_;
};

} // namespace sluice::gateway
