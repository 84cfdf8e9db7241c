#pragma once
#include <optional>
#include <string_view>

namespace sluice::filters {

// The four sandbox profiles (docs/policy.md), weakest containment last.
enum class profile { offline, network_read, publish, allowlist };

std::string_view to_string(profile p);
std::optional<profile> parse_profile(std::string_view s);

// True when the profile terminates TLS inside CONNECT and judges each request.
inline bool terminates_tls(profile p) {
  return p == profile::network_read || p == profile::publish;
}

// Whether a method may pass under a profile. Methods are case-sensitive tokens (RFC 9110): "get" is
// not GET. TRACE and CONNECT-inside-a-tunnel are refused by every profile.
bool method_allowed(profile p, std::string_view method);

} // namespace sluice::filters
