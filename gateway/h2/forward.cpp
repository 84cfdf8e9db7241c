// An h2 stream's way to the origin: the HTTP/1.1 head (Host from :authority, the end-to-end fields,
// credentials, framing of sluice's own), the request body as its DATA arrives (windows opened as
// the origin takes the bytes), the response head submitted and its body buffered, bounded, for
// nghttp2 to send as the client's window allows.
#include "filters/aws_sigv4.hpp"
#include "filters/git_upload_pack.hpp"
#include "gateway/end_to_end_fields.hpp"
#include "gateway/exchange/body.hpp"
#include "gateway/error.hpp"
#include "gateway/h2/stream.hpp"
#include "gateway/h2/upstream.hpp"
#include "gateway/upstream/failure.hpp"

#include <charconv>

// GCC 12 false positive, as in tunnel/connect.cpp: Asio's frames come from its own allocator.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace sluice::gateway::detail {

// The body length a stream's content-length announces (0: none, or not a number).
static std::uint64_t announced_length(const exchange::field_list &fields) {
  std::uint64_t n = 0;
  for (const auto &[name, value] : fields) {
    if (name == "content-length") std::from_chars(value.data(), value.data() + value.size(), n);
  }
  return n;
}

net::awaitable<void> h2_connection::forward(std::shared_ptr<stream> st) {
  auto &o = st->o;
  auto &req = st->request;
  const auto &t = st->policy->cfg().timeouts; // owner_.cfg() follows later streams' policies
  const auto deadline = o.start + t.request;
  ++owner_.state().in_flight;
  struct done_guard {
    h2_connection &c;
    stream &st;
    ~done_guard() {
      st.forwarding = false;
      st.up = nullptr;
      if (st.closed) st.o.settle(); // else on_stream_close settles it
      --c.owner_.state().in_flight;
      if (--c.forwarding_ == 0) c.finished_.cancel();
    }
  } guard{*this, *st};
  auto gone = [&] { return st->closed || pump_.stopping || st->scan_stop; };

  if (st->v.decide) { // [decider]: asked before anything leaves (a body waits in the stream's window)
    exchange::field_list views;
    const exchange::request r = exchange_request(*st, views);
    co_await owner_.consult(r, &target_, *st->policy, o, st->v);
    if (gone()) co_return aborted(*st);
    if (!st->v.reason.empty()) {
      refuse(*st, st->v.reason, st->v.rule);
      co_return;
    }
  }

  if (!st->policy->budgets().empty()) { // [[limits.budget]]: its head and announced body must fit
    exchange::field_list views;
    const exchange::request r = exchange_request(*st, views);
    co_await owner_.admit_budgets(st->v, o, *st->policy, exchange::head_bytes(r), announced_length(views));
    if (gone()) co_return aborted(*st);
    if (!st->v.reason.empty()) {
      refuse(*st, st->v.reason, st->v.rule);
      co_return;
    }
  }

  std::string preread;
  // A body judged whole before anything leaves (Git negotiation, AWS re-signing): awaited to its
  // end (bounded), then judged as every protocol's is.
  if (st->v.read_whole()) {
    const std::size_t limit = exchange::whole_body_limit(st->v);
    while (!st->request_ended && !gone() && st->body_in.size() <= limit) {
      if (!co_await st->wait(std::min(deadline, clock::now() + t.io))) break;
    }
    if (gone()) co_return aborted(*st);
    if (!st->request_ended || st->body_in.size() > limit) { // a body past the limit may have ended too
      refuse(*st, st->body_in.size() > limit ? "body_too_large" : "bad_request_body", o.rule);
      co_return;
    }
    if (st->v.decider_body && !co_await ask_with_body(*st)) co_return gone() ? aborted(*st) : void();
    exchange::field_list views;
    for (auto &[n, v] : req.fields) views.emplace_back(n, v);
    auto no = exchange::judge_body(st->v, o, *st->policy, views, req.method, st->body_in);
    if (!no.jsonrpc.empty()) co_return refuse_mcp(*st, no); // MCP calls the policy refused
    if (!no.reason.empty()) {
      refuse(*st, no.reason, no.rule);
      co_return;
    }
    preread = std::move(st->body_in);
    st->body_in.clear();
  }

  // network-read: a read method carries no body. Over h2 nothing frames one in advance, so the
  // stream's end is awaited before anything leaves, and a DATA byte refuses the request.
  if (st->v.bodyless) {
    while (!st->request_ended && !st->body_seen && !gone()) {
      if (!co_await st->wait(std::min(deadline, clock::now() + t.io))) break;
    }
    if (gone()) co_return aborted(*st);
    if (st->body_seen || !st->request_ended) {
      refuse(*st, st->body_seen ? "body_on_read_method" : "bad_request_body", o.rule);
      co_return;
    }
  }

  const bool tls = o.scheme == "https";
  std::string authority = exchange::authority(o.scheme, o.host, o.port);
  std::string key = pool_key(o.scheme, o.host, o.port);

  // An origin that speaks h2 takes the stream on its one connection. While one stream of this
  // client dials it, the others wait for that dial instead of each opening a connection.
  auto &origins = owner_.owning_worker().h2_origins;
  while (dialing_ && tls && !gone()) co_await st->wait(clock::now() + t.connect + t.tls_handshake);
  if (gone()) co_return aborted(*st);
  if (auto it = origins.find(key); tls && it != origins.end() && it->second->usable()) {
    co_return co_await forward_h2(st, it->second, std::move(preread), authority);
  }
  // A pooled HTTP/1.1 connection, or a new one on which the origin chooses. gRPC needs h2 (its
  // status travels in trailers): its calls always dial.
  std::unique_ptr<upstream_connection> conn = st->grpc ? nullptr : owner_.owning_worker().pool.take(key);
  if (!conn) {
    error_code ec;
    dialing_ = tls;
    conn = co_await owner_.connect_upstream(o.host, st->v.ip, o.port, tls, ec, tls);
    dialing_ = false;
    for (auto &[id, other] : streams_) other->signal(); // those waiting for this dial look again
    if (gone()) co_return aborted(*st);
    if (ec) co_return fail(*st, ec);
    conn->key = key;
    if (conn->h2) {
      auto origin = std::make_shared<h2_upstream>(owner_.owning_worker(), std::move(conn), owner_.cfg().limits.max_header_bytes,
                                                  owner_.cfg().limits.pool_idle_timeout, t.io);
      origin->start();
      co_return co_await forward_h2(st, std::move(origin), std::move(preread), authority);
    }
    if (st->grpc) {
      owner_.owning_worker().pool.put(std::move(conn), max_streams);
      co_return fail(*st, gateway_error::upstream_protocol_error); // the origin offered HTTP/1.1 only
    }
    co_return co_await forward_h1(st, std::move(conn), false, std::move(preread), authority);
  }
  co_return co_await forward_h1(st, std::move(conn), true, std::move(preread), authority);
}

