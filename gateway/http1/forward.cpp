// The upstream stage: dialling the origin (pinned or resolved addresses, each judged; TLS verified),
// sending the request and relaying both bodies in pieces as they arrive, pooling the connection.
#include "gateway/end_to_end_fields.hpp"
#include "gateway/exchange/body.hpp"
#include "gateway/error.hpp"
#include "gateway/session_impl.hpp"
#include "gateway/upstream/dial.hpp"
#include "gateway/upstream/failure.hpp"

#include <charconv>
#include <cstring>

namespace sluice::gateway::detail {
// The origin's addresses that pass the policy: the literal, the policy's pin or what DNS says,
// each judged (destination_address_denied when none passes).
// Dials the origin: pinned or resolved addresses, each judged, only passing ones dialed; then TLS
// with SNI and certificate verification for https.
net::awaitable<std::unique_ptr<upstream_connection>>
session::connect_upstream(const std::string &host, const std::optional<net::ip::address> &ip,
                 unsigned port, bool tls, error_code &ec, bool offer_h2) {
  // Held across the waits below: an h2 connection's other streams may move policy_ on meanwhile.
  const filters::policy_ptr held = policy_;
  std::vector<net::ip::address> allowed;
  if (host == filters::host_service_name) {
    // A port of the host's loopback the policy grants (host_services): the one place sluice dials
    // loopback without allow_addresses; every other port of it stays refused.
    if (held->host_service_on(port)) {
      allowed = {net::ip::make_address("127.0.0.1"), net::ip::make_address("::1")};
    } else {
      ec = gateway_error::destination_address_denied;
      co_return nullptr;
    }
  } else {
    allowed = co_await upstream::allowed_addresses(worker_.dns, *held, state_.own_addresses, host, ip, ec,
                                                   &state_.metrics.dns_lookup_duration);
  }
  if (ec) co_return nullptr;
  auto t0 = clock::now();
  auto conn = std::make_unique<upstream_connection>(worker_.ioc.get_executor());
  ec = co_await upstream::connect_first(conn->tcp, allowed, port, held->cfg().timeouts.connect);
  if (ec) co_return nullptr;
  conn->tcp.socket().set_option(tcp::no_delay(true));
  if (tls) {
    std::call_once(state_.system_trust_once, state_.load_system_trust);
    conn->tls = std::make_unique<tls_stream>(conn->tcp.release_socket(),
                                             state_.upstream_tls.native_handle());
    SSL *ssl = conn->tls->native_handle();
    if (!ip) SSL_set_tlsext_host_name(ssl, host.c_str());
    // A session this origin issued before is offered (resumption: no chain to send and verify);
    // sessions are kept per name (or address) verified and port, only after verification passed.
    state_.origin_sessions.prepare(ssl, host + ":" + std::to_string(port));
    if (offer_h2) {
      static constexpr unsigned char protocols[] = "\x02h2\x08http/1.1";
      SSL_set_alpn_protos(ssl, protocols, sizeof protocols - 1);
    }
    // Hostname (or IP) check inside OpenSSL's chain verification.
    X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (ip) {
      X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
    } else {
      X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size());
    }
    conn->expires_after(held->cfg().timeouts.tls_handshake);
    auto [hec, hn] =
        co_await conn->tls->async_handshake(tls_stream::role::client, {}, use_tuple);
    state_.metrics.tls_handshake("upstream", !hec);
    if (hec) {
      ec = SSL_get_verify_result(ssl) != X509_V_OK ? gateway_error::tls_certificate_error
           : hec == beast::error::timeout          ? gateway_error::connection_timeout
                                                   : gateway_error::tls_protocol_error;
      co_return nullptr;
    }
    const unsigned char *chosen = nullptr;
    unsigned chosen_len = 0;
    SSL_get0_alpn_selected(ssl, &chosen, &chosen_len);
    conn->h2 = chosen_len == 2 && std::memcmp(chosen, "h2", 2) == 0;
  }
  state_.metrics.upstream_connect_duration.Observe(
      std::chrono::duration<double>(clock::now() - t0).count());
  co_return conn;
}

