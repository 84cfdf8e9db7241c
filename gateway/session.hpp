#pragma once
#include "gateway/gateway_state.hpp"

namespace sluice::gateway {

// Serves one client connection to its end: plain HTTP proxy requests, CONNECT tunnels (terminated or
// passed through, by profile) and the requests inside them.
// `agent`: the agent listener's name (serve's [listen.agents]), empty for the proxy port; it must
// outlive the session. `identify`: serve's proxy listener, where clients identify themselves once
// the policy names any ([clients]).
net::awaitable<void> run_session(tcp::socket socket, worker &w, gateway_state &state,
                                 std::string_view agent = {}, bool identify = false);

// Serves one connection to serve's HTTPS proxy listener (state.proxy_tls): TLS first, with the
// client's certificate if it shows one (its identity, against [clients] certificate = ...), then
// everything run_session does, inside that TLS.
net::awaitable<void> run_tls_session(tcp::socket socket, worker &w, gateway_state &state);

// Serves one captured connection (exec's transparent capture): the client thinks it talks to the
// origin itself. The address it dialled names the host (through the DNS responder's table, else as
// an IP literal) and its port the port; TLS is judged and terminated as inside a CONNECT to that
// authority, plain HTTP as origin-form requests for it; anything else is refused and logged.
net::awaitable<void> run_captured_session(tcp::socket socket, worker &w, gateway_state &state);

// co_spawn's completion for a session: an exception that escaped it is said on stderr (the
// gateway goes on serving the others).
void log_session_error(std::exception_ptr e);

} // namespace sluice::gateway

#include <openssl/ssl.h>
namespace sluice::gateway {
// SSL_CTX servername callback for the terminating context: refuses an SNI that names another host
// than the CONNECT authority.
int check_sni(SSL *ssl, int *alert, void *arg);
} // namespace sluice::gateway
