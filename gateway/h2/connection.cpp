// An h2 connection's frames (libnghttp2's callbacks), its reader, writer and watchdog, and each
// stream's translation, judging and sluice's own answers; forwarding is forward.cpp's.
#include "gateway/h2/connection.hpp"

#include "filters/request_hygiene.hpp"
#include "gateway/error.hpp"
#include "gateway/h2/stream.hpp"
#include "gateway/h2/upstream.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <cstring>

// GCC 12 false positive, as in tunnel/connect.cpp: Asio's frames come from its own allocator.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace sluice::gateway::detail {
namespace {

using namespace boost::asio::experimental::awaitable_operators;

h2_connection &self_of(void *user_data) { return *static_cast<h2_connection *>(user_data); }

} // namespace


h2_connection::h2_connection(session &owner, tls_stream &tls, const tunnel_target &target)
    : owner_(owner), tls_(tls), target_(target), pump_(tls.get_executor()), finished_(tls.get_executor()),
      dog_(tls.get_executor()), provoked_tokens_(max_provoked_resets) {
  nghttp2_session_callbacks *cb = nullptr;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session_callbacks_set_on_begin_frame_callback(cb, &on_begin_frame);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb, &on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cb, &on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, &on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, &on_data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, &on_stream_close);
  nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cb, &on_invalid_frame);
  nghttp2_session_callbacks_set_send_data_callback(cb, &send_data);
  nghttp2_session_callbacks_set_data_source_read_length_callback(cb, &data_length);
  // No on_invalid_header callback: without one a field that breaks RFC 9113 resets its stream
  // (with one that returns 0, nghttp2 would drop the field and let the request through).
  nghttp2_option *opt = nullptr;
  nghttp2_option_new(&opt);
  nghttp2_option_set_no_auto_window_update(opt, 1); // a window opens as the origin takes the bytes
  nghttp2_option_set_no_closed_streams(opt, 1);
  nghttp2_option_set_max_deflate_dynamic_table_size(opt, 4096);
  nghttp2_option_set_max_outbound_ack(opt, 1000);   // SETTINGS/PING ACKs a client does not read
  nghttp2_option_set_max_settings(opt, 32);
  nghttp2_option_set_max_continuations(opt, 8);     // CONTINUATION floods (CVE-2024-28182)
  nghttp2_option_set_stream_reset_rate_limit(opt, 200, 20); // rapid reset (CVE-2023-44487)
  nghttp2_session_server_new2(&ng_, cb, this, opt);
  pump_.ng = ng_;
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cb);
  const auto &l = owner_.cfg().limits;
  nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, max_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, static_cast<std::uint32_t>(stream_window)},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<std::uint32_t>(l.max_header_bytes)},
      {NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, 4096},
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
  };
  nghttp2_submit_settings(ng_, NGHTTP2_FLAG_NONE, settings, sizeof settings / sizeof settings[0]);
  nghttp2_session_set_local_window_size(ng_, NGHTTP2_FLAG_NONE, 0, connection_window);
  owner_.owning_worker().h2_clients.insert(this);
  if (owner_.state().draining.load()) goaway(); // it began while the gateway drains
}

h2_connection::~h2_connection() {
  for (auto &[id, st] : streams_) st->o.settle(); // those nghttp2 never closed: the connection ended
  owner_.owning_worker().h2_clients.erase(this);
  nghttp2_session_del(ng_);
}

void h2_connection::goaway() {
  // GOAWAY names the last stream taken: those still open finish; nghttp2 then wants no more
  // reads and the writer ends the connection. A second GOAWAY (one came already) is harmless.
  nghttp2_submit_goaway(ng_, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(ng_), NGHTTP2_NO_ERROR,
                        nullptr, 0);
  kick();
}

void goaway_all(worker &w) {
  for (auto *c : w.h2_clients) c->goaway();
}

void h2_connection::kick() { pump_.kick(); }

