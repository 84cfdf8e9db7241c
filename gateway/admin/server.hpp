#pragma once
#include "gateway/net.hpp"

#include <cstdint>
#include <functional>
#include <string>

namespace sluice::gateway {

// The admin listener: GET / (the live page), /api/stats (its JSON), /metrics (Prometheus text),
// /healthz, /readyz and /ca.pem. Small, bounded requests; one coroutine per connection. The
// gateway hands it what it serves as functions: this listener knows nothing of the gateway.
struct admin_handlers {
  std::function<std::string()> metrics;
  std::function<bool()> ready;
  std::function<std::string()> ca_pem;
  std::function<std::string()> stats; // GET /api/stats (JSON); the page at / reads it
  // [approvals]: GET /api/approvals (the held requests, JSON) and POST /api/approvals/ID (a
  // decision), each with `Authorization: Bearer TOKEN`; empty token: not served.
  std::string approvals_token{};
  std::string webhook_secret{}; // a decision may instead be signed with it (X-Sluice-Signature), by "webhook"
  std::function<std::string()> approvals_pending{};
  // decision "once", "run", "always" or "deny": empty, or why it was not taken.
  std::function<std::string(std::uint64_t id, std::string_view decision, std::string_view by)> approvals_decide{};
};

net::awaitable<void> run_admin(tcp::acceptor &acceptor, admin_handlers handlers);

} // namespace sluice::gateway