// Streams one message body from `in` to `out` through a fixed buffer, re-framing as the outgoing
// header says (Beast's relay pattern). `in_failed` tells which side broke.
template <bool isRequest, class In, class Out>
net::awaitable<error_code> session::relay(In &in, beast::flat_buffer &in_buf,
                                 http::parser<isRequest, http::buffer_body> &p, Out &out,
                                 http::message<isRequest, http::buffer_body> &msg,
                                 std::uint64_t &bytes, bool &in_failed,
                                 clock::time_point deadline, std::uint64_t max_bytes,
                                 exchange::scan_step *scan) {
  chunk buffer;
  msg.body().data = nullptr;
  msg.body().size = 0;
  msg.body().more = !p.is_done();
  http::serializer<isRequest, http::buffer_body> sr{msg};
  // The head goes out on its own only when body bytes are still to come from the network: a
  // request body may wait for 100 Continue, and a response body that is not here yet must not
  // hold the head back. Otherwise head and first body bytes leave in one write (one TLS record).
  if (!p.is_done() && (isRequest || in_buf.size() == 0)) {
    lowest(out).expires_after(cfg().timeouts.io);
    auto [hec, hn] = co_await http::async_write_header(out, sr, use_tuple);
    if (hec) co_return hec;
  }
  // Beast reads as much as the buffer has room for: give a body a full chunk of room, so a bulk
  // transfer moves in 64 KiB steps rather than one TLS record at a time.
  auto remaining = p.content_length_remaining();
  bool large = !remaining || *remaining > in_buf.size() + 16 * 1024;
  if (!p.is_done() && large && in_buf.capacity() - in_buf.size() < chunk_size &&
      in_buf.max_size() >= in_buf.size() + chunk_size) {
    in_buf.reserve(in_buf.size() + chunk_size);
  }
  do {
    if (!p.is_done()) {
      p.get().body().data = buffer.get();
      p.get().body().size = chunk_size;
      lowest(in).expires_after(cfg().timeouts.io);
      // Whatever has arrived is passed on at once (a streamed body is not held back until the
      // buffer fills); a full buffer shows as need_buffer.
      auto [rec, rn] = co_await http::async_read_some(in, in_buf, p, use_tuple);
      if (rec == http::error::need_buffer) rec = {};
      if (rec) {
        in_failed = true;
        co_return rec;
      }
      std::size_t got = chunk_size - p.get().body().size;
      // A read may parse only framing (a chunk header): an empty buffer with more to come
      // would go out as the last chunk, so nothing is written until body bytes are here.
      msg.body().size = got;
      msg.body().data = got ? buffer.get() : nullptr;
      msg.body().more = !p.is_done();
    } else {
      msg.body().data = nullptr;
      msg.body().size = 0;
      msg.body().more = false;
    }
    bytes += msg.body().size;
    // A trickling or endless body is cut at the request deadline or the byte cap.
    if (clock::now() > deadline) {
      in_failed = true;
      co_return error_code(beast::error::timeout);
    }
    if (max_bytes && bytes > max_bytes) {
      in_failed = true;
      co_return error_code(http::error::body_limit);
    }
    if (scan && (msg.body().size || !msg.body().more)) {
      std::string_view piece(static_cast<const char *>(msg.body().data), msg.body().size);
      if (!scan->body(piece, !msg.body().more).empty()) {
        in_failed = true;
        co_return error_code(net::error::operation_aborted); // the caller refuses: scan->refused()
      }
    }
    if (msg.body().size == 0 && msg.body().more) continue;
    const std::size_t sent = msg.body().size; // the serializer consumes body().size as it writes
    lowest(out).expires_after(cfg().timeouts.io);
    auto [wec, wn] = co_await http::async_write(out, sr, use_tuple);
    if (wec == http::error::need_buffer) wec = {};
    if (wec) co_return wec;
    if (throttled()) co_await throttle(sent);
  } while (!p.is_done() || !sr.is_done());
  co_return error_code{};
}