void h2_connection::terminate(std::uint32_t code) {
  nghttp2_session_terminate_session(ng_, code);
  kick();
}

void h2_connection::stop() {
  pump_.stopping = true;
  error_code ignored;
  tls_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  kick();
  dog_.cancel();
}

net::awaitable<void> h2_connection::watchdog() {
  while (!pump_.stopping) {
    const auto t = owner_.cfg().timeouts; // a copy: a reload may free the policy while this waits
    // Between streams: the keep-alive idle deadline from the client's last bytes. With streams
    // open: tunnel_idle without a byte either way (an event stream that sends every 20 s lives as
    // long as its origin keeps it; a client that keeps its window shut holds nothing longer).
    auto since = [&] { return streams_.empty() ? pump_.last_read : std::max(pump_.last_read, pump_.last_write); };
    auto quiet = [&] { return streams_.empty() ? (pump_.reads == 0 ? t.header_read : t.idle) : t.tunnel_idle; };
    auto next = since() + quiet();
    if (pump_.writing) next = std::min(next, pump_.write_since + t.io);
    dog_.expires_at(next);
    co_await dog_.async_wait(use_tuple);
    if (pump_.stopping) break;
    auto now = clock::now();
    if ((pump_.writing && now >= pump_.write_since + t.io) || now >= since() + quiet()) stop();
  }
}

net::awaitable<void> h2_connection::run() {
  co_await (reader() && writer() && watchdog());
  // The client is gone or the connection broke: every stream still forwarding gives up.
  pump_.stopping = true;
  for (auto &[id, st] : streams_) {
    st->closed = true;
    if (st->up) {
      error_code ignored;
      st->up->socket().cancel(ignored);
    }
    st->signal();
  }
  while (forwarding_ > 0) {
    finished_.expires_at(clock::time_point::max());
    co_await finished_.async_wait(use_tuple);
  }
}

// Reads frames until the client closes, idles out, or nghttp2 wants no more (GOAWAY, an error).
net::awaitable<void> h2_connection::reader() {
  // No deadline on reads: between streams the watchdog ends an idle connection as a keep-alive one
  // would end; while streams run, their own deadlines bound them.
  // (co_await is kept out of the condition: GCC 12 miscompiles it there.)
  const int rv = co_await pump_.read(tls_);
  if (rv < 0) {
    // A protocol error nghttp2 found (it queues GOAWAY where it can), or a flood it bounds
    // (NGHTTP2_ERR_FLOODED, too many CONTINUATIONs): the connection ends.
    terminate(NGHTTP2_PROTOCOL_ERROR);
  }
  pump_.stopping = true;
  kick();
  dog_.cancel();
}

// Sends what nghttp2 has queued, whenever there is some, until the connection ends; then (GOAWAY
// sent, or the end) the reader stops waiting too.
net::awaitable<void> h2_connection::writer() {
  co_await pump_.write(tls_, dog_);
  stop();
}

// nghttp2 silently ignores a HEADERS frame whose stream id is lower than one the client has
// used already (it may be a closed stream's). RFC 9113 section 5.1.1 makes an unexpected id a
// connection error: PROTOCOL_ERROR, unless the id is a stream the client opened lately (its frame
// may have crossed a reset) or one still open (trailers).
int h2_connection::on_begin_frame(nghttp2_session *, const nghttp2_frame_hd *hd, void *user_data) {
  auto &self = self_of(user_data);
  if (hd->type != NGHTTP2_HEADERS) return 0;
  if (hd->stream_id > self.highest_opened_) { // a new stream (nghttp2 judges the id's parity)
    self.highest_opened_ = hd->stream_id;
    self.recent_opened_[self.recent_next_++ % self.recent_opened_.size()] = hd->stream_id;
    return 0;
  }
  if (nghttp2_session_find_stream(self.ng_, hd->stream_id) != nullptr) return 0;
  for (auto id : self.recent_opened_) {
    if (id == hd->stream_id) return 0;
  }
  self.terminate(NGHTTP2_PROTOCOL_ERROR);
  return NGHTTP2_ERR_CALLBACK_FAILURE;
}

