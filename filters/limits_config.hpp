#pragma once
// [[limits.budget]] (trusted policy): how much the clients of a gateway may do to a set of hosts —
// requests a second with a burst, exchanges at once, and bytes sent and received — counted per
// run, per client or per client and day (docs/policy.md, "Limits and budgets").
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::filters {

struct budget_rule {
  // Whose traffic one counter holds: `run` every client of this gateway together (exec: the run;
  // serve: the process), `client` each client on its own (exec: the run), `day` each client on its
  // own, refilled at 00:00 UTC.
  enum class scope { run, client, day };
  std::string name;                 // unique in the file; names the budget in refusals and metrics
  std::vector<std::string> hosts;   // host patterns (allow-entry syntax, any port); empty: every host
  std::vector<std::string> roles;   // serve: only these roles' clients; empty: every client
  scope per = scope::client;
  double requests_per_second = 0;   // 0: no rate
  double burst = 0;                 // requests that may come at once (the bucket); 0: one second's worth
  std::uint64_t connections = 0;    // exchanges at once (a request until its response ends, a tunnel,
                                    // a WebSocket, a relayed connection); 0: no limit
  std::uint64_t bytes_out = 0;      // bytes sent towards origins (heads, targets, bodies); 0: no budget
  std::uint64_t bytes_in = 0;       // bytes received from origins; 0: no budget
};

// [limits.shared]: the budgets' counters kept in a Redis server that every replica of `sluice serve`
// shares, so a client spread over replicas by a load balancer gets its budget once.
struct shared_limits_config {
  std::string redis;      // "HOST:PORT"; empty: each process counts on its own
  bool fail_open = false; // Redis unreachable: serve on this process's own counters (else 503 limits_unavailable)
  std::chrono::milliseconds timeout{250}; // one question to Redis, connecting included
  std::string key_prefix = "sluice";      // the keys are PREFIX:budget:NAME:CLIENT[:DAY]
  bool operator==(const shared_limits_config &) const = default;
};

inline std::string_view scope_name(budget_rule::scope s) {
  return s == budget_rule::scope::run ? "run" : s == budget_rule::scope::day ? "day" : "client";
}

} // namespace sluice::filters
