#pragma once
#include "gateway/net.hpp"

#include <array>
#include <boost/asio/ip/udp.hpp>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace sluice::gateway {

// Transparent capture in an exec sandbox (docs/policy.md, "Clients that ignore proxy variables"):
// the sandbox's DNS responder hands every name an address from a synthetic pool, and a captured
// connection to such an address is judged as a connection to that name.
class synthetic_names {
public:
  // 198.19.0.0/16: half of the benchmarking range (RFC 2544), never a real destination on the
  // internet. Addresses .0.1 to .255.254, one per name, for the life of the command.
  static constexpr std::uint32_t pool_base = (198u << 24) | (19u << 16);
  static constexpr std::size_t capacity = 65'534;
  // 198.19.255.255, never handed out: exec's sandbox puts it on lo, so that getaddrinfo's
  // AI_ADDRCONFIG sees an IPv4 address other than 127.0.0.1.
  static constexpr std::uint32_t config_address = pool_base + 0xffffu;

  // The name's address, handing out the next free one for a new name; nullopt when the pool is full.
  std::optional<std::array<std::uint8_t, 4>> address_for(const std::string &name);
  // The name an address was handed out for; nullopt when it never was.
  std::optional<std::string> name_for(const net::ip::address &address) const;
  static bool in_pool(const net::ip::address &address);

private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::uint32_t> by_name_;
  std::vector<std::string> by_index_; // index i holds the name of pool_base + 1 + i
};

// Answers DNS on the sandbox's UDP and TCP port 53 sockets (made inside its network namespace) with
// synthetic addresses, on `ioc`, until the sockets close. TCP: length-prefixed queries, each within
// `io_timeout`, at most 100 per connection.
class dns_responder {
public:
  dns_responder(net::io_context &ioc, int udp_fd, int tcp_fd, synthetic_names &names,
                std::chrono::milliseconds io_timeout);
  void start();
  void close();

private:
  net::awaitable<void> serve_udp();
  net::awaitable<void> accept_tcp();
  net::awaitable<void> serve_tcp(tcp::socket socket);
  std::string answer(std::string_view query);

  net::io_context &ioc_;
  net::ip::udp::socket udp_;
  tcp::acceptor tcp_;
  synthetic_names &names_;
  std::chrono::milliseconds io_timeout_;
};

} // namespace sluice::gateway
