// Relayed TCP (docs/policy.md, "Beyond HTTP"): a connection to a name and port a tcp entry grants,
// or to a host service that passes TCP, copied both ways as bytes. sluice dials it as it dials
// any origin (the name resolved and every address judged; the host's loopback only for a granted
// host service), bounds it (connections at once, idle and total deadlines) and logs it once: bytes
// each way, who closed it, and where a database client's cleartext start shows them, the database
// user and name (never a credential).
#include "filters/db_startup.hpp"
#include "gateway/session.hpp"
#include "gateway/session_impl.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>

#pragma GCC diagnostic ignored "-Wmismatched-new-delete" // as in connect.cpp: Asio's frame allocator

namespace sluice::gateway::detail {

using namespace boost::asio::experimental::awaitable_operators;

namespace {
// Counts one relayed connection for as long as it lives.
struct tcp_slot {
  std::atomic<std::size_t> &open;
  bool taken;
  tcp_slot(std::atomic<std::size_t> &o, std::size_t limit) : open(o), taken(o.fetch_add(1) < limit) {
    if (!taken) --open;
  }
  ~tcp_slot() {
    if (taken) --open;
  }
  tcp_slot(const tcp_slot &) = delete;
  tcp_slot &operator=(const tcp_slot &) = delete;
};

enum class pump_end { eof, error, budget };

// When a relayed connection last moved a byte, either way (the watchdog's idle deadline).
struct relay_clock {
  clock::time_point last;
};

// The read side of a pump: the socket itself where the stream is a plain TCP stream (no timer per
// operation: the watchdog keeps the deadlines), else the stream (TLS on the HTTPS proxy listener).
template <class Stream> auto &raw(Stream &s) {
  if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
    return s.socket();
  } else {
    return s;
  }
}

template <class A, class B> void shutdown_both(A &a, B &b) {
  error_code ignored;
  lowest(a).socket().shutdown(tcp::socket::shutdown_both, ignored);
  lowest(b).socket().shutdown(tcp::socket::shutdown_both, ignored);
}
// Copies bytes one way until end of file (then half-closes the other side) or an error (then
// closes both); `observe` sees each piece before it is written. A client with a byte rate ([roles]
// bytes_per_second) is held to it as in any tunnel.
template <class From, class To>
net::awaitable<pump_end> pump(session &self, From &from, To &to, std::uint64_t &bytes,
                              const std::function<void(std::string_view)> &observe, relay_clock &c,
                              exchange::meter *budget, bool sending) {
  chunk data;
  for (;;) {
    auto [ec, n] = co_await raw(from).async_read_some(net::buffer(data.get(), chunk_size), use_tuple);
    if (ec) {
      if (ec == net::error::eof || ec == net::ssl::error::stream_truncated) {
        co_await close_send(to);
        co_return pump_end::eof;
      }
      shutdown_both(from, to);
      co_return pump_end::error;
    }
    c.last = clock::now();
    bytes += n;
    if (observe) observe(std::string_view(data.get(), n));
    // [[limits.budget]]: a piece that would take a byte budget past its limit does not go.
    if (budget && !budget->moved_one_way(sending, bytes)) {
      shutdown_both(from, to);
      co_return pump_end::budget;
    }
    // Paced before it goes on, so that no byte reaches the other side sooner than the rate allows.
    if (self.throttled()) co_await self.throttle(n);
    auto [wec, wn] = co_await net::async_write(raw(to), net::buffer(data.get(), n), use_tuple);
    if (wec) {
      shutdown_both(from, to);
      co_return pump_end::error;
    }
    c.last = clock::now();
  }
}

} // namespace

