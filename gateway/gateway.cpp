#include "gateway/gateway.hpp"
#include "filters/aws_sigv4.hpp"
#include "gateway/oauth2.hpp"
#include "gateway/admin/server.hpp"
#include "gateway/local_addresses.hpp"
#include "gateway/peer_uid.hpp"
#include "gateway/session.hpp"
#include "filters/host_name.hpp"

#include <filesystem>
#include <boost/json.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <chrono>
#include <boost/asio/use_awaitable.hpp>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <sys/socket.h>
#include <unistd.h>

namespace sluice::gateway {
namespace {

// ALPN for terminated clients: h2 where the client offers it (and [tls] h2 is on), else
// HTTP/1.1; a client that offers neither gets no ALPN and speaks HTTP/1.1.
int select_alpn(SSL *, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                unsigned int inlen, void *arg) {
  static const unsigned char both[] = {2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  const bool h2 = *static_cast<const bool *>(arg);
  const unsigned char *ours = h2 ? both : both + 3;
  unsigned ours_len = h2 ? sizeof both : sizeof both - 3;
  unsigned char *selected = nullptr;
  if (SSL_select_next_proto(&selected, outlen, ours, ours_len, in, inlen) == OPENSSL_NPN_NEGOTIATED) {
    *out = selected;
    return SSL_TLSEXT_ERR_OK;
  }
  return SSL_TLSEXT_ERR_NOACK;
}

// Listen addresses from the config were checked by the loader; this is the same check, for callers
// that did not come through it.
tcp::endpoint parse_endpoint(const std::string &text) {
  auto a = filters::parse_listen_address(text);
  if (!a) {
    throw std::runtime_error("listen address '" + text + "' is not IP:PORT, e.g. 127.0.0.1:3128");
  }
  return {a->ip, a->port};
}

} // namespace

certs::name_constraint_set gateway::constraints_for(const filters::policy &p) {
  certs::name_constraint_set nc;
  nc.constrain = true; // never an unconstrained CA: a regex contributes its literal domain suffix
  // serve's roles: every role's allowlist. A role in report mode may be let through to any name,
  // which no constraint can cover: that CA is unconstrained (docs/policy.md says so).
  std::vector<const filters::policy *> all{&p};
  for (const auto &[name, r] : p.role_policies()) {
    if (r->cfg().report) return certs::name_constraint_set{};
    all.push_back(r.get());
  }
  std::vector<const filters::host_matcher *> lists;
  for (const auto *each : all) {
    lists.push_back(&each->allow_matcher());
    lists.push_back(&each->askable_matcher()); // hosts a person may allow while it runs
  }
  for (const auto *list : lists) {
    for (const auto &pat : list->patterns()) {
      if (pat.type == filters::host_pattern::kind::regex) {
        filters::require_constrainable(pat); // the loader refused these already; this is the backstop
        for (const auto &d : pat.domains) nc.dns.push_back(d);
      } else if (pat.type == filters::host_pattern::kind::subdomains) {
        nc.dns.push_back("." + pat.value);
      } else if (pat.value.find(':') != std::string::npos ||
                 pat.value.find_first_not_of("0123456789.") == std::string::npos) {
        nc.ip.push_back(pat.value);
      } else {
        nc.dns.push_back(pat.value);
      }
    }
  }
  return nc;
}

gateway::gateway(filters::policy_ptr policy, gateway_options options)
    : initial_(policy), options_(std::move(options)) {
  const auto &cfg = policy->cfg();
  ca_ = options_.ca;
  if (!ca_) {
    ca_ = std::make_shared<certs::certificate_authority>(certs::certificate_authority::generate(
        "sluice ephemeral CA", std::chrono::hours(24 * 30), constraints_for(*policy)));
  }
  metrics_ = std::make_unique<metrics::metrics>(options_.skill);
  log_ = std::make_unique<metrics::access_log>(
      cfg.access_log, options_.command_id, options_.skill, cfg.redact_query,
      cfg.access_log_format == "ocsf" ? metrics::log_format::ocsf : metrics::log_format::json);
  leaves_ = std::make_unique<certs::leaf_cache>(*ca_, cfg.leaf_validity);

  server_tls_.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                          ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                          ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
  SSL_CTX *sctx = server_tls_.native_handle();
  if (SSL_CTX_use_PrivateKey(sctx, ca_->leaf_key()) != 1) {
    throw std::runtime_error("cannot install the leaf key: " + certs::openssl_error_string());
  }
  SSL_CTX_set_tlsext_servername_callback(sctx, &check_sni);
  offer_h2_ = cfg.offer_h2;
  SSL_CTX_set_alpn_select_cb(sctx, &select_alpn, &offer_h2_);
  SSL_CTX_set_session_id_context(sctx, reinterpret_cast<const unsigned char *>("sluice"), 6);
  // Resumption rides on stateless tickets; a server-side session cache would hold up to 20,480
  // sessions in memory for nothing.
  SSL_CTX_set_session_cache_mode(sctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_default_read_buffer_len(sctx, 64 * 1024);
  // Cipher choice (docs/benchmarks.md): AES-128-GCM first, on both sides. Every byte is decrypted
  // and encrypted again here, and with AES-NI 128-bit keys take 10 rounds where 256-bit take 14;
  // both are TLS 1.3's standard suites. The client's wish for ChaCha20 (no AES hardware) is kept.
  static constexpr const char *suites = "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384";
  SSL_CTX_set_ciphersuites(sctx, suites);
  SSL_CTX_set_cipher_list(sctx, "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-CHACHA20-POLY1305:"
                                "ECDHE-ECDSA-AES256-GCM-SHA384"); // TLS 1.2: the leaf key is ECDSA
  SSL_CTX_set_options(sctx, SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_PRIORITIZE_CHACHA);

  upstream_tls_.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                            ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                            ssl::context::no_tlsv1_1);
  upstream_tls_.set_verify_mode(ssl::verify_peer);
  // The system store is loaded when the first upstream TLS handshake needs it, not at start-up:
  // parsing a full CA bundle costs tens of milliseconds, and most `exec` runs never need it.
  if (cfg.upstream_system_trust) {
    load_system_trust_ = [ctx = &upstream_tls_] {
      const char *file = std::getenv(X509_get_default_cert_file_env());
      const char *dir = std::getenv(X509_get_default_cert_dir_env());
      if (file || dir) {
        boost::system::error_code ignored; // a missing default store leaves only the bundle
        ctx->set_default_verify_paths(ignored);
      } else {
        SSL_CTX_load_verify_dir(ctx->native_handle(), X509_get_default_cert_dir());
        SSL_CTX_load_verify_file(ctx->native_handle(), X509_get_default_cert_file());
      }
    };
  } else {
    load_system_trust_ = [] {};
  }
  if (!cfg.upstream_ca_bundle.empty()) {
    boost::system::error_code ec;
    upstream_tls_.load_verify_file(cfg.upstream_ca_bundle, ec);
    if (ec) {
      throw std::runtime_error("tls.upstream_ca_bundle '" + cfg.upstream_ca_bundle +
                               "': " + ec.message() + "; give a PEM file of CA certificates");
    }
  }
  SSL_CTX_set_ciphersuites(upstream_tls_.native_handle(), suites); // TLS 1.2 upstream: OpenSSL's list
  upstream_sessions::install(upstream_tls_.native_handle()); // resumption with origins
  SSL_CTX_set_default_read_buffer_len(upstream_tls_.native_handle(), 64 * 1024);

  state_ = std::unique_ptr<gateway_state>(new gateway_state{
      {policy}, *metrics_, *log_, stats_, *leaves_, server_tls_, upstream_tls_, load_system_trust_, {},
      summary_, options_.keep_summary, local_addresses()});
  state_->ssh_host_key = options_.ssh_host_key;
  state_->ssh_agent_socket = options_.ssh_agent_socket;
  state_->ssh_known_hosts = options_.ssh_known_hosts;
  // "Allow always" appends to the file the policy came from (none for the built-in policy).
  std::string policy_file;
  if (std::error_code fec; cfg.source != "built-in" && std::filesystem::is_regular_file(cfg.source, fec)) {
    policy_file = std::filesystem::absolute(cfg.source, fec).string();
  }
  state_->held = std::make_unique<approvals>(cfg.approvals.max_pending, policy_file);
  if (!cfg.approvals.webhook.empty()) {
    filters::credential_config secret;
    secret.name = "approvals.webhook_secret";
    secret.source = cfg.approvals.webhook_secret;
    filters::load_secret(secret); // throws naming the source: the gateway does not start without it
    state_->webhook_secret = std::move(secret.secret);
  }
  state_->credential_refused = [this](const std::string &name) {
    {
      std::lock_guard lock(refresh_m_);
      if (!refused_.insert(name).second) return;
    }
    refresh_cv_.notify_all();
  };

  unsigned n = options_.threads;
  if (n == 0) n = std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  for (unsigned i = 0; i < n; ++i) {
    workers_.push_back(std::make_unique<worker>(cfg));
    guards_.emplace_back(workers_.back()->ioc.get_executor());
  }
}

gateway::~gateway() {
  stop();
  join();
}

bool gateway::peer_allowed(const tcp::socket &socket, const listener_set &set) {
  if (set.uids.empty()) return true;
  auto uid = loopback_peer_uid(socket);
  if (uid && std::find(set.uids.begin(), set.uids.end(), *uid) != set.uids.end()) return true;
  metrics_->agent_refused(set.agent);
  metrics::access_record r;
  auto pol = state_->policy.load();
  r.profile = filters::to_string(pol->cfg().mode);
  r.method = "-";
  r.decision = "deny";
  r.reason = "agent_peer_refused";
  r.agent = set.agent;
  boost::system::error_code ec;
  auto peer = socket.remote_endpoint(ec);
  std::string ip = ec ? std::string() : peer.address().to_string();
  r.source_ip = ip;
  r.source_port = ec ? 0 : peer.port();
  log_->write(r);
  auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  auto last = last_refusal_note_.load();
  if (now - last >= std::chrono::steady_clock::duration(std::chrono::seconds(10)).count() &&
      last_refusal_note_.compare_exchange_strong(last, now)) {
    std::string who = uid ? "uid " + std::to_string(*uid) : std::string("a socket the kernel does not know");
    std::fprintf(stderr, "sluice: agent listener %s refused a connection from %s: only the users in "
                         "listen.agents.%s.uids may use it (further refusals: the access log and "
                         "sluice_agent_connections_refused_total)\n",
                 set.agent.c_str(), who.c_str(), set.agent.c_str());
  }
  return false;
}

void gateway::spawn_accept(std::size_t index, tcp::acceptor &acceptor, const listener_set &set) {
  auto &w = *workers_[index];
  net::co_spawn(
      w.ioc,
      [this, &acceptor, &w, &set]() -> net::awaitable<void> {
        net::steady_timer pause(w.ioc);
        auto last_log = std::chrono::steady_clock::time_point{};
        for (;;) {
          auto [ec, socket] = co_await acceptor.async_accept(net::as_tuple(net::use_awaitable));
          if (ec == net::error::operation_aborted || !acceptor.is_open()) co_return;
          if (ec == net::error::no_descriptors || ec.value() == ENFILE) {
            // Out of descriptors: the pending connection stays queued and accept would fail again
            // at once. Pause instead of spinning; sessions that end free descriptors meanwhile.
            metrics_->accept_paused.Increment();
            auto now = std::chrono::steady_clock::now();
            if (now - last_log >= std::chrono::seconds(10)) {
              last_log = now;
              std::fprintf(stderr, "sluice: out of file descriptors (%s); accepting paused for "
                                   "100 ms at a time; raise the limit (ulimit -n, LimitNOFILE=) "
                                   "or lower [limits] max_connections\n",
                           ec.message().c_str());
            }
            pause.expires_after(std::chrono::milliseconds(100));
            auto [tec] = co_await pause.async_wait(net::as_tuple(net::use_awaitable));
            if (tec == net::error::operation_aborted || !acceptor.is_open()) co_return;
            continue;
          }
          if (ec) continue; // ECONNABORTED and the like: this client is lost, the listener is not
          if (state_->connections.load() >= initial_->cfg().limits.max_connections) {
            continue; // over the connection limit: the socket closes as it goes out of scope
          }
          if (!peer_allowed(socket, set)) continue; // the socket closes as it goes out of scope
          net::co_spawn(w.ioc,
                        set.captured ? run_captured_session(std::move(socket), w, *state_)
                        : set.tls    ? run_tls_session(std::move(socket), w, *state_)
                                     : run_session(std::move(socket), w, *state_, set.agent, set.identify),
                        log_session_error);
        }
      },
      net::detached);
}

tcp::endpoint gateway::listen(const std::string &address, bool identify) {
  auto ep = parse_endpoint(address);
  tcp::acceptor first(workers_[0]->ioc);
  first.open(ep.protocol());
  first.set_option(tcp::acceptor::reuse_address(true));
  boost::system::error_code ec;
  first.bind(ep, ec);
  if (ec) {
    throw std::runtime_error("cannot listen on " + address + ": " + ec.message() +
                             "; pick a free port or another address");
  }
  // The kernel's limit (net.core.somaxconn, 4096 on current kernels): a fleet's clients reconnect
  // in bursts (a replica restarts, a load balancer shifts), and a full accept queue drops SYNs,
  // which costs a client a 1 s retransmission, then 3 s.
  first.listen(tcp::acceptor::max_listen_connections);
  auto bound = first.local_endpoint();
  adopt_listener(first.release());
  listeners_.back()->identify = identify;
  return bound;
}

namespace {
// Client certificates on the HTTPS proxy listener: the handshake goes on whatever the
// verification says, and the first error is kept (the session's app data) so that the client gets
// a 407 that names it, not a bare TLS alert. A certificate that did not verify identifies no one.
int verify_client_certificate(int ok, X509_STORE_CTX *store) {
  auto *ssl = static_cast<SSL *>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  auto *first = ssl ? static_cast<int *>(SSL_get_app_data(ssl)) : nullptr;
  if (!ok && first && *first == X509_V_OK) *first = X509_STORE_CTX_get_error(store);
  if (!ok && !first) return 0; // no session to tell: refuse
  return 1;
}
} // namespace

tcp::endpoint gateway::listen_tls(const std::string &address) {
  const auto &cfg = initial_->cfg();
  proxy_tls_ = std::make_unique<ssl::context>(ssl::context::tls_server);
  auto &ctx = *proxy_tls_;
  ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                  ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
  SSL_CTX *sctx = ctx.native_handle();
  if (SSL_CTX_use_certificate_chain_file(sctx, cfg.proxy_cert.c_str()) != 1) {
    throw std::runtime_error("tls.proxy_cert '" + cfg.proxy_cert + "': " + certs::openssl_error_string() +
                             "; give the HTTPS proxy listener's certificate chain as PEM, leaf first");
  }
  if (SSL_CTX_use_PrivateKey_file(sctx, cfg.proxy_key.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(sctx) != 1) {
    throw std::runtime_error("tls.proxy_key '" + cfg.proxy_key + "': " + certs::openssl_error_string() +
                             "; give the PEM key of tls.proxy_cert's certificate");
  }
  if (!cfg.client_ca.empty()) {
    if (SSL_CTX_load_verify_file(sctx, cfg.client_ca.c_str()) != 1) {
      throw std::runtime_error("tls.client_ca '" + cfg.client_ca + "': " + certs::openssl_error_string() +
                               "; give a PEM file of the CA certificates that issue client certificates");
    }
    // The CAs' names go into the CertificateRequest, so a client with several certificates picks.
    if (STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(cfg.client_ca.c_str())) {
      SSL_CTX_set_client_CA_list(sctx, names);
    }
    SSL_CTX_set_verify(sctx, SSL_VERIFY_PEER, &verify_client_certificate);
    SSL_CTX_set_verify_depth(sctx, 8);
  }
  SSL_CTX_set_session_id_context(sctx, reinterpret_cast<const unsigned char *>("sluice-proxy"), 12);
  SSL_CTX_set_session_cache_mode(sctx, SSL_SESS_CACHE_OFF);
  // No resumption: a resumed session would skip the certificate check, and this handshake happens
  // once per client connection (keep-alive carries the rest).
  SSL_CTX_set_options(sctx, SSL_OP_NO_TICKET);
  SSL_CTX_set_num_tickets(sctx, 0);
  state_->proxy_tls = proxy_tls_.get();
  auto ep = listen(address, true);
  listeners_.back()->tls = true;
  return ep;
}

void gateway::adopt_listener(int fd) { add_listener(fd, false); }

void gateway::adopt_capture(const std::vector<int> &listeners, int dns_udp, int dns_tcp) {
  names_ = std::make_unique<synthetic_names>();
  state_->names = names_.get();
  for (int fd : listeners) add_listener(fd, true);
  dns_ = std::make_unique<dns_responder>(workers_[0]->ioc, dns_udp, dns_tcp, *names_,
                                         initial_->cfg().timeouts.io);
}

tcp::endpoint gateway::listen_agent(const filters::agent_listener &agent) {
  auto ep = listen(agent.address);
  auto &set = *listeners_.back();
  set.agent = agent.name;
  set.uids = agent.uids;
  return ep;
}

gateway::listener_set &gateway::add_listener(int fd, bool captured) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr *>(&ss), &len) != 0) {
    throw std::runtime_error("listener descriptor is not a socket");
  }
  auto proto = ss.ss_family == AF_INET6 ? tcp::v6() : tcp::v4();
  auto set = std::make_unique<listener_set>();
  set->captured = captured;
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    int d = i == 0 ? fd : ::dup(fd);
    auto a = std::make_unique<tcp::acceptor>(workers_[i]->ioc);
    a->assign(proto, d);
    set->acceptors.push_back(std::move(a));
  }
  listeners_.push_back(std::move(set));
  return *listeners_.back();
}