template <bool isRequest, class In, class Out>
net::awaitable<error_code> session::relay_sized(In &in, beast::flat_buffer &in_buf, Out &out,
                                                const std::string &head, std::uint64_t length,
                                                std::uint64_t &bytes, bool &in_failed,
                                                bool &complete, clock::time_point deadline,
                                                std::uint64_t max_bytes, exchange::scan_step *scan) {
  complete = false;
  auto first = static_cast<std::size_t>(std::min<std::uint64_t>(in_buf.size(), length));
  std::uint64_t left = length - first;
  // A trickling or endless body is cut at the request deadline or the byte cap.
  auto over = [&]() -> error_code {
    if (clock::now() > deadline) return beast::error::timeout;
    if (max_bytes && bytes > max_bytes) return http::error::body_limit;
    return {};
  };
  bytes += first;
  if (error_code e = over()) {
    in_failed = true;
    co_return e;
  }
  // A body's piece is scanned before it leaves; its last one with the body's end, so that a
  // finding there still stops the request before the origin has all of it.
  auto refused = [&](std::string_view piece, bool last) { return scan && !scan->body(piece, last).empty(); };
  if (first > 0 && refused({static_cast<const char *>(in_buf.data().data()), first}, left == 0)) {
    in_failed = true;
    co_return error_code(net::error::operation_aborted); // the caller refuses: scan->refused()
  }
  lowest(out).expires_after(cfg().timeouts.io);
  net::const_buffer body_start(in_buf.data().data(), first);
  if (left > 0 && (isRequest || first == 0)) {
    // As relay(): the head alone while body bytes are still to come from the network (a request
    // body may wait for 100 Continue; a response head is not held back for its body).
    auto [hec, hn] = co_await net::async_write(out, net::buffer(head), use_tuple);
    if (hec) co_return hec;
    if (first) {
      lowest(out).expires_after(cfg().timeouts.io);
      auto [bec, bn] = co_await net::async_write(out, body_start, use_tuple);
      if (bec) co_return bec;
    }
  } else { // head and what is here of the body in one write: one TLS record for a small message
    std::array<net::const_buffer, 2> both{net::buffer(head), body_start};
    auto [wec, wn] = co_await net::async_write(out, both, use_tuple);
    if (wec) co_return wec;
  }
  in_buf.consume(first);
  if (throttled()) co_await throttle(first);
  if (left > 0) {
    // A request body of 1 MiB or more is read in pieces of up to 512 KiB, in a buffer of its own
    // (a pooled chunk is 64 KiB): fewer reads, writes and scans a MiB, sluice's CPU for a large
    // upload about a fifth less, scanned or not (docs/benchmarks.md, 2026-12-07). A read still
    // takes what has come, so a slow sender's bytes go on as they arrive.
    const bool large = isRequest && length >= large_body && !throttled(); // a rate limit keeps its 64 KiB steps
    chunk pooled = large ? chunk::none() : chunk();
    std::unique_ptr<char[]> own(large ? new char[large_piece] : nullptr);
    char *const buffer = large ? own.get() : pooled.get();
    const std::size_t cap = large ? large_piece : chunk_size;
    while (left > 0) {
      lowest(in).expires_after(cfg().timeouts.io);
      auto want = static_cast<std::size_t>(std::min<std::uint64_t>(left, cap));
      auto [rec, got] = co_await in.async_read_some(net::buffer(buffer, want), use_tuple);
      if (rec || got == 0) {
        in_failed = true; // the sender stopped short of its Content-Length
        co_return (!rec || rec == net::error::eof || rec == net::ssl::error::stream_truncated)
            ? error_code(http::error::partial_message)
            : rec;
      }
      left -= got;
      bytes += got;
      if (error_code e = over()) {
        in_failed = true;
        co_return e;
      }
      if (refused({buffer, got}, left == 0)) {
        in_failed = true;
        co_return error_code(net::error::operation_aborted);
      }
      lowest(out).expires_after(cfg().timeouts.io);
      auto [wec, wn] = co_await net::async_write(out, net::buffer(buffer, got), use_tuple);
      if (wec) co_return wec;
      if (throttled()) co_await throttle(got);
    }
  }
  complete = true;
  co_return error_code{};
}

// The head sluice writes for a request whose body has a known length (or none): the end-to-end
// fields as they came, the upgrade a WebSocket request asks for, and the length.
static std::string sized_request_head(const http::request<http::buffer_body> &req, const std::string &target,
                                      bool websocket, boost::optional<std::uint64_t> content_length) {
  std::string head;
  head.reserve(512);
  head.append(req.method_string()).append(" ").append(target).append(" HTTP/1.1\r\n");
  append_fields(req.base(), head);
  // Upgrade and Connection are hop-by-hop and left out above; a WebSocket upgrade the policy
  // let through asks the origin for it again (RFC 6455 section 4.1).
  if (websocket) head.append("Connection: Upgrade\r\nUpgrade: websocket\r\n");
  if (content_length) head.append("Content-Length: ").append(std::to_string(*content_length)).append("\r\n");
  head.append("\r\n");
  return head;
}

