// The session's side of judging: the one judge (exchange/judge.hpp) with what this session
// knows of a person's approvals.
#include "gateway/admin/approvals.hpp"
#include "gateway/session_impl.hpp"

namespace sluice::gateway::detail {

verdict session::judge(const exchange::request &r, const tunnel_target *tunnel, const filters::policy &pol,
                       outcome &o) {
  const auto db = state_.scan.load();
  exchange::judging j{pol, tunnel, approved_host_, approved_port_, approved_next_, state_.held.get(), &db};
  approved_next_ = false; // "the next request judged" is this one
  return exchange::judge(r, j, o);
}

} // namespace sluice::gateway::detail
