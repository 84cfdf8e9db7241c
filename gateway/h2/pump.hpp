#pragma once
// The framing loop both HTTP/2 legs share (h2_connection, the client's; h2_upstream, the
// origin's): bytes read go into nghttp2, the frames nghttp2 queues go out one write at a time,
// and the writer sleeps until someone kicks it. One loop, so that both legs end alike: on a read
// error or end of stream, on a frame nghttp2 refuses, on a failed write, or on nghttp2's own
// error while it serializes. Private to gateway/.
#include "gateway/gateway_state.hpp"
#include "gateway/h2/body_queue.hpp"
#include "gateway/tls_stream.hpp"

#include <array>
#include <chrono>
#include <string>
#include <vector>
#include <nghttp2/nghttp2.h>

namespace sluice::gateway::detail {

class h2_pump {
public:
  using clock = std::chrono::steady_clock;
  explicit h2_pump(const net::any_io_executor &ex) : wake_(ex) {}

  nghttp2_session *ng = nullptr;
  bool stopping = false; // the connection is ending: no new streams, streams give up
  bool writing = false;  // a write is under way, since write_since (the watchdog times it)
  clock::time_point write_since;
  clock::time_point last_read = clock::now(), last_write = clock::now();
  std::size_t reads = 0;
  // The frames of the next write: nghttp2's serialized frames, and the DATA frames a leg writes
  // itself from the buffers it holds (NGHTTP2_DATA_FLAG_NO_COPY: its send_data callback appends
  // the frame header and payload here, or adds a frame written in place with add_in_place, and
  // returns NGHTTP2_ERR_WOULDBLOCK when the frame would not fit in write_size). One write,
  // records of 16 KiB, per round.
  static constexpr std::size_t write_size = 64 * 1024;
  std::string out;
  // The bytes this round writes so far.
  std::size_t queued() const { return out.size() + in_place_bytes_; }
  // A DATA frame written from its buffer (body_queue::take_frame), after what `out` holds now:
  // `header` goes to f.at just before this frame is written (not sooner: those bytes may still be
  // the end of the frame before it, in the same buffer), then the header and `payload` bytes.
  void add_in_place(const std::uint8_t *header, std::size_t payload, body_queue::frame f);

  // Wakes the writer: nghttp2 may have frames to send.
  void kick() {
    woken_ = true;
    wake_.cancel();
  }

  // Feeds what `s` reads to nghttp2 until the stream ends, stopping is set, or nghttp2 refuses
  // what it read. Returns nghttp2's error (negative) in that last case, else 0. No deadline of its
  // own: the owner's watchdog and the streams' deadlines bound the connection.
  net::awaitable<int> read(tls_stream &s);
  // Sends what nghttp2 queues until the connection ends: stopping set, nothing more to read or
  // write, a failed write, or an nghttp2 error while serializing (stopping is then set). `dog` is
  // the owner's watchdog timer, cancelled when a write begins so that it times the write.
  net::awaitable<void> write(tls_stream &s, net::steady_timer &dog);

private:
  struct in_place {
    std::size_t after = 0; // out's bytes before it
    std::size_t size = 0;  // header and payload
    std::array<char, body_queue::frame_header> header{};
    body_queue::frame f;
  };
  // Writes out and the frames in place, in order (the round's frames are then let go).
  net::awaitable<error_code> write_round(tls_stream &s);

  std::vector<in_place> in_place_;
  std::size_t in_place_bytes_ = 0;
  std::vector<net::const_buffer> pieces_; // the round's, kept for their capacity
  net::steady_timer wake_;
  bool woken_ = false;
};

} // namespace sluice::gateway::detail