int h2_connection::on_begin_headers(nghttp2_session *, const nghttp2_frame *frame, void *user_data) {
  auto &self = self_of(user_data);
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  auto st = std::make_shared<stream>(self.tls_.get_executor(), frame->hd.stream_id, self.owner_);
  self.streams_[frame->hd.stream_id] = st;
  return 0;
}

int h2_connection::on_header(nghttp2_session *, const nghttp2_frame *frame, const std::uint8_t *name,
                             std::size_t namelen, const std::uint8_t *value, std::size_t valuelen, std::uint8_t,
                             void *user_data) {
  auto &self = self_of(user_data);
  auto it = self.streams_.find(frame->hd.stream_id);
  if (it == self.streams_.end()) return 0;
  auto &st = *it->second;
  if (frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
    // Request trailers are not sent on (docs/policy.md), but their decoding is bounded as a
    // head's: past the limit the stream is reset, and it counts as an oversized list.
    st.trailer_bytes += namelen + valuelen + 32;
    if (st.trailer_bytes <= self.owner_.cfg().limits.max_header_bytes) return 0;
    if (++self.oversized_ >= max_oversized_header_lists) self.terminate(NGHTTP2_ENHANCE_YOUR_CALM);
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  // SETTINGS_MAX_HEADER_LIST_SIZE is only advertised by nghttp2 1.52: counted here (RFC 9113's
  // measure, 32 bytes a field besides its name and value). Past it the fields are not kept, and
  // the request is answered 431 once its block ends.
  st.field_bytes += namelen + valuelen + 32;
  if (st.field_bytes > self.owner_.cfg().limits.max_header_bytes || st.fields.size() >= 1000) {
    st.too_large = true;
    return 0;
  }
  if (st.fields.empty()) st.fields.reserve(16); // one allocation for a usual head, not five
  st.fields.emplace_back(std::string(reinterpret_cast<const char *>(name), namelen),
                         std::string(reinterpret_cast<const char *>(value), valuelen));
  return 0;
}

int h2_connection::on_frame_recv(nghttp2_session *, const nghttp2_frame *frame, void *user_data) {
  auto &self = self_of(user_data);
  switch (frame->hd.type) {
  case NGHTTP2_PING:
  case NGHTTP2_SETTINGS:
  case NGHTTP2_PRIORITY:
  case NGHTTP2_WINDOW_UPDATE:
    // nghttp2 answers each; a client that sends thousands a second only costs (CVE-2019-9512/5).
    if (clock::now() - self.control_window_ > std::chrono::seconds(1)) {
      self.control_window_ = clock::now();
      self.control_frames_ = 0;
    }
    if (++self.control_frames_ > max_control_frames_per_second) self.terminate(NGHTTP2_ENHANCE_YOUR_CALM);
    return 0;
  default:
    break;
  }
  auto it = self.streams_.find(frame->hd.stream_id);
  if (it == self.streams_.end()) return 0;
  auto st = it->second;
  if (frame->hd.type == NGHTTP2_DATA && frame->hd.length == 0 && !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
      ++self.empty_frames_ > max_empty_frames) {
    self.terminate(NGHTTP2_ENHANCE_YOUR_CALM); // empty frames cost the server, carry nothing
    return 0;
  }
  if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) {
    st->request_ended = true;
    // [scan]: the body's end, before its last bytes can leave (forward() runs after this).
    if (st->scan_fed && !st->scan_stop && !st->v.scan->body({}, true).empty()) st->scan_stop = true;
    st->signal();
  }
  if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) self.begin(st);
  return 0;
}

