// An h2 stream's way to the origin: the HTTP/1.1 head (Host from :authority, the end-to-end fields,
// credentials, framing of sluice's own), the request body as its DATA arrives (windows opened as
// the origin takes the bytes), the response head submitted and its body buffered, bounded, for
// nghttp2 to send as the client's window allows.
#include "filters/git_upload_pack.hpp"
#include "gateway/end_to_end_fields.hpp"
#include "gateway/error.hpp"
#include "gateway/h2_stream.hpp"

#include <charconv>

// GCC 12 false positive, as in session_tunnel.cpp: Asio's frames come from its own allocator.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace sluice::gateway::detail {

net::awaitable<void> h2_connection::forward(std::shared_ptr<stream> st) {
  auto &o = st->o;
  auto &req = st->request;
  const auto &t = st->policy->cfg().timeouts; // owner_.cfg() follows later streams' policies
  const auto deadline = o.start + t.request;
  ++owner_.state_.in_flight;
  struct done_guard {
    h2_connection &c;
    stream &st;
    ~done_guard() {
      st.forwarding = false;
      st.up = nullptr;
      --c.owner_.state_.in_flight;
      if (--c.forwarding_ == 0) c.finished_.cancel();
    }
  } guard{*this, *st};
  auto gone = [&] { return st->closed || stopping_; };
  auto aborted = [&] {
    o.decision = "error";
    o.reason = "client_aborted";
    owner_.finish(o);
  };

  // Git negotiation under network-read: the whole body, bounded, checked before anything leaves.
  std::string preread;
  if (st->v.git_read) {
    while (!st->request_ended && !gone() && st->body_in.size() <= filters::max_git_request_bytes) {
      if (!co_await st->wait(std::min(deadline, clock::now() + t.io))) break;
    }
    if (gone()) co_return aborted();
    std::string_view encoding;
    for (auto &[n, v] : req.fields) {
      if (n == "content-encoding") encoding = v;
    }
    bool gzip = beast::iequals(encoding, "gzip");
    std::string_view why = st->body_in.size() > filters::max_git_request_bytes ? "body_too_large"
                           : !st->request_ended                              ? "bad_request_body"
                           : !encoding.empty() && !gzip                       ? "git_request_refused"
                                                        : filters::check_git_upload_pack(st->body_in, gzip);
    if (!why.empty()) {
      refuse(*st, why, o.rule);
      co_return;
    }
    preread = std::move(st->body_in);
    st->body_in.clear();
  }

  // The head for the origin: HTTP/1.1, Host from :authority, the end-to-end fields, the
  // credentials the verdict sets, and framing of sluice's own.
  const bool tls = o.scheme == "https";
  std::string authority = o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host;
  if (o.port != (tls ? 443u : 80u)) authority += ":" + std::to_string(o.port);
  std::string head;
  head.reserve(512);
  head.append(req.method).append(" ").append(o.target).append(" HTTP/1.1\r\nHost: ").append(authority).append("\r\n");
  for (auto &[n, v] : req.fields) {
    if (hop_by_hop(http::string_to_field(n), n) || n == "host") continue;
    bool replaced = false;
    for (auto &[sn, sv] : st->v.set) replaced = replaced || beast::iequals(sn, n);
    if (!replaced) head.append(n).append(": ").append(v).append("\r\n");
  }
  for (auto &[n, v] : st->v.set) head.append(n).append(": ").append(v).append("\r\n");
  const bool no_body = st->request_ended && st->body_in.empty() && !st->v.git_read;
  bool chunked = false;
  if (st->v.git_read) {
    head.append("Content-Length: ").append(std::to_string(preread.size())).append("\r\n");
  } else if (req.content_length) {
    head.append("Content-Length: ").append(std::to_string(*req.content_length)).append("\r\n");
  } else if (!no_body) {
    head.append("Transfer-Encoding: chunked\r\n");
    chunked = true;
  } else if (req.method == "POST" || req.method == "PUT" || req.method == "PATCH") {
    head.append("Content-Length: 0\r\n");
  }
  head.append("\r\n");
  head += preread;

  std::string key;
  key.append(o.scheme).append("://").append(o.host).append(1, ':').append(std::to_string(o.port));
  std::unique_ptr<upstream_connection> conn = owner_.worker_.pool.take(key);
  bool reused = conn != nullptr;
  for (int attempt = 0;; ++attempt) {
    if (!conn) {
      error_code ec;
      conn = co_await owner_.connect_upstream(o.host, st->v.ip, o.port, tls, ec);
      if (gone()) co_return aborted();
      if (ec) co_return fail(*st, ec);
    } else {
      owner_.state_.metrics.upstream_reused.Increment();
    }
    conn->key = key;
    st->up = conn.get();
    conn->expires_after(t.io);
    auto [wec, wn] = co_await conn->visit([&](auto &up) { return net::async_write(up, net::buffer(head), use_tuple); });
    if (gone()) co_return aborted();
    if (!wec) break;
    if (reused && attempt == 0) { // a pooled connection the origin had closed: once more, fresh
      conn.reset();
      reused = false;
      continue;
    }
    co_return fail(*st, gateway_error::response_incomplete);
  }
  o.bytes_in += preread.size();

  // The request body, as it arrives, each piece's window opened once the origin has it.
  while (!st->v.git_read && !no_body) {
    if (!st->body_in.empty()) {
      std::string piece = std::move(st->body_in);
      st->body_in.clear();
      std::string framed;
      if (chunked) {
        char size[20];
        auto end = std::to_chars(size, size + sizeof size, piece.size(), 16).ptr;
        framed.append(size, end).append("\r\n").append(piece).append("\r\n");
      }
      conn->expires_after(t.io);
      auto [ec, n] = co_await conn->visit([&](auto &up) {
        return net::async_write(up, net::buffer(chunked ? framed : piece), use_tuple);
      });
      if (gone()) co_return aborted();
      if (ec) co_return fail(*st, gateway_error::response_incomplete);
      o.bytes_in += piece.size();
      if (owner_.cfg().limits.max_body_bytes && o.bytes_in > owner_.cfg().limits.max_body_bytes) {
        refuse(*st, "body_too_large", o.rule);
          co_return;
      }
      nghttp2_session_consume(ng_, st->id, piece.size());
      st->unconsumed -= std::min(st->unconsumed, piece.size());
      kick();
      if (owner_.throttled()) co_await owner_.throttle(piece.size()); // the client's bytes_per_second
      continue;
    }
    if (st->request_ended) {
      if (chunked) {
        conn->expires_after(t.io);
        auto [ec, n] = co_await conn->visit([&](auto &up) {
          return net::async_write(up, net::buffer(std::string_view("0\r\n\r\n")), use_tuple);
        });
        if (gone()) co_return aborted();
        if (ec) co_return fail(*st, gateway_error::response_incomplete);
      }
      break;
    }
    if (!co_await st->wait(std::min(deadline, clock::now() + t.io)) || gone()) {
      if (gone()) co_return aborted();
      refuse(*st, "bad_request_body", o.rule); // the client stopped sending its body
      co_return;
    }
  }

  // The response head; interim 1xx responses are dropped (HTTP/2 needs none of them here).
  std::optional<http::response_parser<http::buffer_body>> parser;
  error_code ec;
  for (;;) {
    parser.emplace();
    parser->header_limit(static_cast<std::uint32_t>(owner_.cfg().limits.max_header_bytes));
    parser->body_limit(boost::none);
    if (req.method == "HEAD") parser->skip(true);
    conn->expires_after(t.io);
    auto [e, n] = co_await conn->visit(
        [&](auto &up) { return http::async_read_header(up, conn->buffer, *parser, use_tuple); });
    ec = e;
    if (ec || parser->get().result_int() / 100 != 1) break;
    if (parser->get().result_int() == 101) {
      ec = http::error::bad_status;
      break;
    }
  }
  auto &rp = *parser;
  if (gone()) co_return aborted();
  if (ec) {
    co_return fail(*st, ec == beast::error::timeout       ? gateway_error::response_timeout
                        : ec == http::error::header_limit ? gateway_error::upstream_response_too_large
                        : (ec == http::error::end_of_stream || ec == net::error::connection_reset)
                            ? gateway_error::response_incomplete
                            : gateway_error::upstream_protocol_error);
  }
  auto &res = rp.get();
  unsigned code = res.result_int();
  o.status = code;
  o.decision = "allow";
  o.reason = "allowed";
  std::vector<std::pair<std::string_view, std::string_view>> h1;
  for (auto &f : res) h1.emplace_back(f.name_string(), f.value());
  const bool body = !(req.method == "HEAD" || code == 204 || code == 304);
  const auto response_deadline = is_event_stream(res[http::field::content_type]) ? clock::time_point::max() : deadline;
  submit(*st, code, filters::h2_response_fields(code, h1), body);

  // The body, into the stream's buffer as it arrives, read by nghttp2 as the client's window allows.
  chunk buffer;
  bool complete = !body || rp.is_done();
  while (body && !rp.is_done()) {
    bool stalled = false;
    while (st->body_out.size() >= response_buffer && !gone() && !stalled) { // the client reads slower
      stalled = !co_await st->wait(clock::now() + t.io);
    }
    if (gone()) co_return aborted();
    if (stalled) { // its window stayed shut for a whole I/O deadline: the stream is given up
      nghttp2_submit_rst_stream(ng_, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
      kick();
      co_return aborted();
    }
    rp.get().body().data = buffer.get();
    rp.get().body().size = chunk_size;
    conn->expires_after(t.io);
    auto [rec, rn] = co_await conn->visit([&](auto &up) { return http::async_read_some(up, conn->buffer, rp, use_tuple); });
    if (rec == http::error::need_buffer) rec = {};
    if (gone()) co_return aborted();
    std::size_t got = chunk_size - rp.get().body().size;
    o.bytes_out += got;
    const auto limit = owner_.cfg().limits.max_response_body_bytes;
    if (!rec && clock::now() > response_deadline) rec = beast::error::timeout;
    if (!rec && limit && o.bytes_out > limit) rec = http::error::body_limit;
    if (rec) {
      o.decision = "error";
      o.reason = rec == http::error::body_limit ? "response_too_large"
                 : rec == beast::error::timeout ? "response_timeout"
                                                : "response_incomplete";
      owner_.finish(o);
      // The client must not take a cut body for a whole one: the stream is reset.
      nghttp2_submit_rst_stream(ng_, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
      kick();
      co_return;
    }
    if (got) {
      st->body_out.append(buffer.get(), got);
      nghttp2_session_resume_data(ng_, st->id);
      kick();
      if (owner_.throttled()) co_await owner_.throttle(got); // the client's bytes_per_second
    }
    complete = rp.is_done();
  }
  st->response_ended = true;
  if (body) nghttp2_session_resume_data(ng_, st->id);
  kick();
  owner_.finish(o);
  if (complete && res.keep_alive() && (!body || rp.chunked() || rp.content_length())) {
    st->up = nullptr;
    owner_.worker_.pool.put(std::move(conn), max_streams);
  }
}

} // namespace sluice::gateway::detail
