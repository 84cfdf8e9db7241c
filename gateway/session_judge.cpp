// The session's side of judging: the one judge (exchange/judge.hpp) with what this session
// knows of a person's approvals, and the external decider's answer folded in ([decider]).
#include "gateway/admin/approvals.hpp"
#include "gateway/decider/client.hpp"
#include "gateway/session_impl.hpp"
#include "gateway/shared_limits/store.hpp"

namespace sluice::gateway::detail {

verdict session::judge(const exchange::request &r, const tunnel_target *tunnel, const filters::policy &pol,
                       outcome &o) {
  const auto db = state_.scan.load();
  exchange::judging j{pol, tunnel, approved_host_, approved_port_, approved_next_, state_.held.get(), &db};
  approved_next_ = false; // "the next request judged" is this one
  return exchange::judge(r, j, o);
}

decider::asker session::asker_for(const filters::policy &pol) const {
  return {who(), pol.cfg().role, state_.metrics.skill(), {}, filters::to_string(pol.mode())};
}

// The order of precedence (docs/policy.md, "An external decider"): the file's own refusals (deny
// entries, address rules, profile methods, hygiene, the scanner) stand without a question; what
// the allowlist does not name is the decider's to allow, refuse or hand to a person; with when =
// "all" what the file allows is put to it too, and it may only narrow that. An allowed miss is
// judged again as a person's approval is, so methods, routes and credentials still hold.
net::awaitable<void> session::consult(const exchange::request &r, const tunnel_target *tunnel,
                                      const filters::policy &pol, outcome &o, verdict &v) {
  if (!v.decide) co_return;
  v.decide = false;
  if (!v.reason.empty() && v.reason != "host_not_allowlisted") co_return;
  auto d = state_.decider.load();
  if (!d) co_return;
  auto a = co_await d->decide(decider::question(r, v, o, asker_for(pol)));
  if (a.kind == decider::answer::body) { // asked again once the body is here
    v.decider_body = d->config().max_body_bytes;
    v.decider_pending = std::exchange(v.reason, {});
    o.decided_by = "decider";
    co_return;
  }
  fold_answer(r, tunnel, pol, o, v, a);
}

net::awaitable<void> session::consult_body(const exchange::request &r, const tunnel_target *tunnel,
                                           const filters::policy &pol, outcome &o, verdict &v,
                                           std::string_view body) {
  const auto limit = std::exchange(v.decider_body, 0);
  v.reason = std::exchange(v.decider_pending, {}); // the file's own verdict, as the first question had it
  auto d = state_.decider.load();
  decider::answer a;
  if (d) {
    auto q = decider::question(r, v, o, asker_for(pol));
    decider::add_body(q, body);
    a = co_await d->decide(std::move(q));
  } else {
    a.message = "the decider was taken away by a reload";
  }
  if (a.kind == decider::answer::body) {
    a.kind = decider::answer::unavailable;
    a.message = "the decider asked for the body again, with the body";
  } else if (a.kind == decider::answer::ask) { // a person is asked about a request's head, before its body
    a.kind = decider::answer::deny;
    a.message = "the decider asked for a person after reading the body; answer ask to the question "
                "without the body to have a person asked";
  }
  fold_answer(r, tunnel, pol, o, v, a);
  // A body that was read goes as it was read, whatever the verdict now is; a request without one
  // (a GET, a WebSocket upgrade) goes as any other does.
  v.decider_body = body.empty() ? 0 : limit;
}

void session::fold_answer(const exchange::request &r, const tunnel_target *tunnel, const filters::policy &pol,
                          outcome &o, verdict &v, decider::answer &a) {
  o.decided_by = "decider";
  o.decider_message = a.message;
  switch (a.kind) {
  case decider::answer::allow:
    if (!v.reason.empty()) {
      approved_next_ = true;
      v = judge(r, tunnel, pol, o);
      v.decide = false;
      v.ask = false;
      o.decided_by = "decider";
      if (o.rule == "approved") o.rule = v.rule = "decider"; // the decider's leave, not a person's
    }
    if (v.reason.empty()) {
      for (auto &f : a.set) v.set.push_back(std::move(f));
      v.remove = std::move(a.remove);
    }
    break;
  case decider::answer::ask:
    if (r.can_hold) {
      if (v.reason.empty()) v.reason = "host_not_allowlisted"; // held as a miss is; a person decides
      v.ask = true;
      break;
    }
    o.decider_message = "the decider asked for a person, and an h2 stream cannot be held; send the request "
                        "over HTTP/1.1 to be asked";
    a.kind = decider::answer::deny; // refused as the decider's own deny is
    [[fallthrough]];
  default: // deny, timeout, unavailable
    v.reason = decider::refusal_of(a.kind);
    v.ask = false;
    v.close = false;
    v.rule = "decider";
    if (a.kind == decider::answer::deny) o.decider_status = a.status;
  }
}

// A CONNECT (or a captured connection) to a host the allowlist does not name, with a decider: its
// answer on the host and port. Allowed, a terminated tunnel's requests are each put to it again.
net::awaitable<filters::decision> session::consult_connect(outcome &o, const filters::policy &pol,
                                                           std::string_view raw_host, unsigned port) {
  auto d = state_.decider.load();
  if (!d) co_return filters::decision::deny("host_not_allowlisted"); // a reload took it away
  auto a = co_await d->decide(decider::connect_question(o, asker_for(pol)));
  if (a.kind == decider::answer::body) { // a CONNECT has none to send
    a.kind = decider::answer::unavailable;
    a.message = "the decider asked for the body of a CONNECT, which has none";
  }
  o.decided_by = "decider";
  o.decider_message = a.message;
  if (a.kind == decider::answer::allow) co_return pol.decide_connect_approved(raw_host, port);
  if (a.kind == decider::answer::ask) co_return filters::decision::deny("host_not_allowlisted"); // the caller asks
  if (a.kind == decider::answer::deny) o.decider_status = a.status;
  co_return filters::decision::deny(decider::refusal_of(a.kind), "decider");
}

net::awaitable<std::string_view> session::narrow_connection(outcome &o, const filters::policy &pol,
                                                             std::string_view protocol) {
  if (!pol.cfg().decider.all) co_return std::string_view{};
  auto d = state_.decider.load();
  if (!d) co_return std::string_view{};
  auto a = co_await d->decide(decider::connect_question(o, asker_for(pol), protocol, &o.rule));
  o.decided_by = "decider";
  o.decider_message = a.message;
  if (a.kind == decider::answer::allow) co_return std::string_view{};
  if (a.kind == decider::answer::ask || a.kind == decider::answer::body) {
    o.decider_message = a.kind == decider::answer::ask
                            ? "the decider asked for a person about a connection the file allows; sluice holds only "
                              "connections to hosts the allowlist does not name for a person"
                            : "the decider asked for the body of a connection, which sluice does not read";
    a.kind = a.kind == decider::answer::ask ? decider::answer::deny : decider::answer::unavailable;
  }
  if (a.kind == decider::answer::deny) o.decider_status = a.status;
  co_return decider::refusal_of(a.kind);
}

net::awaitable<void> session::admit_budgets(verdict &v, outcome &o, const filters::policy &pol,
                                            std::uint64_t head_bytes, std::uint64_t body_bytes) {
  if (!v.reason.empty() || pol.budgets().empty()) co_return;
  exchange::admission a;
  if (auto shared = state_.shared_limits.load()) {
    a = co_await shared->admit(state_.budgets, pol, who(), o.host, o.scheme, o.port, head_bytes, body_bytes);
  } else {
    a = state_.budgets.admit(pol, who(), o.host, o.scheme, o.port, head_bytes, body_bytes);
  }
  if (a.reason.empty()) {
    o.charged = std::move(a.charged);
    co_return;
  }
  v.reason = a.reason;
  v.rule = "budget:" + a.budget;
  v.close = false;
  o.limit_message = std::move(a.message);
  o.retry_after = a.retry_after;
}

template <class Stream> net::awaitable<bool> session::admit_connection(Stream &s, outcome &o) {
  verdict metered;
  const auto pol = policy_; // held: a reload may swap policy_ while the admission waits
  co_await admit_budgets(metered, o, *pol, 0);
  if (metered.reason.empty()) co_return true;
  co_await deny(s, o, metered.reason, metered.rule, false);
  co_return false;
}
template net::awaitable<bool> session::admit_connection<beast::tcp_stream>(beast::tcp_stream &, outcome &);
template net::awaitable<bool> session::admit_connection<tls_stream>(tls_stream &, outcome &);

} // namespace sluice::gateway::detail