// The head sluice writes for a sized response (known length, or none) to an HTTP/`version` client.
static std::string sized_response_head(const http::response_parser<http::buffer_body> &rp, unsigned version,
                                       bool no_body, bool client_keep) {
  const auto &up_res = rp.get();
  const unsigned code = up_res.result_int();
  std::string rhead;
  rhead.reserve(512);
  rhead.append(version >= 11 ? "HTTP/1.1 " : "HTTP/1.0 ").append(std::to_string(code)).append(" ");
  // The origin's reason phrase; without one, Beast supplies the standard phrase of a code that
  // has one, and "<unknown-status>" for one that has none, which is left out (it is optional).
  beast::string_view reason = up_res.reason();
  if (up_res.result() == http::status::unknown &&
      reason == http::obsolete_reason(http::status::unknown)) {
    reason = {};
  }
  rhead.append(reason).append("\r\n");
  append_fields(up_res.base(), rhead);
  if (!no_body) {
    rhead.append("Content-Length: ").append(std::to_string(*rp.content_length())).append("\r\n");
  } else if (auto cl = up_res[http::field::content_length]; !cl.empty() && code != 204) {
    rhead.append("Content-Length: ").append(cl).append("\r\n"); // HEAD and 304 describe the body they omit
  }
  // What Beast's keep_alive() would write: HTTP/1.1 keeps alive unless told, HTTP/1.0 closes.
  if (version >= 11 && !client_keep) rhead.append("Connection: close\r\n");
  if (version < 11 && client_keep) rhead.append("Connection: keep-alive\r\n");
  rhead.append("\r\n");
  return rhead;
}

// The origin's response head: interim 1xx responses (100 Continue, 103) are passed on to an
// HTTP/1.1 client; a 101 ends the head only for a WebSocket upgrade (every other upgrade was
// refused before the request left).
template <class Stream>
net::awaitable<error_code> session::read_response_head(Stream &s, upstream_connection &conn,
                                                       std::optional<http::response_parser<http::buffer_body>> &rp,
                                                       bool head_method, bool websocket, unsigned version) {
  co_return co_await conn.visit([&](auto &up) -> net::awaitable<error_code> {
    for (;;) {
      rp.emplace();
      rp->header_limit(static_cast<std::uint32_t>(cfg().limits.max_header_bytes));
      rp->body_limit(boost::none);
      if (head_method) rp->skip(true);
      conn.expires_after(cfg().timeouts.io);
      auto [e, n] = co_await http::async_read_header(up, conn.buffer, *rp, use_tuple);
      const unsigned code = e ? 0 : rp->get().result_int();
      if (e || code / 100 != 1) co_return e;
      if (code == 101) co_return websocket ? error_code{} : error_code(http::error::bad_status);
      if (version >= 11) {
        http::response<http::empty_body> interim;
        interim.result(code);
        lowest(s).expires_after(cfg().timeouts.io);
        co_await http::async_write(s, interim, use_tuple);
      }
    }
  });
}

