#include "gateway/h2/pump.hpp"

#include "gateway/session_impl.hpp"

namespace sluice::gateway::detail {

net::awaitable<int> h2_pump::read(tls_stream &s) {
  chunk data;
  while (!stopping && nghttp2_session_want_read(ng)) {
    s.expires_never();
    auto [ec, n] = co_await s.async_read_some(net::buffer(data.get(), chunk_size), use_tuple);
    if (ec) break; // end of stream, reset, or the owner's stop()
    last_read = clock::now();
    ++reads;
    auto rv = nghttp2_session_mem_recv(ng, reinterpret_cast<const std::uint8_t *>(data.get()), n);
    if (rv < 0) co_return static_cast<int>(rv);
    kick();
  }
  co_return 0;
}

net::awaitable<void> h2_pump::write(tls_stream &s, net::steady_timer &dog) {
  for (;;) {
    out.clear();
    while (out.size() < write_size) {
      const std::uint8_t *bytes = nullptr;
      auto n = nghttp2_session_mem_send(ng, &bytes);
      if (n < 0) { // nghttp2 cannot go on (out of memory, a callback failed): the connection ends
        stopping = true;
        break;
      }
      if (n == 0) break;
      out.append(reinterpret_cast<const char *>(bytes), static_cast<std::size_t>(n));
    }
    if (!out.empty()) {
      writing = true;
      write_since = clock::now();
      dog.cancel(); // the watchdog now has a write to time
      s.expires_never();
      auto [ec, n] = co_await net::async_write(s, net::buffer(out), use_tuple);
      writing = false;
      last_write = clock::now();
      if (ec) co_return;
      continue;
    }
    if (stopping || (!nghttp2_session_want_read(ng) && !nghttp2_session_want_write(ng))) co_return;
    if (!woken_) {
      wake_.expires_at(clock::time_point::max());
      co_await wake_.async_wait(use_tuple);
    }
    woken_ = false;
  }
}

} // namespace sluice::gateway::detail
