#include "gateway/capture.hpp"
#include "filters/dns_message.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <sys/socket.h>

namespace sluice::gateway {
namespace {
constexpr auto use_tuple = net::as_tuple(net::use_awaitable);
constexpr unsigned max_tcp_queries = 100;
} // namespace

std::optional<std::array<std::uint8_t, 4>> synthetic_names::address_for(const std::string &name) {
  std::lock_guard lock(mutex_);
  std::uint32_t index;
  if (auto it = by_name_.find(name); it != by_name_.end()) {
    index = it->second;
  } else {
    if (by_index_.size() >= capacity) return std::nullopt;
    index = static_cast<std::uint32_t>(by_index_.size());
    by_index_.push_back(name);
    by_name_.emplace(name, index);
  }
  std::uint32_t a = pool_base + 1 + index;
  return std::array<std::uint8_t, 4>{static_cast<std::uint8_t>(a >> 24), static_cast<std::uint8_t>(a >> 16),
                                     static_cast<std::uint8_t>(a >> 8), static_cast<std::uint8_t>(a)};
}

bool synthetic_names::in_pool(const net::ip::address &address) {
  if (!address.is_v4()) return false;
  return (address.to_v4().to_uint() & 0xffff0000u) == pool_base;
}

std::optional<std::string> synthetic_names::name_for(const net::ip::address &address) const {
  if (!in_pool(address)) return std::nullopt;
  std::uint32_t a = address.to_v4().to_uint();
  if (a <= pool_base) return std::nullopt;
  std::size_t index = a - pool_base - 1;
  std::lock_guard lock(mutex_);
  if (index >= by_index_.size()) return std::nullopt;
  return by_index_[index];
}

dns_responder::dns_responder(net::io_context &ioc, int udp_fd, int tcp_fd, synthetic_names &names,
                             std::chrono::milliseconds io_timeout)
    : ioc_(ioc), udp_(ioc), tcp_(ioc), names_(names), io_timeout_(io_timeout) {
  udp_.assign(net::ip::udp::v4(), udp_fd);
  tcp_.assign(tcp::v4(), tcp_fd);
}

void dns_responder::start() {
  net::co_spawn(ioc_, serve_udp(), net::detached);
  net::co_spawn(ioc_, accept_tcp(), net::detached);
}

void dns_responder::close() {
  error_code ignored;
  udp_.close(ignored);
  tcp_.close(ignored);
}

std::string dns_responder::answer(std::string_view query) {
  return filters::answer_dns_query(query, [this](const std::string &name) { return names_.address_for(name); });
}

net::awaitable<void> dns_responder::serve_udp() {
  std::array<char, filters::max_dns_query_bytes + 1> buf;
  for (;;) {
    net::ip::udp::endpoint from;
    auto [ec, n] = co_await udp_.async_receive_from(net::buffer(buf), from, use_tuple);
    if (ec == net::error::operation_aborted || !udp_.is_open()) co_return;
    if (ec) continue; // a refused earlier answer (ICMP) and the like: the socket goes on
    std::string reply = answer(std::string_view(buf.data(), n));
    if (reply.empty()) continue;
    if (reply.size() > 512) reply.resize(512); // never: one question and one A record
    error_code ignored; // a datagram to loopback does not block; a full socket buffer drops it
    udp_.send_to(net::buffer(reply), from, MSG_DONTWAIT, ignored);
  }
}

net::awaitable<void> dns_responder::accept_tcp() {
  for (;;) {
    auto [ec, socket] = co_await tcp_.async_accept(use_tuple);
    if (ec == net::error::operation_aborted || !tcp_.is_open()) co_return;
    if (ec) continue;
    net::co_spawn(ioc_, serve_tcp(std::move(socket)), net::detached);
  }
}

net::awaitable<void> dns_responder::serve_tcp(tcp::socket socket) {
  beast::tcp_stream s(std::move(socket));
  std::array<unsigned char, 2> len;
  std::string query;
  for (unsigned i = 0; i < max_tcp_queries; ++i) {
    s.expires_after(io_timeout_);
    auto [ec, n] = co_await net::async_read(s, net::buffer(len), use_tuple);
    if (ec) co_return;
    std::size_t size = (std::size_t(len[0]) << 8) | len[1];
    if (size > filters::max_dns_query_bytes) co_return;
    query.resize(size);
    auto [ec2, n2] = co_await net::async_read(s, net::buffer(query), use_tuple);
    if (ec2) co_return;
    std::string reply = answer(query);
    if (reply.empty()) co_return;
    std::string framed;
    framed += static_cast<char>(reply.size() >> 8);
    framed += static_cast<char>(reply.size() & 0xff);
    framed += reply;
    auto [ec3, n3] = co_await net::async_write(s, net::buffer(framed), use_tuple);
    if (ec3) co_return;
  }
}

} // namespace sluice::gateway
