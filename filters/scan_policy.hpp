#pragma once
// [scan] (docs/policy.md, "What leaves"): the secret scanner's settings as data. The scanner itself
// is scan/ (which includes nothing of filters/); gateway/exchange/ builds scan/'s database from
// this table, and asks scan_hosts how a request to one host is scanned.
#include "filters/host_matcher.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::filters {

struct scan_rule_config {
  std::string id;      // a rule id: a lower-case letter, then [a-z0-9_.-], at most 64
  std::string pattern; // `regex`: RE2 syntax (checked at load)
  std::string action;  // "block" or "report"; "" : [scan] custom
  std::vector<std::string> hosts; // host patterns the rule does not apply to (exempt)
};

struct scan_config {
  bool enabled = true;
  bool canaries = true;       // exec plants canaries, and a request that carries one is refused
  bool caller_secrets = true; // the caller's own secrets (its variables, [credentials] values)
  bool builtin_rules = true;  // `rules`: sluice's rule set of documented secret formats
  // Each kind's default action: "block" or "report".
  std::string format = "block", custom = "block", own_secret = "block", canary = "block";
  std::vector<scan_rule_config> rules;         // [[scan.rule]]
  std::map<std::string, std::string> actions;  // [scan.actions]: rule id -> "block", "report", "off"
  std::vector<std::string> report_hosts;       // host patterns: findings there are reported, not blocked
  std::vector<std::string> off_hosts;          // host patterns: only canaries are looked for there
  // Names of the caller's variables whose values are its own secrets ('*' any run of characters,
  // case ignored).
  std::vector<std::string> own_secret_names = {"*TOKEN*", "*SECRET*", "*KEY*", "*PASSWORD*",
                                               "*PASSWD*", "*CREDENTIAL*", "*AUTH*"};
  std::uint64_t max_decoded_body_bytes = 256ull << 20; // a gzip/deflate body inflated; 0: no bound
};

// The ids of scan/'s built-in rules (scan/rule.hpp; a unit test keeps the two lists equal): what
// [scan.actions] may name besides the custom rules.
const std::vector<std::string_view> &builtin_scan_rule_ids();

// Whether `name` (a variable's) matches one of `patterns` ('*' wildcards, case ignored).
bool secret_name(const std::vector<std::string> &patterns, std::string_view name);

// The per-host part of [scan], compiled: how a request to a host is scanned.
class scan_hosts {
public:
  enum class mode { enforce, report, off };
  scan_hosts() = default;
  explicit scan_hosts(const scan_config &c);
  // off_hosts before report_hosts; a host neither names is enforced.
  mode mode_for(std::string_view host, std::string_view scheme, unsigned port) const;
  // Whether custom rule `id` leaves this host alone ([[scan.rule]] hosts).
  bool exempt(std::string_view id, std::string_view host, std::string_view scheme, unsigned port) const;

private:
  host_matcher report_, off_;
  std::vector<std::pair<std::string, host_matcher>> exempt_;
};

} // namespace sluice::filters
