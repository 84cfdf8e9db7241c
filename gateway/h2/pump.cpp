#include "gateway/h2/pump.hpp"

#include "gateway/session_impl.hpp"

#include <cstring>

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

void h2_pump::add_in_place(const std::uint8_t *header, std::size_t payload, body_queue::frame f) {
  in_place entry{out.size(), body_queue::frame_header + payload, {}, std::move(f)};
  std::memcpy(entry.header.data(), header, body_queue::frame_header);
  in_place_bytes_ += entry.size;
  in_place_.push_back(std::move(entry));
}

net::awaitable<error_code> h2_pump::write_round(tls_stream &s) {
  if (in_place_.empty()) {
    auto [ec, n] = co_await net::async_write(s, net::buffer(out), use_tuple);
    co_return ec;
  }
  // The round as pieces: out's bytes between the frames written in place, and those frames, each
  // header put in place just before its frame is written.
  pieces_.clear();
  std::size_t from = 0;
  for (const auto &f : in_place_) {
    if (f.after > from) pieces_.emplace_back(out.data() + from, f.after - from);
    from = f.after;
    pieces_.emplace_back(f.f.at, f.size);
  }
  if (from < out.size()) pieces_.emplace_back(out.data() + from, out.size() - from);
  // The pieces come in order, and a frame's piece starts at its header's place (out's never do).
  auto place_header = [this, next = std::size_t{0}](std::size_t piece) mutable {
    if (next == in_place_.size() || pieces_[piece].data() != in_place_[next].f.at) return;
    const auto &f = in_place_[next++];
    std::memcpy(f.f.at, f.header.data(), f.header.size());
  };
  auto [ec, n] = co_await s.async_write_pieces(pieces_, place_header, use_tuple);
  in_place_.clear(); // the buffers go back to the pool once no stream holds them either
  in_place_bytes_ = 0;
  co_return ec;
}

net::awaitable<void> h2_pump::write(tls_stream &s, net::steady_timer &dog) {
  for (;;) {
    out.clear();
    while (queued() < write_size) {
      const std::uint8_t *bytes = nullptr;
      auto n = nghttp2_session_mem_send(ng, &bytes);
      if (n < 0) { // nghttp2 cannot go on (out of memory, a callback failed): the connection ends
        stopping = true;
        break;
      }
      if (n == 0) break;
      out.append(reinterpret_cast<const char *>(bytes), static_cast<std::size_t>(n));
    }
    if (queued() > 0) {
      writing = true;
      write_since = clock::now();
      dog.cancel(); // the watchdog now has a write to time
      s.expires_never();
      auto ec = co_await write_round(s);
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