template <class Stream>
net::awaitable<void> session::relay_tcp(Stream &s, beast::flat_buffer &buf, outcome &o, const filters::policy &pol,
                                        const std::optional<net::ip::address> &ip) {
  auto d = pol.decide_tcp(o.host, o.port);
  o.rule = d.rule;
  if (!d.allowed) {
    co_await deny(s, o, d.reason, d.rule, false);
    co_return;
  }
  if (d.would_deny) o.would_deny = d.reason;
  if (auto no = co_await narrow_connection(o, pol, "tcp"); !no.empty()) { // [decider] when = "all"
    co_await deny(s, o, no, "decider", false);
    co_return;
  }
  o.scheme = "tcp";
  o.protocol = "tcp";
  tcp_slot slot(state_.tcp_open, cfg().limits.max_tcp_connections);
  if (!slot.taken) {
    co_await deny(s, o, "tcp_connection_limit", o.rule, false);
    co_return;
  }
  if (!policy_->budgets().empty() && !co_await admit_connection(s, o)) co_return; // [[limits.budget]]
  auto conn = co_await open_tunnel(s, o, ip);
  if (!conn) co_return;
  error_code ec;
  o.decision = "allow";
  o.reason = "allowed";
  if (!captured_) o.status = 200;
  // What is learnt goes into the outcome at once: a run that ends while the relay is still open
  // writes its line when the session goes, with what was known by then.
  filters::db_startup_sniffer sniff(o.port);
  const std::function<void(std::string_view)> observe = [&sniff, &o](std::string_view piece) {
    if (sniff.done()) return;
    sniff.feed(piece);
    const auto &info = sniff.info();
    if (info.protocol == filters::db_protocol::unknown) return;
    o.db_protocol = filters::db_startup_sniffer::name(info.protocol);
    o.db_user = info.user;
    o.db_name = info.database;
  };
  auto &origin = conn->tcp;
  if (buf.size()) { // the bytes that told sluice what the client speaks
    observe(std::string_view(static_cast<const char *>(buf.data().data()), buf.size()));
    origin.expires_after(cfg().timeouts.io);
    auto [wec, wn] = co_await net::async_write(origin, buf.data(), use_tuple);
    o.bytes_in += wn;
    buf.consume(buf.size());
    if (wec) {
      o.closed_by = "error";
      co_return;
    }
  }
  // Both ways at once. Deadlines: no byte either way for tunnel_idle, and the whole connection
  // for [timeouts] tcp, kept by one watchdog rather than a timer per read and write (a database's
  // small round trips would pay for two timer changes each).
  relay_clock clock_state{clock::now()};
  auto one_way = [&](auto &from, auto &to, std::uint64_t &bytes, std::string_view side,
                     const std::function<void(std::string_view)> &see) -> net::awaitable<void> {
    auto end = co_await pump(*this, from, to, bytes, see, clock_state, o.charged.get(), side == "client");
    if (o.closed_by.empty()) o.closed_by = end == pump_end::eof ? side : end == pump_end::budget ? "budget" : "error";
  };
  auto watchdog = [&]() -> net::awaitable<void> {
    const auto idle = cfg().timeouts.tunnel_idle, whole = cfg().timeouts.tcp;
    const auto until = clock::now() + whole;
    net::steady_timer timer(worker_.ioc.get_executor());
    for (;;) {
      auto now = clock::now();
      if (now >= until) {
        if (o.closed_by.empty()) o.closed_by = "deadline";
        break;
      }
      if (now - clock_state.last >= idle) {
        if (o.closed_by.empty()) o.closed_by = "idle";
        break;
      }
      timer.expires_at(std::min(until, clock_state.last + idle));
      auto [tec] = co_await timer.async_wait(use_tuple);
      if (tec) co_return; // the relay ended first
    }
    shutdown_both(s, origin);
  };
  lowest(s).socket().set_option(tcp::no_delay(true), ec); // small round trips, as to the origin
  lowest(s).expires_never();
  origin.expires_never();
  co_await ((one_way(s, origin, o.bytes_in, "client", observe) && one_way(origin, s, o.bytes_out, "server", {})) ||
            watchdog());
}

template net::awaitable<void> session::relay_tcp<beast::tcp_stream>(beast::tcp_stream &, beast::flat_buffer &,
                                                                    outcome &, const filters::policy &, const std::optional<net::ip::address> &);
template net::awaitable<void> session::relay_tcp<tls_stream>(tls_stream &, beast::flat_buffer &, outcome &, const filters::policy &,
                                                             const std::optional<net::ip::address> &);

} // namespace sluice::gateway::detail