// After the origin's response head: passes a WebSocket 101 on to the frame relay, else relays the
// response (sized: a head of sluice's own and the body's bytes as they are; else Beast's relay),
// records the outcome, and pools the connection when it ended at a message boundary. Returns
// whether the client connection stays open.
template <class Stream>
net::awaitable<bool> session::relay_response(Stream &s, beast::flat_buffer &buf, std::unique_ptr<upstream_connection> conn,
                                             http::response_parser<http::buffer_body> &rp, outcome &o, bool keep_alive,
                                             bool head_method, bool websocket, unsigned version, exchange::scan_step *scan) {
  auto &up_res = rp.get();
  unsigned code = up_res.result_int();
  if (websocket && code == 101) co_return co_await switch_to_websocket(s, buf, *conn, o, up_res, scan);
  bool no_body = head_method || code == 204 || code == 304 || code / 100 == 1;
  bool client_keep = keep_alive;
  bool upstream_framed = no_body || rp.chunked() || rp.content_length().has_value();
  // A sized response (known length, or none) is relayed by relay_sized; the rest by Beast's relay.
  bool sized = no_body || (!rp.chunked() && rp.content_length());
  if (!sized && (!rp.chunked() || version < 11)) {
    // The origin delimits the body by closing, so must we; an HTTP/1.0 client cannot read
    // chunks: its body is delimited by close too.
    client_keep = false;
  }
  if (state_.draining.load() || state_.unready.load()) client_keep = false;
  // A stream of server-sent events (LLM streams, MCP's streamable HTTP) lasts as long as the
  // origin keeps it: the idle deadline between its bytes (timeouts.io) holds it, not the deadline
  // of a whole response, which still cuts every other response that trickles.
  const auto response_deadline = is_event_stream(up_res[http::field::content_type])
                                     ? clock::time_point::max()
                                     : o.start + cfg().timeouts.request;
  o.status = code;
  o.decision = "allow";
  o.reason = "allowed";
  if (!client_keep) linger_ = true; // an origin may answer before the request's body is all sent

  bool in_failed = false;
  bool complete = false;
  error_code ec;
  if (sized) { // the head written here, the body's bytes relayed as they are
    std::string rhead = sized_response_head(rp, version, no_body, client_keep);
    ec = co_await conn->visit([&](auto &up) {
      return relay_sized<false>(up, conn->buffer, s, rhead,
                                no_body ? 0 : *rp.content_length(), o.bytes_out, in_failed,
                                complete, response_deadline, cfg().limits.max_response_body_bytes);
    });
  } else {
    http::response<http::buffer_body> res;
    res.version(version);
    res.result(code); // the number itself: result() would turn a code Beast has no name for into 0
    res.reason(up_res.reason());
    copy_fields(up_res.base(), res.base());
    if (rp.chunked() && version >= 11) res.chunked(true);
    res.keep_alive(client_keep);
    ec = co_await conn->visit([&](auto &up) {
      return relay<false>(up, conn->buffer, rp, s, res, o.bytes_out, in_failed, response_deadline,
                          cfg().limits.max_response_body_bytes);
    });
    complete = rp.is_done();
  }
  if (ec) {
    o.decision = "error";
    o.reason = !in_failed                       ? "client_aborted"
               : ec == http::error::body_limit ? "response_too_large"
               : ec == beast::error::timeout   ? "response_timeout"
                                               : "response_incomplete";
    co_return false;
  }
  if (upstream_framed && up_res.keep_alive() && complete) {
    worker_.pool.put(std::move(conn));
  }
  co_return client_keep;
}

