#pragma once
#include "gateway/net.hpp"

#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <map>

namespace sluice::gateway {

// The idle terminated tunnels parked on one worker (docs/architecture.md, "parking"), by deadline,
// under one timer for all of them: a parked tunnel's only pending operation is the wait on its
// socket, not a deadline timer of its own besides (about 0.3 KiB a tunnel). When a deadline
// passes, the lot cancels that socket's wait; the tunnel then closes as an idle one does. One
// worker's thread only, like everything else of the worker.
class parking_lot {
public:
  using clock = std::chrono::steady_clock;

  // Kept by the parked tunnel (its session); registered between add() and remove().
  // Its fields are the lot's alone (a plain struct inside the lot: the session only holds it).
  struct ticket {
    tcp::socket *socket_ = nullptr;
    std::multimap<clock::time_point, ticket *>::iterator at_;
    bool parked_ = false;
  };

  explicit parking_lot(net::io_context &ioc) : timer_(ioc) {}
  parking_lot(const parking_lot &) = delete;
  parking_lot &operator=(const parking_lot &) = delete;

  // `socket` waits for its next request until `deadline`; past it, its wait is cancelled.
  void add(ticket &t, tcp::socket &socket, clock::time_point deadline);
  // The wait has ended (a request arrives, the peer closed, or the lot cancelled it); a ticket the
  // lot has already let go of is left as it is.
  void remove(ticket &t);
  // The gateway drains: every parked tunnel's wait is cancelled now (an idle connection has no
  // response to finish, and would otherwise hold the drain until its deadline).
  void expire_all();

private:
  void arm(clock::time_point when);
  void expire(clock::time_point now);

  std::multimap<clock::time_point, ticket *> by_deadline_;
  net::steady_timer timer_;
  clock::time_point armed_for_ = clock::time_point::max(); // the timer's expiry while it waits
};

} // namespace sluice::gateway
