#pragma once
#include <boost/asio/ip/address.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::filters {

// A host as the gateway matches it: a lower-case DNS name without a trailing dot, or an IP literal in
// canonical form (IPv4 dotted quad; IPv4-mapped IPv6 folded to IPv4; IPv6 without brackets).
struct host_name {
  std::string name;
  std::optional<boost::asio::ip::address> ip;
};

// Normalizes a host taken from a CONNECT authority, URL or Host header. Returns the reason on refusal:
// "invalid_host" (syntax), "ambiguous_host" (a numeric form that resolvers read differently, such as
// 0177.1, 0x7f.1, 2130706433 or 127.1), "non_ascii_host" (raw UTF-8: IDNs must arrive as xn-- labels).
struct host_parse_result {
  std::optional<host_name> host;
  std::string_view reason;
};
host_parse_result parse_host(std::string_view raw);

// Splits "host:port" or "[v6]:port"; the port is 0 when absent. Returns false when malformed or out of
// range (port must be 1..65535).
bool split_authority(std::string_view authority, std::string_view &host, unsigned &port);

// A listen address: an IP literal and a port, "127.0.0.1:3128" or "[::1]:3128". Empty when malformed,
// when the port is missing or 0, or when the host is a name.
struct listen_address {
  boost::asio::ip::address ip;
  unsigned short port = 0;
};
std::optional<listen_address> parse_listen_address(std::string_view text);

// The address a hosts(5) file (text as read) gives `name`, if it lists it. sluice resolves with DNS
// only; this serves the message of a dns_error for a name that only /etc/hosts knows.
std::optional<std::string> hosts_file_address(std::string_view hosts_text, std::string_view name);

} // namespace sluice::filters
