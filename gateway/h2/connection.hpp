#pragma once
// HTTP/2 on the terminated leg (ALPN "h2"): one client connection's streams, each translated
// (filters/h2_translation), judged by the step every protocol shares (session::judge) and
// forwarded to the origin over HTTP/1.1 (the upstream pool), one access-log line per stream.
// Framing is libnghttp2's; the bounds against the known HTTP/2 attacks are set here.
// Private to gateway/.
#include "gateway/exchange/body.hpp"
#include "gateway/h2/pump.hpp"
#include "gateway/session_impl.hpp"

#include <array>
#include <map>
#include <memory>
#include <nghttp2/nghttp2.h>

namespace sluice::gateway::detail {

class h2_upstream;

class h2_connection {
public:
  h2_connection(session &owner, tls_stream &tls, const tunnel_target &target);
  ~h2_connection();
  h2_connection(const h2_connection &) = delete;
  h2_connection &operator=(const h2_connection &) = delete;

  // Serves the connection until the client closes it, it idles out or breaks the protocol, and
  // every stream's forwarding has ended.
  net::awaitable<void> run();
  // The gateway drains: GOAWAY, and the connection ends once its open streams have.
  void goaway();

  struct stream; // one request and its response

private:
  // nghttp2's callbacks (user_data is the connection).
  static int on_begin_frame(nghttp2_session *, const nghttp2_frame_hd *, void *);
  static int on_begin_headers(nghttp2_session *, const nghttp2_frame *, void *);
  static int on_header(nghttp2_session *, const nghttp2_frame *, const std::uint8_t *, std::size_t,
                       const std::uint8_t *, std::size_t, std::uint8_t, void *);
  static int on_frame_recv(nghttp2_session *, const nghttp2_frame *, void *);
  static int on_data_chunk(nghttp2_session *, std::uint8_t, std::int32_t, const std::uint8_t *, std::size_t,
                           void *);
  static int on_stream_close(nghttp2_session *, std::int32_t, std::uint32_t, void *);
  // A frame that broke the protocol: nghttp2 resets its stream (or ends the connection).
  static int on_invalid_frame(nghttp2_session *, const nghttp2_frame *, int, void *);
  static ssize_t read_body(nghttp2_session *, std::int32_t, std::uint8_t *, std::size_t, std::uint32_t *,
                           nghttp2_data_source *, void *);
  static ssize_t data_length(nghttp2_session *, std::uint8_t, std::int32_t, std::int32_t, std::int32_t, std::uint32_t,
                             void *);
  static int send_data(nghttp2_session *, nghttp2_frame *, const std::uint8_t *, std::size_t,
                       nghttp2_data_source *, void *);

  net::awaitable<void> reader();
  net::awaitable<void> writer();
  // The connection's deadlines, kept apart from the TLS stream's one (which reads and writes
  // running side by side would share): a write that takes longer than timeouts.io, and no
  // stream open for the idle deadline (header_read before the first frames), end it.
  net::awaitable<void> watchdog();
  void stop(); // ends the reader, the writer and the watchdog
  // The stream's log line names the tunnel's origin and, `from_fields`, the method and path the
  // client sent (a stream refused before translation, or reset before judging).
  void label(stream &st, bool from_fields);
  // A request's header block is complete: translated, judged, answered or forwarded.
  void begin(const std::shared_ptr<stream> &st);
  // Forwards an allowed stream to the origin and its response back: over the worker's h2
  // connection to the origin where it speaks h2, else over HTTP/1.1 (the upstream pool).
  net::awaitable<void> forward(std::shared_ptr<stream> st);
  net::awaitable<void> forward_h1(std::shared_ptr<stream> st, std::unique_ptr<upstream_connection> conn,
                                  bool reused, std::string preread, std::string authority);
  net::awaitable<bool> send_body(std::shared_ptr<stream> st, upstream_connection &conn, bool chunked,
                                 clock::time_point deadline);
  net::awaitable<void> forward_h2(std::shared_ptr<stream> st, std::shared_ptr<h2_upstream> origin,
                                  std::string preread, std::string authority);
  // A response sluice writes itself: a refusal (the policy's, or the framing's) or a failure
  // upstream; gRPC-shaped (200, grpc-status) for a gRPC call.
  void respond(stream &st, unsigned status, std::string_view ps_error, std::string body);
  void refuse(stream &st, std::string_view reason, std::string rule);
  // MCP calls the policy refused (exchange/mcp.hpp): 200 with their JSON-RPC errors.
  void refuse_mcp(stream &st, const exchange::body_refusal &no);
  // [decider] asked for the body: asked again with the body read whole (st.body_in). False when
  // the stream is refused here or gone (the caller ends it).
  net::awaitable<bool> ask_with_body(stream &st);
  void fail(stream &st, error_code ec);
  // The stream ended before its answer did: the client reset it, or nghttp2 did for the
  // client's fault (its reason), or the connection ended.
  void aborted(stream &st);
  // A stream the client made sluice reset: counted, and past the bound the connection ends.
  void provoked_reset();
  // Submits the response head (and the body through read_body, if one follows).
  void submit(stream &st, unsigned status, std::vector<std::pair<std::string, std::string>> fields, bool body);
  // Wakes the writer: frames to send.
  void kick();
  // Ends the connection with GOAWAY (`code`) after what is queued.
  void terminate(std::uint32_t code);

  session &owner_;
  tls_stream &tls_;
  tunnel_target target_;
  nghttp2_session *ng_ = nullptr;
  std::map<std::int32_t, std::shared_ptr<stream>> streams_;
  h2_pump pump_;                // the reader and the writer; stopping: no new streams, streams give up
  net::steady_timer finished_;  // run() waits on it for the last forwarding stream
  net::steady_timer dog_;       // the watchdog's
  std::size_t forwarding_ = 0;  // streams whose forward() has not returned
  bool dialing_ = false;        // a stream is dialing the origin (others wait to share an h2 origin)
  // Flood counters (nghttp2 1.52 bounds some floods itself: rapid reset, CONTINUATION, ACKs).
  std::size_t empty_frames_ = 0;
  std::size_t oversized_ = 0;   // header lists refused as too large
  // The client's stream ids: the highest it opened, and the last few it opened (a HEADERS frame
  // for one of those, closed meanwhile, may have crossed sluice's RST_STREAM: ignored, as nghttp2
  // does; for any other lower id it is a connection error, RFC 9113 section 5.1.1).
  std::int32_t highest_opened_ = 0;
  std::array<std::int32_t, 64> recent_opened_{};
  std::size_t recent_next_ = 0;
  double provoked_tokens_;       // provoked_reset()'s bucket, full at the start
  clock::time_point provoked_at_ = clock::now();
  std::size_t control_frames_ = 0;
  clock::time_point control_window_ = clock::now();
};

} // namespace sluice::gateway::detail
