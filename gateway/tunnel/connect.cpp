// CONNECT (on the proxy port, by SOCKS5, and captured TLS, which takes the same path without
// the "200"): the authority is judged first, then passed through (allowlist) or terminated with a
// leaf for it (network-read, publish), whose requests go to the HTTP/1.1 loop (http1/) or to an
// h2 connection (h2/).
#include "filters/client_identity.hpp"
#include "gateway/h2/connection.hpp"
#include "gateway/session.hpp"
#include "gateway/session_impl.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <cstring>
#include <openssl/ssl.h>

// GCC 12 false positive: Asio's awaitable frames come from, and go back to, its own
// operator new/delete (a per-thread recycling allocator); with serve_requests defined in another
// file, GCC pairs the frame's delete with the global new it cannot see past.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace sluice::gateway {
namespace detail {

using namespace boost::asio::experimental::awaitable_operators;

// Half-closes `s` after the other side's end of file: a TLS client's connection gets close_notify
// first (TLS 1.3 lets the other direction go on).
net::awaitable<void> close_send(beast::tcp_stream &s) {
  error_code ignored;
  s.socket().shutdown(tcp::socket::shutdown_send, ignored);
  co_return;
}
net::awaitable<void> close_send(tls_stream &s) {
  s.expires_after(std::chrono::seconds(2));
  co_await s.async_shutdown(use_tuple);
  error_code ignored;
  s.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

// Copies bytes one way until EOF or error, for `allowlist` tunnels.
template <class From, class To>
net::awaitable<void> session::pipe(From &from, To &to, std::uint64_t &bytes, exchange::meter *budget,
                                   bool sending) {
  chunk data;
  for (;;) {
    lowest(from).expires_after(cfg().timeouts.tunnel_idle);
    auto [ec, n] = co_await from.async_read_some(net::buffer(data.get(), chunk_size), use_tuple);
    if (ec) {
      // half-close on EOF (a TLS client's close_notify or a truncation is its EOF too); on any
      // other error tear both directions down
      if (ec == net::error::eof || ec == net::ssl::error::stream_truncated) {
        co_await close_send(to);
      } else {
        error_code ignored;
        from.socket().shutdown(tcp::socket::shutdown_both, ignored);
        to.socket().shutdown(tcp::socket::shutdown_both, ignored);
      }
      co_return;
    }
    bytes += n;
    // [[limits.budget]]: a piece that would take a byte budget past its limit does not go.
    if (budget && !budget->moved_one_way(sending, bytes)) {
      error_code ignored;
      from.socket().shutdown(tcp::socket::shutdown_both, ignored);
      to.socket().shutdown(tcp::socket::shutdown_both, ignored);
      co_return;
    }
    if (throttled()) co_await throttle(n); // paced before it goes on, as in the TCP relay
    lowest(to).expires_after(cfg().timeouts.io);
    auto [wec, wn] = co_await net::async_write(to, net::buffer(data.get(), n), use_tuple);
    if (wec) {
      error_code ignored;
      from.socket().shutdown(tcp::socket::shutdown_both, ignored);
      to.socket().shutdown(tcp::socket::shutdown_both, ignored);
      co_return;
    }
  }
}

// "200 Connection established", or the SOCKS5 success reply for a SOCKS CONNECT.
template <class Stream> net::awaitable<bool> session::send_established(Stream &s) {
  if (captured_) co_return true; // the client thinks it is connected to the origin already
  if (socks_pending_) {
    socks_pending_ = false;
    co_return co_await socks_reply(s, 0x00);
  }
  static constexpr std::string_view established = "HTTP/1.1 200 Connection established\r\n\r\n";
  lowest(s).expires_after(cfg().timeouts.io);
  auto [wec, wn] = co_await net::async_write(s, net::buffer(established), use_tuple);
  co_return !wec;
}

// The policy's decision on a CONNECT to `raw_host`:`port`; a host a person allowed for the run, or
// may allow now ([approvals]), is held here, before the tunnel opens.
template <class Stream>
net::awaitable<filters::decision> session::decide_connect(Stream &s, outcome &o, const filters::policy &pol,
                                                          std::string_view raw_host, unsigned port) {
  auto d = pol.decide_connect(raw_host, port);
  if (!d.allowed && d.reason == "host_not_allowlisted") {
    // A host a person allowed for the run, or may allow now ([approvals]): held before the tunnel.
    // With a [decider], it is asked first; what it hands on ("ask") goes to a person as before.
    bool run_approved = state_.held->allowed_for_run(o.host, port);
    if (!run_approved && pol.cfg().decider.configured() && state_.decider.load()) {
      o.method = "CONNECT";
      d = co_await consult_connect(o, pol, raw_host, port);
    }
    if (d.allowed || d.reason != "host_not_allowlisted") {
      // the decider answered (or the miss stands for a person below)
    } else if (run_approved) {
      d = pol.decide_connect_approved(raw_host, port);
    } else if (pol.askable(o.host, "https", port)) {
      o.method = "CONNECT";
      auto a = co_await ask(o, "connect", pol, lowest(s).socket());
      if (a == approval::once || a == approval::run || a == approval::always) {
        d = pol.decide_connect_approved(raw_host, port);
        approved_host_ = o.host; // the requests inside this tunnel
        approved_port_ = port;
        tunnel_approval_ = o.approval;
        tunnel_decided_by_ = o.decided_by;
      } else {
        d = filters::decision::deny(a == approval::deny      ? "approval_denied"
                                    : a == approval::timeout ? "approval_timeout"
                                    : a == approval::gone    ? "client_aborted"
                                                             : "approval_queue_full");
      }
    }
  }
  co_return d;
}

// The origin's connection for a tunnel sluice does not open (allowlist, relayed TCP), and the
// client told it is established; null when the dial failed (the client got the failure) or the
// client left.
template <class Stream>
net::awaitable<std::unique_ptr<upstream_connection>>
session::open_tunnel(Stream &s, outcome &o, const std::optional<net::ip::address> &ip) {
  error_code ec;
  auto conn = co_await connect_upstream(o.host, ip, o.port, false, ec);
  if (ec) {
    co_await fail(s, o, ec, false);
    co_return nullptr;
  }
  if (!co_await send_established(s)) co_return nullptr;
  co_return conn;
}
template net::awaitable<std::unique_ptr<upstream_connection>>
session::open_tunnel<beast::tcp_stream>(beast::tcp_stream &, outcome &, const std::optional<net::ip::address> &);
template net::awaitable<std::unique_ptr<upstream_connection>>
session::open_tunnel<tls_stream>(tls_stream &, outcome &, const std::optional<net::ip::address> &);

// allowlist: the tunnel passed through unopened, its bytes copied both ways until either side ends.
template <class Stream>
net::awaitable<void> session::pass_through(Stream &s, beast::flat_buffer &buf, outcome &o,
                                           const std::optional<net::ip::address> &ip) {
  if (!policy_->budgets().empty() && !co_await admit_connection(s, o)) co_return; // [[limits.budget]]
  auto conn = co_await open_tunnel(s, o, ip);
  if (!conn) co_return;
  if (buf.size()) { // bytes the client sent before our 200
    conn->tcp.expires_after(cfg().timeouts.io);
    auto [e2, n2] = co_await net::async_write(conn->tcp, buf.data(), use_tuple);
    o.bytes_in += n2;
    buf.consume(buf.size());
  }
  o.decision = "allow";
  o.reason = "allowed";
  o.status = 200;
  co_await (pipe(s, conn->tcp, o.bytes_in, o.charged.get(), true) &&
            pipe(conn->tcp, s, o.bytes_out, o.charged.get(), false));
}

// CONNECT (HTTP or SOCKS5): judged on host and port before anything else happens; then passed
// through (allowlist) or terminated with a leaf for the CONNECT host (network-read, publish).
template <class Stream>
net::awaitable<void> session::handle_connect(Stream &s, beast::flat_buffer &buf, record &o) {
  // Held for the tunnel's lifetime: requests inside it move policy_ on to newer policies.
  const filters::policy_ptr held = policy_;
  const auto &pol = *held;
  o.scheme = "https";
  std::string_view raw_host;
  unsigned port = 0;
  const std::string target = std::move(o.target); // raw_host points into it
  if (!filters::split_authority(target, raw_host, port) || port == 0) {
    o.host = target;
    co_await deny(s, o, "invalid_host", {}, false);
    co_return;
  }
  o.port = port;
  auto parsed = filters::parse_host(raw_host);
  o.host = parsed.host ? parsed.host->name : std::string(raw_host);
  o.target = "";
  if (!parsed.host) {
    co_await deny(s, o, parsed.reason, {}, false);
    co_return;
  }
  if (pol.tcp_granted(o.host, port)) {
    // TCP to a named service (or a host service that passes TCP), asked for by CONNECT or SOCKS5:
    // relayed as bytes under every profile, whatever it speaks.
    co_await relay_tcp(s, buf, o, pol, parsed.host->ip);
    co_return;
  }
  auto d = co_await decide_connect(s, o, pol, raw_host, port);
  if (!d.allowed) {
    co_await deny(s, o, d.reason, d.rule, false);
    co_return;
  }
  o.rule = d.rule;
  if (d.would_deny) o.would_deny = d.reason;

  if (!filters::terminates_tls(pol.mode())) {
    // No request inside will be judged: with when = "all" the decider is asked about the tunnel.
    if (auto no = co_await narrow_connection(o, pol, "connect"); !no.empty()) {
      co_await deny(s, o, no, "decider", false);
      co_return;
    }
    co_await pass_through(s, buf, o, parsed.host->ip);
    co_return;
  }

  if (!co_await send_established(s)) co_return;
  if (buf.size() == 0) {
    lowest(s).expires_after(cfg().timeouts.header_read);
    auto [rec, rn] = co_await s.async_read_some(buf.prepare(16 * 1024), use_tuple);
    if (rec) co_return;
    buf.commit(rn);
  }
  auto first = static_cast<const unsigned char *>(buf.data().data())[0];
  if (first != 0x16) { // not a TLS handshake record: the gateway cannot judge what it cannot read
    co_await deny(s, o, "tls_required", d.rule, false);
    co_return;
  }

  auto leaf = state_.leaves.get(o.host, parsed.host->ip.has_value());
  (leaf.cached ? state_.metrics.cert_cache_hits : state_.metrics.certs_minted).Increment();
  // The tunnel's TLS, on the socket or inside the client's TLS; kept by the session, where parking
  // finds it.
  if constexpr (std::is_same_v<Stream, tls_stream>) {
    tunnel_tls_ = std::make_unique<tls_stream>(s, state_.server_tls.native_handle());
  } else {
    tunnel_tls_ = std::make_unique<tls_stream>(s.release_socket(), state_.server_tls.native_handle());
  }
  tls_stream &tls = *tunnel_tls_;
  SSL *ssl = tls.native_handle();
  SSL_use_certificate(ssl, leaf.cert.get());
  sni_check check{o.host, parsed.host->ip.has_value(), false};
  SSL_set_app_data(ssl, &check);
  lowest(tls).expires_after(cfg().timeouts.tls_handshake);
  auto [hec, used] =
      co_await tls.async_handshake(tls_stream::role::server, buf.data(), use_tuple);
  SSL_set_app_data(ssl, nullptr);
  silent_ = false; // from here on, the client reads HTTP answers inside TLS
  state_.metrics.tls_handshake("client", !hec);
  if (hec) {
    if (check.mismatch) {
      o.decision = "deny";
      o.reason = "sni_mismatch";
    } else {
      // Logged although no request was made: a client that rejects sluice's certificate (a
      // wrong or stale CA bundle) is otherwise invisible. An alert from the client means its
      // own checks refused the handshake; anything else is a close, a timeout or garbage.
      bool alert = hec.category() == net::error::get_ssl_category() &&
                   ERR_GET_REASON(static_cast<unsigned long>(hec.value())) >= SSL_AD_REASON_OFFSET;
      o.decision = "error";
      o.reason = alert ? "client_tls_rejected" : "client_tls_error";
    }
    co_return;
  }
  buf.consume(used);
  buf.shrink_to_fit(); // the ClientHello's buffer is not needed for the tunnel's lifetime
  tunnel_target_ = tunnel_target{o.host, port};
  const unsigned char *proto = nullptr;
  unsigned proto_len = 0;
  SSL_get0_alpn_selected(ssl, &proto, &proto_len);
  if (proto_len == 2 && std::memcmp(proto, "h2", 2) == 0) {
    // HTTP/2 (the client offered h2, and sluice does): its streams, each judged as a request is.
    {
      h2_connection h2(*this, tls, tunnel_target_);
      co_await h2.run();
    }
    lowest(tls).expires_after(std::chrono::seconds(2));
    co_await tls.async_shutdown(use_tuple);
    co_return;
  }
  tunnel_buf_ = beast::flat_buffer(cfg().limits.max_header_bytes + chunk_size);
  co_await serve_requests(tls, tunnel_buf_, &tunnel_target_);
  if (park_) co_return; // every caller returns too, and run_counted parks the session
  lowest(tls).expires_after(std::chrono::seconds(2));
  co_await tls.async_shutdown(use_tuple); // best effort: close_notify, then the socket closes
  if (!tls.carried()) co_await close_client(tls.socket()); // a carried one: its carrier's end does
}

template net::awaitable<void> session::handle_connect<beast::tcp_stream>(beast::tcp_stream &, beast::flat_buffer &,
                                                                         record &);
template net::awaitable<void> session::handle_connect<tls_stream>(tls_stream &, beast::flat_buffer &, record &);

} // namespace detail

// The SNI a client sends inside a terminated CONNECT must name the CONNECT host; anything else is a
// client trying to reach one host through a tunnel opened for another.
int check_sni(SSL *ssl, int *alert, void *) {
  auto *check = static_cast<detail::session::sni_check *>(SSL_get_app_data(ssl));
  if (!check) return SSL_TLSEXT_ERR_NOACK;
  const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  if (!name) return SSL_TLSEXT_ERR_NOACK; // no SNI: the leaf for the CONNECT host is used
  auto parsed = filters::parse_host(name);
  if (!parsed.host || parsed.host->name != check->host) {
    check->mismatch = true;
    *alert = SSL_AD_UNRECOGNIZED_NAME;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  return SSL_TLSEXT_ERR_OK;
}

} // namespace sluice::gateway
