#include "gateway/upstream/pool.hpp"

#include <charconv>

#include <algorithm>

#include <sys/socket.h>

namespace sluice::gateway {

std::string pool_key(std::string_view scheme, const std::string &host, unsigned port) {
  std::string key;
  key.reserve(scheme.size() + host.size() + 9);
  key.append(scheme).append("://").append(host).append(1, ':');
  char port_text[8];
  key.append(port_text, std::to_chars(port_text, port_text + sizeof port_text, port).ptr);
  return key;
}

namespace {

// An idle connection is usable only when nothing is waiting on it: EOF or unexpected bytes mean the
// origin closed it or is out of step with us.
bool still_idle(upstream_connection &c) {
  if (c.buffer.size() != 0) {
    return false;
  }
  if (c.tls && SSL_has_pending(c.tls->native_handle())) {
    return false; // bytes OpenSSL read ahead past the last response
  }
  char byte;
  auto fd = c.socket().native_handle();
  ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

} // namespace

std::unique_ptr<upstream_connection> upstream_pool::take(const std::string &key) {
  auto it = idle_.find(key);
  if (it == idle_.end()) {
    return nullptr;
  }
  auto now = std::chrono::steady_clock::now();
  auto &q = it->second;
  while (!q.empty()) {
    auto e = std::move(q.back()); // most recently used first: warmest connection
    q.pop_back();
    --size_;
    if (now - e.since < idle_timeout_ && still_idle(*e.conn)) {
      return std::move(e.conn);
    }
  }
  return nullptr;
}

void upstream_pool::put(std::unique_ptr<upstream_connection> conn, std::size_t per_key) {
  if (per_key_ == 0 || total_ == 0) {
    return;
  }
  if (conn->buffer.size() == 0 && conn->buffer.capacity() > 16 * 1024) {
    conn->buffer.shrink_to_fit(); // a bulk transfer's 64 KiB is not kept while idle
    conn->buffer.reserve(16 * 1024);
  }
  auto it = idle_.find(conn->key);
  if (it == idle_.end()) {
    if (idle_.size() >= total_) { // at most total_ keys hold a connection: the rest are empty
      std::erase_if(idle_, [](const auto &kv) { return kv.second.empty(); });
    }
    it = idle_.emplace(conn->key, std::vector<idle_entry>{}).first;
  }
  auto &q = it->second;
  if (q.size() >= std::max(per_key_, per_key)) {
    q.erase(q.begin());
    --size_;
  }
  if (size_ >= total_) {
    evict_oldest();
  }
  q.push_back({std::move(conn), std::chrono::steady_clock::now()});
  ++size_;
}

void upstream_pool::evict_oldest() {
  auto oldest = idle_.end();
  for (auto it = idle_.begin(); it != idle_.end(); ++it) {
    if (!it->second.empty() &&
        (oldest == idle_.end() || it->second.front().since < oldest->second.front().since)) {
      oldest = it;
    }
  }
  if (oldest != idle_.end()) {
    oldest->second.erase(oldest->second.begin());
    --size_;
  }
}

void upstream_sessions::prepare(SSL *ssl, const std::string &key) {
  {
    std::lock_guard lock(mutex_);
    auto it = sessions_.find(key);
    if (it != sessions_.end()) SSL_set_session(ssl, it->second.get()); // takes its own reference
  }
  SSL_set_ex_data(ssl, ex_index(), new owner{this, key});
}

void upstream_sessions::keep(const std::string &key, SSL_SESSION *session) {
  std::unique_ptr<SSL_SESSION, decltype(&SSL_SESSION_free)> held(session, &SSL_SESSION_free);
  if (max_ == 0) return;
  std::lock_guard lock(mutex_);
  auto it = sessions_.find(key);
  if (it != sessions_.end()) {
    it->second.swap(held); // the newest ticket replaces the one before (freed after the lock)
    return;
  }
  while (sessions_.size() >= max_ && !order_.empty()) {
    sessions_.erase(order_.front());
    order_.pop_front();
  }
  sessions_.emplace(key, std::move(held));
  order_.push_back(key);
}

int upstream_sessions::ex_index() {
  static const int index =
      SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, &upstream_sessions::free_owner);
  return index;
}

void upstream_sessions::free_owner(void *, void *ptr, CRYPTO_EX_DATA *, int, long, void *) {
  delete static_cast<owner *>(ptr);
}

void upstream_sessions::install(SSL_CTX *ctx) {
  ex_index(); // allocated before any worker runs
  // Sessions live here only: OpenSSL's internal client cache is never consulted by a client.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(ctx, &upstream_sessions::on_new_session);
}

int upstream_sessions::on_new_session(SSL *ssl, SSL_SESSION *session) {
  auto *o = static_cast<owner *>(SSL_get_ex_data(ssl, ex_index()));
  // Only a verified handshake gets here with a session to keep; a resumable one is kept.
  if (!o || SSL_get_verify_result(ssl) != X509_V_OK || !SSL_SESSION_is_resumable(session)) return 0;
  // A copy: `session` stays the connection's own, and OpenSSL marks it not resumable when the
  // connection is freed without a close_notify (the usual end of an upstream connection).
  if (SSL_SESSION *copy = SSL_SESSION_dup(session)) o->cache->keep(o->key, copy);
  return 0; // the connection keeps its reference
}

} // namespace sluice::gateway
