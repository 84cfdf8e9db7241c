#pragma once
#include "gateway/net.hpp"

#include <functional>
#include <string>

namespace sluice::gateway {

// The admin listener: GET / (the live page), /api/stats (its JSON), /metrics (Prometheus text),
// /healthz, /readyz and /ca.pem. Small,
// bounded requests; one coroutine per connection.
struct admin_handlers {
  std::function<std::string()> metrics;
  std::function<bool()> ready;
  std::function<std::string()> ca_pem;
  std::function<std::string()> stats; // GET /api/stats (JSON); the page at / reads it
};

net::awaitable<void> run_admin(tcp::acceptor &acceptor, admin_handlers handlers);

} // namespace sluice::gateway