int h2_connection::on_data_chunk(nghttp2_session *ng, std::uint8_t, std::int32_t id, const std::uint8_t *data,
                                 std::size_t len, void *user_data) {
  auto &self = self_of(user_data);
  auto it = self.streams_.find(id);
  if (it == self.streams_.end() || !it->second->forwarding) {
    nghttp2_session_consume(ng, id, len); // a refused or finished stream's bytes go nowhere
    return 0;
  }
  auto &st = *it->second;
  if (st.v.bodyless) { // a read method's DATA under network-read: refused, never kept (forward())
    nghttp2_session_consume(ng, id, len);
    st.body_seen = st.body_seen || len > 0;
    st.signal();
    return 0;
  }
  if (st.v.scan && !st.scan_stop) { // [scan]: each piece before it is kept to be sent
    st.scan_fed = true;
    if (!st.v.scan->body({reinterpret_cast<const char *>(data), len}, false).empty()) st.scan_stop = true;
  }
  if (st.scan_stop) {
    nghttp2_session_consume(ng, id, len);
    st.signal();
    return 0;
  }
  st.body_in.append(reinterpret_cast<const char *>(data), len);
  // Git negotiation is read whole before it is judged (bounded by its own cap), so its window
  // opens at once; any other body's opens as the origin takes it (forward()).
  if (st.v.read_whole()) { // Git negotiation, or an AWS body to be hashed
    nghttp2_session_consume(ng, id, len);
  } else {
    st.unconsumed += len;
  }
  st.signal();
  return 0;
}

int h2_connection::on_stream_close(nghttp2_session *, std::int32_t id, std::uint32_t, void *user_data) {
  auto &self = self_of(user_data);
  auto it = self.streams_.find(id);
  if (it == self.streams_.end()) return 0;
  auto st = it->second;
  st->closed = true;
  if (!st->begun && !self.pump_.stopping) {
    // Reset before its header block was judged (a malformed field, say): one access-log line
    // with the reason, as a refused HTTP/1.1 request has, so smuggling attempts show.
    self.label(*st, true);
    st->o.reason = !st->reset_reason.empty() ? st->reset_reason : "h2_stream_reset";
  }
  if (!st->forwarding) st->o.settle(); // else forward() settles it as it ends
  // What the stream received and the origin never took still counts against the connection's
  // window: given back, or resets mid-upload would shut it for every other stream.
  if (st->unconsumed) nghttp2_session_consume_connection(self.ng_, st->unconsumed);
  st->unconsumed = 0;
  if (st->up && !st->response_ended) {
    error_code ignored; // the client reset it: the origin's answer is not wanted any more
    st->up->socket().cancel(ignored);
  }
  st->signal();
  self.streams_.erase(it);
  if (self.streams_.empty()) self.dog_.cancel(); // the idle deadline applies again
  return 0;
}

int h2_connection::on_invalid_frame(nghttp2_session *, const nghttp2_frame *frame, int lib_error,
                                    void *user_data) {
  auto &self = self_of(user_data);
  if (auto it = self.streams_.find(frame->hd.stream_id); it != self.streams_.end()) {
    auto &reason = it->second->reset_reason;
    if (reason.empty()) {
      reason = lib_error == NGHTTP2_ERR_HTTP_HEADER      ? "h2_malformed_field"
               : lib_error == NGHTTP2_ERR_HTTP_MESSAGING ? "h2_malformed_message"
               : lib_error == NGHTTP2_ERR_FLOW_CONTROL   ? "h2_flow_control_error"
                                                         : "h2_protocol_error";
    }
  }
  self.provoked_reset();
  return 0;
}

void h2_connection::provoked_reset() {
  auto now = clock::now();
  std::chrono::duration<double> since = now - provoked_at_;
  provoked_at_ = now;
  provoked_tokens_ = std::min(max_provoked_resets, provoked_tokens_ + since.count() * provoked_resets_per_second);
  if (provoked_tokens_ < 1) {
    terminate(NGHTTP2_ENHANCE_YOUR_CALM); // MadeYouReset (CVE-2025-8671): the client's fault, over and over
    return;
  }
  provoked_tokens_ -= 1;
}

