// An h2 connection to an origin (upstream.hpp): libnghttp2's client session, its reader, writer
// and watchdog, and the hand-over of each stream's response to the client stream it serves.
#include "gateway/h2/upstream.hpp"

#include "gateway/h2/stream.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <cstring>

// GCC 12 false positive, as in tunnel/connect.cpp: Asio's frames come from its own allocator.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace sluice::gateway::detail {
namespace {

using namespace boost::asio::experimental::awaitable_operators;

h2_upstream &self_of(void *user_data) { return *static_cast<h2_upstream *>(user_data); }

// The window each origin stream may run ahead of its client: what a stream's response buffer holds.
constexpr std::int32_t origin_stream_window = static_cast<std::int32_t>(response_buffer);
// The connection's: every stream's buffer full at once (max_streams of them) still fits.
constexpr std::int32_t origin_connection_window = 32 * 1024 * 1024;

} // namespace

h2_upstream::h2_upstream(worker &w, std::unique_ptr<upstream_connection> conn, std::size_t max_header_bytes,
                         clock::duration idle, clock::duration io)
    : worker_(w), conn_(std::move(conn)), max_header_bytes_(max_header_bytes), idle_(idle), io_(io),
      pump_(conn_->tls->get_executor()), dog_(conn_->tls->get_executor()) {
  nghttp2_session_callbacks *cb = nullptr;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session_callbacks_set_on_header_callback(cb, &on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, &on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, &on_data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, &on_stream_close);
  nghttp2_option *opt = nullptr;
  nghttp2_option_new(&opt);
  nghttp2_option_set_no_auto_window_update(opt, 1); // a window opens as the client takes the bytes
  nghttp2_option_set_max_deflate_dynamic_table_size(opt, 4096);
  nghttp2_option_set_max_outbound_ack(opt, 1000);
  nghttp2_option_set_max_settings(opt, 32);
  nghttp2_option_set_max_continuations(opt, 8);
  nghttp2_option_set_peer_max_concurrent_streams(opt, max_streams); // until the origin's SETTINGS say
  nghttp2_session_client_new2(&ng_, cb, this, opt);
  pump_.ng = ng_;
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cb);
  nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 0}, // the origin opens none (no push)
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, static_cast<std::uint32_t>(origin_stream_window)},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<std::uint32_t>(max_header_bytes)},
  };
  nghttp2_submit_settings(ng_, NGHTTP2_FLAG_NONE, settings, sizeof settings / sizeof settings[0]);
  nghttp2_session_set_local_window_size(ng_, NGHTTP2_FLAG_NONE, 0, origin_connection_window);
}

h2_upstream::~h2_upstream() { nghttp2_session_del(ng_); }

void h2_upstream::start() {
  worker_.h2_origins[conn_->key] = shared_from_this();
  net::co_spawn(dog_.get_executor(), [self = shared_from_this()]() { return self->run(); }, net::detached);
}

