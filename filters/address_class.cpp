#include "filters/address_class.hpp"

#include <array>
#include <charconv>
#include <stdexcept>
#include <string>

namespace sluice::filters {
namespace {

using boost::asio::ip::address;
using boost::asio::ip::address_v4;
using boost::asio::ip::address_v6;

bool in4(uint32_t a, uint32_t net, unsigned bits) {
  uint32_t mask = bits == 0 ? 0 : ~uint32_t(0) << (32 - bits);
  return (a & mask) == (net & mask);
}
constexpr uint32_t v4(unsigned a, unsigned b, unsigned c, unsigned d) {
  return (a << 24) | (b << 16) | (c << 8) | d;
}

address_class classify_v4(uint32_t a) {
  if (a == v4(169, 254, 169, 254) || a == v4(100, 100, 100, 200) || a == v4(192, 0, 0, 192)) {
    return address_class::metadata;
  }
  if (in4(a, v4(0, 0, 0, 0), 8)) return address_class::unspecified;
  if (in4(a, v4(127, 0, 0, 0), 8)) return address_class::loopback;
  if (in4(a, v4(10, 0, 0, 0), 8) || in4(a, v4(172, 16, 0, 0), 12) ||
      in4(a, v4(192, 168, 0, 0), 16)) {
    return address_class::private_net;
  }
  if (in4(a, v4(169, 254, 0, 0), 16)) return address_class::link_local;
  if (in4(a, v4(100, 64, 0, 0), 10)) return address_class::cgnat;
  if (a == v4(255, 255, 255, 255)) return address_class::broadcast;
  if (in4(a, v4(224, 0, 0, 0), 4)) return address_class::multicast;
  if (in4(a, v4(192, 0, 0, 0), 24) || in4(a, v4(192, 0, 2, 0), 24) ||
      in4(a, v4(192, 88, 99, 0), 24) || in4(a, v4(198, 18, 0, 0), 15) ||
      in4(a, v4(198, 51, 100, 0), 24) || in4(a, v4(203, 0, 113, 0), 24) ||
      in4(a, v4(240, 0, 0, 0), 4)) {
    return address_class::reserved;
  }
  return address_class::global;
}

uint32_t embedded_v4(const address_v6::bytes_type &b, std::size_t at) {
  return (uint32_t(b[at]) << 24) | (uint32_t(b[at + 1]) << 16) | (uint32_t(b[at + 2]) << 8) |
         uint32_t(b[at + 3]);
}

bool prefix6(const address_v6::bytes_type &b, std::initializer_list<uint8_t> p, unsigned bits) {
  unsigned i = 0;
  for (auto byte : p) {
    unsigned take = bits >= 8 ? 8 : bits;
    if (take == 0) break;
    uint8_t mask = static_cast<uint8_t>(0xff << (8 - take));
    if ((b[i] & mask) != (byte & mask)) return false;
    bits -= take;
    ++i;
  }
  return true;
}

address_class classify_v6(const address_v6 &a) {
  auto b = a.to_bytes();
  bool first80_zero = true;
  for (int i = 0; i < 10; ++i) first80_zero = first80_zero && b[i] == 0;
  if (first80_zero && b[10] == 0xff && b[11] == 0xff) {
    return classify_v4(embedded_v4(b, 12)); // ::ffff:a.b.c.d
  }
  if (a.is_unspecified()) return address_class::unspecified;
  if (a.is_loopback()) return address_class::loopback;
  if (first80_zero && b[10] == 0 && b[11] == 0) {
    return classify_v4(embedded_v4(b, 12)); // deprecated IPv4-compatible ::a.b.c.d
  }
  if (a == boost::asio::ip::make_address_v6("fd00:ec2::254")) return address_class::metadata;
  // 64:ff9b::/96 well-known NAT64 prefix: the gateway would reach the embedded IPv4 address.
  if (prefix6(b, {0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0}, 96)) {
    return classify_v4(embedded_v4(b, 12));
  }
  if (prefix6(b, {0x00, 0x64, 0xff, 0x9b, 0x00, 0x01}, 48)) return address_class::private_net;
  if (prefix6(b, {0x20, 0x02}, 16)) return classify_v4(embedded_v4(b, 2)); // 6to4
  if (prefix6(b, {0x20, 0x01, 0x00, 0x00}, 32)) return address_class::teredo;
  if (prefix6(b, {0xfc}, 7)) return address_class::private_net;
  if (prefix6(b, {0xfe, 0x80}, 10)) return address_class::link_local;
  if (prefix6(b, {0xfe, 0xc0}, 10)) return address_class::private_net; // deprecated site-local
  if (prefix6(b, {0xff}, 8)) return address_class::multicast;
  if (prefix6(b, {0x20, 0x01, 0x0d, 0xb8}, 32) || prefix6(b, {0x20, 0x01, 0x00, 0x10}, 28) ||
      prefix6(b, {0x20, 0x01, 0x00, 0x20}, 28) || prefix6(b, {0x01, 0x00, 0, 0, 0, 0, 0, 0}, 64)) {
    return address_class::reserved; // documentation, ORCHID, discard-only
  }
  if (!prefix6(b, {0x20}, 3)) return address_class::reserved; // outside global unicast
  return address_class::global;
}

} // namespace

std::string_view to_string(address_class c) {
  switch (c) {
  case address_class::global: return "global";
  case address_class::unspecified: return "unspecified";
  case address_class::loopback: return "loopback";
  case address_class::private_net: return "private";
  case address_class::link_local: return "link_local";
  case address_class::metadata: return "metadata";
  case address_class::cgnat: return "cgnat";
  case address_class::multicast: return "multicast";
  case address_class::broadcast: return "broadcast";
  case address_class::reserved: return "reserved";
  case address_class::teredo: return "teredo";
  case address_class::own_address: return "own_address";
  }
  return "unknown";
}

address_class classify(const address &addr, const std::vector<address> &own) {
  address_class c = addr.is_v4() ? classify_v4(addr.to_v4().to_uint())
                                 : classify_v6(addr.to_v6());
  if (c == address_class::global) {
    for (const auto &o : own) {
      if (o == addr) return address_class::own_address;
    }
  }
  return c;
}

bool address_range::contains(const address &a) const {
  address x = a;
  if (x.is_v6() && x.to_v6().is_v4_mapped()) {
    x = boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, x.to_v6());
  }
  if (x.is_v4() != base.is_v4()) return false;
  if (x.is_v4()) return in4(x.to_v4().to_uint(), base.to_v4().to_uint(), prefix);
  auto xb = x.to_v6().to_bytes();
  auto bb = base.to_v6().to_bytes();
  unsigned bits = prefix;
  for (std::size_t i = 0; i < 16 && bits > 0; ++i) {
    unsigned take = bits >= 8 ? 8 : bits;
    uint8_t mask = static_cast<uint8_t>(0xff << (8 - take));
    if ((xb[i] & mask) != (bb[i] & mask)) return false;
    bits -= take;
  }
  return true;
}

address_range parse_address_range(std::string_view text) {
  auto slash = text.find('/');
  std::string addr_part(text.substr(0, slash));
  boost::system::error_code ec;
  auto base = boost::asio::ip::make_address(addr_part, ec);
  if (ec) {
    throw std::invalid_argument("address range '" + std::string(text) +
                                "' is not an IP address; write e.g. 198.18.0.0/15 or ::1/128");
  }
  unsigned max = base.is_v4() ? 32 : 128;
  unsigned prefix = max;
  if (slash != std::string_view::npos) {
    auto digits = text.substr(slash + 1);
    auto [p, e] = std::from_chars(digits.data(), digits.data() + digits.size(), prefix);
    if (e != std::errc() || p != digits.data() + digits.size() || prefix > max) {
      throw std::invalid_argument("address range '" + std::string(text) +
                                  "': prefix length must be 0.." + std::to_string(max));
    }
  }
  return {base, prefix};
}

} // namespace sluice::filters
