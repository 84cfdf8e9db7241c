// Relayed TCP (docs/policy.md, "Beyond HTTP"): a connection to a name and port a tcp entry grants,
// or to a host service that passes TCP, copied both ways as bytes. sluice dials it as it dials
// any origin (the name resolved and every address judged; the host's loopback only for a granted
// host service), bounds it (connections at once, idle and total deadlines) and logs it once: bytes
// each way, who closed it, and where a database client's cleartext start shows them, the database
// user and name (never a credential).
#include "filters/db_startup.hpp"
#include "gateway/session.hpp"
#include "gateway/session_impl.hpp"
#include "gateway/tunnel/pipe.hpp"

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

template <class A, class B> void shutdown_both(A &a, B &b) {
  error_code ignored;
  lowest(a).socket().shutdown(tcp::socket::shutdown_both, ignored);
  lowest(b).socket().shutdown(tcp::socket::shutdown_both, ignored);
}
} // namespace

template <class Stream>
net::awaitable<void> session::relay_tcp(Stream &s, beast::flat_buffer &buf, outcome &o,
                                        const std::optional<net::ip::address> &ip) {
  o.scheme = "tcp";
  o.protocol = "tcp";
  tcp_slot slot(state_.tcp_open, cfg().limits.max_tcp_connections);
  if (!slot.taken) {
    co_await deny(s, o, "tcp_connection_limit", o.rule, false);
    co_return;
  }
  error_code ec;
  auto conn = co_await connect_upstream(o.host, ip, o.port, false, ec);
  if (ec) {
    co_await fail(s, o, ec, false);
    co_return;
  }
  if (!co_await send_established(s)) co_return;
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
  auto one_way = [&](auto &from, auto &to, std::uint64_t &bytes, std::string_view side,
                     const std::function<void(std::string_view)> &see) -> net::awaitable<void> {
    auto end = co_await pipe(from, to, bytes, see);
    if (o.closed_by.empty()) o.closed_by = end == pipe_end::eof ? side : end == pipe_end::idle ? "idle" : "error";
  };
  net::steady_timer deadline(worker_.ioc.get_executor());
  auto whole = [&]() -> net::awaitable<void> {
    deadline.expires_after(cfg().timeouts.tcp);
    auto [dec] = co_await deadline.async_wait(use_tuple);
    if (dec) co_return; // the relay ended first
    if (o.closed_by.empty()) o.closed_by = "deadline";
    shutdown_both(s, origin);
  };
  co_await ((one_way(s, origin, o.bytes_in, "client", observe) && one_way(origin, s, o.bytes_out, "server", {})) ||
            whole());
}

template net::awaitable<void> session::relay_tcp<beast::tcp_stream>(beast::tcp_stream &, beast::flat_buffer &,
                                                                    outcome &, const std::optional<net::ip::address> &);
template net::awaitable<void> session::relay_tcp<tls_stream>(tls_stream &, beast::flat_buffer &, outcome &,
                                                             const std::optional<net::ip::address> &);

} // namespace sluice::gateway::detail
