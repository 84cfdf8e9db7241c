// The WebSocket stage: after the origin's 101 to an upgrade the policy let through, frames are
// relayed both ways as they come, their headers read on the way (websocket_scanner): a message
// over the limit or a frame that breaks the protocol ends the connection with a close frame to
// both sides (1009, 1002), and the log line gets the message counts and the close code. On an MCP
// route with websocket = true each client message is held until judged whole (mcp_sink).
#include "gateway/end_to_end_fields.hpp"
#include "gateway/exchange/mcp.hpp"
#include "gateway/error.hpp"
#include "gateway/session_impl.hpp"
#include "gateway/websocket/frames.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <openssl/rand.h>

// GCC 12 false positive, as in tunnel/connect.cpp: Asio's frames come from its own allocator.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace sluice::gateway::detail {
namespace {

using namespace boost::asio::experimental::awaitable_operators;

// What the two directions of one WebSocket share.
struct ws_shared {
  clock::time_point last_activity = clock::now(); // bytes either way: the idle deadline's start
  unsigned stop_code = 0;   // a direction broke the rules: the other sends this close code back
  std::string_view reason;  // websocket_message_too_large or websocket_protocol_error
  bool reset = false;       // a side failed (not a clean end of file)
  bool idle = false;        // nothing either way for the idle deadline
  int open = 2;             // directions still running; the last one stops the watchdog
  net::steady_timer *watchdog = nullptr;
  // Writes to the client: the origin's direction relays, and on an MCP route the client's own
  // direction answers a refused message with a frame of sluice's own. One write at a time, and
  // sluice's frame only where what went to the client so far ends outside any frame and message.
  bool client_writing = false;
  bool client_at_rest = true;   // the bytes written to the client end at rest (websocket_scanner::at_rest)
  net::steady_timer *turn = nullptr; // never expires; cancelled when a write to the client ends
};

// Waits for the client's write turn (and, with `own_frame`, for the stream to the client to be at
// rest), then takes it; end_client_turn gives it back. False: an own frame cannot go, the origin's
// direction having ended (perhaps inside one of the server's frames).
net::awaitable<bool> client_turn(ws_shared &st, bool own_frame) {
  while (st.client_writing || (own_frame && !st.client_at_rest)) {
    if (own_frame && st.open < 2) co_return false;
    co_await st.turn->async_wait(use_tuple);
  }
  st.client_writing = true;
  co_return true;
}
void end_client_turn(ws_shared &st) {
  st.client_writing = false;
  st.turn->cancel();
}

// Tears both sockets down, so that the other direction's pending read ends too.
template <class A, class B> void shutdown_both(A &a, B &b) {
  error_code ignored;
  lowest(a).socket().shutdown(tcp::socket::shutdown_both, ignored);
  lowest(b).socket().shutdown(tcp::socket::shutdown_both, ignored);
}

// A read without a deadline of its own: a WebSocket is idle only when neither direction moves,
// which the watchdog judges. (A plain stream's read goes to its socket, so that the write
// deadline beast::tcp_stream keeps for the other direction is left alone.)
net::awaitable<std::tuple<error_code, std::size_t>> read_untimed(beast::tcp_stream &s, net::mutable_buffer b) {
  co_return co_await s.socket().async_read_some(b, use_tuple);
}
net::awaitable<std::tuple<error_code, std::size_t>> read_untimed(tls_stream &s, net::mutable_buffer b) {
  s.expires_never();
  co_return co_await s.async_read_some(b, use_tuple);
}

// A WebSocket on an MCP route (o.mcp_messages): each client message is gathered whole (at most
// max_mcp_body_bytes), judged at its end (exchange::mcp_messages) and only then may go on; a
// refused one is dropped, and `reply` holds the JSON-RPC error for the client. [scan] sees the
// message first, as on any WebSocket.
struct mcp_sink final : websocket_payload_sink {
  mcp_sink(const filters::mcp_rule &rule, outcome &o, const filters::policy &pol, metrics::metrics &m,
           websocket_payload_sink *next)
      : judge(rule, o, pol), o(o), m(m), next(next) {}
  exchange::mcp_messages judge;
  outcome &o;
  metrics::metrics &m;
  websocket_payload_sink *next;
  std::string message;
  std::string reply; // the last message was refused: its answer, not yet sent
  std::string_view piece(std::string_view bytes, bool message_end) override {
    if (next) {
      if (auto why = next->piece(bytes, message_end); !why.empty()) return why;
    }
    if (message.size() + bytes.size() > exchange::max_mcp_body_bytes) return "websocket_message_too_large";
    message.append(bytes);
    if (!message_end) return {};
    auto j = judge.judge(message);
    message.clear();
    for (const auto &tool : j.tool_labels) m.mcp_call(o.rule, tool, j.decision);
    if (!j.refusal.reason.empty()) reply = std::move(j.refusal.jsonrpc);
    return {};
  }
};

// 1009: too big; 1008: a policy violation ([scan] found a secret); 1002: a broken frame.
unsigned close_code_for(std::string_view reason) {
  if (reason == "websocket_message_too_large") return 1009;
  return reason == "secret_detected" || reason == "canary_detected" ? 1008 : 1002;
}

// An MCP refusal's answer, a frame of sluice's own, to the client (`client`; `origin` is the other
// side) in the client's write turn. False: the connection ends (the origin's direction has, or the
// write failed).
template <class Client, class Origin>
net::awaitable<bool> answer_client(Client &client, Origin &origin, ws_shared &st, std::string frame,
                                   std::chrono::milliseconds io) {
  if (!co_await client_turn(st, true)) { // the origin's side is gone: so is the connection
    shutdown_both(client, origin);
    co_return false;
  }
  lowest(client).expires_after(io);
  auto [ec, wn] = co_await net::async_write(client, net::buffer(frame), use_tuple);
  end_client_turn(st);
  if (ec) {
    st.reset = st.reset || !st.idle;
    shutdown_both(client, origin);
    co_return false;
  }
  co_return true;
}

// One direction: reads from `from` (first what `pre` holds), scans, writes to `to`. The other
// direction is the only writer to `from`, so a close frame for the side that broke a rule is
// sent by it (woken by cancelling its read, or at its next turn); the one exception, an MCP
// refusal's answer to the client, waits for the client's write turn (client_turn).
template <class From, class To>
net::awaitable<void> ws_pipe(From &from, beast::flat_buffer &pre, To &to, websocket_scanner &scan,
                             bool to_server, ws_shared &st, std::uint64_t &bytes,
                             std::chrono::milliseconds io, exchange::meter *budget, mcp_sink *mcp = nullptr) {
  chunk data;
  std::string held; // mcp: the scanned bytes of a message not yet judged (and what came with it)
  std::string_view held_too_long; // mcp: held passed its bound
  auto write_to = [&](const void *at, std::size_t n) -> net::awaitable<error_code> {
    if (!to_server) co_await client_turn(st, false);
    lowest(to).expires_after(io);
    auto [ec, wn] = co_await net::async_write(to, net::buffer(at, n), use_tuple);
    if (!to_server) {
      if (!ec) st.client_at_rest = scan.at_rest(); // what went to the client is what was scanned
      end_client_turn(st);
    }
    co_return ec;
  };
  auto send_close = [&](unsigned code, std::string_view why) -> net::awaitable<void> {
    unsigned char frame[4 + 2 + 125 + 4];
    unsigned char mask[4] = {};
    if (to_server) RAND_bytes(mask, sizeof mask);
    std::size_t n = websocket_close_frame(code, why, to_server, mask, frame);
    co_await write_to(frame, n);
  };
  // Sends `n` scanned bytes on, as far as the byte budget lets them; false: this direction stops.
  auto forward = [&](const unsigned char *at, std::size_t n) -> net::awaitable<bool> {
    // [[limits.budget]]: bytes that would take a byte budget past its limit do not go; both sides
    // are told why (1008), as for the scanner's refusal.
    if (n && budget && !budget->moved_one_way(to_server, bytes + n)) {
      st.reason = "budget_exhausted";
      st.stop_code = 1008;
      co_await send_close(st.stop_code, "sluice: budget_exhausted");
      error_code ignored;
      lowest(to).socket().cancel(ignored);
      co_return false;
    }
    if (!n) co_return true;
    if (co_await write_to(at, n)) {
      st.reset = st.reset || !st.idle;
      shutdown_both(from, to);
      co_return false;
    }
    bytes += n;
    co_return true;
  };
  // An MCP route: a message goes on once judged, whole; a refused one is dropped (with any
  // control frame sent inside it) and the client gets its answer in a text frame of sluice's own.
  auto forward_judged = [&](const unsigned char *at, std::size_t n) -> net::awaitable<bool> {
    for (std::size_t off = 0; off < n;) {
      const std::size_t ok = scan.scan(at + off, n - off);
      held.append(reinterpret_cast<const char *>(at + off), ok);
      off += ok;
      if (!scan.error().empty() || ok == 0) co_return true; // the stream stops below; held is dropped
      if (held.size() > exchange::max_mcp_body_bytes + chunk_size) { // empty fragments, without end
        held_too_long = "websocket_message_too_large";
        co_return true;
      }
      if (!mcp->reply.empty()) {
        held.clear();
        if (!co_await answer_client(from, to, st, websocket_text_frame(std::exchange(mcp->reply, {})), io)) {
          co_return false;
        }
      } else if (scan.at_rest()) {
        if (!co_await forward(reinterpret_cast<const unsigned char *>(held.data()), held.size())) co_return false;
        held.clear();
      }
    }
    co_return true;
  };
  for (;;) {
    if (st.stop_code) { // the other direction broke a rule: tell this one's peer why
      co_await send_close(st.stop_code, "sluice: " + std::string(st.reason));
      shutdown_both(from, to);
      break;
    }
    const unsigned char *at;
    std::size_t n;
    if (pre.size()) {
      n = pre.size();
      at = static_cast<const unsigned char *>(pre.data().data());
    } else {
      auto [ec, got] = co_await read_untimed(from, net::buffer(data.get(), chunk_size));
      if (ec && st.stop_code) continue; // cancelled by the other direction: answer above
      if (ec) {
        if (ec == net::error::eof || ec == net::ssl::error::stream_truncated) {
          co_await close_send(to); // a clean end: the other way may go on (the close handshake)
        } else {
          st.reset = st.reset || !st.idle;
          shutdown_both(from, to);
        }
        break;
      }
      n = got;
      at = reinterpret_cast<const unsigned char *>(data.get());
    }
    st.last_activity = clock::now();
    const bool go_on = mcp ? co_await forward_judged(at, n) : co_await forward(at, scan.scan(at, n));
    if (!go_on) break;
    if (pre.size()) pre.consume(pre.size());
    if (!scan.error().empty() || !held_too_long.empty()) {
      st.reason = !scan.error().empty() ? scan.error() : held_too_long;
      st.stop_code = close_code_for(st.reason);
      co_await send_close(st.stop_code, "sluice: " + std::string(st.reason));
      error_code ignored;
      lowest(to).socket().cancel(ignored); // wakes the other direction, which answers `from`
      break;
    }
  }
  if (--st.open == 0) st.watchdog->cancel();
  st.turn->cancel(); // a direction waiting for the client's turn sees this one has ended
}

// [scan]: the client's messages go through the request's scan before they are forwarded.
struct scan_sink final : websocket_payload_sink {
  explicit scan_sink(exchange::scan_step &s) : scan(s) {}
  exchange::scan_step &scan;
  std::string_view piece(std::string_view bytes, bool message_end) override { return scan.message(bytes, message_end); }
};

// Ends the connection once neither direction has moved for `idle`.
template <class Shut>
net::awaitable<void> ws_watchdog(net::steady_timer &t, ws_shared &st, std::chrono::milliseconds idle, Shut shut) {
  while (st.open > 0) {
    t.expires_at(st.last_activity + idle);
    co_await t.async_wait(use_tuple);
    if (st.open == 0) break;
    if (clock::now() >= st.last_activity + idle) {
      st.idle = true;
      shut();
      break;
    }
  }
}

} // namespace