bool h2_upstream::usable() const {
  auto limit = nghttp2_session_get_remote_settings(ng_, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
  return !pump_.stopping && nghttp2_session_check_request_allowed(ng_) && streams_.size() < std::min(limit, max_streams);
}

void h2_upstream::kick() { pump_.kick(); }

void h2_upstream::stop() {
  pump_.stopping = true;
  error_code ignored;
  conn_->socket().shutdown(tcp::socket::shutdown_both, ignored);
  kick();
  dog_.cancel();
}

std::int32_t h2_upstream::open(const std::shared_ptr<stream> &st,
                               const std::vector<std::pair<std::string, std::string>> &fields, bool body) {
  if (pump_.stopping) return NGHTTP2_ERR_SESSION_CLOSING;
  std::vector<nghttp2_nv> nv;
  nv.reserve(fields.size());
  for (auto &[n, v] : fields) {
    nv.push_back({reinterpret_cast<std::uint8_t *>(const_cast<char *>(n.data())),
                  reinterpret_cast<std::uint8_t *>(const_cast<char *>(v.data())), n.size(), v.size(),
                  NGHTTP2_NV_FLAG_NONE});
  }
  nghttp2_data_provider provider{};
  provider.source.ptr = st.get();
  provider.read_callback = &read_request_body;
  auto id = nghttp2_submit_request(ng_, nullptr, nv.data(), nv.size(), body ? &provider : nullptr, st.get());
  if (id < 0) return id;
  streams_[id] = st;
  kick();
  return id;
}

void h2_upstream::resume(std::int32_t id) {
  if (streams_.contains(id)) {
    nghttp2_session_resume_data(ng_, id);
    kick();
  }
}

void h2_upstream::consumed(std::int32_t id, std::size_t n) {
  if (n == 0) return;
  nghttp2_session_consume(ng_, id, n); // the connection's window, and the stream's while it is open
  kick();
}

void h2_upstream::cancel(std::int32_t id, std::size_t unread) {
  // What the origin sent that the client never took still counts against the connection's window.
  if (unread) nghttp2_session_consume_connection(ng_, unread);
  kick();
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  streams_.erase(it);
  nghttp2_submit_rst_stream(ng_, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
  if (streams_.empty()) {
    quiet_since_ = clock::now();
    dog_.cancel();
  }
  kick();
}

net::awaitable<void> h2_upstream::run() {
  co_await (reader() && writer() && watchdog());
  pump_.stopping = true;
  if (auto it = worker_.h2_origins.find(conn_->key); it != worker_.h2_origins.end() && it->second.get() == this) {
    worker_.h2_origins.erase(it);
  }
  // Streams still open lost their origin: each client stream is told (it answers 502 or resets).
  for (auto &[id, st] : streams_) {
    st->origin_closed = true;
    if (st->origin_error == NGHTTP2_NO_ERROR) st->origin_error = NGHTTP2_CONNECT_ERROR;
    st->signal();
  }
  streams_.clear();
}

net::awaitable<void> h2_upstream::reader() {
  // The watchdog and the streams' own deadlines bound the reads.
  // (co_await is kept out of the condition: GCC 12 miscompiles it there.)
  const int rv = co_await pump_.read(*conn_->tls);
  if (rv < 0) {
    nghttp2_session_terminate_session(ng_, NGHTTP2_PROTOCOL_ERROR);
    kick();
  }
  pump_.stopping = true;
  kick();
  dog_.cancel();
}

net::awaitable<void> h2_upstream::writer() {
  co_await pump_.write(*conn_->tls, dog_);
  stop();
}

// A write that takes longer than the I/O deadline, or no stream open for the idle deadline, ends
// the connection (an origin that stops answering mid-stream is the stream's deadline's to judge).
net::awaitable<void> h2_upstream::watchdog() {
  while (!pump_.stopping) {
    auto next = streams_.empty() ? quiet_since_ + idle_ : clock::time_point::max();
    if (pump_.writing) next = std::min(next, pump_.write_since + io_);
    dog_.expires_at(next);
    co_await dog_.async_wait(use_tuple);
    if (pump_.stopping) break;
    auto now = clock::now();
    if (pump_.writing && now >= pump_.write_since + io_) {
      stop();
    } else if (streams_.empty() && now >= quiet_since_ + idle_) {
      nghttp2_session_terminate_session(ng_, NGHTTP2_NO_ERROR); // GOAWAY, then the writer ends it
      pump_.stopping = true;
      kick();
    }
  }
}

int h2_upstream::on_header(nghttp2_session *, const nghttp2_frame *frame, const std::uint8_t *name,
                           std::size_t namelen, const std::uint8_t *value, std::size_t valuelen, std::uint8_t,
                           void *user_data) {
  auto &self = self_of(user_data);
  auto it = self.streams_.find(frame->hd.stream_id);
  if (it == self.streams_.end() || frame->hd.type != NGHTTP2_HEADERS) return 0;
  auto &st = *it->second;
  st.origin_field_bytes += namelen + valuelen + 32;
  if (st.origin_field_bytes > self.max_header_bytes_) {
    st.origin_too_large = true;
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; // the stream is reset
  }
  auto &into = frame->headers.cat == NGHTTP2_HCAT_HEADERS && st.head_ready ? st.trailers : st.head;
  if (into.empty()) into.reserve(16); // one allocation for a usual head, not five
  into.emplace_back(std::string(reinterpret_cast<const char *>(name), namelen),
                    std::string(reinterpret_cast<const char *>(value), valuelen));
  return 0;
}

int h2_upstream::on_frame_recv(nghttp2_session *, const nghttp2_frame *frame, void *user_data) {
  auto &self = self_of(user_data);
  auto it = self.streams_.find(frame->hd.stream_id);
  if (it == self.streams_.end()) return 0;
  auto &st = *it->second;
  if (frame->hd.type == NGHTTP2_HEADERS) {
    if (!st.head_ready) {
      // An interim (1xx) head is dropped: the final one follows.
      bool interim = !st.head.empty() && st.head.front().first == ":status" && st.head.front().second.size() == 3 &&
                     st.head.front().second[0] == '1';
      if (interim) {
        st.head.clear();
        st.origin_field_bytes = 0;
      } else {
        st.head_ready = true;
        st.origin_field_bytes = 0; // trailers get a budget of their own
      }
    }
    st.signal();
  }
  if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
      (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
    st.origin_ended = true;
    st.signal();
  }
  return 0;
}

int h2_upstream::on_data_chunk(nghttp2_session *ng, std::uint8_t, std::int32_t id, const std::uint8_t *data,
                               std::size_t len, void *user_data) {
  auto &self = self_of(user_data);
  auto it = self.streams_.find(id);
  if (it == self.streams_.end()) {
    nghttp2_session_consume(ng, id, len); // a cancelled stream's bytes go nowhere
    return 0;
  }
  auto &st = *it->second;
  st.body_out.append(std::string_view(reinterpret_cast<const char *>(data), len));
  st.o.bytes_out += len;
  st.signal();
  return 0;
}

int h2_upstream::on_stream_close(nghttp2_session *, std::int32_t id, std::uint32_t error_code, void *user_data) {
  auto &self = self_of(user_data);
  auto it = self.streams_.find(id);
  if (it == self.streams_.end()) return 0;
  auto st = it->second;
  self.streams_.erase(it);
  st->origin_closed = true;
  st->origin_error = error_code;
  st->signal();
  if (self.streams_.empty()) {
    self.quiet_since_ = clock::now();
    self.dog_.cancel();
  }
  return 0;
}

ssize_t h2_upstream::read_request_body(nghttp2_session *, std::int32_t, std::uint8_t *buf, std::size_t length,
                                       std::uint32_t *flags, nghttp2_data_source *source, void *) {
  auto &st = *static_cast<stream *>(source->ptr);
  std::size_t n = std::min(length, st.body_in.size() - st.in_at);
  std::memcpy(buf, st.body_in.data() + st.in_at, n);
  st.in_at += n;
  if (st.in_at == st.body_in.size()) {
    st.body_in.clear();
    st.in_at = 0;
  }
  st.sent_up += n;
  if (n) st.signal(); // forward() opens the client's window by as much
  if (st.body_in.empty() && st.request_ended) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
  } else if (n == 0) {
    return NGHTTP2_ERR_DEFERRED; // resumed when more arrives
  }
  return static_cast<ssize_t>(n);
}

} // namespace sluice::gateway::detail
