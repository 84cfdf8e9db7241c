#include "gateway/session.hpp"
#include "filters/git_upload_pack.hpp"
#include "filters/request_hygiene.hpp"
#include "gateway/capture.hpp"
#include "gateway/error.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/url/parse.hpp>
#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <openssl/ssl.h>

namespace sluice::gateway {
namespace {

using namespace boost::asio::experimental::awaitable_operators;
using clock = std::chrono::steady_clock;
constexpr auto use_tuple = net::as_tuple(net::use_awaitable);
constexpr std::size_t chunk_size = 64 * 1024;

// The authority a terminated tunnel was opened for; every request inside must name it.
struct tunnel_target {
  std::string host; // normalized
  unsigned port = 0;
  std::string_view scheme = "https"; // "http": a captured plain connection
};

// What one request turned into, for the access log, the metrics and the exec summary.
struct outcome {
  std::string method, scheme, host, target, rule;
  unsigned port = 0;
  std::string_view decision = "deny";
  std::string_view reason;
  unsigned status = 0;
  std::uint64_t bytes_in = 0, bytes_out = 0;
  clock::time_point start = clock::now();
};

// Fields a proxy must not forward (RFC 9110 section 7.6.1) plus the proxy's own credentials.
bool hop_by_hop(std::string_view name) {
  if (name.size() >= 6 && beast::iequals(name.substr(0, 6), "proxy-")) {
    return true; // Proxy-Authorization, Proxy-Connection and any other proxy-addressed field
  }
  for (auto h : {"connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade",
                 "content-length"}) {
    if (beast::iequals(name, h)) return true;
  }
  return false;
}

// Copies end-to-end fields, leaving out hop-by-hop ones and any the Connection header names.
template <class Fields> void copy_fields(const Fields &from, http::fields &to) {
  std::vector<std::string> named;
  for (auto &f : from) {
    if (f.name() == http::field::connection) {
      for (auto token : http::token_list(f.value())) named.emplace_back(token);
    }
  }
  for (auto &f : from) {
    auto name = f.name_string();
    if (hop_by_hop(name)) continue;
    bool listed = false;
    for (auto &n : named) listed = listed || beast::iequals(n, name);
    if (!listed) to.insert(f.name(), name, f.value());
  }
}

// Relay buffers of chunk_size, kept per thread for reuse: allocating and freeing 64 KiB per request
// makes malloc trim and re-fault its heap each time. At most `kept` wait idle per worker.
class chunk {
public:
  chunk() {
    auto &f = free_list();
    if (f.empty()) {
      data_.reset(new char[chunk_size]);
    } else {
      data_ = std::move(f.back());
      f.pop_back();
    }
  }
  ~chunk() {
    auto &f = free_list();
    if (f.size() < kept) f.push_back(std::move(data_));
  }
  chunk(const chunk &) = delete;
  chunk &operator=(const chunk &) = delete;
  char *get() { return data_.get(); }

private:
  static constexpr std::size_t kept = 16;
  static std::vector<std::unique_ptr<char[]>> &free_list() {
    thread_local std::vector<std::unique_ptr<char[]>> f;
    return f;
  }
  std::unique_ptr<char[]> data_;
};

// The layer that carries deadlines: the beast::tcp_stream of a plain stream, the tls_stream itself.
template <class Stream> auto &lowest(Stream &s) { return beast::get_lowest_layer(s); }

// The session proper: one client connection, one worker.
class session {
public:
  session(tcp::socket socket, worker &w, gateway_state &state)
      : client_(std::move(socket)), worker_(w), state_(state),
        policy_(state.policy.load()), buffer_(cfg().limits.max_header_bytes + chunk_size) {}

  net::awaitable<void> run() {
    co_await serve_requests(client_, buffer_, nullptr);
    if (connect_) {
      // A CONNECT ends the plain request loop first, so its frames (about 4 KiB) are not held for
      // the life of the tunnel.
      outcome o = std::move(*connect_);
      connect_.reset();
      ++state_.in_flight;
      co_await handle_connect(client_, buffer_, o);
      --state_.in_flight;
    }
    error_code ignored; // the client may already be gone
    client_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

private:
  // The config of the policy this session holds now; it follows policy_ across reloads (a reference
  // kept from the first policy would dangle once a reload drops the last owner).
  const filters::config &cfg() const { return policy_->cfg(); }

  void finish(outcome &o) {
    auto elapsed = std::chrono::duration<double>(clock::now() - o.start).count();
    auto profile = filters::to_string(cfg().mode);
    state_.metrics.request(
        {profile, o.decision, o.reason, o.method, o.rule, o.bytes_in, o.bytes_out, elapsed});
    std::string path = metrics::redact_target(o.target, state_.log.redact_query());
    state_.log.write({profile, o.method, o.scheme, o.host, o.port, path, o.rule, o.reason,
                      o.decision, o.status, o.bytes_in, o.bytes_out, elapsed,
                      captured_ ? "capture" : "proxy"});
    state_.stats.record({o.method, o.host, o.port, path, o.rule, o.decision, o.reason, o.status,
                         o.bytes_in, o.bytes_out});
    if (state_.keep_summary) {
      state_.summary.record(o.host, o.port, std::string(o.decision), std::string(o.reason), o.method);
    }
  }

  // Writes a complete short reply: denials (403 + Proxy-Status), framing errors (400), upstream
  // failures (502/504).
  template <class Stream>
  net::awaitable<void> reply(Stream &s, outcome &o, unsigned status, std::string_view ps_error,
                             std::string body, bool keep_alive, unsigned version = 11) {
    if (silent_) {
      // A captured TLS connection not (yet) terminated: the client expects a TLS server, and an
      // HTTP answer would be garbage to it. It gets the close; the log and summary say why.
      o.status = 0;
      co_return;
    }
    if (socks_pending_) {
      // A SOCKS5 CONNECT that will not be established: its reply code, not an HTTP response.
      socks_pending_ = false;
      unsigned char code = 0x01; // general failure
      if (status == 403 || ps_error == "destination_ip_prohibited") code = 0x02; // not allowed by ruleset
      else if (ps_error == "dns_error" || ps_error == "destination_ip_unroutable") code = 0x04;
      else if (ps_error == "connection_refused") code = 0x05;
      else if (ps_error == "connection_timeout") code = 0x04;
      co_await socks_reply(s, code);
      o.status = 0;
      co_return;
    }
    http::response<http::string_body> res{static_cast<http::status>(status), version};
    res.set(http::field::server, "sluice");
    res.set(http::field::content_type, "text/plain; charset=utf-8");
    res.set("Proxy-Status", "sluice; error=" + std::string(ps_error) + "; details=\"" +
                                std::string(o.reason) + "\"");
    res.body() = std::move(body);
    res.keep_alive(keep_alive);
    res.prepare_payload();
    o.status = status;
    lowest(s).expires_after(cfg().timeouts.io);
    co_await http::async_write(s, res, use_tuple);
  }

  // For a name DNS does not know: whether this machine's /etc/hosts does, and what to do about it
  // (sluice resolves with DNS only: a hosts entry could point any name at loopback).
  static std::string hosts_file_note(const std::string &host) {
    std::ifstream f("/etc/hosts");
    std::string text(64 * 1024, '\0');
    f.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<std::size_t>(f.gcount()));
    auto addr = filters::hosts_file_address(text, host);
    if (!addr) return {};
    return "The name is in this machine's /etc/hosts (" + *addr + "), which sluice does not read: "
           "it resolves with DNS only. To use that address, pin it in the policy: [upstream.resolve] \"" +
           host + "\" = \"" + *addr + "\" (and list it in upstream.allow_addresses if it is private).\n";
  }

