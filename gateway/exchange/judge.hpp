#pragma once
// The judging step every protocol shares: a request (exchange.hpp) is decided here and nowhere
// else. The origin is worked out and cross-checked with Host (or :authority) and the tunnel;
// hygiene, Git negotiation, WebSocket upgrades and credentials are checked; the decision is the
// policy's. No I/O: the caller answers.
#include "filters/policy.hpp"
#include "gateway/exchange/exchange.hpp"
#include "scan/database.hpp"

namespace sluice::gateway::exchange {

// Hosts a person let through for the whole run ([approvals], "allow for this run").
class run_approvals {
public:
  virtual bool allowed_for_run(const std::string &host, unsigned port) const = 0;

protected:
  ~run_approvals() = default;
};

// What the judge weighs besides the request.
struct judging {
  const filters::policy &policy;
  const tunnel_target *tunnel = nullptr; // the tunnel (or captured connection) the request came in
  // Hosts a person let through: for this tunnel or connection, for this one request (`next`), or
  // for the run.
  std::string_view approved_host{};
  unsigned approved_port = 0;
  bool approved_next = false;
  const run_approvals *for_run = nullptr;
  // [scan]: the compiled database in force (null: nothing is scanned).
  const scan::database_ptr *scan = nullptr;
};

// Decides `r`. Fills `o` as it goes (method, scheme, host, port, origin-form target, rule,
// would_deny, protocol, credential), so that a refusal is logged with what was judged.
verdict judge(const request &r, const judging &j, outcome &o);

} // namespace sluice::gateway::exchange
