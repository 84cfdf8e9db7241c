// The session's entry: a connection from the proxy port or a captured one, and what every request
// ends in (finish: access log, metrics, live page, exec summary). The stages are in session_*.cpp.
#include "gateway/session.hpp"
#include "filters/client_identity.hpp"
#include "gateway/session_impl.hpp"

#include <cstdio>
#include "filters/aws_sigv4.hpp"
#include "gateway/https_post.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/json.hpp>
#include <sys/socket.h>
#include <thread>

#include <openssl/crypto.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cctype>
#include <cstring>

namespace sluice::gateway {
namespace detail {

using namespace boost::asio::experimental::awaitable_operators;

// A CONNECT ends the request loop first, so its frames (about 4 KiB) are not held for the life of
// the tunnel; then the tunnel is handled on the same client stream. Called only with connect_ set
// (no coroutine frame for a connection without one).
template <class Stream> net::awaitable<void> session::connect_after_requests(Stream &s) {
  record o = std::move(*connect_);
  connect_.reset();
  ++state_.in_flight;
  co_await handle_connect(s, buffer_, o);
  if (park_) co_return; // still in flight, parked
  tunnel_tls_.reset(); // before its carrier, if it has one
  --state_.in_flight;
}

void session::park(std::unique_ptr<session> self) {
  self->client_.reset(); // its socket is the tunnel's now
  tls_stream &tls = *self->tunnel_tls_;
  auto ex = tls.get_executor();
  if (self->state_.draining.load()) { // idle while the gateway drains: closes now
    net::co_spawn(ex, resume(std::move(self), net::error::operation_aborted), log_session_error);
    return;
  }
  if (SSL_has_pending(tls.native_handle())) { // decrypted bytes already held: a request has begun
    net::co_spawn(ex, resume(std::move(self), {}), log_session_error);
    return;
  }
  // One wait on the socket, its deadline kept by the worker's parking lot (which cancels the wait
  // when it passes) rather than a timer of the tunnel's own.
  tcp::socket &socket = tls.socket();
  self->worker_.parking.add(self->ticket_, socket, self->resume_deadline_);
  socket.async_wait(tcp::socket::wait_read, [self = std::move(self), ex](error_code ec) mutable {
    self->worker_.parking.remove(self->ticket_);
    net::co_spawn(ex, resume(std::move(self), ec), log_session_error);
  });
}

net::awaitable<void> session::resume(std::unique_ptr<session> self, error_code ec) {
  self->park_ = false;
  tls_stream &tls = *self->tunnel_tls_;
  if (!ec) { // the next request is arriving
    co_await self->serve_requests(tls, self->tunnel_buf_, &self->tunnel_target_);
    if (self->park_) {
      park(std::move(self));
      co_return;
    }
  } // else closed, reset or idled out: as serve_requests would have ended
  tls.expires_after(std::chrono::seconds(2));
  co_await tls.async_shutdown(use_tuple); // best effort: close_notify, then the socket closes
  co_await self->close_client(tls.socket());
  gateway_state &state = self->state_;
  self.reset();
  --state.in_flight;
  connection_closed(state);
}

namespace {

// How long a closing connection's late bytes are read and dropped (close_client).
constexpr auto linger_time = std::chrono::seconds(2);

net::awaitable<void> drop_input(tcp::socket &s) {
  std::array<char, 16384> scratch;
  for (;;) {
    auto [ec, n] = co_await s.async_read_some(net::buffer(scratch), use_tuple);
    if (ec) co_return; // the client closed (eof), reset, or the wait was cancelled
  }
}

net::awaitable<void> linger_expired(tcp::socket &s) {
  net::steady_timer timer(s.get_executor(), linger_time);
  co_await timer.async_wait(use_tuple);
}

} // namespace

// The last step of a client connection. When sluice is the one closing after an answer (a request
// refused before its body was read, a response with Connection: close), the client may still be
// writing its body: closing at once with its bytes unread makes the kernel answer with a reset, and
// a client that is still writing then reports "connection reset" instead of reading the answer
// already sent to it (curl: "Send failure"). So sluice half-closes and reads and drops what still
// comes, until the client closes or for at most linger_time (RFC 9112, section 9.6; nginx's
// lingering close), with one 16 KiB buffer for that time only. Otherwise, a half-close.
net::awaitable<void> session::close_client(tcp::socket &s) {
  error_code ignored; // the client may already be gone
  s.shutdown(tcp::socket::shutdown_send, ignored);
  if (!linger_ || ignored) co_return;
  co_await (drop_input(s) || linger_expired(s));
}

void connection_opened(gateway_state &state) {
  ++state.connections;
  state.metrics.connections_active.Increment();
}

void connection_closed(gateway_state &state) {
  state.metrics.connections_active.Decrement();
  --state.connections;
}

net::awaitable<void> session::run() {
  if (tls_listener_) {
    co_await run_tls();
    co_return;
  }
  co_await serve_requests(*client_, buffer_, nullptr);
  if (connect_) co_await connect_after_requests(*client_);
  if (park_) co_return;
  co_await close_client(client_->socket());
}

net::awaitable<void> session::run_tls() {
  tls_stream tls(client_->release_socket(), state_.proxy_tls->native_handle());
  SSL *ssl = tls.native_handle();
  int verify_error = X509_V_OK; // the first error verify_client_certificate saw
  SSL_set_app_data(ssl, &verify_error);
  tls.expires_after(cfg().timeouts.tls_handshake);
  auto [hec, used] = co_await tls.async_handshake(tls_stream::role::server, {}, use_tuple);
  SSL_set_app_data(ssl, nullptr);
  state_.metrics.tls_handshake("client", !hec);
  if (hec) {
    // Logged: a client that cannot speak TLS to the HTTPS proxy listener (a plain-HTTP client on
    // the wrong port, a client that does not trust the listener's certificate) is otherwise
    // invisible.
    bool alert = hec.category() == net::error::get_ssl_category() &&
                 ERR_GET_REASON(static_cast<unsigned long>(hec.value())) >= SSL_AD_REASON_OFFSET;
    record o(*this);
    o.method = "-";
    o.scheme = "https";
    o.decision = "error";
    o.reason = alert ? "client_tls_rejected" : "client_tls_error";
    co_return;
  }
  read_peer_certificate(ssl, verify_error);
  co_await serve_requests(tls, buffer_, nullptr);
  if (connect_) co_await connect_after_requests(tls);
  tls.expires_after(std::chrono::seconds(2));
  co_await tls.async_shutdown(use_tuple); // best effort: close_notify, then the socket closes
  co_await close_client(tls.socket());
}

void session::read_peer_certificate(SSL *ssl, int verify_error) {
  X509 *cert = SSL_get0_peer_certificate(ssl);
  if (!cert) return; // none shown: the client may still send a token, inside TLS
  if (verify_error == X509_V_OK) verify_error = static_cast<int>(SSL_get_verify_result(ssl));
  if (verify_error != X509_V_OK) {
    id().peer_certificate_error = X509_verify_cert_error_string(verify_error);
    return;
  }
  filters::certificate_names names;
  auto *sans = static_cast<GENERAL_NAMES *>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; sans && i < sk_GENERAL_NAME_num(sans); ++i) {
    const GENERAL_NAME *g = sk_GENERAL_NAME_value(sans, i);
    if (g->type != GEN_URI && g->type != GEN_DNS) continue;
    const ASN1_IA5STRING *text = g->d.ia5;
    std::string value(reinterpret_cast<const char *>(ASN1_STRING_get0_data(text)),
                      static_cast<std::size_t>(ASN1_STRING_length(text)));
    if (value.empty() || value.find('\0') != std::string::npos || value.size() > 2048) continue;
    if (g->type == GEN_URI) {
      names.uris.push_back(std::move(value));
    } else {
      for (auto &c : value) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      names.dns.push_back(std::move(value));
    }
    if (names.uris.size() + names.dns.size() >= 64) break; // a bound on what one client brings
  }
  GENERAL_NAMES_free(sans);
  id().peer_names = std::move(names);
}

namespace {

// Returns when the client hung up (end of stream or an error); bytes it sent meanwhile (a
// pipelined request, TLS data) are left for later and looked at again every 200 ms.
net::awaitable<void> client_gone(tcp::socket &socket) {
  net::steady_timer pause(socket.get_executor());
  for (;;) {
    auto [ec] = co_await socket.async_wait(tcp::socket::wait_read, use_tuple);
    if (ec) co_return;
    char c;
    ssize_t n = ::recv(socket.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) co_return;
    pause.expires_after(std::chrono::milliseconds(200));
    co_await pause.async_wait(use_tuple);
  }
}

net::awaitable<bool> decided_or_expired(net::steady_timer &timer) {
  auto [ec] = co_await timer.async_wait(use_tuple);
  co_return !ec; // true: the time ran out
}

} // namespace

net::awaitable<approval> session::ask(outcome &o, std::string_view kind, const filters::policy &pol, tcp::socket &client) {
  held_request r;
  r.client = who();
  r.method = o.method;
  r.scheme = o.scheme;
  r.host = o.host;
  r.port = o.port;
  r.path = metrics::redact_target(o.target, state_.log.redact_query());
  r.profile = filters::to_string(pol.mode());
  r.kind = kind;
  r.timeout = pol.cfg().approvals.timeout;
  if (auto *pattern = pol.askable_matcher().match(o.host, o.scheme, o.port)) r.rule = "[approvals] hosts " + *pattern;
  auto ex = co_await net::this_coro::executor;
  auto timer = std::make_shared<net::steady_timer>(ex);
  // A decision comes on another thread: it wakes this one by cancelling the timer there.
  auto e = state_.held->hold(r, [timer, ex] { net::post(ex, [timer] { timer->cancel(); }); });
  if (!e) {
    o.approval = "refused";
    state_.metrics.approval("refused");
    co_return approval::pending;
  }
  if (!pol.cfg().approvals.webhook.empty() && !state_.webhook_secret.empty()) {
    // The chat tool hears of it on a thread of its own (at most 10 s; max_pending at once at most).
    auto id = approvals::id_of(e);
    std::string body = boost::json::serialize(boost::json::object{
        {"id", id}, {"kind", r.kind}, {"client", r.client}, {"method", r.method}, {"scheme", r.scheme},
        {"host", r.host}, {"port", r.port}, {"path", r.path}, {"profile", r.profile},
        {"timeout_seconds", static_cast<double>(r.timeout.count()) / 1000.0},
        {"callback", "http://" + state_.approvals_admin + "/api/approvals/" + std::to_string(id)}});
    std::string signature = "sha256=" + filters::sigv4::hmac_sha256_hex(state_.webhook_secret, body);
    std::thread([cfg = pol.cfg(), body = std::move(body), signature = std::move(signature)] {
      try {
        auto answer = https_post(cfg.approvals.webhook, body, "application/json", {{"X-Sluice-Signature", signature}},
                                 cfg, "approvals webhook");
        if (answer.status / 100 != 2) {
          std::fprintf(stderr, "sluice: approvals webhook %s answered HTTP %u\n", cfg.approvals.webhook.c_str(), answer.status);
        }
      } catch (const std::exception &ex) {
        std::fprintf(stderr, "sluice: approvals webhook %s: %s\n", cfg.approvals.webhook.c_str(), ex.what());
      }
    }).detach();
  }
  std::fprintf(stderr, "sluice: %s %s:%u is waiting for a decision (request %llu): sluice approve %llu\n",
               r.method.c_str(), r.host.c_str(), r.port, static_cast<unsigned long long>(approvals::id_of(e)),
               static_cast<unsigned long long>(approvals::id_of(e)));
  timer->expires_after(r.timeout);
  auto waited = co_await (decided_or_expired(*timer) || client_gone(client));
  approval a;
  if (waited.index() == 1) {
    state_.held->forget(e);
    a = approval::gone;
  } else {
    a = state_.held->result(e, std::get<0>(waited));
  }
  o.approval = to_string(a);
  o.decided_by = state_.held->decided_by(e);
  state_.metrics.approval(o.approval);
  co_return a;
}

void session::record_outcome(outcome &o) noexcept try {
  if (o.charged) { // [[limits.budget]]: what the exchange moved in all, and its place freed
    o.charged->finish(o.bytes_in, o.bytes_out);
  }
  if (o.approval.empty() && !tunnel_approval_.empty()) {
    o.approval = tunnel_approval_;
    o.decided_by = tunnel_decided_by_;
  }
  if (!o.would_deny.empty() && o.decision == "allow") {
    o.decision = "would_deny";
    o.reason = o.would_deny;
  }
  auto elapsed = std::chrono::duration<double>(clock::now() - o.start).count();
  auto profile = filters::to_string(cfg().mode);
  state_.metrics.request(
      {profile, o.decision, o.reason, o.method, o.rule, o.bytes_in, o.bytes_out, elapsed, who(), o.protocol});
  // Never the value found by the scanner: a secret in the path takes the whole path out of the log
  // and the live page, one in the query the query (whatever [log] redact_query says).
  const bool secret_in_path = o.scan_location.starts_with("path"), secret_in_query = o.scan_location.starts_with("query");
  std::string path = metrics::redact_target(o.target, state_.log.redact_query() || secret_in_query || secret_in_path);
  if (secret_in_path) path.replace(0, path.find('?'), "/REDACTED");
  state_.log.write({profile, o.method, o.scheme, o.host, o.port, path, o.rule, o.reason,
                    o.decision, o.status, o.bytes_in, o.bytes_out, elapsed,
                    captured_ ? "capture" : "proxy", agent_, who(), cfg().role, o.protocol,
                    o.ws_messages_in, o.ws_messages_out, o.ws_close_code, o.grpc_status, o.ssh_user,
                    o.ssh_command, o.exit_status, o.approval, o.decided_by, source_.ip, source_.port,
                    o.scan_rule, o.scan_location, o.closed_by, o.db_protocol, o.db_user, o.db_name,
                    o.mcp_method, o.mcp_tool, o.mcp_refused});
  for (const auto &tool : o.mcp_tool_labels) state_.metrics.mcp_call(o.rule, tool, o.decision);
  if (!agent_.empty()) state_.metrics.agent_request(agent_, o.decision);
  if (!o.scan_kind.empty()) {
    state_.metrics.scan_finding(o.scan_kind, o.scan_rule, o.scan_action);
    if (o.reason == "canary_detected") {
      // Nobody sends a canary by accident: the command read a decoy credential and tried to send
      // it out. Said where the person running sluice looks, besides the log.
      std::fprintf(stderr,
                   "sluice: ALERT: a canary planted for this run (%s) was sent to %s:%u in %s; refused. "
                   "The command read a decoy credential and tried to send it out.\n",
                   o.scan_rule.c_str(), o.host.c_str(), o.port, o.scan_location.c_str());
    }
  }
  state_.stats.record({o.method, o.host, o.port, path, o.rule, o.decision, o.reason, o.status,
                       o.bytes_in, o.bytes_out, o.scan_kind, o.scan_rule, o.scan_location, o.scan_action});
  if (state_.keep_summary) {
    state_.summary.record(o.host, o.port, std::string(o.decision), std::string(o.reason), o.method);
  }
  if (o.status == 401 && !o.credential.empty() && state_.credential_refused) state_.credential_refused(o.credential);
} catch (...) {
  // Called from a record's destructor: a line that cannot be built (out of memory) is lost, the
  // connection is not.
}

std::string_view session::refresh_policy() {
  auto top = state_.policy.load();
  if (who().empty()) {
    policy_ = std::move(top);
    return {};
  }
  // An identified client keeps its access only while the file still names it with that token.
  const auto *c = top->client(id_->who);
  bool same = c && (id_->by_certificate ? c->certificate : c->token_sha256) == id_->who_hash;
  auto role = same ? top->for_client(id_->who) : nullptr;
  if (!role) {
    policy_ = std::move(top);
    return "client_revoked";
  }
  policy_ = std::move(role);
  return {};
}

std::string_view session::identify_request(std::string_view proxy_authorization) {
  auto top = state_.policy.load();
  if (!identify_ || !top->requires_identity()) {
    if (id_) id_->who.clear();
    policy_ = std::move(top);
    return {};
  }
  // On the HTTPS proxy listener a certificate, once shown, is the client's identity: a token in
  // the request cannot stand in for a certificate that failed, nor name another client.
  if (id_ && !id_->peer_certificate_error.empty()) {
    id_->who.clear();
    policy_ = std::move(top);
    return "client_certificate_invalid";
  }
  // A connection mostly carries one client's requests with the same header: identified once per
  // policy, the next such request costs a comparison (the result depends on nothing else).
  auto &i = id();
  bool by_certificate = i.peer_names.has_value();
  if (!i.who.empty() && top == i.identified_by && proxy_authorization.size() == i.identified_header.size() &&
      CRYPTO_memcmp(proxy_authorization.data(), i.identified_header.data(), i.identified_header.size()) == 0) {
    return {}; // refresh_policy() has already put the role's policy in place
  }
  i.identified_by.reset();
  auto m = by_certificate ? filters::identify_certificate(top->cfg(), *i.peer_names)
                          : filters::identify_header(top->cfg(), proxy_authorization);
  if (!m.client) {
    i.who.clear();
    policy_ = std::move(top);
    return m.reason;
  }
  take_client(*top, *m.client, by_certificate);
  i.identified_by = top;
  i.identified_header.assign(by_certificate ? std::string_view() : proxy_authorization);
  return {};
}

void session::take_client(const filters::policy &top, const filters::client_config &c,
                          bool by_certificate) {
  auto &i = id();
  i.who = c.name;
  i.by_certificate = by_certificate;
  i.who_hash = by_certificate ? c.certificate : c.token_sha256;
  policy_ = top.for_client(i.who);
}

bool session::within_rate() {
  double rate = policy_->requests_per_second();
  return rate <= 0 || who().empty() || state_.meters.admit(who(), rate);
}

net::awaitable<void> session::throttle(std::size_t n) {
  auto rate = policy_->bytes_per_second();
  if (rate == 0 || who().empty() || n == 0) co_return;
  auto wait = state_.meters.charge(who(), static_cast<double>(rate), n);
  if (wait <= clock::duration::zero()) co_return;
  net::steady_timer timer(co_await net::this_coro::executor);
  timer.expires_after(wait);
  co_await timer.async_wait(use_tuple);
}

// A captured connection (exec's transparent capture): the address the client dialled names the
// host (the DNS responder's table, else the literal) and the port; its first byte says whether it
// speaks TLS (judged as a CONNECT to that authority, without the "200"), HTTP (origin-form
// requests that must name that host) or something else (refused, logged).
// GCC 12 warns -Wmismatched-new-delete on this coroutine's frame: Asio allocates the frame with its
// own operator new and frees it with the matching operator delete, which GCC cannot pair through
// the coroutine transform (a known false positive of GCC 12). Silenced for this function.

} // namespace detail