tcp::endpoint gateway::listen_admin(const std::string &address) {
  // "127.0.0.1:0": a port the system picks (exec's admin listener for approvals).
  auto ep = address == "127.0.0.1:0" ? tcp::endpoint(net::ip::address_v4::loopback(), 0) : parse_endpoint(address);
  admin_ = std::make_unique<tcp::acceptor>(workers_[0]->ioc);
  admin_->open(ep.protocol());
  admin_->set_option(tcp::acceptor::reuse_address(true));
  boost::system::error_code ec;
  admin_->bind(ep, ec);
  if (ec) {
    throw std::runtime_error("cannot listen on admin address " + address + ": " + ec.message());
  }
  admin_->listen(128);
  auto bound = admin_->local_endpoint();
  state_->approvals_admin = (bound.address().is_v6() ? "[" + bound.address().to_string() + "]" : bound.address().to_string()) +
                            ":" + std::to_string(bound.port());
  return bound;
}

std::string gateway::stats_json() const {
  namespace js = boost::json;
  auto out = stats_.snapshot();
  auto pol = state_->policy.load();
  const auto &cfg = pol->cfg();
  js::array allow, deny;
  for (auto &a : cfg.allow) allow.emplace_back(a);
  for (auto &r : cfg.allow_routes) allow.emplace_back(r.text);
  for (auto &d : cfg.deny) deny.emplace_back(d);
  for (auto &r : cfg.deny_routes) deny.emplace_back(r.text);
  js::object policy{{"profile", std::string(filters::to_string(cfg.mode))},
                    {"source", cfg.source},
                    {"allow", std::move(allow)},
                    {"deny", std::move(deny)},
                    {"skill", options_.skill},
                    {"command_id", options_.command_id}};
  out["policy"] = std::move(policy);
  out["now"] = metrics::unix_now();
  out["started"] = std::chrono::duration<double>(started_.time_since_epoch()).count();
  out["connections_active"] = state_->connections.load();
  return js::serialize(out);
}

