// SOCKS5 (RFC 1928) on the proxy port: the greeting, the optional user name and password
// (RFC 1929, where [clients] identify clients), and the CONNECT request, which then takes the
// CONNECT path (connect.cpp) with a SOCKS reply in place of the "200".
#include "filters/client_identity.hpp"
#include "gateway/session_impl.hpp"

// GCC 12 false positive, as in connect.cpp: Asio's frames come from its own allocator.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace sluice::gateway::detail {

// VER REP RSV ATYP BND.ADDR BND.PORT, with an unspecified IPv4 bound address (RFC 1928).
template <class Stream> net::awaitable<bool> session::socks_reply(Stream &s, unsigned char code) {
  const unsigned char r[10] = {0x05, code, 0x00, 0x01, 0, 0, 0, 0, 0, 0};
  lowest(s).expires_after(cfg().timeouts.io);
  auto [ec, n] = co_await net::async_write(s, net::buffer(r), use_tuple);
  co_return !ec;
}

// Reads until `buf` holds `n` bytes (SOCKS negotiation is small and bounded), under the deadline
// the caller set for the whole step: a client dribbling bytes does not extend it.
net::awaitable<bool> session::read_at_least(beast::tcp_stream &s, beast::flat_buffer &buf, std::size_t n) {
  while (buf.size() < n) {
    auto [ec, got] = co_await s.async_read_some(buf.prepare(512), use_tuple);
    if (ec) co_return false;
    buf.commit(got);
  }
  co_return true;
}

// SOCKS5 (RFC 1928) on the proxy port: no authentication, CONNECT only. The requested host and
// port become a CONNECT target and take exactly the CONNECT path: same policy, same termination,
// same logs. Returns true when a CONNECT was read (connect_ is set for run()).
net::awaitable<bool> session::read_socks5(beast::tcp_stream &s, beast::flat_buffer &buf) {
  record o(*this); // written only if refused here: a CONNECT read goes on to run() (connect_)
  o.method = "CONNECT";
  o.scheme = "https";
  auto bytes = [&] { return static_cast<const unsigned char *>(buf.data().data()); };
  auto refuse = [&](std::string_view reason, std::string_view decision = "error") {
    o.method = "-";
    o.decision = decision;
    o.reason = reason;
  };
  s.expires_after(cfg().timeouts.header_read); // the greeting, all of it
  if (!co_await read_at_least(s, buf, 2)) co_return false;
  std::size_t nmethods = bytes()[1];
  if (!co_await read_at_least(s, buf, 2 + nmethods)) co_return false;
  // Where clients identify themselves ([clients]), only username/password (RFC 1929) is offered:
  // the user name is the client's name, the password its token.
  auto top = state_.policy.load();
  const bool need_auth = identify_ && top->requires_identity();
  bool offered = false;
  for (std::size_t i = 0; i < nmethods; ++i) offered = offered || bytes()[2 + i] == (need_auth ? 0x02 : 0x00);
  buf.consume(2 + nmethods);
  if (!offered) {
    static const unsigned char none[] = {0x05, 0xff};
    lowest(s).expires_after(cfg().timeouts.io);
    co_await net::async_write(s, net::buffer(none), use_tuple);
    if (need_auth) {
      refuse("proxy_auth_required", "deny");
    } else {
      refuse("socks_refused");
    }
    co_return false;
  }
  const unsigned char ok[] = {0x05, static_cast<unsigned char>(need_auth ? 0x02 : 0x00)};
  s.expires_after(cfg().timeouts.io);
  if (auto [wec, wn] = co_await net::async_write(s, net::buffer(ok), use_tuple); wec) co_return false;
  if (need_auth) {
    s.expires_after(cfg().timeouts.header_read); // the whole sub-negotiation
    if (!co_await read_at_least(s, buf, 2)) co_return false;
    std::size_t ulen = bytes()[1];
    if (!co_await read_at_least(s, buf, 2 + ulen + 1)) co_return false;
    std::size_t plen = bytes()[2 + ulen];
    if (!co_await read_at_least(s, buf, 3 + ulen + plen)) co_return false;
    std::string_view user(reinterpret_cast<const char *>(bytes()) + 2, ulen);
    std::string_view pass(reinterpret_cast<const char *>(bytes()) + 3 + ulen, plen);
    auto m = bytes()[0] == 0x01 ? filters::identify(top->cfg(), user, pass)
                                : filters::client_match{nullptr, "proxy_auth_invalid"};
    buf.consume(3 + ulen + plen);
    const unsigned char status[] = {0x01, static_cast<unsigned char>(m.client ? 0x00 : 0x01)};
    lowest(s).expires_after(cfg().timeouts.io);
    auto [aec, an] = co_await net::async_write(s, net::buffer(status), use_tuple);
    if (!m.client) {
      refuse(m.reason, "deny");
      co_return false;
    }
    if (aec) co_return false;
    take_client(*top, *m.client, false);
  }
  s.expires_after(cfg().timeouts.header_read); // the request, all of it
  if (!co_await read_at_least(s, buf, 5)) co_return false;
  unsigned char ver = bytes()[0], cmd = bytes()[1], atyp = bytes()[3];
  std::size_t addr_len = atyp == 0x01 ? 4 : atyp == 0x04 ? 16 : atyp == 0x03 ? 1u + bytes()[4] : 0;
  if (ver != 0x05 || addr_len == 0) {
    co_await socks_reply(s, 0x08); // address type not supported
    refuse("socks_refused");
    co_return false;
  }
  if (!co_await read_at_least(s, buf, 4 + addr_len + 2)) co_return false;
  const unsigned char *a = bytes() + 4;
  std::string host;
  if (atyp == 0x01) {
    host = net::ip::address_v4({a[0], a[1], a[2], a[3]}).to_string();
  } else if (atyp == 0x04) {
    net::ip::address_v6::bytes_type b;
    std::copy(a, a + 16, b.begin());
    host = "[" + net::ip::address_v6(b).to_string() + "]";
  } else {
    host.assign(reinterpret_cast<const char *>(a + 1), a[0]);
  }
  unsigned port = (unsigned(a[addr_len]) << 8) | a[addr_len + 1];
  buf.consume(4 + addr_len + 2);
  if (cmd != 0x01) { // BIND and UDP ASSOCIATE: not a proxy for those
    co_await socks_reply(s, 0x07);
    o.host = host;
    o.port = port;
    refuse("socks_refused");
    co_return false;
  }
  o.target = host + ":" + std::to_string(port);
  if (!within_rate()) {
    co_await socks_reply(s, 0x02); // not allowed by ruleset
    o.host = host;
    o.port = port;
    refuse("rate_limited", "deny");
    co_return false;
  }
  socks_pending_ = true;
  connect_ = std::make_unique<record>(std::move(o));
  co_return true;
}

template net::awaitable<bool> session::socks_reply<beast::tcp_stream>(beast::tcp_stream &, unsigned char);
template net::awaitable<bool> session::socks_reply<tls_stream>(tls_stream &, unsigned char);

} // namespace sluice::gateway::detail