template <class Stream>
net::awaitable<bool> session::forward(Stream &s, beast::flat_buffer &buf,
                             http::request_parser<http::buffer_body> &parser, outcome &o,
                             const std::optional<net::ip::address> &ip, unsigned version,
                             const std::string *preread, exchange::scan_step *scan) {
  auto &req = parser.get();
  bool tls = o.scheme == "https";
  const std::string key = pool_key(o.scheme, o.host, o.port);
  bool has_body = parser.chunked() || (parser.content_length() && *parser.content_length() > 0);
  const bool websocket = o.protocol == "websocket";
  if (preread && scan && !scan->body(*preread, true).empty()) { // read whole: scanned before it leaves
    co_await deny(s, o, scan->refused(), "scan:" + o.scan_rule, false, version);
    co_return false;
  }

  if (websocket && o.mcp_messages) {
    // An MCP route's WebSocket: a refused message is dropped, which a compressor that keeps its
    // window from message to message (permessage-deflate) would not survive; so no extension is
    // asked for, and every message goes uncompressed.
    req.erase(http::field::sec_websocket_extensions);
  }
  if (req[http::field::host].empty()) {
    // An HTTP/1.0 request may come without Host; it leaves as HTTP/1.1, which requires one.
    req.set(http::field::host, exchange::authority(o.scheme, o.host, o.port));
  }
  // A chunked body is re-framed by Beast's serializer; any other request leaves as a head sluice
  // writes itself followed by the body's bytes as they are.
  std::optional<http::request<http::buffer_body>> out;
  std::string head;
  if (parser.chunked()) {
    out.emplace(req.method(), o.target, 11);
    if (req.method() == http::verb::unknown) out->method_string(req.method_string());
    copy_fields(req.base(), out->base());
    out->chunked(true);
  } else if (!preread) {
    head = sized_request_head(req, o.target, websocket, parser.content_length());
  }

  std::unique_ptr<upstream_connection> conn;
  std::optional<http::response_parser<http::buffer_body>> rp;
  // A pooled connection may have been closed by the origin a moment ago; a request without a body
  // is retried once on a fresh connection, never one whose body was already consumed.
  for (int attempt = 0; attempt < 2; ++attempt) {
    conn = worker_.pool.take(key);
    bool reused = conn != nullptr;
    if (!conn) {
      error_code ec;
      conn = co_await connect_upstream(o.host, ip, o.port, tls, ec);
      if (ec) {
        co_await fail(s, o, ec, req.keep_alive() && !has_body, version);
        co_return req.keep_alive() && !has_body;
      }
    } else {
      state_.metrics.upstream_reused.Increment();
    }
    conn->key = key;
    bool in_failed = false;
    error_code ec;
    if (preread) { // a body read and checked before (Git negotiation): sent whole, with its length
      http::request<http::string_body> whole{req.method(), o.target, 11};
      copy_fields(req.base(), whole.base());
      whole.body() = *preread;
      whole.prepare_payload();
      conn->expires_after(cfg().timeouts.io);
      ec = co_await conn->visit([&](auto &up) -> net::awaitable<error_code> {
        auto [e, n] = co_await http::async_write(up, whole, use_tuple);
        co_return e;
      });
      o.bytes_in = preread->size();
    } else if (out) {
      ec = co_await conn->visit([&](auto &up) {
        return relay<true>(s, buf, parser, up, *out, o.bytes_in, in_failed,
                           o.start + cfg().timeouts.request, 0, scan);
      });
    } else {
      bool sent = false;
      ec = co_await conn->visit([&](auto &up) {
        return relay_sized<true>(s, buf, up, head, parser.content_length().value_or(0),
                                 o.bytes_in, in_failed, sent, o.start + cfg().timeouts.request, 0, scan);
      });
    }
    if (ec && in_failed && scan && !scan->refused().empty()) {
      // A secret in the body ([scan]): the origin has at most a cut request, and the connection
      // is dropped.
      co_await deny(s, o, scan->refused(), "scan:" + o.scan_rule, false, version);
      co_return false;
    }
    if (ec && in_failed) {
      // The client's body broke its own framing (bad chunk size, oversize body) or stopped:
      // answer a framing error with 400 while no response has started; the origin sees a cut
      // request and the connection is dropped.
      bool framing = ec.category() == http::make_error_code(http::error::bad_chunk).category() ||
                     ec == http::error::body_limit;
      if (framing) {
        co_await deny(s, o, ec == http::error::body_limit ? "body_too_large" : "bad_request_body",
                      o.rule, false, version);
      } else {
        o.decision = "error";
        o.reason = "client_aborted";
      }
      co_return false;
    }
    if (!ec) ec = co_await read_response_head(s, *conn, rp, req.method() == http::verb::head, websocket, version);
    if (!ec) break;
    if (reused && !has_body && attempt == 0 && o.bytes_in == 0 && upstream::closed_while_pooled(ec)) {
      continue;
    }
    error_code mapped = upstream::response_failure(ec);
    co_await fail(s, o, mapped, false, version);
    co_return false;
  }

  co_return co_await relay_response(s, buf, std::move(conn), *rp, o, req.keep_alive(),
                                   req.method() == http::verb::head, websocket, version, scan);
}

template net::awaitable<bool> session::forward<beast::tcp_stream>(beast::tcp_stream &, beast::flat_buffer &,
                                                     http::request_parser<http::buffer_body> &, outcome &,
                                                     const std::optional<net::ip::address> &, unsigned,
                                                     const std::string *, exchange::scan_step *);
template net::awaitable<bool> session::forward<tls_stream>(tls_stream &, beast::flat_buffer &,
                                                     http::request_parser<http::buffer_body> &, outcome &,
                                                     const std::optional<net::ip::address> &, unsigned,
                                                     const std::string *, exchange::scan_step *);

} // namespace sluice::gateway::detail
