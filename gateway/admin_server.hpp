#pragma once
#include "gateway/net.hpp"

#include <functional>
#include <string>

namespace sluice::gateway {

// The admin listener: GET /metrics (Prometheus text), /healthz, /readyz and /ca.pem. Small,
// bounded requests; one coroutine per connection.
struct admin_handlers {
  std::function<std::string()> metrics;
  std::function<bool()> ready;
  std::function<std::string()> ca_pem;
};

net::awaitable<void> run_admin(tcp::acceptor &acceptor, admin_handlers handlers);

} // namespace sluice::gateway
