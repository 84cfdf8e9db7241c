// Reading and judging requests: the plain proxy loop and the loop inside a terminated tunnel or a
// captured connection. A head is read within its limits and checked raw, then parsed; the origin is
// worked out and cross-checked with Host; hygiene, Git negotiation and credentials are checked; the
// decision is the policy's. Allowed requests go on to forward().
#include "filters/request_hygiene.hpp"
#include "gateway/exchange/body.hpp"
#include "gateway/session_impl.hpp"

#include <cstring>

namespace sluice::gateway::detail {
namespace {

// A POST on an MCP route whose calls the policy refused (gateway/exchange/mcp.hpp): HTTP 200 with
// the JSON-RPC errors, which an MCP client hands to the agent, and Proxy-Status saying it was
// sluice. The body was read whole: the connection may stay open.
template <class Stream>
net::awaitable<void> mcp_refusal(Stream &s, outcome &o, const exchange::body_refusal &no, bool keep_alive,
                                 unsigned version, std::chrono::milliseconds io) {
  o.decision = "deny";
  o.reason = no.reason;
  o.rule = no.rule;
  http::response<http::string_body> res{http::status::ok, version};
  res.set(http::field::server, "sluice");
  res.set(http::field::content_type, "application/json");
  res.set("Proxy-Status", proxy_status("http_request_denied", o.reason, o.rule));
  res.body() = no.jsonrpc;
  res.keep_alive(keep_alive);
  res.prepare_payload();
  o.status = 200;
  lowest(s).expires_after(io);
  co_await http::async_write(s, res, use_tuple);
}

} // namespace

// Reads request heads and answers them until the connection should close. `tunnel` is set inside a
// terminated CONNECT; the stream is then TLS.
template <class Stream>
net::awaitable<void> session::serve_requests(Stream &s, beast::flat_buffer &buf,
                                    const tunnel_target *tunnel) {
  for (std::size_t served = std::exchange(resume_served_, 0); served < cfg().limits.max_requests_per_connection;
       ++served) {
    if (state_.draining.load()) co_return;
    if (resume_deadline_ != clock::time_point::max()) {
      // Resumed from parking: the head it waited for has begun to arrive; its deadline stands.
      lowest(s).expires_at(std::exchange(resume_deadline_, clock::time_point::max()));
    } else {
      lowest(s).expires_after(served == 0 ? cfg().timeouts.header_read : cfg().timeouts.idle);
    }
    http::request_parser<http::buffer_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(cfg().limits.max_header_bytes));
    if (cfg().limits.max_body_bytes) {
      parser.body_limit(cfg().limits.max_body_bytes);
    } else {
      parser.body_limit(boost::none);
    }
    std::string_view raw_reason;
    error_code ec = co_await read_head(s, buf, parser, raw_reason);
    if constexpr (std::is_same_v<Stream, tls_stream>) {
      if (park_) { // no request came for park_after (read_head): park, to resume here
        resume_served_ = served;
        resume_deadline_ = s.expiry();
        co_return;
      }
    }
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == net::error::operation_aborted || ec == net::error::connection_reset ||
        ec == net::ssl::error::stream_truncated || ec == net::error::eof) {
      // The client closed or idled out between requests, or a slowloris head hit its deadline.
      co_return;
    }
    // Each request is judged by the policy current at its start (an identified client's: its role's).
    std::string_view revoked = refresh_policy();
    record o(*this); // written when this request's turn of the loop ends
    o.scheme = tunnel ? tunnel->scheme : "http";
    if (raw_reason == "socks5") {
      if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
        if (!tunnel && served == 0) {
          co_await read_socks5(s, buf);
          co_return; // run() takes the CONNECT on, if there is one
        }
      }
      raw_reason = "non_http_protocol"; // SOCKS inside a tunnel or after HTTP requests
    }
    if (raw_reason == "socks_refused" || (raw_reason == "non_http_protocol" && ec != http::error::bad_version)) {
      o.method = "-";
      o.decision = "error";
      o.reason = raw_reason;
      if (tunnel) {
        o.host = tunnel->host;
        o.port = tunnel->port;
      }
      if (raw_reason == "socks_refused") {
        // SOCKS4 (no host names, no IPv6): "request rejected"; the client stops at once.
        static const unsigned char socks4[] = {0x00, 0x5b, 0, 0, 0, 0, 0, 0};
        lowest(s).expires_after(cfg().timeouts.io);
        co_await net::async_write(s, net::buffer(socks4), use_tuple);
      }
      co_return;
    }
    if (ec) {
      o.method = "-";
      bool too_large = ec == http::error::header_limit;
      o.decision = "deny";
      o.reason = !raw_reason.empty() ? raw_reason : too_large ? "header_too_large" : "bad_request";
      unsigned status = too_large ? 431 : 400;
      std::string body = "sluice: malformed request (" + ec.message() + ")\n";
      if (raw_reason == "non_http_protocol") {
        body = "sluice: this connection does not speak HTTP (non_http_protocol); sluice carries HTTP, "
               "HTTPS and WebSocket and closes anything else\n";
      } else if (raw_reason == "h2c_refused") {
        body = "sluice: HTTP/2 in clear text is not carried (h2c_refused); send HTTP/1.1\n";
      }
      if (tunnel) {
        o.host = tunnel->host;
        o.port = tunnel->port;
      }
      co_await reply(s, o, status, "http_request_error", std::move(body), false);
      co_return;
    }
    {
      auto &req = parser.get();
      bool has_body = parser.chunked() || (parser.content_length() && *parser.content_length() > 0);
      bool keep_alive = req.keep_alive() && !has_body;
      // Who is asking: each request on the proxy listener says so (a connection may carry several
      // clients' requests through a load balancer); inside a tunnel, the client that opened it,
      // as long as the current policy still names it with the same token.
      std::string_view refused =
          tunnel || captured_ ? revoked : identify_request(req[http::field::proxy_authorization]);
      if (refused.empty() && !within_rate()) refused = "rate_limited";
      if (!refused.empty()) {
        o.method = std::string(req.method_string());
        o.target = std::string(req.target());
        if (tunnel) {
          o.host = tunnel->host;
          o.port = tunnel->port;
        }
        bool keep = keep_alive && refused != "client_revoked";
        co_await refuse_client(s, o, refused, keep, req.version());
        if (!keep) co_return;
        continue;
      }
    }
    ++state_.in_flight;
    bool keep = co_await handle(s, buf, parser, tunnel, o);
    --state_.in_flight;
    if (!keep) co_return;
    if (buf.size() == 0) buf.shrink_to_fit(); // idle keep-alive connections hold no read buffer
  }
}