void h2_connection::aborted(stream &st) {
  if (st.scan_stop && !st.closed && !pump_.stopping) {
    // A secret in the body ([scan]): refused while nothing was answered, else the stream is reset;
    // the origin has at most a cut request (its leg is dropped or reset as forward() ends).
    if (!st.submitted) return refuse(st, st.v.scan->refused(), "scan:" + st.o.scan_rule);
    st.o.decision = "deny";
    st.o.reason = st.v.scan->refused();
    nghttp2_submit_rst_stream(ng_, NGHTTP2_FLAG_NONE, st.id, NGHTTP2_REFUSED_STREAM);
    kick();
    return;
  }
  st.o.decision = "error";
  st.o.reason = st.reset_reason.empty() ? std::string_view("client_aborted") : st.reset_reason;
}

// Says how much of the response a DATA frame carries; send_data writes it (NO_COPY: from the
// buffer the origin's bytes were read into, or copied once into the connection's write, never
// into nghttp2's frame first).
ssize_t h2_connection::read_body(nghttp2_session *ng, std::int32_t id, std::uint8_t *, std::size_t length,
                                 std::uint32_t *flags, nghttp2_data_source *source, void *) {
  auto &st = *static_cast<stream *>(source->ptr);
  std::size_t n = st.body_out.frame_size(length);
  if (n) *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
  if (n == st.body_out.size() && st.response_ended) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (!st.trailers.empty()) { // the origin's trailers (gRPC's status) end the stream instead
      std::vector<nghttp2_nv> nv;
      nv.reserve(st.trailers.size());
      for (auto &[tn, tv] : st.trailers) {
        nv.push_back({reinterpret_cast<std::uint8_t *>(tn.data()), reinterpret_cast<std::uint8_t *>(tv.data()),
                      tn.size(), tv.size(), NGHTTP2_NV_FLAG_NONE});
      }
      if (nghttp2_submit_trailer(ng, id, nv.data(), nv.size()) == 0) *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    }
  } else if (n == 0) {
    return NGHTTP2_ERR_DEFERRED; // resumed when more arrives
  }
  return static_cast<ssize_t>(n);
}

// A DATA frame's payload: at most a TLS record's plaintext less the frame header, so that a
// write of whole frames is whole records (4 frames, 4 records of 16 KiB, in a 64 KiB write) rather
// than 4 full records and a 36-byte one.
ssize_t h2_connection::data_length(nghttp2_session *, std::uint8_t, std::int32_t, std::int32_t session_window,
                                   std::int32_t stream_window, std::uint32_t max_frame, void *) {
  constexpr auto record_payload = static_cast<std::int64_t>(body_queue::frame_payload);
  auto n = std::min({record_payload, std::int64_t{session_window}, std::int64_t{stream_window}, std::int64_t{max_frame}});
  return static_cast<ssize_t>(std::max<std::int64_t>(n, 1));
}

int h2_connection::send_data(nghttp2_session *, nghttp2_frame *frame, const std::uint8_t *framehd,
                             std::size_t length, nghttp2_data_source *source, void *user_data) {
  auto &self = self_of(user_data);
  auto &pump = self.pump_;
  auto &out = pump.out;
  if (pump.queued() > 0 && pump.queued() + 9 + length + frame->data.padlen > h2_pump::write_size) {
    return NGHTTP2_ERR_WOULDBLOCK; // the next write takes it
  }
  auto &st = *static_cast<stream *>(source->ptr);
  const std::size_t padding = frame->data.padlen; // none is asked for; written as RFC 9113 6.1 has it
  body_queue::frame in_place;
  if (padding == 0 && st.body_out.take_frame(length, in_place)) {
    pump.add_in_place(framehd, length, std::move(in_place)); // the payload is not copied
  } else {
    out.append(reinterpret_cast<const char *>(framehd), 9);
    if (padding > 0) out.push_back(static_cast<char>(padding - 1));
    st.body_out.move_to(out, length);
    if (padding > 1) out.append(padding - 1, '\0');
  }
  st.signal(); // room for more of the origin's bytes
  if (st.origin) st.origin->consumed(st.origin_id, length); // an h2 origin may send as many more
  return 0;
}

