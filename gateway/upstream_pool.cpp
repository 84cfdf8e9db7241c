#include "gateway/upstream_pool.hpp"

#include <sys/socket.h>

namespace sluice::gateway {
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
      if (q.empty()) idle_.erase(it);
      return std::move(e.conn);
    }
  }
  idle_.erase(it);
  return nullptr;
}

void upstream_pool::put(std::unique_ptr<upstream_connection> conn) {
  if (per_key_ == 0 || total_ == 0) {
    return;
  }
  if (conn->buffer.size() == 0 && conn->buffer.capacity() > 16 * 1024) {
    conn->buffer.shrink_to_fit(); // a bulk transfer's 64 KiB is not kept while idle
    conn->buffer.reserve(16 * 1024);
  }
  auto &q = idle_[conn->key];
  if (q.size() >= per_key_) {
    q.pop_front();
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
    oldest->second.pop_front();
    --size_;
    if (oldest->second.empty()) idle_.erase(oldest);
  }
}

} // namespace sluice::gateway