void gateway::start() {
  for (auto &set : listeners_) {
    for (std::size_t i = 0; i < set->acceptors.size(); ++i) spawn_accept(i, *set->acceptors[i], *set);
  }
  if (dns_) dns_->start();
  if (admin_) {
    admin_handlers h{[this] { return metrics_->serialize(); },
                     [this] { return !state_->draining.load() && !state_->unready.load(); },
                     [this] { return ca_->cert_pem(); },
                     [this] { return stats_json(); }};
    h.approvals_token = options_.approvals_token;
    h.webhook_secret = state_->webhook_secret;
    h.approvals_pending = [this] { return state_->held->pending_json(); };
    h.approvals_decide = [this](std::uint64_t id, std::string_view decision, std::string_view by) -> std::string {
      if (decision == "always") return state_->held->allow_always(id, std::string(by));
      auto a = decision == "once" ? approval::once : decision == "run" ? approval::run : approval::deny;
      if (state_->held->decide(id, a, std::string(by))) return {};
      return "request " + std::to_string(id) + " is no longer waiting (decided, timed out or gone)";
    };
    net::co_spawn(workers_[0]->ioc, run_admin(*admin_, std::move(h)), net::detached);
  }
  bool ttl = false;
  for (const auto &c : state_->policy.load()->cfg().credentials) {
    ttl |= c.refresh_at != std::chrono::steady_clock::time_point{} || !c.file_stamp.empty();
  }
  if (ttl) refresher_ = std::thread([this] { refresh_credentials(); });
  for (auto &w : workers_) {
    threads_.emplace_back([&ioc = w->ioc] {
      for (;;) {
        try {
          ioc.run();
          return;
        } catch (const std::exception &e) {
          std::fprintf(stderr, "sluice: worker error: %s\n", e.what());
        }
      }
    });
  }
}

