#pragma once
#include <boost/asio/ip/address.hpp>
#include <string_view>
#include <vector>

namespace sluice::filters {

// What an upstream address is, for the decision whether the gateway may dial it.
enum class address_class {
  global,       // ordinary public unicast
  unspecified,  // 0.0.0.0/8, ::
  loopback,     // 127/8, ::1
  private_net,  // RFC 1918, fc00::/7 unique-local, 64:ff9b:1::/48 local NAT64
  link_local,   // 169.254/16, fe80::/10
  metadata,     // cloud instance metadata: 169.254.169.254, fd00:ec2::254, 100.100.100.200
  cgnat,        // 100.64/10 shared address space
  multicast,    // 224/4, ff00::/8
  broadcast,    // 255.255.255.255
  reserved,     // documentation, benchmarking (198.18/15), 240/4, IETF blocks, non-2000::/3 IPv6
  teredo,       // 2001::/32 hides an arbitrary IPv4 client
  own_address,  // an address of one of this host's interfaces
};

std::string_view to_string(address_class c);

// Classifies an address. IPv4-mapped, IPv4-compatible, NAT64 (64:ff9b::/96) and 6to4 (2002::/16)
// addresses are classified by the IPv4 address they embed. `own` lists this host's interface addresses.
address_class classify(const boost::asio::ip::address &addr,
                       const std::vector<boost::asio::ip::address> &own = {});

// A CIDR range, for `allow_addresses` and tests.
struct address_range {
  boost::asio::ip::address base;
  unsigned prefix = 0;
  bool contains(const boost::asio::ip::address &a) const;
};
// Parses "198.18.0.0/15" or "::1/128"; throws std::invalid_argument naming the input.
address_range parse_address_range(std::string_view text);

} // namespace sluice::filters
