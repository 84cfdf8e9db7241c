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
  explicit host_matcher(const std::vector<std::string> &patterns);
  host_matcher(host_matcher &&) noexcept;
  host_matcher &operator=(host_matcher &&) noexcept;
  ~host_matcher();

  // The first matching pattern (as written) for a normalized host, or nullopt.
  std::optional<std::string> match(std::string_view host, std::string_view scheme,
                                   unsigned port) const;

  const std::vector<host_pattern> &patterns() const { return patterns_; }
  bool has_regex() const { return !regexes_.empty(); }

private:
  std::vector<host_pattern> patterns_;
  std::unordered_map<std::string, std::vector<std::size_t>> exact_;
  std::unordered_map<std::string, std::vector<std::size_t>> suffix_;
  std::vector<std::pair<std::unique_ptr<re2::RE2>, std::size_t>> regexes_;
};

} // namespace sluice::filters
