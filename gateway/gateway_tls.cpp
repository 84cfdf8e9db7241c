// The gateway's TLS (gateway.hpp): the context that terminates clients' TLS with leaves of the CA
// (and the CA's name constraints), the one that verifies origins, and the HTTPS proxy listener's.
#include "gateway/gateway.hpp"
#include "filters/host_name.hpp"
#include "gateway/session.hpp"

#include <cstdlib>

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

// Cipher choice (docs/benchmarks.md): AES-128-GCM first, on both sides. Every byte is decrypted
// and encrypted again here, and with AES-NI 128-bit keys take 10 rounds where 256-bit take 14;
// both are TLS 1.3's standard suites. The client's wish for ChaCha20 (no AES hardware) is kept.
constexpr const char *suites = "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384";

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

certs::name_constraint_set gateway::constraints_for(const filters::policy &p) {
  certs::name_constraint_set nc;
  nc.constrain = true; // never an unconstrained CA: a regex contributes its literal domain suffix
  // serve's roles: every role's allowlist. A role in report mode may be let through to any name,
  // which no constraint can cover: that CA is unconstrained (docs/policy.md says so).
  // A [decider] may let any name through (what the allowlist leaves open is its to answer), which
  // no constraint can cover either: that CA is unconstrained too.
  if (p.cfg().decider.configured()) return certs::name_constraint_set{};
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

void gateway::setup_server_tls(const filters::config &cfg) {
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
  SSL_CTX_set_ciphersuites(sctx, suites);
  SSL_CTX_set_cipher_list(sctx, "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-CHACHA20-POLY1305:"
                                "ECDHE-ECDSA-AES256-GCM-SHA384"); // TLS 1.2: the leaf key is ECDSA
  SSL_CTX_set_options(sctx, SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_PRIORITIZE_CHACHA);
}

void gateway::setup_upstream_tls(const filters::config &cfg) {
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
}

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

} // namespace sluice::gateway
