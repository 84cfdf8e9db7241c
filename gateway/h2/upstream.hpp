#pragma once
// HTTP/2 to the origin: one TLS connection on which the origin selected "h2" in ALPN, its streams
// those of h2 clients' streams that were judged and allowed (any client connection of the worker
// that goes to the same scheme, host and port), multiplexed. Each origin stream's response is
// handed to its client stream as it arrives: the head, the body bytes (bounded by the stream's
// window, which opens only as the client takes them), the trailers (gRPC's grpc-status).
// Framing is libnghttp2's (a client session). Private to gateway/.
#include "gateway/h2/connection.hpp"
#include "gateway/h2/pump.hpp"

#include <map>
#include <memory>
#include <nghttp2/nghttp2.h>
#include <string>

namespace sluice::gateway::detail {

class h2_upstream : public std::enable_shared_from_this<h2_upstream> {
public:
  using stream = h2_connection::stream;
  // `conn` has finished its TLS handshake with "h2" selected. `max_header_bytes` bounds each
  // response head and trailer section; `idle` ends the connection when no stream has been open
  // for that long; `io` bounds any one write.
  h2_upstream(worker &w, std::unique_ptr<upstream_connection> conn, std::size_t max_header_bytes,
              clock::duration idle, clock::duration io);
  ~h2_upstream();
  h2_upstream(const h2_upstream &) = delete;
  h2_upstream &operator=(const h2_upstream &) = delete;

  // Runs the connection (detached; it holds itself) and lists it in the worker's h2 origins.
  void start();
  // A new stream can be opened now: the origin has not said GOAWAY, the connection works, and the
  // origin's limit on concurrent streams leaves room.
  bool usable() const;
  // Opens a stream for `st`: `fields` are the request head (pseudo-headers first); its body, if
  // `body`, is read from st.body_in until st.request_ended. Returns the origin's stream id, or a
  // negative nghttp2 error.
  std::int32_t open(const std::shared_ptr<stream> &st, const std::vector<std::pair<std::string, std::string>> &fields,
                    bool body);
  // More request body (or its end) is in st.body_in for stream `id`.
  void resume(std::int32_t id);
  // The client took `n` bytes of stream `id`'s response: the origin may send that many more.
  void consumed(std::int32_t id, std::size_t n);
  // The client stream is gone or given up: the origin's stream is reset (CANCEL) if still open and
  // forgotten; `unread` (its bytes the client never took) is given back to the connection's window.
  void cancel(std::int32_t id, std::size_t unread);

private:
  static int on_header(nghttp2_session *, const nghttp2_frame *, const std::uint8_t *, std::size_t,
                       const std::uint8_t *, std::size_t, std::uint8_t, void *);
  static int on_frame_recv(nghttp2_session *, const nghttp2_frame *, void *);
  static int on_data_chunk(nghttp2_session *, std::uint8_t, std::int32_t, const std::uint8_t *, std::size_t,
                           void *);
  static int on_stream_close(nghttp2_session *, std::int32_t, std::uint32_t, void *);
  static ssize_t read_request_body(nghttp2_session *, std::int32_t, std::uint8_t *, std::size_t, std::uint32_t *,
                                   nghttp2_data_source *, void *);

  net::awaitable<void> run();
  net::awaitable<void> reader();
  net::awaitable<void> writer();
  net::awaitable<void> watchdog();
  void kick();
  void stop();

  worker &worker_;
  std::unique_ptr<upstream_connection> conn_;
  nghttp2_session *ng_ = nullptr;
  std::size_t max_header_bytes_;
  clock::duration idle_, io_;
  std::map<std::int32_t, std::shared_ptr<stream>> streams_;
  h2_pump pump_; // the reader and the writer; stopping: the connection is ending
  net::steady_timer dog_;
  clock::time_point quiet_since_ = clock::now(); // the last stream closed (or the connection opened)
};

} // namespace sluice::gateway::detail
