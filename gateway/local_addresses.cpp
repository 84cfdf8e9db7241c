#include "gateway/local_addresses.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

namespace sluice::gateway {

std::vector<boost::asio::ip::address> local_addresses() {
  std::vector<boost::asio::ip::address> out;
  ifaddrs *list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (auto *i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    if (i->ifa_addr->sa_family == AF_INET) {
      auto *sin = reinterpret_cast<sockaddr_in *>(i->ifa_addr);
      out.emplace_back(boost::asio::ip::address_v4(ntohl(sin->sin_addr.s_addr)));
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      auto *sin6 = reinterpret_cast<sockaddr_in6 *>(i->ifa_addr);
      boost::asio::ip::address_v6::bytes_type b;
      std::copy(std::begin(sin6->sin6_addr.s6_addr), std::end(sin6->sin6_addr.s6_addr), b.begin());
      out.emplace_back(boost::asio::ip::address_v6(b));
    }
  }
  freeifaddrs(list);
  return out;
}

} // namespace sluice::gateway