  std::string denial_text(const outcome &o, std::string_view rule) {
    std::string where = o.scheme + "://" + o.host + (o.port ? ":" + std::to_string(o.port) : "");
    std::string msg = "sluice: denied " + o.method + " " + where + o.target + ": " +
                      std::string(o.reason);
    if (!rule.empty()) msg += " (rule " + std::string(rule) + ")";
    msg += "\n";
    if (o.reason == "host_not_allowlisted") {
      msg += "To allow it, add \"" + o.host + "\" to the allowlist (policy.allow, or "
             "--allow-domain " + o.host + " for sluice exec).\n";
    } else if (o.reason == "method_not_allowed" || o.reason == "body_on_read_method" ||
               o.reason == "method_override_refused") {
      msg += "The " + std::string(filters::to_string(cfg().mode)) +
             " profile is read-only (GET, HEAD, OPTIONS). Writes need the publish profile with "
             "--confirm-external-side-effects.\n";
    } else if (o.reason == "destination_address_denied") {
      msg += "The name resolves to a loopback, private, link-local or other special address. "
             "List the range in upstream.allow_addresses if it is meant to be reachable.\n";
    } else if (o.reason == "host_denied") {
      msg += "A deny rule matches this host; deny rules beat allow rules.\n";
    } else if (o.reason == "git_push_refused") {
      msg += "Pushing (git-receive-pack) writes to the remote: it needs --sandbox-profile publish "
             "--confirm-external-side-effects. Fetching and cloning work in network-read.\n";
    } else if (o.reason == "git_request_refused") {
      msg += "Only fetch negotiation (want, have, shallow, deepen, filter, done; protocol v2 ls-refs "
             "and fetch) may be sent to git-upload-pack in network-read.\n";
    } else if (o.reason == "credential_host_mismatch") {
      msg += "The request carries the placeholder of a credential that belongs to other hosts "
             "([credentials] hosts in the policy); sluice does not send it here.\n";
    }
    return msg;
  }

  template <class Stream>
  net::awaitable<void> deny(Stream &s, outcome &o, std::string_view reason, std::string rule,
                            bool keep_alive, unsigned version = 11) {
    o.decision = "deny";
    o.reason = reason;
    o.rule = std::move(rule);
    bool framing = filters::is_framing_error(reason);
    unsigned status = framing ? 400 : 403;
    std::string_view ps = framing ? "http_request_error" : "http_request_denied";
    std::string body = denial_text(o, o.rule);
    co_await reply(s, o, status, ps, std::move(body), keep_alive && !framing, version);
    finish(o);
  }

  template <class Stream>
  net::awaitable<void> fail(Stream &s, outcome &o, error_code ec, bool keep_alive,
                            unsigned version = 11) {
    gateway_error ge = ec.category() == gateway_category() ? static_cast<gateway_error>(ec.value())
                                                           : gateway_error::response_incomplete;
    o.decision = ge == gateway_error::destination_address_denied ? "deny" : "error";
    o.reason = reason_of(ge);
    // Built before co_await: GCC 12 double-destroys temporaries of a conditional inside co_await.
    std::string body = ge == gateway_error::destination_address_denied
                           ? denial_text(o, {})
                           : "sluice: " + std::string(reason_of(ge)) + " for " + o.scheme + "://" +
                                 o.host + ":" + std::to_string(o.port) + "\n";
    if (ge == gateway_error::dns_error) body += hosts_file_note(o.host);
    co_await reply(s, o, http_status_of(ge), proxy_status_of(ge), std::move(body), keep_alive,
                   version);
    finish(o);
  }

