#include "gateway/upstream/dial.hpp"

#include "gateway/error.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <prometheus/histogram.h>

namespace sluice::gateway::upstream {

net::awaitable<std::vector<net::ip::address>>
allowed_addresses(resolver &dns, const filters::policy &pol, const std::vector<net::ip::address> &own,
                  const std::string &host, const std::optional<net::ip::address> &ip, error_code &ec,
                  prometheus::Histogram *dns_timing) {
  std::vector<net::ip::address> addresses;
  if (ip) {
    addresses.push_back(*ip);
  } else if (auto pin = pol.cfg().pins.find(host); pin != pol.cfg().pins.end()) {
    addresses = pin->second;
  } else {
    auto t0 = std::chrono::steady_clock::now();
    addresses = co_await dns.resolve(host, ec);
    if (dns_timing) {
      dns_timing->Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    if (ec) co_return addresses;
  }
  std::vector<net::ip::address> allowed;
  for (auto &a : addresses) {
    if (pol.decide_address(a, own).allowed) allowed.push_back(a);
  }
  if (allowed.empty()) ec = gateway_error::destination_address_denied;
  co_return allowed;
}

net::awaitable<error_code> connect_first(beast::tcp_stream &s, const std::vector<net::ip::address> &addresses,
                                         unsigned port, std::chrono::steady_clock::duration timeout) {
  error_code ec = gateway_error::connection_refused;
  for (auto &a : addresses) {
    s.expires_after(timeout);
    auto [cec] = co_await s.async_connect(tcp::endpoint(a, static_cast<unsigned short>(port)),
                                          net::as_tuple(net::use_awaitable));
    if (!cec) co_return error_code{};
    if (cec == beast::error::timeout) {
      ec = gateway_error::connection_timeout;
    } else if (cec == net::error::network_unreachable || cec == net::error::host_unreachable) {
      ec = gateway_error::destination_unreachable;
    } else {
      ec = gateway_error::connection_refused;
    }
    s.close();
  }
  co_return ec;
}

} // namespace sluice::gateway::upstream
