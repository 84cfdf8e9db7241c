#pragma once
#include "filters/host_pattern.hpp"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace re2 {
class RE2;
}

namespace sluice::filters {

// A compiled set of host patterns. Exact names and `*.` suffixes are hash lookups (one per label of the
// host), regexes are compiled once at load, so a decision costs the same with 10 or 100,000 rules.
class host_matcher {
public:
  host_matcher() = default;
  // `portless_any_port`: a pattern without a port matches every port (deny lists), instead of the
  // scheme's default port (allow lists).
  explicit host_matcher(const std::vector<std::string> &patterns, bool portless_any_port = false);
  host_matcher(host_matcher &&) noexcept;
  host_matcher &operator=(host_matcher &&) noexcept;
  ~host_matcher();

  // The first matching pattern (as written) for a normalized host, or null. The text is the
  // matcher's own (no copy on the request path): valid as long as the matcher.
  const std::string *match(std::string_view host, std::string_view scheme, unsigned port) const;

  const std::vector<host_pattern> &patterns() const { return patterns_; }
  bool has_regex() const { return !regexes_.empty(); }

private:
  bool port_ok(const host_pattern &p, std::string_view scheme, unsigned port) const {
    return (portless_any_port_ && p.port == 0) || port_matches(p.port, scheme, port);
  }


  // Looked up by string_view: a request's host is never copied to be found.
  struct name_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using index = std::unordered_map<std::string, std::vector<std::size_t>, name_hash, std::equal_to<>>;

  std::vector<host_pattern> patterns_;
  bool portless_any_port_ = false;
  index exact_;
  index suffix_;
  std::vector<std::pair<std::unique_ptr<re2::RE2>, std::size_t>> regexes_;
};

} // namespace sluice::filters