// Reads one request head: bytes up to the blank line (bounded by the buffer's limit), a raw
// check for what a lenient parser would repair silently, then Beast's parser on exactly those
// bytes. The body, if any, stays in `buf` for the relay.
template <class Stream>
net::awaitable<error_code> session::read_head(Stream &s, beast::flat_buffer &buf,
                                     http::request_parser<http::buffer_body> &parser,
                                     std::string_view &raw_reason) {
  std::size_t n = 0;      // length of the head once the blank line is found
  std::size_t scanned = 0; // bytes already searched
  bool line_checked = false; // the request line has been seen to end in " HTTP/x.y"
  while (n == 0) {
    std::string_view have(static_cast<const char *>(buf.data().data()), buf.size());
    for (std::size_t i = scanned; i < have.size(); ++i) {
      const void *lf = std::memchr(have.data() + i, '\n', have.size() - i);
      if (!lf) break;
      i = static_cast<std::size_t>(static_cast<const char *>(lf) - have.data());
      if (i + 1 < have.size() && have[i + 1] == '\n') {
        n = i + 2;
      } else if (i + 2 < have.size() && have[i + 1] == '\r' && have[i + 2] == '\n') {
        n = i + 3;
      }
      if (n) break;
    }
    if (n) break;
    if (!line_checked) {
      // Nor is a first line that does not end in " HTTP/x.y" (an SSH client's banner, which then
      // waits for the server's): closed at once, not left to the head's deadline.
      std::string_view text = have;
      auto start = text.find_first_not_of("\r\n");
      auto lf = start == std::string_view::npos ? start : text.find('\n', start);
      if (lf != std::string_view::npos) {
        auto line = text.substr(start, lf - start);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        auto n9 = line.size();
        bool http = n9 >= 9 && line[n9 - 9] == ' ' && line.substr(n9 - 8, 5) == "HTTP/" &&
                    line[n9 - 3] >= '0' && line[n9 - 3] <= '9' && line[n9 - 2] == '.' &&
                    line[n9 - 1] >= '0' && line[n9 - 1] <= '9';
        if (!http) { // answered with a 400 naming it (bad_version: not a bad first byte)
          raw_reason = "non_http_protocol";
          co_return http::error::bad_version;
        }
        line_checked = true;
      }
    }
    scanned = have.size() >= 2 ? have.size() - 2 : 0;
    std::size_t room = buf.max_size() - buf.size();
    if (room == 0 || buf.size() > cfg().limits.max_header_bytes) {
      co_return http::error::header_limit;
    }
    if constexpr (std::is_same_v<Stream, tls_stream>) {
      if (buf.size() == 0) { // idle: wait for the next request before taking a read buffer
        auto deadline = s.expiry();
        // The tunnel's own stream waits park_after, then parks without its frames.
        bool may_park = &s == tunnel_tls_.get() && !s.carried();
        if (may_park) s.expires_at(std::min(deadline, clock::now() + park_after));
        auto [wec, wn] = co_await s.async_wait_readable(use_tuple);
        s.expires_at(deadline);
        if (may_park && wec == beast::error::timeout && clock::now() < deadline) {
          park_ = true;
          co_return wec;
        }
        if (wec) co_return wec == net::error::eof ? error_code(http::error::end_of_stream) : wec;
      }
    }
    auto [ec, got] = co_await s.async_read_some(buf.prepare(std::min<std::size_t>(room, 16384)),
                                                use_tuple);
    if (ec && buf.size() == 0) {
      co_return ec == net::error::eof ? error_code(http::error::end_of_stream) : ec;
    }
    if (ec) co_return ec == beast::error::timeout ? ec : error_code(http::error::partial_message);
    bool first = buf.size() == 0;
    buf.commit(got);
    if (first && got) {
      // A request starts with a method token (an empty line before it is tolerated). SOCKS
      // greetings and raw TLS are answered at once instead of waiting for a line that never comes.
      auto c = static_cast<unsigned char>(static_cast<const char *>(buf.data().data())[0]);
      bool letter = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '\r' || c == '\n';
      if (!letter) {
        raw_reason = c == 0x05 ? "socks5" : c == 0x04 ? "socks_refused" : "non_http_protocol";
        co_return http::error::bad_method;
      }
    }
  }
  std::string_view head(static_cast<const char *>(buf.data().data()), n);
  if (head.starts_with("PRI * HTTP/2.0\r\n")) { // HTTP/2's preface: h2c by prior knowledge
    raw_reason = "h2c_refused";
    co_return http::error::bad_version;
  }
  raw_reason = filters::check_raw_head(head);
  if (!raw_reason.empty()) co_return http::error::bad_field;
  error_code pec;
  auto used = parser.put(net::buffer(head.data(), head.size()), pec);
  buf.consume(used);
  if (!pec && !parser.is_header_done()) pec = http::error::partial_message;
  co_return pec;
}