void h2_connection::submit(stream &st, unsigned status, std::vector<std::pair<std::string, std::string>> fields,
                           bool body) {
  if (st.closed || st.submitted) return;
  st.submitted = true;
  std::string code = std::to_string(status);
  std::vector<nghttp2_nv> nv;
  nv.reserve(fields.size() + 1);
  auto add = [&](const std::string &n, const std::string &v) {
    nv.push_back({reinterpret_cast<std::uint8_t *>(const_cast<char *>(n.data())),
                  reinterpret_cast<std::uint8_t *>(const_cast<char *>(v.data())), n.size(), v.size(),
                  NGHTTP2_NV_FLAG_NONE});
  };
  static const std::string status_name = ":status";
  bool has_status = !fields.empty() && fields.front().first == ":status";
  if (!has_status) add(status_name, code);
  for (auto &[n, v] : fields) add(n, v);
  nghttp2_data_provider provider{};
  provider.source.ptr = &st;
  provider.read_callback = &read_body;
  nghttp2_submit_response(ng_, st.id, nv.data(), nv.size(), body ? &provider : nullptr); // nv is copied
  kick();
}

void h2_connection::respond(stream &st, unsigned status, std::string_view ps_error, std::string body) {
  st.o.status = status;
  std::string ps = proxy_status(ps_error, st.o.reason,
                                status == 403 || st.o.rule.starts_with("budget:") ? std::string_view(st.o.rule) : "");
  if (st.grpc) {
    // A gRPC client reads grpc-status, not the HTTP status: a refusal is PERMISSION_DENIED (7), a
    // failure upstream UNAVAILABLE (14), with sluice's text in grpc-message (percent-encoded).
    while (!body.empty() && body.back() == '\n') body.pop_back();
    std::string message;
    for (char c : body) {
      auto u = static_cast<unsigned char>(c);
      if (u >= 0x20 && u < 0x7f && c != '%') {
        message += c;
      } else {
        char hex[4];
        std::snprintf(hex, sizeof hex, "%%%02X", u);
        message += hex;
      }
    }
    st.o.status = 200;
    st.o.grpc_status = status == 403 || status == 400 || status == 431 || status == 429 ? 7 : 14;
    submit(st, 200,
           {{"content-type", "application/grpc"},
            {"grpc-status", std::to_string(st.o.grpc_status)},
            {"grpc-message", message},
            {"proxy-status", ps}},
           false);
    return;
  }
  const auto length = std::to_string(body.size());
  const bool head = st.o.method == "HEAD"; // its answer has the length, not the text (RFC 9110 9.3.2)
  st.body_out.clear();
  if (!head) st.body_out.append(body);
  st.response_ended = true;
  std::vector<std::pair<std::string, std::string>> fields{{"content-type", "text/plain; charset=utf-8"},
                                                          {"content-length", length},
                                                          {"server", "sluice"},
                                                          {"proxy-status", ps}};
  if (status == 429 || st.o.retry_after) { // rate_limited, or a day's budget ([[limits.budget]])
    fields.emplace_back("retry-after", std::to_string(std::max(1u, st.o.retry_after)));
  }
  submit(st, status, std::move(fields), !head);
}

