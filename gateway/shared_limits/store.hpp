#pragma once
// [limits.shared] (docs/policy.md, "Budgets shared by replicas"): the budgets' counters in a Redis
// server every replica of `sluice serve` shares. One admission is one Lua script run atomically on
// the server for every budget the request falls under (the same checks as exchange::ledger's);
// what an exchange moves and its end are sent without waiting. Redis not answering within
// `timeout`: fail_open serves on this process's own counters, else the request is refused (503
// limits_unavailable); both are counted and the change is logged, and nothing hangs.
#include "filters/policy.hpp"
#include "gateway/exchange/limits.hpp"
#include "gateway/net.hpp"
#include "gateway/shared_limits/redis_link.hpp"

#include <atomic>
#include <memory>
#include <string>

namespace sluice::gateway::shared_limits {

class store final : public exchange::meter_sink, public std::enable_shared_from_this<store> {
public:
  // Connects in the background (a server that is down at start is a failure like any other).
  // `replica`: this process's name among the replicas (its open exchanges are counted under it,
  // and forgotten 30 s after it stops saying it is alive).
  store(const filters::shared_limits_config &cfg, std::string replica);
  ~store();
  store(const store &) = delete;
  store &operator=(const store &) = delete;

  const filters::shared_limits_config &config() const { return cfg_; }

  // The admission of one exchange under `pol`'s budgets, asked of Redis (see the header's top).
  net::awaitable<exchange::admission> admit(exchange::ledger &local, const filters::policy &pol, std::string client,
                                            std::string host, std::string scheme, unsigned port,
                                            std::uint64_t head_bytes, std::uint64_t body_bytes);

  void charge(const std::vector<std::string> &keys, std::uint64_t out, std::uint64_t in) override;
  void release(const std::vector<std::string> &keys) override;

  // Stops the link: no callback reaches a worker after it (called once the workers stopped).
  void stop();
  // sluice_limits_shared_total{outcome}, sluice_limits_shared_up (Prometheus text).
  std::string prometheus() const;

private:
  void note(bool ok, const std::string &why);

  filters::shared_limits_config cfg_;
  std::string replica_;
  std::string where_; // HOST:PORT, for messages
  std::string sha_;   // the admission script's SHA-1 (EVALSHA)
  redis_link link_;
  std::atomic<std::uint64_t> ok_{0}, failed_open_{0}, failed_closed_{0};
  std::atomic<bool> healthy_{true};
};

// "HOST:PORT" into its parts; false when it is not one.
bool split_redis_address(const std::string &text, std::string &host, unsigned &port);

} // namespace sluice::gateway::shared_limits
