#include "gateway/parking_lot.hpp"

namespace sluice::gateway {

void parking_lot::add(ticket &t, tcp::socket &socket, clock::time_point deadline) {
  t.socket_ = &socket;
  t.at_ = by_deadline_.emplace(deadline, &t);
  t.parked_ = true;
  // Tunnels park with the same idle timeout, so a new deadline is nearly always the latest: the
  // timer is moved only for one that comes due before the time it is set for.
  if (deadline < armed_for_) arm(deadline);
}

void parking_lot::remove(ticket &t) {
  if (!t.parked_) return;
  by_deadline_.erase(t.at_);
  t.parked_ = false;
}

void parking_lot::expire_all() { expire(clock::time_point::max()); }

void parking_lot::expire(clock::time_point now) {
  while (!by_deadline_.empty() && by_deadline_.begin()->first <= now) {
    ticket *t = by_deadline_.begin()->second;
    by_deadline_.erase(by_deadline_.begin());
    t->parked_ = false;
    error_code ignored;
    t->socket_->cancel(ignored); // its wait completes with operation_aborted: the tunnel closes
  }
}

void parking_lot::arm(clock::time_point when) {
  armed_for_ = when;
  timer_.expires_at(when); // a wait already pending ends with operation_aborted and does nothing
  timer_.async_wait([this](error_code ec) {
    if (ec) return; // re-armed (or the worker is going away)
    armed_for_ = clock::time_point::max();
    expire(clock::now());
    if (!by_deadline_.empty()) arm(by_deadline_.begin()->first);
  });
}

} // namespace sluice::gateway