template <class Stream>
net::awaitable<bool> session::switch_to_websocket(Stream &s, beast::flat_buffer &buf, upstream_connection &conn,
                                                  outcome &o, const http::response<http::buffer_body> &res,
                                                  exchange::scan_step *scan) {
  bool upgraded = false, deflate = false;
  for (auto &f : res) {
    if (f.name() == http::field::upgrade) upgraded = upgraded || beast::iequals(f.value(), "websocket");
    if (f.name() == http::field::sec_websocket_extensions) {
      deflate = deflate || f.value().find("permessage-deflate") != beast::string_view::npos;
    }
  }
  if (!upgraded) { // a 101 to something the client did not ask for: not passed on
    co_await fail(s, o, gateway_error::upstream_protocol_error, false, 11);
    co_return false;
  }
  std::string head = "HTTP/1.1 101 Switching Protocols\r\n";
  append_fields(res.base(), head); // Sec-WebSocket-Accept, -Protocol, -Extensions and the rest
  head.append("Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
  lowest(s).expires_after(cfg().timeouts.io);
  auto [wec, wn] = co_await net::async_write(s, net::buffer(head), use_tuple);
  o.status = 101;
  o.decision = "allow";
  o.reason = "allowed";
  if (wec) {
    o.decision = "error";
    o.reason = "client_aborted";
  } else {
    co_await relay_websocket(s, buf, conn, o, deflate, scan);
  }
  co_return false;
}

template <class Stream>
net::awaitable<void> session::relay_websocket(Stream &s, beast::flat_buffer &client_buf,
                                              upstream_connection &conn, outcome &o, bool deflate,
                                              exchange::scan_step *scan) {
  const auto max = cfg().limits.max_websocket_message_bytes;
  const auto idle = cfg().timeouts.tunnel_idle, io = cfg().timeouts.io;
  websocket_scanner up(true, max, deflate), down(false, max, deflate);
  std::optional<scan_sink> sink;
  if (scan) up.set_sink(&sink.emplace(*scan));
  std::optional<mcp_sink> mcp;
  const auto pol = policy_; // the policy the upgrade was judged by, kept for the connection's life
  if (o.mcp_messages) {
    up.set_sink(&mcp.emplace(*o.mcp_messages, o, *pol, state_.metrics, scan ? &*sink : nullptr));
    up.pause_at_message_end(true);
  }
  ws_shared st;
  net::steady_timer watchdog(worker_.ioc.get_executor()), turn(worker_.ioc.get_executor());
  st.watchdog = &watchdog;
  turn.expires_at(clock::time_point::max());
  st.turn = &turn;
  co_await conn.visit([&](auto &origin) -> net::awaitable<void> {
    co_await (ws_pipe(s, client_buf, origin, up, true, st, o.bytes_in, io, o.charged.get(), mcp ? &*mcp : nullptr) &&
              ws_pipe(origin, conn.buffer, s, down, false, st, o.bytes_out, io, o.charged.get()) &&
              ws_watchdog(watchdog, st, idle, [&] { shutdown_both(s, origin); }));
  });
  o.ws_messages_in = up.messages();
  o.ws_messages_out = down.messages();
  o.ws_close_code = up.closed() ? up.close_code() : down.close_code();
  auto &m = state_.metrics;
  m.websocket_messages_in.Increment(static_cast<double>(up.messages()));
  m.websocket_messages_out.Increment(static_cast<double>(down.messages()));
  m.websocket_bytes_in.Increment(static_cast<double>(up.payload_bytes()));
  m.websocket_bytes_out.Increment(static_cast<double>(down.payload_bytes()));
  if (!st.reason.empty()) {
    // A message over the limit or carrying a secret ([scan]) is the policy's refusal; a broken
    // frame is the peer's error.
    bool refused = st.reason == "websocket_message_too_large" || st.reason == "budget_exhausted" ||
                   (scan && st.reason == scan->refused());
    o.decision = refused ? "deny" : "error";
    o.reason = st.reason;
    m.websocket_closed(st.reason == "websocket_message_too_large" ? "message_too_large" : "protocol_error");
  } else {
    m.websocket_closed(up.closed() || down.closed() ? "close" : st.idle ? "idle" : "reset");
  }
}

template net::awaitable<bool> session::switch_to_websocket<beast::tcp_stream>(
    beast::tcp_stream &, beast::flat_buffer &, upstream_connection &, outcome &, const http::response<http::buffer_body> &,
    exchange::scan_step *);
template net::awaitable<bool> session::switch_to_websocket<tls_stream>(
    tls_stream &, beast::flat_buffer &, upstream_connection &, outcome &, const http::response<http::buffer_body> &,
    exchange::scan_step *);
template net::awaitable<void> session::relay_websocket<beast::tcp_stream>(beast::tcp_stream &, beast::flat_buffer &,
                                                                          upstream_connection &, outcome &, bool,
                                                                          exchange::scan_step *);
template net::awaitable<void> session::relay_websocket<tls_stream>(tls_stream &, beast::flat_buffer &,
                                                                   upstream_connection &, outcome &, bool,
                                                                   exchange::scan_step *);

} // namespace sluice::gateway::detail
