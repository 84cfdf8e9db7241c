#pragma once
// One stream of an h2 connection, shared by the connection (h2/connection.cpp: frames, judging,
// answers) and the stream's forwarding to the origin (h2/forward.cpp). Private to gateway/.
#include "filters/h2_translation.hpp"
#include "gateway/h2/body_queue.hpp"
#include "gateway/h2/connection.hpp"

namespace sluice::gateway::detail {

class h2_upstream;

// What one client connection may hold (docs/policy.md, "HTTP/2"): streams at once, the window each
// stream's request body may run ahead of the origin, the connection's window, and what a stream's
// response may hold before its origin is read from again.
inline constexpr std::uint32_t max_streams = 100;
inline constexpr std::int32_t stream_window = 256 * 1024;
inline constexpr std::int32_t connection_window = 1024 * 1024;
inline constexpr std::size_t response_buffer = 256 * 1024;
// Frames a well-behaved client has no reason to send many of: empty DATA frames without
// END_STREAM on a connection (CVE-2019-9518 has no bound in nghttp2 1.52), and PING, SETTINGS,
// PRIORITY and WINDOW_UPDATE frames in one second.
inline constexpr std::size_t max_empty_frames = 100;
inline constexpr std::size_t max_control_frames_per_second = 500;
// Streams the client made sluice reset (a malformed header block, a window overflowed: the
// MadeYouReset attack, CVE-2025-8671, which nghttp2 1.52 does not bound): a bucket of this many,
// refilled at the rate below, as nghttp2's own bound on the resets a client sends.
inline constexpr double max_provoked_resets = 100;
inline constexpr double provoked_resets_per_second = 10;
// Header lists refused as too large (431) on one connection: an HPACK bomb costs the decoding
// however the list ends, so past this many the connection ends.
inline constexpr std::size_t max_oversized_header_lists = 4;

struct h2_connection::stream {
  stream(net::any_io_executor ex, std::int32_t id, exchange::recorder &to) : id(id), o(to), wake(ex) {}
  std::int32_t id;
  // The request's fields as they arrive, copied (nghttp2's views last one read) and bounded.
  std::vector<std::pair<std::string, std::string>> fields;
  std::size_t field_bytes = 0;
  std::size_t trailer_bytes = 0; // of request trailers, which are dropped but bounded
  bool too_large = false;
  filters::h2_request request;
  bool grpc = false;         // content-type application/grpc: refusals are gRPC-shaped
  std::string body_in;       // request body bytes not yet written to the origin
  std::size_t in_at = 0;     // of body_in, handed to an h2 origin already
  std::size_t sent_up = 0;   // request body bytes an h2 origin's session took, not yet counted back
  std::size_t unconsumed = 0; // of those received, not yet counted back into the windows
  bool request_ended = false;
  bool body_seen = false;    // a DATA byte arrived on a bodyless stream (verdict::bodyless)
  bool begun = false;        // its header block ended: translated and judged (begin())
  // Why nghttp2 reset it, where the client broke the protocol on it (on_invalid_frame): logged.
  std::string_view reset_reason;
  // The response as the origin sends it, framed out by send_data.
  body_queue body_out;
  bool response_ended = false;
  bool submitted = false;    // a response head went to nghttp2
  bool closed = false;       // nghttp2 closed the stream (the client reset it, or it is done)
  // [scan] found a secret in the body as it arrived: the piece was never kept, and forward()
  // stops as for a reset (aborted() answers the refusal).
  bool scan_stop = false;
  bool scan_fed = false;     // body bytes went through the scan (its end is then scanned too)
  bool forwarding = false;   // forward() runs for it
  upstream_connection *up = nullptr; // while forward() talks to the origin: cancelled on close
  // While an h2 origin serves it (h2_upstream): its stream there and the response as it arrives.
  std::shared_ptr<h2_upstream> origin;
  std::int32_t origin_id = -1;
  std::vector<std::pair<std::string, std::string>> head;     // ":status" first
  std::vector<std::pair<std::string, std::string>> trailers; // after the body (gRPC's grpc-status)
  std::size_t origin_field_bytes = 0;
  bool origin_too_large = false; // a head or trailer section past limits.max_header_bytes
  bool head_ready = false;
  bool origin_ended = false;     // END_STREAM from the origin
  bool origin_closed = false;    // the origin's stream is closed (origin_error says how)
  std::uint32_t origin_error = 0;
  // Written when the stream is done: nghttp2 closed it and forward() has ended (settle(), in
  // on_stream_close and forward's guard), or when the connection lets go of it.
  record o;
  verdict v;
  filters::policy_ptr policy; // the policy it was judged by, held while it is forwarded
  net::steady_timer wake;    // forward() waits on it for body bytes, room, or the stream's end
  bool woken = false;
  void signal() {
    woken = true;
    wake.cancel();
  }
  // Waits for signal() or `deadline`; false when the deadline passed first.
  net::awaitable<bool> wait(clock::time_point deadline) {
    if (!woken) {
      wake.expires_at(deadline);
      co_await wake.async_wait(use_tuple);
    }
    bool ok = woken || clock::now() < deadline;
    woken = false;
    co_return ok;
  }
};

// The stream's translated request as the exchange takes it (judge, the decider's question); its
// field views point into `st.request`, kept in `views`.
inline exchange::request exchange_request(const h2_connection::stream &st, exchange::field_list &views) {
  const auto &req = st.request;
  views.clear();
  views.reserve(req.fields.size());
  for (auto &[n, v] : req.fields) views.emplace_back(n, v);
  exchange::request r;
  r.method = req.method;
  r.target = req.path;
  r.authority = req.authority;
  r.scheme = req.scheme;
  r.fields = &views;
  r.version = 20;
  return r;
}

} // namespace sluice::gateway::detail
