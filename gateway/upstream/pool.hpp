#pragma once
#include "gateway/net.hpp"
#include "gateway/tls_stream.hpp"

#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace sluice::gateway {

// One connection to an origin: plain TCP, or TLS over TCP. `visit` hands the active stream to a
// generic function, so the relay code is written once for both.
// The pool's key for an origin, "scheme://host:port" in one allocation: one spelling for every
// protocol that takes or puts a connection.
std::string pool_key(std::string_view scheme, const std::string &host, unsigned port);

struct upstream_connection {
  // The read buffer starts with room for a whole response head: Beast sizes each read by the room
  // left, and an empty buffer would read a head in 512-byte pieces.
  explicit upstream_connection(net::any_io_executor ex) : tcp(ex) { buffer.reserve(16 * 1024); }
  std::string key; // "scheme://host:port"
  beast::tcp_stream tcp;
  std::unique_ptr<tls_stream> tls; // set for https; it then owns the socket
  beast::flat_buffer buffer{128 * 1024};
  bool h2 = false; // the origin selected "h2" in ALPN: the connection is an h2_upstream's, never pooled here

  void expires_after(std::chrono::steady_clock::duration d) {
    if (tls) {
      tls->expires_after(d);
    } else {
      tcp.expires_after(d);
    }
  }
  tcp::socket &socket() { return tls ? tls->socket() : tcp.socket(); }
  template <class F> decltype(auto) visit(F &&f) { return tls ? f(*tls) : f(tcp); }
};

// TLS sessions origins issued, kept to resume the next connection to the same origin (no
// certificate chain to send and verify again when no pooled connection is idle). Shared by the
// workers (a lock, taken once per new upstream TLS connection and per ticket). Keyed by the name or
// address verified and the port; a session enters only from a handshake that passed verification
// for that key, so a resumption never stands in for a check that was not made. Bounded: the
// oldest key goes first.
class upstream_sessions {
public:
  explicit upstream_sessions(std::size_t max_entries) : max_(max_entries) {}
  // Before a client handshake: offers the session kept for `key`, if any, and has the sessions
  // this connection receives kept under `key`.
  void prepare(SSL *ssl, const std::string &key);

  // Installs the new-session callback on the upstream context (once, at start-up).
  static void install(SSL_CTX *ctx);

private:
  struct owner {
    upstream_sessions *cache;
    std::string key;
  };
  void keep(const std::string &key, SSL_SESSION *session); // takes ownership
  static int on_new_session(SSL *ssl, SSL_SESSION *session);
  static void free_owner(void *, void *ptr, CRYPTO_EX_DATA *, int, long, void *);
  static int ex_index();

  std::size_t max_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::unique_ptr<SSL_SESSION, decltype(&SSL_SESSION_free)>>
      sessions_;
  std::deque<std::string> order_; // keys, oldest first
};

// Idle upstream connections of one worker, keyed by scheme, host and port. Bounded per key and in
// total; an entry is dropped when it has idled too long or its peer has closed or sent stray bytes.
class upstream_pool {
public:
  upstream_pool(std::size_t per_key, std::size_t total, std::chrono::milliseconds idle_timeout)
      : per_key_(per_key), total_(total), idle_timeout_(idle_timeout) {}

  std::unique_ptr<upstream_connection> take(const std::string &key);
  // `per_key`: a higher bound for this key than the configured one (an h2 client's streams run
  // side by side, each on a connection of its own to the origin).
  void put(std::unique_ptr<upstream_connection> conn, std::size_t per_key = 0);
  std::size_t size() const { return size_; }

private:
  struct idle_entry {
    std::unique_ptr<upstream_connection> conn;
    std::chrono::steady_clock::time_point since;
  };
  void evict_oldest();

  std::size_t per_key_, total_;
  std::chrono::milliseconds idle_timeout_;
  std::size_t size_ = 0;
  // Oldest first. A key whose list empties stays (with its list's capacity), so that the usual
  // take-then-put of one keep-alive connection allocates nothing; put() sweeps empty keys once
  // there are as many keys as connections may idle.
  std::unordered_map<std::string, std::vector<idle_entry>> idle_;
};

} // namespace sluice::gateway