template <class Stream>
net::awaitable<bool> session::handle(Stream &s, beast::flat_buffer &buf,
                            http::request_parser<http::buffer_body> &parser,
                            const tunnel_target *tunnel, record &o) {
  auto &req = parser.get();
  const filters::policy_ptr held = policy_; // see handle_connect: a tunnel may move policy_ on
  const auto &pol = *held;
  o.method = std::string(req.method_string());
  unsigned version = req.version();
  bool has_body = parser.chunked() || (parser.content_length() && *parser.content_length() > 0);
  bool keep_alive = req.keep_alive() && !has_body;

  if (!tunnel && req.method() == http::verb::connect) { // on the plain or the HTTPS proxy listener
    o.target = std::string(req.target());
    connect_ = std::make_unique<record>(std::move(o)); // handled by run() once this loop has ended
    co_return false;
  }

  if (tunnel && req.method() == http::verb::connect) {
    o.host = tunnel->host;
    o.port = tunnel->port;
    o.target = std::string(req.target());
    co_await deny(s, o, "connect_in_tunnel", {}, false, version);
    co_return false;
  }

  // The one judging step (session_judge.cpp), on the head as Beast parsed it.
  auto &fields = field_views_; // kept by the session: its capacity serves every request
  fields.clear();
  for (auto &f : req) fields.emplace_back(f.name_string(), f.value());
  exchange::request in;
  in.method = req.method_string();
  in.target = req.target();
  in.fields = &fields;
  in.version = version;
  in.can_hold = true;
  verdict v = judge(in, tunnel, pol, o);
  co_await consult(in, tunnel, pol, o, v); // [decider], where the verdict names it
  if (v.ask) { // not on the allowlist, but a person may let it through ([approvals])
    auto a = co_await ask(o, "request", pol, lowest(s).socket());
    if (a == approval::once || a == approval::run || a == approval::always) {
      approved_next_ = true;
      v = judge(in, tunnel, pol, o);
    } else {
      v.reason = a == approval::deny      ? "approval_denied"
                 : a == approval::timeout ? "approval_timeout"
                 : a == approval::gone    ? "client_aborted"
                                          : "approval_queue_full";
      v.close = false;
    }
  }
  // [[limits.budget]]: its head and announced body must fit what is left.
  if (v.reason.empty() && !pol.budgets().empty()) {
    co_await admit_budgets(v, o, pol, exchange::head_bytes(in), parser.content_length().value_or(0));
  }
  if (!v.reason.empty()) {
    if (v.reason == "not_a_proxy_request") {
      o.reason = v.reason;
      std::string body = "sluice is a forward proxy: send absolute-form requests "
                         "(http://host/path) or CONNECT host:port\n";
      co_await reply(s, o, 400, "http_request_error", std::move(body), false, version);
      o.decision = "deny";
      co_return false;
    }
    bool keep = keep_alive && !v.close;
    co_await deny(s, o, v.reason, v.rule, keep, version);
    co_return keep;
  }
  // An allowed request that waits for 100 Continue gets it from sluice, which reads its body next,
  // and Expect is not passed on: the origin's own 100 would come only once sluice reads the
  // origin, after the body (a client that takes any readable byte for the answer, such as
  // botocore after a TLS 1.3 session ticket, would wait until the I/O deadline).
  if (has_body && beast::iequals(req[http::field::expect], "100-continue")) {
    http::response<http::empty_body> go_on{http::status::continue_, 11};
    lowest(s).expires_after(cfg().timeouts.io);
    co_await http::async_write(s, go_on, use_tuple);
    req.erase(http::field::expect);
    fields.clear(); // the views again: one pointed into the field just erased
    for (auto &f : req) fields.emplace_back(f.name_string(), f.value());
  }
  // A body judged whole before anything leaves (Git negotiation, AWS re-signing): read (bounded),
  // then judged as every protocol's is.
  std::string whole;
  if (v.read_whole()) {
    error_code bec = co_await read_whole_body(s, buf, parser, whole, exchange::whole_body_limit(v),
                                              o.start + cfg().timeouts.request);
    if (bec) {
      co_await deny(s, o, bec == http::error::body_limit ? "body_too_large" : "bad_request_body", o.rule,
                    false, version);
      co_return false;
    }
    if (v.decider_body) { // the decider asked for the body: asked again with it
      co_await consult_body(in, tunnel, pol, o, v, whole);
      if (!v.reason.empty()) {
        bool keep = keep_alive && !v.close; // the body was read: the connection may go on
        co_await deny(s, o, v.reason, v.rule, keep, version);
        co_return keep;
      }
    }
    auto no = exchange::judge_body(v, o, pol, fields, req.method_string(), whole);
    if (!no.jsonrpc.empty()) {
      co_await mcp_refusal(s, o, no, keep_alive, version, cfg().timeouts.io);
      co_return keep_alive;
    }
    if (!no.reason.empty()) {
      co_await deny(s, o, no.reason, no.rule, false, version);
      co_return false;
    }
  }
  fields.clear(); // views into the head, which the credentials below change
  for (auto &name : v.remove) req.erase(name); // the decider's
  for (auto &[name, value] : v.set) req.set(name, value);
  co_return co_await forward(s, buf, parser, o, v.ip, version,
                             v.read_whole() ? &whole : nullptr, v.scan.get());
}

