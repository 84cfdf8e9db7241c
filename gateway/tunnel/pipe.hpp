#pragma once
// The byte pump both ways of a tunnel that sluice does not open: allowlist CONNECT tunnels
// (connect.cpp) and relayed TCP (tcp.cpp). Included by those two wings only.
#include "gateway/session_impl.hpp"

#include <functional>

namespace sluice::gateway::detail {

// Copies bytes one way until EOF or error (allowlist tunnels, relayed TCP); `observe`, if set,
// sees each piece before it is written. Says how it ended.
template <class From, class To>
net::awaitable<session::pipe_end> session::pipe(From &from, To &to, std::uint64_t &bytes,
                                       const std::function<void(std::string_view)> &observe) {
  chunk data;
  for (;;) {
    lowest(from).expires_after(cfg().timeouts.tunnel_idle);
    auto [ec, n] = co_await from.async_read_some(net::buffer(data.get(), chunk_size), use_tuple);
    if (ec) {
      // half-close on EOF (a TLS client's close_notify or a truncation is its EOF too); on any
      // other error tear both directions down
      if (ec == net::error::eof || ec == net::ssl::error::stream_truncated) {
        co_await close_send(to);
        co_return pipe_end::eof;
      }
      error_code ignored;
      from.socket().shutdown(tcp::socket::shutdown_both, ignored);
      to.socket().shutdown(tcp::socket::shutdown_both, ignored);
      co_return ec == beast::error::timeout ? pipe_end::idle : pipe_end::error;
    }
    bytes += n;
    if (observe) observe(std::string_view(data.get(), n));
    lowest(to).expires_after(cfg().timeouts.io);
    auto [wec, wn] = co_await net::async_write(to, net::buffer(data.get(), n), use_tuple);
    if (wec) {
      error_code ignored;
      from.socket().shutdown(tcp::socket::shutdown_both, ignored);
      to.socket().shutdown(tcp::socket::shutdown_both, ignored);
      co_return pipe_end::error;
    }
    if (throttled()) co_await throttle(n);
  }
}

} // namespace sluice::gateway::detail
