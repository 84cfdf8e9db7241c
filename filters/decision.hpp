#pragma once
#include <string>
#include <string_view>

namespace sluice::filters {

// The outcome of one policy check. `reason` is a stable, low-cardinality string that flows unchanged
// into the metric label, the access log and the Proxy-Status details; `rule` is the matched allowlist
// entry as written in the config (never the raw host).
struct decision {
  bool allowed = false;
  std::string_view reason;
  std::string rule;
  // Report mode: allowed, but enforce would have refused it for `reason`.
  bool would_deny = false;

  static decision allow(std::string rule) { return {true, "allowed", std::move(rule)}; }
  static decision deny(std::string_view reason, std::string rule = {}) {
    return {false, reason, std::move(rule)};
  }
};

} // namespace sluice::filters