namespace {
net::awaitable<void> run_counted(tcp::socket socket, worker &w, gateway_state &state, bool captured,
                                 std::string_view agent, bool identify, bool tls = false) {
  detail::connection_opened(state);
  {
    error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    auto s = std::make_unique<detail::session>(std::move(socket), w, state, agent, identify, tls);
    if (captured) {
      co_await s->run_captured();
    } else {
      co_await s->run();
    }
    if (s->parked()) { // an idle tunnel: it goes on without this frame, and is counted until it ends
      detail::session::park(std::move(s));
      co_return;
    }
  }
  detail::connection_closed(state);
}
} // namespace

void log_session_error(std::exception_ptr e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception &ex) {
    std::fprintf(stderr, "sluice: session error: %s\n", ex.what());
  }
}

net::awaitable<void> run_session(tcp::socket socket, worker &w, gateway_state &state,
                                 std::string_view agent, bool identify) {
  return run_counted(std::move(socket), w, state, false, agent, identify);
}

net::awaitable<void> run_tls_session(tcp::socket socket, worker &w, gateway_state &state) {
  return run_counted(std::move(socket), w, state, false, {}, true, true);
}

net::awaitable<void> run_captured_session(tcp::socket socket, worker &w, gateway_state &state) {
  return run_counted(std::move(socket), w, state, true, {}, false);
}

} // namespace sluice::gateway
