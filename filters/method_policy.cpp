#include "filters/method_policy.hpp"

namespace sluice::filters {

std::string_view to_string(profile p) {
  switch (p) {
  case profile::offline: return "offline";
  case profile::network_read: return "network-read";
  case profile::publish: return "publish";
  case profile::allowlist: return "allowlist";
  }
  return "unknown";
}

std::optional<profile> parse_profile(std::string_view s) {
  if (s == "offline") return profile::offline;
  if (s == "network-read") return profile::network_read;
  if (s == "publish") return profile::publish;
  if (s == "allowlist") return profile::allowlist;
  return std::nullopt;
}

bool method_allowed(profile p, std::string_view method) {
  if (method.empty() || method == "TRACE" || method == "CONNECT") {
    return false;
  }
  for (char c : method) {
    if (c < 'A' || c > 'Z') {
      return false; // only upper-case registered-style tokens; "get" and "G-ET" are refused
    }
  }
  switch (p) {
  case profile::offline: return false;
  case profile::network_read: return method == "GET" || method == "HEAD" || method == "OPTIONS";
  case profile::publish:
  case profile::allowlist: return true;
  }
  return false;
}

} // namespace sluice::filters
