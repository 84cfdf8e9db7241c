#pragma once
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::filters {

// One allow or deny entry: `api.github.com` (exact), `*.github.com` (subdomains only, not the apex),
// `re:REGEX` (RE2, full match), each with an optional `:PORT`. Without a port the pattern matches 443
// for https and 80 for http.
struct host_pattern {
  enum class kind { exact, subdomains, regex };
  kind type = kind::exact;
  std::string text;  // as written in the config; used as the `rule` label
  std::string value; // normalized host, the suffix after "*.", or the regex
  unsigned port = 0; // 0: scheme default
  // For a regex: the DNS subtrees every name it matches lies in (from the regex's literal domain
  // suffix, one per top-level alternative); empty when it has none. The CA's name constraints.
  std::vector<std::string> domains;
};

// Thrown with a message naming the pattern and the fix.
struct pattern_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

host_pattern parse_host_pattern(std::string_view text);

// The DNS subtrees a regex's matches are confined to, read off its literal suffix: for
// `(api|www)\.github\.com` "github.com", for `pkg[0-9]+\.example\.org` "example.org", for
// `a\.test|b\.example\.org` both. Empty when some alternative ends in anything but literal
// labels (`.*`, `\.(com|org)`, `[a-z]+`): such a regex has no name-constraint equivalent.
std::vector<std::string> regex_domain_suffixes(std::string_view regex);

// For an allow entry: throws pattern_error when it is a regex without a literal domain suffix, so
// that no CA is ever issued without name constraints.
void require_constrainable(const host_pattern &p);

// True when a request for `scheme` on `port` satisfies a pattern's port.
inline bool port_matches(unsigned pattern_port, std::string_view scheme, unsigned port) {
  if (pattern_port != 0) {
    return pattern_port == port;
  }
  return (scheme == "https" && port == 443) || (scheme == "http" && port == 80);
}

} // namespace sluice::filters