  // Reads request heads and answers them until the connection should close. `tunnel` is set inside a
  // terminated CONNECT; the stream is then TLS.
  template <class Stream>
  net::awaitable<void> serve_requests(Stream &s, beast::flat_buffer &buf,
                                      const tunnel_target *tunnel) {
    for (std::size_t served = 0; served < cfg().limits.max_requests_per_connection; ++served) {
      if (state_.draining.load()) co_return;
      http::request_parser<http::buffer_body> parser;
      parser.header_limit(static_cast<std::uint32_t>(cfg().limits.max_header_bytes));
      if (cfg().limits.max_body_bytes) {
        parser.body_limit(cfg().limits.max_body_bytes);
      } else {
        parser.body_limit(boost::none);
      }
      lowest(s).expires_after(served == 0 ? cfg().timeouts.header_read : cfg().timeouts.idle);
      std::string_view raw_reason;
      error_code ec = co_await read_head(s, buf, parser, raw_reason);
      if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
          ec == net::error::operation_aborted || ec == net::error::connection_reset ||
          ec == net::ssl::error::stream_truncated || ec == net::error::eof) {
        // The client closed or idled out between requests, or a slowloris head hit its deadline.
        co_return;
      }
      policy_ = state_.policy.load(); // each request is judged by the policy current at its start
      outcome o;
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
      if (raw_reason == "socks_refused" || raw_reason == "non_http_protocol") {
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
        finish(o);
        co_return;
      }
      if (ec) {
        o.method = "-";
        bool too_large = ec == http::error::header_limit;
        o.decision = "deny";
        o.reason = !raw_reason.empty() ? raw_reason : too_large ? "header_too_large" : "bad_request";
        unsigned status = too_large ? 431 : 400;
        std::string body = "sluice: malformed request (" + ec.message() + ")\n";
        co_await reply(s, o, status, "http_request_error", std::move(body), false);
        finish(o);
        co_return;
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
  net::awaitable<error_code> read_head(Stream &s, beast::flat_buffer &buf,
                                       http::request_parser<http::buffer_body> &parser,
                                       std::string_view &raw_reason) {
    std::size_t n = 0;      // length of the head once the blank line is found
    std::size_t scanned = 0; // bytes already searched
    while (n == 0) {
      std::string_view have(static_cast<const char *>(buf.data().data()), buf.size());
      for (std::size_t i = scanned; i < have.size(); ++i) {
        if (have[i] != '\n') continue;
        if (i + 1 < have.size() && have[i + 1] == '\n') {
          n = i + 2;
        } else if (i + 2 < have.size() && have[i + 1] == '\r' && have[i + 2] == '\n') {
          n = i + 3;
        }
        if (n) break;
      }
      if (n) break;
      scanned = have.size() >= 2 ? have.size() - 2 : 0;
      std::size_t room = buf.max_size() - buf.size();
      if (room == 0 || buf.size() > cfg().limits.max_header_bytes) {
        co_return http::error::header_limit;
      }
      if constexpr (std::is_same_v<Stream, tls_stream>) {
        if (buf.size() == 0) { // idle: wait for the next request before taking a read buffer
          auto [wec, wn] = co_await s.async_wait_readable(use_tuple);
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
    raw_reason = filters::check_raw_head(head);
    if (!raw_reason.empty()) co_return http::error::bad_field;
    error_code pec;
    auto used = parser.put(net::buffer(head.data(), head.size()), pec);
    buf.consume(used);
    if (!pec && !parser.is_header_done()) pec = http::error::partial_message;
    co_return pec;
  }

  template <class Stream>
  net::awaitable<bool> handle(Stream &s, beast::flat_buffer &buf,
                              http::request_parser<http::buffer_body> &parser,
                              const tunnel_target *tunnel, outcome &o) {
    auto &req = parser.get();
    const filters::policy_ptr held = policy_; // see handle_connect: a tunnel may move policy_ on
    const auto &pol = *held;
    o.method = std::string(req.method_string());
    unsigned version = req.version();
    bool has_body = parser.chunked() || (parser.content_length() && *parser.content_length() > 0);
    bool keep_alive = req.keep_alive() && !has_body;

    if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
      if (!tunnel && req.method() == http::verb::connect) {
        o.target = std::string(req.target());
        connect_ = std::move(o); // handled by run() once this loop has ended
        co_return false;
      }
    }

    if (tunnel && req.method() == http::verb::connect) {
      o.host = tunnel->host;
      o.port = tunnel->port;
      o.target = std::string(req.target());
      co_await deny(s, o, "connect_in_tunnel", {}, false, version);
      co_return false;
    }

    // Work out the origin the request is for, refusing every ambiguity.
    std::string target(req.target());
    std::string raw_host;
    unsigned port = 0;
    if (!target.empty() && target.front() != '/' && target != "*") {
      auto url = boost::urls::parse_absolute_uri(target);
      if (!url || url->has_fragment() || !url->has_authority()) {
        o.target = target;
        co_await deny(s, o, "ambiguous_target", {}, false, version);
        co_return false;
      }
      if (url->has_userinfo()) {
        o.target = target;
        co_await deny(s, o, "userinfo_in_target", {}, keep_alive, version);
        co_return keep_alive;
      }
      std::string scheme(url->scheme());
      if (scheme != "http" && scheme != "https") {
        o.target = target;
        co_await deny(s, o, "unsupported_scheme", {}, keep_alive, version);
        co_return keep_alive;
      }
      o.scheme = scheme;
      raw_host = std::string(url->encoded_host());
      if (url->host_type() == boost::urls::host_type::ipv6 && raw_host.front() != '[') {
        raw_host = "[" + raw_host + "]"; // parse_host takes IPv6 literals in brackets
      }
      port = url->has_port() ? url->port_number() : (scheme == "https" ? 443 : 80);
      if (url->has_port() && port == 0) {
        co_await deny(s, o, "invalid_host", {}, false, version);
        co_return false;
      }
      std::string path(url->encoded_path());
      target = (path.empty() ? "/" : path) +
               (url->has_query() ? "?" + std::string(url->encoded_query()) : "");
      if (tunnel) {
        auto h = filters::parse_host(raw_host);
        if (!h.host || h.host->name != tunnel->host || port != tunnel->port || scheme != tunnel->scheme) {
          o.host = raw_host;
          o.target = target;
          co_await deny(s, o, "host_mismatch", {}, false, version);
          co_return false;
        }
      }
    } else if (tunnel) {
      raw_host = tunnel->host;
      if (raw_host.find(':') != std::string::npos) raw_host = "[" + raw_host + "]"; // IPv6, normalized
      port = tunnel->port;
    } else {
      o.target = target;
      o.reason = "not_a_proxy_request";
      std::string body = "sluice is a forward proxy: send absolute-form requests "
                         "(http://host/path) or CONNECT host:port\n";
      co_await reply(s, o, 400, "http_request_error", std::move(body), false, version);
      o.decision = "deny";
      finish(o);
      co_return false;
    }
    o.target = target;
    o.port = port;
    auto parsed = filters::parse_host(raw_host);
    o.host = parsed.host ? parsed.host->name : raw_host;
    if (!parsed.host) {
      co_await deny(s, o, parsed.reason, {}, false, version);
      co_return false;
    }

    // Host must name the same origin as the target (or the CONNECT authority).
    auto host_field = req[http::field::host];
    if (host_field.empty() && version >= 11) {
      co_await deny(s, o, "bad_host_header", {}, false, version);
      co_return false;
    }
    if (!host_field.empty()) {
      std::string_view hh;
      unsigned hp = 0;
      bool ok = filters::split_authority(host_field, hh, hp);
      auto hparsed = ok ? filters::parse_host(hh) : filters::host_parse_result{};
      if (hp == 0) hp = o.scheme == "https" ? 443 : 80;
      if (!hparsed.host || hparsed.host->name != o.host || hp != port) {
        co_await deny(s, o, "host_mismatch", {}, false, version);
        co_return false;
      }
    }

    filters::request_view view{req.method_string(), target, {}};
    for (auto &f : req) view.fields.emplace_back(f.name_string(), f.value());
    if (auto why = filters::check_request(view, pol.mode()); !why.empty()) {
      co_await deny(s, o, why, {}, false, version);
      co_return false;
    }
    // Read-only Git over smart HTTP: in network-read a fetch's POST to git-upload-pack is a read
    // once its whole body (bounded) shows nothing but negotiation; a push is refused by name.
    std::string git_body;
    bool git_read = false;
    if (pol.mode() == filters::profile::network_read && req.method() == http::verb::post) {
      std::string_view path = std::string_view(target).substr(0, target.find('?'));
      if (filters::is_git_receive_pack(target)) {
        co_await deny(s, o, "git_push_refused", {}, false, version);
        co_return false;
      }
      git_read = filters::is_git_upload_pack("POST", path, req[http::field::content_type]);
    }
    auto d = pol.decide(git_read ? std::string_view("GET") : std::string_view(o.method), o.scheme, o.host,
                        port);
    if (!d.allowed) {
      co_await deny(s, o, d.reason, d.rule, keep_alive && !git_read, version);
      co_return keep_alive && !git_read;
    }
    o.rule = d.rule;
    if (git_read) {
      if (beast::iequals(req[http::field::expect], "100-continue")) {
        http::response<http::empty_body> go_on{http::status::continue_, 11};
        lowest(s).expires_after(cfg().timeouts.io);
        co_await http::async_write(s, go_on, use_tuple);
        req.erase(http::field::expect);
      }
      error_code bec = co_await read_whole_body(s, buf, parser, git_body, filters::max_git_request_bytes,
                                                o.start + cfg().timeouts.request);
      if (bec) {
        co_await deny(s, o, bec == http::error::body_limit ? "body_too_large" : "bad_request_body", o.rule,
                      false, version);
        co_return false;
      }
      auto encoding = req[http::field::content_encoding];
      bool gzip = beast::iequals(encoding, "gzip");
      std::string_view why = !encoding.empty() && !gzip ? std::string_view("git_request_refused")
                                                         : filters::check_git_upload_pack(git_body, gzip);
      if (!why.empty()) {
        co_await deny(s, o, why, o.rule, false, version);
        co_return false;
      }
    }
    if (!pol.credentials().empty()) {
      // Credentials: a placeholder bound for another host is refused; for the credential's own
      // hosts the gateway puts the secret in (the command never held it).
      filters::credential_result cr;
      {
        std::vector<std::pair<std::string_view, std::string_view>> fields;
        for (auto &f : req) fields.emplace_back(f.name_string(), f.value());
        cr = pol.credentials().apply(fields, req.target(), o.host, o.scheme, port);
      }
      if (!cr.reason.empty()) {
        co_await deny(s, o, cr.reason, "credential:" + cr.credential, keep_alive, version);
        co_return keep_alive;
      }
      for (auto &[name, value] : cr.set) req.set(name, value);
    }
    co_return co_await forward(s, buf, parser, o, parsed.host->ip, version,
                               git_read ? &git_body : nullptr);
  }

  // Reads a whole request body into `out`, at most `cap` bytes (body_limit beyond), within the
  // request's deadline (a body trickling a byte per I/O timeout is cut all the same).
  template <class Stream>
  net::awaitable<error_code> read_whole_body(Stream &s, beast::flat_buffer &buf,
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

  // Dials the origin: pinned or resolved addresses, each judged, only passing ones dialed; then TLS
  // with SNI and certificate verification for https.
  net::awaitable<std::unique_ptr<upstream_connection>>
  connect_upstream(const std::string &host, const std::optional<net::ip::address> &ip,
                   unsigned port, bool tls, error_code &ec) {
    const auto &pol = *policy_;
    std::vector<net::ip::address> addresses;
    if (ip) {
      addresses.push_back(*ip);
    } else if (auto pin = pol.cfg().pins.find(host); pin != pol.cfg().pins.end()) {
      addresses = pin->second;
    } else {
      auto t0 = clock::now();
      addresses = co_await worker_.dns.resolve(host, ec);
      state_.metrics.dns_lookup_duration.Observe(
          std::chrono::duration<double>(clock::now() - t0).count());
      if (ec) co_return nullptr;
    }
    std::vector<net::ip::address> allowed;
    for (auto &a : addresses) {
      if (pol.decide_address(a, state_.own_addresses).allowed) allowed.push_back(a);
    }
    if (allowed.empty()) {
      ec = gateway_error::destination_address_denied;
      co_return nullptr;
    }
    auto t0 = clock::now();
    auto conn = std::make_unique<upstream_connection>(worker_.ioc.get_executor());
    ec = gateway_error::connection_refused;
    for (auto &a : allowed) {
      // The endpoint dialed is built from the address that was just checked, never re-resolved.
      conn->tcp.expires_after(cfg().timeouts.connect);
      auto [cec] = co_await conn->tcp.async_connect(tcp::endpoint(a, port), use_tuple);
      if (!cec) {
        ec = {};
        break;
      }
      if (cec == beast::error::timeout) {
        ec = gateway_error::connection_timeout;
      } else if (cec == net::error::network_unreachable || cec == net::error::host_unreachable) {
        ec = gateway_error::destination_unreachable;
      } else {
        ec = gateway_error::connection_refused;
      }
      conn->tcp.close();
    }
    if (ec) co_return nullptr;
    conn->tcp.socket().set_option(tcp::no_delay(true));
    if (tls) {
      std::call_once(state_.system_trust_once, state_.load_system_trust);
      conn->tls = std::make_unique<tls_stream>(conn->tcp.release_socket(),
                                               state_.upstream_tls.native_handle());
      SSL *ssl = conn->tls->native_handle();
      if (!ip) SSL_set_tlsext_host_name(ssl, host.c_str());
      // Hostname (or IP) check inside OpenSSL's chain verification.
      X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
      X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      if (ip) {
        X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
      } else {
        X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size());
      }
      conn->expires_after(cfg().timeouts.tls_handshake);
      auto [hec, hn] =
          co_await conn->tls->async_handshake(tls_stream::role::client, {}, use_tuple);
      state_.metrics.tls_handshake("upstream", !hec);
      if (hec) {
        ec = SSL_get_verify_result(ssl) != X509_V_OK ? gateway_error::tls_certificate_error
             : hec == beast::error::timeout          ? gateway_error::connection_timeout
                                                     : gateway_error::tls_protocol_error;
        co_return nullptr;
      }
    }
    state_.metrics.upstream_connect_duration.Observe(
        std::chrono::duration<double>(clock::now() - t0).count());
    co_return conn;
  }

  // Streams one message body from `in` to `out` through a fixed buffer, re-framing as the outgoing
  // header says (Beast's relay pattern). `in_failed` tells which side broke.
  template <bool isRequest, class In, class Out>
  net::awaitable<error_code> relay(In &in, beast::flat_buffer &in_buf,
                                   http::parser<isRequest, http::buffer_body> &p, Out &out,
                                   http::message<isRequest, http::buffer_body> &msg,
                                   std::uint64_t &bytes, bool &in_failed,
                                   clock::time_point deadline, std::uint64_t max_bytes = 0) {
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
      if (msg.body().size == 0 && msg.body().more) continue;
      lowest(out).expires_after(cfg().timeouts.io);
      auto [wec, wn] = co_await http::async_write(out, sr, use_tuple);
      if (wec == http::error::need_buffer) wec = {};
      if (wec) co_return wec;
    } while (!p.is_done() || !sr.is_done());
    co_return error_code{};
  }

  template <class Stream>
  net::awaitable<bool> forward(Stream &s, beast::flat_buffer &buf,
                               http::request_parser<http::buffer_body> &parser, outcome &o,
                               const std::optional<net::ip::address> &ip, unsigned version,
                               const std::string *preread = nullptr) {
    auto &req = parser.get();
    bool tls = o.scheme == "https";
    std::string key = o.scheme + "://" + o.host + ":" + std::to_string(o.port);
    bool has_body = parser.chunked() || (parser.content_length() && *parser.content_length() > 0);

    http::request<http::buffer_body> out{req.method(), o.target, 11};
    if (req.method() == http::verb::unknown) out.method_string(req.method_string());
    copy_fields(req.base(), out.base());
    if (req[http::field::host].empty()) {
      // An HTTP/1.0 request may come without Host; it leaves as HTTP/1.1, which requires one.
      std::string authority = o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host;
      if (o.port != (tls ? 443u : 80u)) authority += ":" + std::to_string(o.port);
      out.set(http::field::host, authority);
      req.set(http::field::host, authority);
    }
    if (parser.chunked()) {
      out.chunked(true);
    } else if (parser.content_length()) {
      out.content_length(*parser.content_length());
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
      } else {
        ec = co_await conn->visit([&](auto &up) {
          return relay<true>(s, buf, parser, up, out, o.bytes_in, in_failed,
                             o.start + cfg().timeouts.request);
        });
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
          finish(o);
        }
        co_return false;
      }
      if (!ec) {
        rp.emplace();
        rp->header_limit(static_cast<std::uint32_t>(cfg().limits.max_header_bytes));
        rp->body_limit(boost::none);
        if (req.method() == http::verb::head) rp->skip(true);
        conn->expires_after(cfg().timeouts.io);
        ec = co_await conn->visit([&](auto &up) -> net::awaitable<error_code> {
          auto [e, n] = co_await http::async_read_header(up, conn->buffer, *rp, use_tuple);
          // Interim 1xx responses (100 Continue, 103) are passed on; 101 never is, since
          // upgrades were refused before the request left.
          while (!e && rp->get().result_int() / 100 == 1 && rp->get().result_int() != 101) {
            if (version >= 11) {
              http::response<http::empty_body> interim{rp->get().result(), 11};
              lowest(s).expires_after(cfg().timeouts.io);
              co_await http::async_write(s, interim, use_tuple);
            }
            rp.emplace();
            rp->header_limit(static_cast<std::uint32_t>(cfg().limits.max_header_bytes));
            rp->body_limit(boost::none);
            if (req.method() == http::verb::head) rp->skip(true);
            conn->expires_after(cfg().timeouts.io);
            std::tie(e, n) = co_await http::async_read_header(up, conn->buffer, *rp, use_tuple);
          }
          if (!e && rp->get().result_int() == 101) e = http::error::bad_status;
          co_return e;
        });
      }
      if (!ec) break;
      if (reused && !has_body && attempt == 0 && o.bytes_in == 0 &&
          (ec == http::error::end_of_stream || ec == net::error::connection_reset ||
           ec == net::error::broken_pipe || ec == net::ssl::error::stream_truncated)) {
        continue;
      }
      error_code mapped = ec == beast::error::timeout      ? gateway_error::response_timeout
                          : ec == http::error::header_limit ? gateway_error::upstream_response_too_large
                          : (ec == http::error::end_of_stream || ec == net::error::connection_reset ||
                             ec == net::ssl::error::stream_truncated)
                              ? gateway_error::response_incomplete
                              : gateway_error::upstream_protocol_error;
      co_await fail(s, o, mapped, false, version);
      co_return false;
    }

    auto &up_res = rp->get();
    http::response<http::buffer_body> res{up_res.result(), version};
    res.reason(up_res.reason());
    copy_fields(up_res.base(), res.base());
    unsigned code = up_res.result_int();
    bool no_body = req.method() == http::verb::head || code == 204 || code == 304 || code / 100 == 1;
    bool client_keep = req.keep_alive();
    bool upstream_framed = no_body || rp->chunked() || rp->content_length().has_value();
    if (no_body) {
      if (auto cl = up_res[http::field::content_length]; !cl.empty() && code != 204) {
        res.set(http::field::content_length, cl); // HEAD and 304 describe the body they omit
      }
    } else if (rp->chunked()) {
      if (version >= 11) {
        res.chunked(true);
      } else {
        client_keep = false; // an HTTP/1.0 client cannot read chunks: delimit the body by close
      }
    } else if (rp->content_length()) {
      res.content_length(*rp->content_length());
    } else {
      client_keep = false; // the origin delimits the body by closing; so must we
    }
    if (state_.draining.load()) client_keep = false;
    res.keep_alive(client_keep);
    o.status = code;
    o.decision = "allow";
    o.reason = "allowed";

    bool in_failed = false;
    error_code ec = co_await conn->visit([&](auto &up) {
      return relay<false>(up, conn->buffer, *rp, s, res, o.bytes_out, in_failed,
                          o.start + cfg().timeouts.request, cfg().limits.max_response_body_bytes);
    });
    if (ec) {
      o.decision = "error";
      o.reason = !in_failed                       ? "client_aborted"
                 : ec == http::error::body_limit ? "response_too_large"
                 : ec == beast::error::timeout   ? "response_timeout"
                                                 : "response_incomplete";
      finish(o);
      co_return false;
    }
    finish(o);
    if (upstream_framed && up_res.keep_alive() && rp->is_done()) {
      worker_.pool.put(std::move(conn));
    }
    co_return client_keep;
  }

  // Copies bytes one way until EOF or error, for `allowlist` tunnels.
  net::awaitable<void> pipe(beast::tcp_stream &from, beast::tcp_stream &to, std::uint64_t &bytes) {
    chunk data;
    for (;;) {
      from.expires_after(cfg().timeouts.tunnel_idle);
      auto [ec, n] = co_await from.async_read_some(net::buffer(data.get(), chunk_size), use_tuple);
      if (ec) {
        error_code ignored; // half-close on EOF; on any error tear both directions down
        if (ec == net::error::eof) {
          to.socket().shutdown(tcp::socket::shutdown_send, ignored);
        } else {
          from.socket().shutdown(tcp::socket::shutdown_both, ignored);
          to.socket().shutdown(tcp::socket::shutdown_both, ignored);
        }
        co_return;
      }
      bytes += n;
      to.expires_after(cfg().timeouts.io);
      auto [wec, wn] = co_await net::async_write(to, net::buffer(data.get(), n), use_tuple);
      if (wec) {
        error_code ignored;
        from.socket().shutdown(tcp::socket::shutdown_both, ignored);
        to.socket().shutdown(tcp::socket::shutdown_both, ignored);
        co_return;
      }
    }
  }

  // "200 Connection established", or the SOCKS5 success reply for a SOCKS CONNECT.
  net::awaitable<bool> send_established(beast::tcp_stream &s) {
    if (captured_) co_return true; // the client thinks it is connected to the origin already
    if (socks_pending_) {
      socks_pending_ = false;
      co_return co_await socks_reply(s, 0x00);
    }
    static constexpr std::string_view established = "HTTP/1.1 200 Connection established\r\n\r\n";
    s.expires_after(cfg().timeouts.io);
    auto [wec, wn] = co_await net::async_write(s, net::buffer(established), use_tuple);
    co_return !wec;
  }

  // VER REP RSV ATYP BND.ADDR BND.PORT, with an unspecified IPv4 bound address (RFC 1928).
  template <class Stream> net::awaitable<bool> socks_reply(Stream &s, unsigned char code) {
    const unsigned char r[10] = {0x05, code, 0x00, 0x01, 0, 0, 0, 0, 0, 0};
    lowest(s).expires_after(cfg().timeouts.io);
    auto [ec, n] = co_await net::async_write(s, net::buffer(r), use_tuple);
    co_return !ec;
  }

  // Reads until `buf` holds `n` bytes (SOCKS negotiation is small and bounded), under the deadline
  // the caller set for the whole step: a client dribbling bytes does not extend it.
  net::awaitable<bool> read_at_least(beast::tcp_stream &s, beast::flat_buffer &buf, std::size_t n) {
    while (buf.size() < n) {
      auto [ec, got] = co_await s.async_read_some(buf.prepare(512), use_tuple);
      if (ec) co_return false;
      buf.commit(got);
    }
    co_return true;
  }

  // SOCKS5 (RFC 1928) on the proxy port: no authentication, CONNECT only. The requested host and
  // port become a CONNECT target and take exactly the CONNECT path: same policy, same termination,
  // same logs. Returns true when a CONNECT was read (connect_ is set for run()).
  net::awaitable<bool> read_socks5(beast::tcp_stream &s, beast::flat_buffer &buf) {
    outcome o;
    o.method = "CONNECT";
    o.scheme = "https";
    auto bytes = [&] { return static_cast<const unsigned char *>(buf.data().data()); };
    auto refuse = [&](std::string_view reason) {
      o.method = "-";
      o.decision = "error";
      o.reason = reason;
      finish(o);
    };
    s.expires_after(cfg().timeouts.header_read); // the greeting, all of it
    if (!co_await read_at_least(s, buf, 2)) co_return false;
    std::size_t nmethods = bytes()[1];
    if (!co_await read_at_least(s, buf, 2 + nmethods)) co_return false;
    bool no_auth = false;
    for (std::size_t i = 0; i < nmethods; ++i) no_auth = no_auth || bytes()[2 + i] == 0x00;
    buf.consume(2 + nmethods);
    if (!no_auth) {
      static const unsigned char none[] = {0x05, 0xff};
      lowest(s).expires_after(cfg().timeouts.io);
      co_await net::async_write(s, net::buffer(none), use_tuple);
      refuse("socks_refused");
      co_return false;
    }
    static const unsigned char ok[] = {0x05, 0x00};
    s.expires_after(cfg().timeouts.io);
    if (auto [wec, wn] = co_await net::async_write(s, net::buffer(ok), use_tuple); wec) co_return false;
    s.expires_after(cfg().timeouts.header_read); // the request, all of it
    if (!co_await read_at_least(s, buf, 5)) co_return false;
    unsigned char ver = bytes()[0], cmd = bytes()[1], atyp = bytes()[3];
    std::size_t addr_len = atyp == 0x01 ? 4 : atyp == 0x04 ? 16 : atyp == 0x03 ? 1u + bytes()[4] : 0;
    if (ver != 0x05 || addr_len == 0) {
      co_await socks_reply(s, 0x08); // address type not supported
      refuse("socks_refused");
      co_return false;
    }
    if (!co_await read_at_least(s, buf, 4 + addr_len + 2)) co_return false;
    const unsigned char *a = bytes() + 4;
    std::string host;
    if (atyp == 0x01) {
      host = net::ip::address_v4({a[0], a[1], a[2], a[3]}).to_string();
    } else if (atyp == 0x04) {
      net::ip::address_v6::bytes_type b;
      std::copy(a, a + 16, b.begin());
      host = "[" + net::ip::address_v6(b).to_string() + "]";
    } else {
      host.assign(reinterpret_cast<const char *>(a + 1), a[0]);
    }
    unsigned port = (unsigned(a[addr_len]) << 8) | a[addr_len + 1];
    buf.consume(4 + addr_len + 2);
    if (cmd != 0x01) { // BIND and UDP ASSOCIATE: not a proxy for those
      co_await socks_reply(s, 0x07);
      o.host = host;
      o.port = port;
      refuse("socks_refused");
      co_return false;
    }
    o.target = host + ":" + std::to_string(port);
    socks_pending_ = true;
    connect_ = std::move(o);
    co_return true;
  }

  // CONNECT (HTTP or SOCKS5): judged on host and port before anything else happens; then passed
  // through (allowlist) or terminated with a leaf for the CONNECT host (network-read, publish).
  net::awaitable<void> handle_connect(beast::tcp_stream &s, beast::flat_buffer &buf, outcome &o) {
    // Held for the tunnel's lifetime: requests inside it move policy_ on to newer policies.
    const filters::policy_ptr held = policy_;
    const auto &pol = *held;
    o.scheme = "https";
    std::string_view raw_host;
    unsigned port = 0;
    const std::string target = std::move(o.target); // raw_host points into it
    if (!filters::split_authority(target, raw_host, port) || port == 0) {
      o.host = target;
      co_await deny(s, o, "invalid_host", {}, false);
      co_return;
    }
    o.port = port;
    auto parsed = filters::parse_host(raw_host);
    o.host = parsed.host ? parsed.host->name : std::string(raw_host);
    o.target = "";
    if (!parsed.host) {
      co_await deny(s, o, parsed.reason, {}, false);
      co_return;
    }
    auto d = pol.decide_connect(raw_host, port);
    if (!d.allowed) {
      co_await deny(s, o, d.reason, d.rule, false);
      co_return;
    }
    o.rule = d.rule;

    if (!filters::terminates_tls(pol.mode())) {
      error_code ec;
      auto conn = co_await connect_upstream(o.host, parsed.host->ip, port, false, ec);
      if (ec) {
        co_await fail(s, o, ec, false);
        co_return;
      }
      if (!co_await send_established(s)) co_return;
      if (buf.size()) { // bytes the client sent before our 200
        conn->tcp.expires_after(cfg().timeouts.io);
        auto [e2, n2] = co_await net::async_write(conn->tcp, buf.data(), use_tuple);
        o.bytes_in += n2;
        buf.consume(buf.size());
      }
      o.decision = "allow";
      o.reason = "allowed";
      o.status = 200;
      co_await (pipe(s, conn->tcp, o.bytes_in) && pipe(conn->tcp, s, o.bytes_out));
      finish(o);
      co_return;
    }

    if (!co_await send_established(s)) co_return;
    if (buf.size() == 0) {
      s.expires_after(cfg().timeouts.header_read);
      auto [rec, rn] = co_await s.async_read_some(buf.prepare(16 * 1024), use_tuple);
      if (rec) co_return;
      buf.commit(rn);
    }
    auto first = static_cast<const unsigned char *>(buf.data().data())[0];
    if (first != 0x16) { // not a TLS handshake record: the gateway cannot judge what it cannot read
      co_await deny(s, o, "tls_required", d.rule, false);
      co_return;
    }

    auto leaf = state_.leaves.get(o.host, parsed.host->ip.has_value());
    (leaf.cached ? state_.metrics.cert_cache_hits : state_.metrics.certs_minted).Increment();
    tls_stream tls(s.release_socket(), state_.server_tls.native_handle());
    SSL *ssl = tls.native_handle();
    SSL_use_certificate(ssl, leaf.cert.get());
    sni_check check{o.host, parsed.host->ip.has_value(), false};
    SSL_set_app_data(ssl, &check);
    lowest(tls).expires_after(cfg().timeouts.tls_handshake);
    auto [hec, used] =
        co_await tls.async_handshake(tls_stream::role::server, buf.data(), use_tuple);
    SSL_set_app_data(ssl, nullptr);
    silent_ = false; // from here on, the client reads HTTP answers inside TLS
    state_.metrics.tls_handshake("client", !hec);
    if (hec) {
      if (check.mismatch) {
        o.decision = "deny";
        o.reason = "sni_mismatch";
      } else {
        // Logged although no request was made: a client that rejects sluice's certificate (a
        // wrong or stale CA bundle) is otherwise invisible. An alert from the client means its
        // own checks refused the handshake; anything else is a close, a timeout or garbage.
        bool alert = hec.category() == net::error::get_ssl_category() &&
                     ERR_GET_REASON(static_cast<unsigned long>(hec.value())) >= SSL_AD_REASON_OFFSET;
        o.decision = "error";
        o.reason = alert ? "client_tls_rejected" : "client_tls_error";
      }
      finish(o);
      co_return;
    }
    buf.consume(used);
    buf.shrink_to_fit(); // the ClientHello's buffer is not needed for the tunnel's lifetime
    tunnel_target t{o.host, port};
    beast::flat_buffer inner(cfg().limits.max_header_bytes + chunk_size);
    co_await serve_requests(tls, inner, &t);
    lowest(tls).expires_after(std::chrono::seconds(2));
    co_await tls.async_shutdown(use_tuple); // best effort: close_notify, then the socket closes
  }

public:
  // A captured connection (exec's transparent capture): the address the client dialled names the
  // host (the DNS responder's table, else the literal) and the port; its first byte says whether it
  // speaks TLS (judged as a CONNECT to that authority, without the "200"), HTTP (origin-form
  // requests that must name that host) or something else (refused, logged).
  net::awaitable<void> run_captured() {
    captured_ = true;
    error_code ec;
    auto local = client_.socket().local_endpoint(ec);
    if (ec) co_return;
    auto addr = local.address();
    if (addr.is_v6() && addr.to_v6().is_v4_mapped()) {
      addr = net::ip::make_address_v4(net::ip::v4_mapped, addr.to_v6());
    }
    std::string host;
    if (state_.names) {
      if (auto name = state_.names->name_for(addr)) host = *name;
    }
    if (host.empty()) host = addr.to_string(); // never handed out: judged as the literal it is
    unsigned port = local.port();
    std::string authority = (addr.is_v6() && host.find(':') != std::string::npos ? "[" + host + "]" : host) +
                            ":" + std::to_string(port);
    outcome o;
    o.host = host;
    o.port = port;
    o.scheme = "https";
    // HTTP and TLS clients speak first; waiting for them is bounded like a request head.
    client_.expires_after(cfg().timeouts.header_read);
    auto [rec, rn] = co_await client_.async_read_some(buffer_.prepare(16 * 1024), use_tuple);
    if (rec && rec != beast::error::timeout) co_return; // closed without a word
    buffer_.commit(rn);
    unsigned char first = rn ? static_cast<const unsigned char *>(buffer_.data().data())[0] : 0;
    // HTTP: a method token and a space. (A token alone is not enough: an SSH client's banner
    // "SSH-2.0-..." starts with letters too.) Methods are short; more bytes are read if needed.
    bool http = false;
    while (!rec && first != 0x16) {
      std::string_view have(static_cast<const char *>(buffer_.data().data()), buffer_.size());
      auto end = std::find_if_not(have.begin(), have.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || (c != '\0' && std::strchr("!#$%&'*+-.^_`|~", c));
      });
      if (end != have.end() || have.size() >= 32) {
        http = end != have.begin() && end != have.end() && *end == ' ' && end - have.begin() <= 31;
        break;
      }
      auto [mec, mn] = co_await client_.async_read_some(buffer_.prepare(16 * 1024), use_tuple);
      if (mec && mec != beast::error::timeout) co_return;
      rec = mec;
      buffer_.commit(mn);
    }
    if (first == 0x16) {
      o.method = "CONNECT";
      o.target = authority;
      silent_ = true;
      ++state_.in_flight;
      co_await handle_connect(client_, buffer_, o);
      --state_.in_flight;
    } else if (http) {
      tunnel_target t{host, port, "http"};
      co_await serve_requests(client_, buffer_, &t);
    } else {
      // Not HTTP, not TLS (SSH, SMTP, a database, or a client waiting for a server greeting):
      // sluice cannot judge it.
      o.method = "-";
      o.scheme = "tcp";
      o.decision = "error";
      o.reason = "non_http_protocol";
      finish(o);
    }
    error_code ignored;
    client_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  // Set on the SSL object during a terminating handshake, read by the SNI callback.
  struct sni_check {
    std::string host;
    bool is_ip;
    bool mismatch;
  };

private:
  beast::tcp_stream client_;
  worker &worker_;
  gateway_state &state_;
  filters::policy_ptr policy_;
  beast::flat_buffer buffer_;
  std::optional<outcome> connect_; // a CONNECT read by serve_requests, for run() to handle
  bool socks_pending_ = false;     // connect_ came by SOCKS5: its answer is a SOCKS reply
  bool captured_ = false;          // a captured connection (run_captured)
  bool silent_ = false;            // captured TLS before the handshake: denials close, write nothing
};

} // namespace

// The SNI a client sends inside a terminated CONNECT must name the CONNECT host; anything else is a
// client trying to reach one host through a tunnel opened for another.
int check_sni(SSL *ssl, int *alert, void *) {
  auto *check = static_cast<session::sni_check *>(SSL_get_app_data(ssl));
  if (!check) return SSL_TLSEXT_ERR_NOACK;
  const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  if (!name) return SSL_TLSEXT_ERR_NOACK; // no SNI: the leaf for the CONNECT host is used
  auto parsed = filters::parse_host(name);
  if (!parsed.host || parsed.host->name != check->host) {
    check->mismatch = true;
    *alert = SSL_AD_UNRECOGNIZED_NAME;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  return SSL_TLSEXT_ERR_OK;
}

namespace {
net::awaitable<void> run_counted(tcp::socket socket, worker &w, gateway_state &state, bool captured) {
  ++state.connections;
  state.metrics.connections_active.Increment();
  {
    error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    session s(std::move(socket), w, state);
    if (captured) {
      co_await s.run_captured();
    } else {
      co_await s.run();
    }
  }
  state.metrics.connections_active.Decrement();
  --state.connections;
}
} // namespace

net::awaitable<void> run_session(tcp::socket socket, worker &w, gateway_state &state) {
  return run_counted(std::move(socket), w, state, false);
}

net::awaitable<void> run_captured_session(tcp::socket socket, worker &w, gateway_state &state) {
  return run_counted(std::move(socket), w, state, true);
}

} // namespace sluice::gateway