// Each round waits until the first credential is due (its ttl passed, or 80% of an OAuth2 token's
// life), reads or obtains every due one again and, where a value changed, swaps in a policy
// holding it, unless the policy was replaced meanwhile (a reload reads every source itself). A
// source that fails keeps its last value, logged and counted, and is tried again after its ttl
// (one without a ttl, an OAuth2 token or a credential_process's keys, after 5 s, while it may
// still be valid).
void gateway::refresh_credentials() {
  using steady = std::chrono::steady_clock;
  for (;;) {
    auto current = state_->policy.load();
    auto due = steady::time_point::max();
    for (const auto &c : current->cfg().credentials) {
      if (c.refresh_at != steady::time_point{}) due = std::min(due, c.refresh_at);
      // A file without a ttl is looked at every second, and read again once it changed.
      if (c.refresh_at == steady::time_point{} && !c.file_stamp.empty()) due = std::min(due, steady::now() + std::chrono::seconds(1));
    }
    // None due (a reload may bring some): look again in a minute.
    if (due == steady::time_point::max()) due = steady::now() + std::chrono::seconds(60);
    std::set<std::string> refused;
    {
      std::unique_lock lock(refresh_m_);
      refresh_cv_.wait_until(lock, due, [this] { return refresh_stop_ || !refused_.empty(); });
      if (refresh_stop_) return;
      refused.swap(refused_);
    }
    current = state_->policy.load();
    auto cfg = current->cfg();
    bool changed = false;
    auto now = steady::now();
    for (auto &c : cfg.credentials) {
      // An OAuth2 token an API refused with 401 is obtained again now: once for each token (an API
      // that refuses every token does not make sluice ask the token endpoint for each request),
      // and at most every 10 s.
      bool refused_now = false;
      if (c.oauth2 && refused.count(c.name)) {
        auto token = filters::sigv4::sha256_hex(c.secret);
        auto &last = refused_last_[c.name];
        if (last.first != token && (last.second == steady::time_point{} || now - last.second >= std::chrono::seconds(10))) {
          last = {token, now};
          refused_now = true;
          std::fprintf(stderr, "sluice: credential '%s': the API answered 401; obtaining a new token\n", c.name.c_str());
        }
      }
      bool file_changed = c.refresh_at == steady::time_point{} && !c.file_stamp.empty() &&
                          filters::file_stamp(c.source) != c.file_stamp;
      if (!refused_now && !file_changed &&
          (c.refresh_at == steady::time_point{} || c.refresh_at > now + std::chrono::milliseconds(50))) {
        continue;
      }
      auto last = c;
      try {
        load_credential(c, cfg);
      } catch (const std::exception &e) {
        std::fprintf(stderr, "sluice: %s; its last value stays in use\n", e.what());
        metrics_->credential_refresh_failures.Increment();
        c = std::move(last);
        if (file_changed) {
          c.file_stamp = filters::file_stamp(c.source); // read again when it changes again
        } else {
          c.refresh_at = steady::now() + (c.ttl.count() > 0 ? c.ttl : std::chrono::milliseconds(5000));
        }
      }
      changed = true; // at least its next refresh moved
    }
    if (!changed) continue;
    try {
      filters::policy_ptr next = std::make_shared<const filters::policy>(std::move(cfg));
      state_->policy.compare_exchange_strong(current, next);
    } catch (const std::exception &e) {
      std::fprintf(stderr, "sluice: credentials read again, but the policy could not be rebuilt: %s\n", e.what());
    }
  }
}