void h2_connection::refuse(stream &st, std::string_view reason, std::string rule) {
  auto &o = st.o;
  o.decision = "deny";
  o.reason = reason;
  o.rule = std::move(rule);
  bool framing = filters::is_framing_error(reason) || reason.starts_with("h2_") || reason == "header_too_large";
  unsigned status = reason == "header_too_large" ? 431 : reason == "rate_limited" ? 429 : framing ? 400 : 403;
  if (reason == "limits_unavailable") status = 503; // [limits.shared] unreachable, fail_open = false
  if (reason == "decider_denied" && o.decider_status) status = o.decider_status; // the decider's choice
  respond(st, status, framing ? "http_request_error" : "http_request_denied", owner_.denial_text(o, o.rule));
}

void h2_connection::refuse_mcp(stream &st, const exchange::body_refusal &no) {
  auto &o = st.o;
  o.decision = "deny";
  o.reason = no.reason;
  o.rule = no.rule;
  o.status = 200;
  st.body_out.clear();
  st.body_out.append(no.jsonrpc);
  st.response_ended = true;
  submit(st, 200,
         {{"content-type", "application/json"},
          {"content-length", std::to_string(no.jsonrpc.size())},
          {"server", "sluice"},
          {"proxy-status", proxy_status("http_request_denied", o.reason, o.rule)}},
         true);
}

void h2_connection::fail(stream &st, error_code ec) {
  std::string body;
  gateway_error ge = owner_.failed(st.o, ec, body);
  respond(st, http_status_of(ge), proxy_status_of(ge), std::move(body));
}

void h2_connection::label(stream &st, bool from_fields) {
  auto &o = st.o;
  o.scheme = target_.scheme;
  o.host = target_.host;
  o.port = target_.port;
  o.protocol = "h2";
  o.method = "-";
  if (!from_fields) return;
  for (auto &[n, v] : st.fields) {
    if (n == ":method") o.method = v;
    if (n == ":path") o.target = v;
  }
}

void h2_connection::begin(const std::shared_ptr<stream> &st) {
  auto &o = st->o;
  label(*st, false);
  st->begun = true;
  if (pump_.stopping) return;
  if (st->too_large) {
    refuse(*st, "header_too_large", {});
    // An HPACK bomb costs its decoding however the list ends: a few refusals, then the end.
    if (++oversized_ >= max_oversized_header_lists) terminate(NGHTTP2_ENHANCE_YOUR_CALM);
    return;
  }
  std::vector<filters::h2_field> in;
  in.reserve(st->fields.size());
  for (auto &[n, v] : st->fields) in.push_back({n, v});
  auto &req = st->request;
  if (auto why = filters::translate_h2_request(in, req); !why.empty()) {
    label(*st, true);
    refuse(*st, why, {});
    return;
  }
  st->fields.clear();
  st->fields.shrink_to_fit();
  for (auto &[n, v] : req.fields) {
    if (n == "content-type" && v.rfind("application/grpc", 0) == 0) st->grpc = true;
  }
  // The one judging step, as for an HTTP/1.1 request inside the tunnel.
  exchange::field_list fields;
  const exchange::request r = exchange_request(*st, fields);
  // Each stream is judged by the policy current at its start, for the client that opened the
  // tunnel while the policy still names it, within its role's rate.
  if (auto revoked = owner_.refresh_policy(); !revoked.empty()) {
    refuse(*st, revoked, {});
    return;
  }
  if (!owner_.within_rate()) {
    refuse(*st, "rate_limited", {});
    return;
  }
  st->policy = owner_.current_policy();
  st->v = owner_.judge(r, &target_, *st->policy, o);
  if (st->grpc) o.protocol = "grpc";
  // A miss the [decider] is to be asked about goes on to forward(), which asks it first.
  const bool decider_next = st->v.decide && (st->v.reason.empty() || st->v.reason == "host_not_allowlisted");
  if (!st->v.reason.empty() && !decider_next) {
    refuse(*st, st->v.reason, st->v.rule);
    return;
  }
  st->forwarding = true;
  ++forwarding_;
  net::co_spawn(tls_.get_executor(), forward(st), net::detached);
}

} // namespace sluice::gateway::detail