// Reads a whole request body into `out`, at most `cap` bytes (body_limit beyond), within the
// request's deadline (a body trickling a byte per I/O timeout is cut all the same).
template <class Stream>
net::awaitable<error_code> session::read_whole_body(Stream &s, beast::flat_buffer &buf,
                                           http::request_parser<http::buffer_body> &parser,
                                           std::string &out, std::size_t cap,
                                           clock::time_point deadline) {
  chunk tmp;
  while (!parser.is_done()) {
    if (clock::now() > deadline) co_return beast::error::timeout;
    parser.get().body().data = tmp.get();
    parser.get().body().size = chunk_size;
    lowest(s).expires_after(cfg().timeouts.io);
    auto [ec, n] = co_await http::async_read_some(s, buf, parser, use_tuple);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) co_return ec;
    out.append(tmp.get(), chunk_size - parser.get().body().size);
    if (out.size() > cap) co_return http::error::body_limit;
  }
  co_return error_code{};
}

template net::awaitable<void> session::serve_requests<beast::tcp_stream>(beast::tcp_stream &, beast::flat_buffer &,
                                                            const tunnel_target *);
template net::awaitable<void> session::serve_requests<tls_stream>(tls_stream &, beast::flat_buffer &,
                                                            const tunnel_target *);

} // namespace sluice::gateway::detail