void gateway::set_unready() { state_->unready.store(true); }

void gateway::reload(filters::policy_ptr policy) { state_->policy.store(std::move(policy)); }

namespace {
// Runs `f` on the worker thread of `ioc` and waits for it: what a worker owns is touched from its
// own thread only.
template <class F> void run_on(net::io_context &ioc, F f) {
  std::promise<void> done;
  net::post(ioc, [&] {
    f();
    done.set_value();
  });
  done.get_future().wait();
}
} // namespace

void gateway::drain(std::chrono::milliseconds max_wait) {
  state_->draining.store(true);
  // Close every acceptor on its own worker thread: acceptors are not thread-safe.
  for (auto &set : listeners_) {
    for (std::size_t i = 0; i < set->acceptors.size(); ++i) {
      run_on(workers_[i]->ioc, [&] {
        boost::system::error_code ignored;
        set->acceptors[i]->close(ignored);
      });
    }
  }
  // Idle parked tunnels have no response to finish: they close now instead of holding the drain
  // until their idle deadline. A tunnel busy with a request finishes it (draining is checked
  // before the next).
  for (auto &w : workers_) {
    run_on(w->ioc, [&] {
      w->parking.expire_all();
      detail::goaway_all(*w); // h2 clients: no new streams, and close once theirs end
    });
  }
  if (dns_) run_on(workers_[0]->ioc, [&] { dns_->close(); }); // on its worker, as the acceptors
  auto wait = max_wait.count() > 0
                  ? max_wait
                  : std::chrono::duration_cast<std::chrono::milliseconds>(initial_->cfg().timeouts.drain);
  auto deadline = std::chrono::steady_clock::now() + wait;
  while (state_->in_flight.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  stop();
}

void gateway::stop() {
  {
    std::lock_guard lock(refresh_m_);
    refresh_stop_ = true;
  }
  refresh_cv_.notify_all();
  guards_.clear();
  for (auto &w : workers_) w->ioc.stop();
}

void gateway::join() {
  for (auto &t : threads_) {
    if (t.joinable()) t.join();
  }
  if (refresher_.joinable()) refresher_.join();
  threads_.clear();
}

} // namespace sluice::gateway
