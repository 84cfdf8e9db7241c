// Short answers the gateway writes itself: denials (403 with Proxy-Status and a text that says how
// to allow what was refused), framing errors (400), upstream failures (502/504), SOCKS reply codes.
#include "filters/host_name.hpp"
#include "filters/request_hygiene.hpp"
#include "gateway/error.hpp"
#include "gateway/session_impl.hpp"

#include <fstream>

namespace sluice::gateway::detail {

std::string proxy_status(std::string_view ps_error, std::string_view reason, std::string_view rule) {
  // RFC 9209, with the matched rule as one more parameter (an sf-string: quotes and backslashes
  // escaped, anything outside printable ASCII left out).
  std::string ps = "sluice; error=" + std::string(ps_error) + "; details=\"" + std::string(reason) + "\"";
  if (!rule.empty()) {
    ps += "; rule=\"";
    for (char c : rule) {
      if (c == '"' || c == '\\') ps += '\\';
      if (c >= 0x20 && c < 0x7f) ps += c;
    }
    ps += '"';
  }
  return ps;
}

// Writes a complete short reply: denials (403 + Proxy-Status), framing errors (400), upstream
// failures (502/504).
template <class Stream>
net::awaitable<void> session::reply(Stream &s, outcome &o, unsigned status, std::string_view ps_error,
                           std::string body, bool keep_alive, unsigned version) {
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
  res.set("Proxy-Status", proxy_status(ps_error, o.reason, status == 403 || o.rule.starts_with("budget:") ? std::string_view(o.rule) : ""));
  if (status == 407) {
    res.insert(http::field::proxy_authenticate, "Basic realm=\"sluice\"");
    res.insert(http::field::proxy_authenticate, "Bearer realm=\"sluice\"");
  } else if (status == 429) {
    res.set(http::field::retry_after, std::to_string(std::max(1u, o.retry_after)));
  } else if (o.reason == "budget_exhausted" && o.retry_after) { // per = "day": refilled at 00:00 UTC
    res.set(http::field::retry_after, std::to_string(o.retry_after));
  }
  res.body() = std::move(body);
  res.keep_alive(keep_alive);
  res.prepare_payload();
  o.status = status;
  if (!keep_alive) linger_ = true;
  lowest(s).expires_after(cfg().timeouts.io);
  co_await http::async_write(s, res, use_tuple);
}

// For a name DNS does not know: whether this machine's /etc/hosts does, and what to do about it
// (sluice resolves with DNS only: a hosts entry could point any name at loopback).
std::string session::hosts_file_note(const std::string &host) {
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

std::string session::denial_text(const outcome &o, std::string_view rule) {
  std::string where = o.scheme + "://" + o.host + (o.port ? ":" + std::to_string(o.port) : "");
  std::string msg = "sluice: denied " + o.method + " " + where + o.target + ": " +
                    std::string(o.reason);
  if (!rule.empty()) msg += " (rule " + std::string(rule) + ")";
  msg += "\n";
  if (!o.limit_message.empty()) { // [[limits.budget]]: which budget, its limit, when to retry
    msg += o.limit_message;
  } else if (o.reason == "host_not_allowlisted") {
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
  } else if (o.reason == "route_denied") {
    msg += "A deny route matches this method and path (paths compare without case, and a path "
           "with '//', ';' or dot segments is denied wherever a deny route covers the host).\n";
  } else if (o.reason == "route_not_allowed") {
    msg += "The policy allows this host only for the methods and paths its routes list; add a "
           "route (or the host as a plain entry) in the trusted policy.\n";
  } else if (o.reason == "ambiguous_path") {
    msg += "Routes compare paths one way only: this path has '//', ';', an escaped '/' or a dot "
           "segment, which servers read differently.\n";
  } else if (o.reason == "route_needs_termination") {
    msg += "The allowlist profile passes tunnels without opening them, so a route's methods and "
           "paths cannot be held there; use network-read or publish.\n";
  } else if (o.reason == "git_push_refused") {
    msg += "Pushing (git-receive-pack) writes to the remote: it needs --sandbox-profile publish "
           "--confirm-external-side-effects. Fetching and cloning work in network-read.\n";
  } else if (o.reason == "git_request_refused") {
    msg += "Only fetch negotiation (want, have, shallow, deepen, filter, done; protocol v2 ls-refs "
           "and fetch) may be sent to git-upload-pack in network-read.\n";
  } else if (o.reason == "websocket_refused") {
    msg += "The " + std::string(filters::to_string(cfg().mode)) +
           " profile opens a WebSocket only through a trusted route that says so: { host = \"" + o.host +
           "\", paths = [\"...\"], websocket = true } in the policy; publish allows it wherever the GET "
           "is allowed.\n";
  } else if (o.reason == "upgrade_refused") {
    msg += "sluice carries WebSocket upgrades (an HTTP/1.1 GET with Connection: Upgrade, Upgrade: "
           "websocket, Sec-WebSocket-Key and Sec-WebSocket-Version: 13) and no other upgrade.\n";
  } else if (o.reason == "h2c_refused") {
    msg += "HTTP/2 in clear text (h2c, by upgrade or prior knowledge) is not carried: the gateway "
           "cannot hold it to the rules it holds HTTP/1.1 to. Send HTTP/1.1.\n";
  } else if (o.reason == "connection_strips_field") {
    msg += "The Connection header names a field (Host, Content-Length, Transfer-Encoding, "
           "Authorization, Proxy-Authorization or a credential's header) that would be stripped "
           "after it was checked; list only hop-by-hop options there (close, keep-alive, TE).\n";
  } else if (o.reason == "underscore_framing_field") {
    msg += "A field spelled like Content-Length or Transfer-Encoding with '_' for '-' is read as "
           "the real one by some servers; send the standard name.\n";
  } else if (o.reason == "decider_denied") {
    msg += "The policy decider ([decider]) refused it" +
           (o.decider_message.empty() ? std::string(".\n") : ": " + o.decider_message + "\n");
  } else if (o.reason == "decider_timeout") {
    msg += "The policy decider ([decider]) did not answer within its timeout; sluice refuses what it "
           "cannot get an answer for. Try again, or ask the operator to look at the decider.\n";
  } else if (o.reason == "decider_unavailable") {
    msg += "The policy decider ([decider]) is not available (not running, overloaded, or its answer was "
           "unusable); sluice refuses what it cannot get an answer for. The operator sees why in sluice's "
           "messages.\n";
  } else if (o.reason == "credential_host_mismatch") {
    msg += "The request carries the placeholder of a credential that belongs to other hosts "
           "([credentials] hosts in the policy); sluice does not send it here.\n";
  }
  return msg;
}

template <class Stream>
net::awaitable<void> session::deny(Stream &s, outcome &o, std::string_view reason, std::string rule,
                          bool keep_alive, unsigned version) {
  o.decision = "deny";
  o.reason = reason;
  o.rule = std::move(rule);
  bool framing = filters::is_framing_error(reason);
  // A refused WebSocket upgrade is 426: clients that try a WebSocket first (Codex's model
  // transport) fall back to plain HTTP at once on it, where a 403 makes them retry (docs/policy.md).
  unsigned status = framing ? 400 : reason == "websocket_refused" ? 426 : reason == "rate_limited" ? 429 : 403;
  if (reason == "limits_unavailable") status = 503; // [limits.shared] unreachable, fail_open = false
  if (reason == "decider_denied" && o.decider_status) status = o.decider_status; // the decider's choice
  std::string_view ps = framing ? "http_request_error" : "http_request_denied";
  std::string body = denial_text(o, o.rule);
  co_await reply(s, o, status, ps, std::move(body), keep_alive && (status == 403 || status == 429), version);
}

template <class Stream>
net::awaitable<void> session::refuse_client(Stream &s, outcome &o, std::string_view reason,
                                            bool keep_alive, unsigned version) {
  o.decision = "deny";
  o.reason = reason;
  unsigned status = 407;
  std::string body;
  if (reason == "rate_limited") {
    status = 429;
    body = "sluice: client " + who() + " is over its role's requests_per_second (" +
           std::to_string(policy_->requests_per_second()) + "); retry after a second, or raise "
           "requests_per_second in [roles." + cfg().role + "]\n";
  } else if (reason == "client_revoked") {
    status = 403;
    body = "sluice: client " + who() + " is no longer in the policy with the token this connection "
           "identified with ([clients] changed); connect again with the current token\n";
  } else if (reason == "client_certificate_invalid") {
    body = "sluice: the client certificate was refused (" + id_->peer_certificate_error +
           "): it must chain to a CA in [tls] client_ca, be valid now and be meant for TLS clients; "
           "renew it, or connect without one and send a token\n";
  } else if (id_ && id_->peer_names) {
    body = "sluice: the client certificate names no client of this policy, or more than one (its "
           "subjectAltName:";
    for (const auto &u : id_->peer_names->uris) body += " URI:" + u;
    for (const auto &d : id_->peer_names->dns) body += " DNS:" + d;
    body += "); a client is [clients.NAME] with certificate = \"URI\" or \"DNS name\", exactly one of "
            "those\n";
  } else {
    body = std::string("sluice: ") +
           (reason == "proxy_auth_invalid" ? "these proxy credentials match no client"
                                           : "this proxy serves only the clients its policy names") +
           ". Send Proxy-Authorization: Basic NAME:TOKEN (a proxy URL such as "
           "http://NAME:TOKEN@HOST:PORT) or Bearer TOKEN, with a token from [clients.NAME]\n";
  }
  co_await reply(s, o, status, status == 429 ? "http_request_error" : "http_request_denied",
                 std::move(body), keep_alive, version);
}

gateway_error session::failed(outcome &o, error_code ec, std::string &body) {
  gateway_error ge = ec.category() == gateway_category() ? static_cast<gateway_error>(ec.value())
                                                         : gateway_error::response_incomplete;
  o.decision = ge == gateway_error::destination_address_denied ? "deny" : "error";
  o.reason = reason_of(ge);
  body = ge == gateway_error::destination_address_denied
             ? denial_text(o, {})
             : "sluice: " + std::string(reason_of(ge)) + " for " + o.scheme + "://" + o.host + ":" +
                   std::to_string(o.port) + "\n";
  if (ge == gateway_error::dns_error) body += hosts_file_note(o.host);
  return ge;
}

template <class Stream>
net::awaitable<void> session::fail(Stream &s, outcome &o, error_code ec, bool keep_alive,
                          unsigned version) {
  // Built before co_await: GCC 12 double-destroys temporaries of a conditional inside co_await.
  std::string body;
  gateway_error ge = failed(o, ec, body);
  co_await reply(s, o, http_status_of(ge), proxy_status_of(ge), std::move(body), keep_alive,
                 version);
}

template net::awaitable<void> session::reply<beast::tcp_stream>(beast::tcp_stream &, outcome &, unsigned, std::string_view,
                                                   std::string, bool, unsigned);
template net::awaitable<void> session::reply<tls_stream>(tls_stream &, outcome &, unsigned, std::string_view,
                                                   std::string, bool, unsigned);
template net::awaitable<void> session::deny<beast::tcp_stream>(beast::tcp_stream &, outcome &, std::string_view, std::string,
                                                  bool, unsigned);
template net::awaitable<void> session::deny<tls_stream>(tls_stream &, outcome &, std::string_view, std::string,
                                                  bool, unsigned);
template net::awaitable<void> session::refuse_client<beast::tcp_stream>(beast::tcp_stream &, outcome &, std::string_view,
                                                                         bool, unsigned);
template net::awaitable<void> session::refuse_client<tls_stream>(tls_stream &, outcome &, std::string_view, bool,
                                                                 unsigned);
template net::awaitable<void> session::fail<beast::tcp_stream>(beast::tcp_stream &, outcome &, error_code, bool, unsigned);
template net::awaitable<void> session::fail<tls_stream>(tls_stream &, outcome &, error_code, bool, unsigned);

} // namespace sluice::gateway::detail
