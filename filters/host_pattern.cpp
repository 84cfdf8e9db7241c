#include "filters/host_pattern.hpp"
#include "filters/host_name.hpp"

#include <charconv>

namespace sluice::filters {
namespace {

// Takes a trailing ":PORT" off `body` when present.
unsigned take_port(std::string_view &body, std::string_view text) {
  auto colon = body.rfind(':');
  if (colon == std::string_view::npos || (!body.empty() && body.back() == ']')) {
    return 0;
  }
  auto digits = body.substr(colon + 1);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) {
    if (body.front() == '[' || body.substr(0, 3) == "re:") {
      return 0;
    }
    throw pattern_error("pattern '" + std::string(text) +
                        "': the port after ':' must be a number from 1 to 65535");
  }
  unsigned port = 0;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (ec != std::errc() || port == 0 || port > 65535) {
    throw pattern_error("pattern '" + std::string(text) + "': port " + std::string(digits) +
                        " is out of range; use 1 to 65535");
  }
  body = body.substr(0, colon);
  return port;
}

} // namespace

host_pattern parse_host_pattern(std::string_view text) {
  host_pattern out;
  out.text = std::string(text);
  if (text.empty()) {
    throw pattern_error("empty host pattern; write a host such as api.github.com, *.github.com "
                        "or re:REGEX");
  }
  std::string_view body = text;
  if (body.substr(0, 3) == "re:") {
    body.remove_prefix(3);
    // A regex may itself hold ':'; only a trailing ":DIGITS" is a port.
    auto colon = body.rfind(':');
    if (colon != std::string_view::npos && colon + 1 < body.size() &&
        body.substr(colon + 1).find_first_not_of("0123456789") == std::string_view::npos) {
      std::string_view port_part = body;
      out.port = take_port(port_part, text);
      body = port_part;
    }
    if (body.empty()) {
      throw pattern_error("pattern '" + std::string(text) + "': the regex after 're:' is empty");
    }
    out.type = host_pattern::kind::regex;
    out.value = std::string(body);
    return out;
  }
  out.port = take_port(body, text);
  bool wildcard = body.substr(0, 2) == "*.";
  if (wildcard) {
    body.remove_prefix(2);
  }
  if (body.find('*') != std::string_view::npos) {
    throw pattern_error("pattern '" + std::string(text) +
                        "': '*' is only allowed as a leading '*.' label; use re: for other shapes");
  }
  auto parsed = parse_host(body);
  if (!parsed.host) {
    throw pattern_error("pattern '" + std::string(text) + "' is not a valid host (" +
                        std::string(parsed.reason) +
                        "); write a DNS name, a dotted-quad IPv4 or a [bracketed] IPv6 address");
  }
  if (wildcard && parsed.host->ip) {
    throw pattern_error("pattern '" + std::string(text) + "': '*.' cannot precede an IP address");
  }
  if (wildcard && parsed.host->name.find('.') == std::string::npos) {
    throw pattern_error("pattern '" + std::string(text) +
                        "' would match a whole top-level domain; name a registrable domain");
  }
  out.type = wildcard ? host_pattern::kind::subdomains : host_pattern::kind::exact;
  out.value = parsed.host->name;
  return out;
}

} // namespace sluice::filters
