#include "gateway/resolver.hpp"
#include "gateway/error.hpp"

#include <arpa/inet.h>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <mutex>
#include <netinet/in.h>
#include <stdexcept>

namespace sluice::gateway {

void init_cares() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (ares_library_init(ARES_LIB_INIT_ALL) != ARES_SUCCESS) {
      throw std::runtime_error("c-ares initialization failed");
    }
  });
}

// One c-ares socket watched by Asio. The descriptor is released, never closed, on removal: c-ares
// owns it.
struct resolver::watcher {
  explicit watcher(net::any_io_executor ex, int fd) : desc(ex, fd) {}
  net::posix::stream_descriptor desc;
  ares_socket_t fd = ARES_SOCKET_BAD;
  bool want_read = false, want_write = false;
  bool reading = false, writing = false;
  std::uint64_t generation = 0; // tells a stale completion from one for a reused descriptor number
};

// One pending lookup, shared between the coroutine and the c-ares callback.
struct resolver::query {
  explicit query(net::any_io_executor ex) : done(ex) {}
  net::steady_timer done;
  bool finished = false;
  int status = ARES_ETIMEOUT;
  std::vector<net::ip::address> addresses;
};

resolver::resolver(net::any_io_executor ex, const std::vector<std::string> &servers,
                   std::chrono::milliseconds timeout)
    : ex_(ex), timer_(ex), timeout_(timeout) {
  init_cares();
  ares_options opts{};
  opts.sock_state_cb = &resolver::on_sock_state;
  opts.sock_state_cb_data = this;
  opts.timeout = static_cast<int>(std::max<long>(timeout.count() / 2, 100));
  opts.tries = 2;
  char lookups[] = "b"; // DNS only: /etc/hosts could map any name to loopback
  opts.lookups = lookups;
  int mask = ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES | ARES_OPT_LOOKUPS;
  if (int rc = ares_init_options(&channel_, &opts, mask); rc != ARES_SUCCESS) {
    throw std::runtime_error(std::string("c-ares: ") + ares_strerror(rc));
  }
  if (!servers.empty()) {
    std::string csv;
    for (const auto &s : servers) csv += (csv.empty() ? "" : ",") + s;
    if (int rc = ares_set_servers_ports_csv(channel_, csv.c_str()); rc != ARES_SUCCESS) {
      ares_destroy(channel_);
      throw std::runtime_error("upstream.dns_servers '" + csv + "': " + ares_strerror(rc) +
                               "; write entries as \"IP\" or \"IP:PORT\"");
    }
  }
}

resolver::~resolver() {
  // ares_destroy runs every pending callback with ARES_EDESTRUCTION; queries are kept alive by them.
  ares_destroy(channel_);
  for (auto &[fd, w] : watchers_) {
    w->desc.release();
  }
}

void resolver::on_sock_state(void *data, ares_socket_t fd, int readable, int writable) {
  auto *self = static_cast<resolver *>(data);
  auto it = self->watchers_.find(fd);
  if (!readable && !writable) {
    if (it != self->watchers_.end()) {
      error_code ignored; // operation_aborted reaches the pending waits, which then see no watcher
      it->second->desc.cancel(ignored);
      it->second->desc.release();
      self->watchers_.erase(it);
    }
    return;
  }
  if (it == self->watchers_.end()) {
    auto w = std::make_unique<watcher>(self->ex_, fd);
    w->fd = fd;
    w->generation = ++self->generation_;
    it = self->watchers_.emplace(fd, std::move(w)).first;
  }
  it->second->want_read = readable;
  it->second->want_write = writable;
  self->arm(*it->second);
}

void resolver::arm(watcher &w) {
  ares_socket_t fd = w.fd;
  std::uint64_t gen = w.generation;
  if (w.want_read && !w.reading) {
    w.reading = true;
    w.desc.async_wait(net::posix::descriptor_base::wait_read, [this, fd, gen](error_code ec) {
      auto it = watchers_.find(fd);
      if (it == watchers_.end() || it->second->generation != gen) return; // c-ares closed it
      it->second->reading = false;
      if (ec) return;
      ares_process_fd(channel_, fd, ARES_SOCKET_BAD);
      if (auto again = watchers_.find(fd); again != watchers_.end()) arm(*again->second);
      schedule_timer();
    });
  }
  if (w.want_write && !w.writing) {
    w.writing = true;
    w.desc.async_wait(net::posix::descriptor_base::wait_write, [this, fd, gen](error_code ec) {
      auto it = watchers_.find(fd);
      if (it == watchers_.end() || it->second->generation != gen) return;
      it->second->writing = false;
      if (ec) return;
      ares_process_fd(channel_, ARES_SOCKET_BAD, fd);
      if (auto again = watchers_.find(fd); again != watchers_.end()) arm(*again->second);
      schedule_timer();
    });
  }
}

void resolver::schedule_timer() {
  timeval tv{};
  timeval *t = ares_timeout(channel_, nullptr, &tv);
  if (!t) {
    timer_.cancel();
    return;
  }
  timer_.expires_after(std::chrono::seconds(t->tv_sec) + std::chrono::microseconds(t->tv_usec));
  timer_.async_wait([this](error_code ec) {
    if (ec) return; // operation_aborted: rescheduled or destroyed
    ares_process_fd(channel_, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
    schedule_timer();
  });
}

void resolver::on_result(void *arg, int status, int, ares_addrinfo *res) {
  auto *holder = static_cast<std::shared_ptr<query> *>(arg);
  auto q = std::move(*holder);
  delete holder;
  if (!q->finished) {
    q->status = status;
    if (status == ARES_SUCCESS && res) {
      for (auto *n = res->nodes; n; n = n->ai_next) {
        if (n->ai_family == AF_INET) {
          auto *sin = reinterpret_cast<sockaddr_in *>(n->ai_addr);
          q->addresses.emplace_back(net::ip::address_v4(ntohl(sin->sin_addr.s_addr)));
        } else if (n->ai_family == AF_INET6) {
          auto *sin6 = reinterpret_cast<sockaddr_in6 *>(n->ai_addr);
          net::ip::address_v6::bytes_type b;
          std::copy(std::begin(sin6->sin6_addr.s6_addr), std::end(sin6->sin6_addr.s6_addr),
                    b.begin());
          q->addresses.emplace_back(net::ip::address_v6(b));
        }
      }
    }
    q->finished = true;
    q->done.cancel();
  }
  if (res) ares_freeaddrinfo(res);
}

net::awaitable<std::vector<net::ip::address>> resolver::resolve(const std::string &host,
                                                                error_code &ec) {
  auto q = std::make_shared<query>(ex_);
  q->done.expires_after(timeout_);
  ares_addrinfo_hints hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_flags = ARES_AI_NOSORT;
  ares_getaddrinfo(channel_, host.c_str(), nullptr, &hints, &resolver::on_result,
                   new std::shared_ptr<query>(q));
  schedule_timer();
  if (!q->finished) {
    error_code wait_ec;
    co_await q->done.async_wait(net::redirect_error(net::use_awaitable, wait_ec));
  }
  if (!q->finished) {
    q->finished = true; // deadline: the late c-ares answer is dropped by on_result
  }
  if (q->status != ARES_SUCCESS || q->addresses.empty()) {
    ec = gateway_error::dns_error;
    co_return std::vector<net::ip::address>{};
  }
  ec = {};
  co_return std::move(q->addresses);
}

} // namespace sluice::gateway