net::awaitable<bool> h2_connection::ask_with_body(stream &st) {
  exchange::field_list views;
  const exchange::request r = exchange_request(st, views);
  co_await owner_.consult_body(r, &target_, *st.policy, st.o, st.v, st.body_in);
  if (st.closed || pump_.stopping || st.scan_stop) co_return false;
  if (st.v.reason.empty()) co_return true;
  refuse(st, st.v.reason, st.v.rule);
  co_return false;
}

// The head of an h2 stream's request for an HTTP/1.1 origin, with `preread` (a body read whole)
// after it: Host from :authority, the end-to-end fields, the credentials the verdict sets, and
// framing of sluice's own (`chunked` when the body's length is unknown).
static std::string h1_request_head(const h2_connection::stream &st, const std::string &authority, const std::string &preread,
                            bool no_body, bool &chunked) {
  const auto &req = st.request;
  std::string head;
  head.reserve(512);
  head.append(req.method).append(" ").append(st.o.target).append(" HTTP/1.1\r\nHost: ").append(authority).append("\r\n");
  for (auto &[n, v] : req.fields) {
    if (hop_by_hop(http::string_to_field(n), n) || n == "host") continue;
    bool replaced = false;
    for (auto &[sn, sv] : st.v.set) replaced = replaced || beast::iequals(sn, n);
    for (auto &rn : st.v.remove) replaced = replaced || beast::iequals(rn, n); // the decider's
    if (!replaced) head.append(n).append(": ").append(v).append("\r\n");
  }
  for (auto &[n, v] : st.v.set) head.append(n).append(": ").append(v).append("\r\n");
  chunked = false;
  if (st.v.read_whole()) {
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
  return head;
}

// An HTTP/1.1 origin's response head for an h2 stream; interim 1xx responses are dropped (HTTP/2
// needs none of them here), and a 101 is an error (no upgrade was asked for).
static net::awaitable<error_code> read_h1_response_head(upstream_connection &conn,
                                                        std::optional<http::response_parser<http::buffer_body>> &parser,
                                                        bool head_method, std::size_t max_header,
                                                        clock::duration io) {
  for (;;) {
    parser.emplace();
    parser->header_limit(static_cast<std::uint32_t>(max_header));
    parser->body_limit(boost::none);
    if (head_method) parser->skip(true);
    conn.expires_after(io);
    auto [e, n] = co_await conn.visit(
        [&](auto &up) { return http::async_read_header(up, conn.buffer, *parser, use_tuple); });
    if (e || parser->get().result_int() / 100 != 1) co_return e;
    if (parser->get().result_int() == 101) co_return http::error::bad_status;
  }
}

// The request body of an h2 stream sent on as HTTP/1.1, as it arrives (chunked when its length is
// unknown), each piece's window opened once the origin has it. False when the stream ended here
// (refused, failed or aborted, and answered).
net::awaitable<bool> h2_connection::send_body(std::shared_ptr<stream> st, upstream_connection &conn, bool chunked,
                                              clock::time_point deadline) {
  auto &o = st->o;
  const auto &t = st->policy->cfg().timeouts;
  auto gone = [&] { return st->closed || pump_.stopping || st->scan_stop; };
  // After a write to the origin: whether the stream goes on (else it ended here, answered).
  auto went_out = [&](error_code ec) {
    if (gone()) {
      aborted(*st);
      return false;
    }
    if (ec) {
      fail(*st, upstream::response_failure(ec));
      return false;
    }
    return true;
  };
  for (;;) {
    if (!st->body_in.empty()) {
      std::string piece = std::move(st->body_in);
      st->body_in.clear();
      std::string framed;
      if (chunked) {
        char size[20];
        auto end = std::to_chars(size, size + sizeof size, piece.size(), 16).ptr;
        framed.append(size, end).append("\r\n").append(piece).append("\r\n");
      }
      conn.expires_after(t.io);
      auto [ec, n] = co_await conn.visit([&](auto &up) {
        return net::async_write(up, net::buffer(chunked ? framed : piece), use_tuple);
      });
      if (!went_out(ec)) co_return false;
      o.bytes_in += piece.size();
      if (owner_.cfg().limits.max_body_bytes && o.bytes_in > owner_.cfg().limits.max_body_bytes) {
        refuse(*st, "body_too_large", o.rule);
        co_return false;
      }
      nghttp2_session_consume(ng_, st->id, piece.size());
      st->unconsumed -= std::min(st->unconsumed, piece.size());
      kick();
      if (owner_.throttled()) co_await owner_.throttle(piece.size()); // the client's bytes_per_second
      continue;
    }
    if (st->request_ended) {
      if (chunked) {
        conn.expires_after(t.io);
        auto [ec, n] = co_await conn.visit([&](auto &up) {
          return net::async_write(up, net::buffer(std::string_view("0\r\n\r\n")), use_tuple);
        });
        if (!went_out(ec)) co_return false;
      }
      co_return true;
    }
    if (!co_await st->wait(std::min(deadline, clock::now() + t.io)) || gone()) {
      if (gone()) {
        aborted(*st);
        co_return false;
      }
      refuse(*st, "bad_request_body", o.rule); // the client stopped sending its body
      co_return false;
    }
  }
}

// One piece of an HTTP/1.1 origin's response body into `into` (at most its size): a body of known
// length (`left` bytes still to come) from what the connection read with the head, then straight
// from the origin's stream, as relay_sized does; any other body through Beast's parser (chunked,
// or delimited by the close). Returns the error and the bytes that arrived.
static net::awaitable<std::pair<error_code, std::size_t>>
read_h1_body(upstream_connection &conn, http::response_parser<http::buffer_body> &rp, net::mutable_buffer into,
             std::optional<std::uint64_t> &left) {
  if (left) {
    auto want = static_cast<std::size_t>(std::min<std::uint64_t>(*left, into.size()));
    if (conn.buffer.size() > 0) {
      std::size_t n = net::buffer_copy(net::buffer(into.data(), want), conn.buffer.data());
      conn.buffer.consume(n);
      *left -= n;
      co_return std::pair{error_code{}, n};
    }
    auto [ec, n] = co_await conn.visit(
        [&](auto &up) { return up.async_read_some(net::buffer(into.data(), want), use_tuple); });
    *left -= n;
    // The origin stopped short of its Content-Length.
    if (n == 0 && (!ec || ec == net::error::eof || ec == net::ssl::error::stream_truncated)) {
      ec = http::error::partial_message;
    }
    co_return std::pair{ec, n};
  }
  rp.get().body().data = into.data();
  rp.get().body().size = into.size();
  auto [ec, n] = co_await conn.visit([&](auto &up) { return http::async_read_some(up, conn.buffer, rp, use_tuple); });
  if (ec == http::error::need_buffer) ec = {};
  co_return std::pair{ec, into.size() - rp.get().body().size};
}

net::awaitable<void> h2_connection::forward_h1(std::shared_ptr<stream> st, std::unique_ptr<upstream_connection> conn,
                                               bool reused, std::string preread, std::string authority) {
  auto &o = st->o;
  auto &req = st->request;
  const auto &t = st->policy->cfg().timeouts;
  const auto deadline = o.start + t.request;
  const bool tls = o.scheme == "https";
  auto gone = [&] { return st->closed || pump_.stopping || st->scan_stop; };
  const bool no_body = st->request_ended && st->body_in.empty() && !st->v.read_whole();
  bool chunked = false;
  std::string head = h1_request_head(*st, authority, preread, no_body, chunked);

  std::optional<http::response_parser<http::buffer_body>> parser;
  const std::size_t max_header = owner_.cfg().limits.max_header_bytes;
  auto read_response_head = [&] { return read_h1_response_head(*conn, parser, req.method == "HEAD", max_header, t.io); };

  // A pooled connection may have been closed by the origin a moment ago: a request whose body is
  // all in `head` (or that has none) goes once more on a fresh connection, as over HTTP/1.1. Such
  // a request reads its response head here, so that a close noticed only then is retried too.
  const bool in_head = no_body || st->v.read_whole(); // the whole request is `head`
  const std::string key = conn->key;
  error_code ec;
  for (int attempt = 0;; ++attempt) {
    if (!conn) {
      conn = co_await owner_.connect_upstream(o.host, st->v.ip, o.port, tls, ec);
      if (gone()) co_return aborted(*st);
      if (ec) co_return fail(*st, ec);
    } else {
      owner_.state().metrics.upstream_reused.Increment();
    }
    conn->key = key;
    st->up = conn.get();
    conn->expires_after(t.io);
    auto [wec, wn] = co_await conn->visit([&](auto &up) { return net::async_write(up, net::buffer(head), use_tuple); });
    ec = wec;
    if (!ec && in_head) ec = co_await read_response_head();
    if (gone()) co_return aborted(*st);
    if (!ec) break;
    if (reused && attempt == 0 && upstream::closed_while_pooled(ec)) {
      conn.reset();
      reused = false;
      continue;
    }
    co_return fail(*st, upstream::response_failure(ec));
  }
  o.bytes_in += preread.size();

  if (!in_head) { // the body, then the response head
    const bool sent = co_await send_body(st, *conn, chunked, deadline);
    if (!sent) co_return;
    ec = co_await read_response_head();
  }
  auto &rp = *parser;
  if (gone()) co_return aborted(*st);
  if (ec) co_return fail(*st, upstream::response_failure(ec));
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
  body_tail tail;
  std::optional<std::uint64_t> left; // a known length's bytes still to come: read without the parser
  if (body && !rp.is_done() && !rp.chunked() && rp.content_length()) left = *rp.content_length_remaining();
  auto body_done = [&] { return left ? *left == 0 : rp.is_done(); };
  bool complete = !body || body_done();
  while (body && !body_done()) {
    bool stalled = false;
    while (st->body_out.size() >= response_buffer && !gone() && !stalled) { // the client reads slower
      stalled = !co_await st->wait(clock::now() + t.io);
    }
    if (gone()) co_return aborted(*st);
    if (stalled) { // its window stayed shut for a whole I/O deadline: the stream is given up
      nghttp2_submit_rst_stream(ng_, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
      kick();
      co_return aborted(*st);
    }
    conn->expires_after(t.io);
    std::size_t room = 0;
    char *into = tail.room(body_queue::capacity, room);
    auto [rec, got] = co_await read_h1_body(*conn, rp, net::buffer(into, room), left);
    if (gone()) co_return aborted(*st);
    o.bytes_out += got;
    const auto limit = owner_.cfg().limits.max_response_body_bytes;
    if (!rec && clock::now() > response_deadline) rec = beast::error::timeout;
    if (!rec && limit && o.bytes_out > limit) rec = http::error::body_limit;
    if (rec) {
      o.decision = "error";
      o.reason = rec == http::error::body_limit ? "response_too_large"
                 : rec == beast::error::timeout ? "response_timeout"
                                                : "response_incomplete";
      // The client must not take a cut body for a whole one: the stream is reset.
      nghttp2_submit_rst_stream(ng_, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
      kick();
      co_return;
    }
    if (got) {
      tail.filled(st->body_out, got); // the buffer itself, not a copy
      nghttp2_session_resume_data(ng_, st->id);
      kick();
      if (owner_.throttled()) co_await owner_.throttle(got); // the client's bytes_per_second
    }
    complete = body_done();
  }
  st->response_ended = true;
  if (body) nghttp2_session_resume_data(ng_, st->id);
  kick();
  if (complete && res.keep_alive() && (!body || rp.chunked() || rp.content_length())) {
    st->up = nullptr;
    owner_.owning_worker().pool.put(std::move(conn), max_streams);
  }
}

// The header list of an h2 stream's request for an h2 origin: pseudo-headers, the end-to-end fields,
// the credentials the verdict sets (lowercase), and a content-length where it is known. A body read
// whole (`preread`) becomes what the stream sends.
static std::vector<std::pair<std::string, std::string>> h2_request_fields(h2_connection::stream &st, std::string authority,
                                                                          std::string &preread) {
  const auto &req = st.request;
  std::vector<std::pair<std::string, std::string>> fields;
  fields.reserve(req.fields.size() + st.v.set.size() + 5);
  fields.emplace_back(":method", req.method);
  fields.emplace_back(":scheme", st.o.scheme);
  fields.emplace_back(":authority", std::move(authority));
  fields.emplace_back(":path", st.o.target);
  for (auto &[n, v] : req.fields) {
    if (n == "host" || n == "content-length") continue;
    bool replaced = false;
    for (auto &[sn, sv] : st.v.set) replaced = replaced || beast::iequals(sn, n);
    for (auto &rn : st.v.remove) replaced = replaced || beast::iequals(rn, n); // the decider's
    if (!replaced) fields.emplace_back(n, v);
  }
  for (auto &[n, v] : st.v.set) {
    std::string name = n;
    for (auto &c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    fields.emplace_back(std::move(name), v);
  }
  if (st.v.read_whole()) {
    fields.emplace_back("content-length", std::to_string(preread.size()));
    st.body_in = std::move(preread);
    st.in_at = 0;
  } else if (req.content_length) {
    fields.emplace_back("content-length", std::to_string(*req.content_length));
  }
  return fields;
}

// The stream on an h2 origin's connection: the request head as h2 (the end-to-end fields, the
// credentials the verdict sets), its body as the client sends it (the client's window opened as
// the origin's session takes the bytes), the response head, body and trailers handed back as they
// arrive (the origin's window opened as the client takes the bytes: read_body).
net::awaitable<void> h2_connection::forward_h2(std::shared_ptr<stream> st, std::shared_ptr<h2_upstream> origin,
                                               std::string preread, std::string authority) {
  auto &o = st->o;
  auto &req = st->request;
  const auto &t = st->policy->cfg().timeouts;
  const auto &limits = st->policy->cfg().limits;
  auto gone = [&] { return st->closed || pump_.stopping || st->scan_stop; };
  auto fields = h2_request_fields(*st, std::move(authority), preread);
  st->origin = origin;
  st->origin_id = origin->open(st, fields, !(st->request_ended && st->body_in.empty()));
  struct release_guard { // the origin's stream is let go however this ends
    stream &st;
    ~release_guard() {
      if (st.origin) st.origin->cancel(st.origin_id, st.body_out.size());
      st.origin = nullptr;
    }
  } release{*st};
  if (st->origin_id < 0) co_return fail(*st, gateway_error::upstream_protocol_error);
  owner_.state().metrics.upstream_reused.Increment(); // a stream on a connection that exists

  bool long_stream = st->grpc; // a gRPC call or an event stream lasts as long as its peers keep it
  const auto deadline = o.start + t.request;
  auto views = [](const std::vector<std::pair<std::string, std::string>> &list) {
    std::vector<std::pair<std::string_view, std::string_view>> out;
    out.reserve(list.size());
    for (auto &[n, v] : list) out.emplace_back(n, v);
    return out;
  };
  auto grpc_status = [&](const std::vector<std::pair<std::string, std::string>> &list) {
    for (auto &[n, v] : list) {
      int code = -1;
      if (n == "grpc-status" && std::from_chars(v.data(), v.data() + v.size(), code).ec == std::errc{}) {
        o.grpc_status = code;
      }
    }
  };
  // The client stream is reset: a response cut short must not pass for a whole one.
  auto cut = [&](std::string_view reason) {
    o.decision = "error";
    o.reason = reason;
    nghttp2_submit_rst_stream(ng_, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
    kick();
  };
  for (;;) {
    if (gone()) co_return aborted(*st);
    if (st->sent_up) { // the origin's session took request body bytes: the client may send more
      o.bytes_in += st->sent_up;
      if (!st->v.read_whole()) {
        nghttp2_session_consume(ng_, st->id, st->sent_up);
        st->unconsumed -= std::min(st->unconsumed, st->sent_up);
        kick();
      }
      st->sent_up = 0;
      if (limits.max_body_bytes && o.bytes_in > limits.max_body_bytes) {
        if (!st->submitted) co_return refuse(*st, "body_too_large", o.rule);
        co_return cut("body_too_large");
      }
    }
    if (!st->body_in.empty() || st->request_ended) origin->resume(st->origin_id);
    if (st->head_ready && !st->submitted) {
      unsigned code = 0;
      if (!st->head.empty() && st->head.front().first == ":status") {
        auto &status = st->head.front().second;
        std::from_chars(status.data(), status.data() + status.size(), code);
      }
      if (code < 200 || code > 999) co_return fail(*st, gateway_error::upstream_protocol_error);
      o.status = code;
      o.decision = "allow";
      o.reason = "allowed";
      for (auto &[n, v] : st->head) {
        if (n == "content-type" && is_event_stream(v)) long_stream = true;
      }
      grpc_status(st->head); // a trailers-only answer carries it in the head
      bool body = !(st->origin_ended && st->body_out.empty() && st->trailers.empty()) && req.method != "HEAD";
      if (!body) st->response_ended = true;
      submit(*st, code, filters::h2_response_fields_from_h2(code, std::move(st->head)), body);
    }
    if (st->submitted && !st->body_out.empty()) {
      nghttp2_session_resume_data(ng_, st->id);
      kick();
    }
    if (limits.max_response_body_bytes && o.bytes_out > limits.max_response_body_bytes) {
      co_return cut("response_too_large");
    }
    if (st->origin_closed) {
      if (st->origin_error != NGHTTP2_NO_ERROR || !st->origin_ended || !st->submitted) {
        // Reset by the origin, its connection lost, or a head past the limit.
        auto ge = st->origin_too_large ? gateway_error::upstream_response_too_large
                  : st->origin_error == NGHTTP2_REFUSED_STREAM || st->origin_error == NGHTTP2_CONNECT_ERROR
                      ? gateway_error::response_incomplete
                      : gateway_error::upstream_protocol_error;
        if (!st->submitted) co_return fail(*st, ge);
        co_return cut(st->origin_too_large ? "response_too_large" : "response_incomplete");
      }
      if (!st->trailers.empty()) { // most responses end without: nothing to copy
        auto trailers = views(st->trailers);
        st->trailers = filters::h2_trailer_fields(trailers);
        grpc_status(st->trailers);
      }
      st->response_ended = true;
      nghttp2_session_resume_data(ng_, st->id); // the rest of the body, then the trailers (read_body)
      kick();
      co_return;
    }
    if (!long_stream && clock::now() > deadline) {
      if (!st->submitted) co_return fail(*st, gateway_error::response_timeout);
      co_return cut("response_timeout");
    }
    // Between any two events (bytes either way, the client's window opening) at most the I/O
    // deadline; a gRPC call or event stream may idle as long as a tunnel.
    auto until = clock::now() + (long_stream ? t.tunnel_idle : t.io);
    if (!long_stream) until = std::min(until, deadline + std::chrono::milliseconds(1));
    if (!co_await st->wait(until) && !gone() && !st->origin_closed &&
        (long_stream || clock::now() <= deadline)) {
      if (!st->submitted) co_return fail(*st, gateway_error::response_timeout);
      co_return cut("response_timeout");
    }
  }
}

} // namespace sluice::gateway::detail
