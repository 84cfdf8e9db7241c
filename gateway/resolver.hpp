#pragma once
#include "gateway/net.hpp"

#include <ares.h>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sluice::gateway {

// c-ares on an Asio executor: c-ares owns the DNS sockets, Asio waits on them, so no thread ever
// blocks on a lookup. One resolver per worker (io_context), used from that worker only.
class resolver {
public:
  // `servers`: "ip" or "ip:port" entries; empty uses /etc/resolv.conf. Lookups never read
  // /etc/hosts: names come from DNS or from the config's pins.
  resolver(net::any_io_executor ex, const std::vector<std::string> &servers,
           std::chrono::milliseconds timeout);
  ~resolver();
  resolver(const resolver &) = delete;
  resolver &operator=(const resolver &) = delete;

  // All A and AAAA records for `host`; gateway_error::dns_error on NXDOMAIN, no data, timeout.
  net::awaitable<std::vector<net::ip::address>> resolve(const std::string &host, error_code &ec);

private:
  struct watcher;
  struct query;
  static void on_sock_state(void *data, ares_socket_t fd, int readable, int writable);
  static void on_result(void *arg, int status, int timeouts, ares_addrinfo *res);
  void arm(watcher &w);
  void schedule_timer();

  net::any_io_executor ex_;
  ares_channel channel_ = nullptr;
  std::map<ares_socket_t, std::unique_ptr<watcher>> watchers_;
  net::steady_timer timer_;
  std::chrono::milliseconds timeout_;
  std::uint64_t generation_ = 0;
};

// Initializes c-ares once per process (ares_library_init); call before any resolver.
void init_cares();

} // namespace sluice::gateway
