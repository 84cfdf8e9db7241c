// filters/ names scan/'s built-in rule ids for [scan.actions] without including scan/: the two lists
// must be the same.
#include "filters/scan_policy.hpp"
#include "scan/rule.hpp"

#include <catch2/catch.hpp>

TEST_CASE("filters knows every built-in rule id", "[scan][filters]") {
  std::vector<std::string> a, b;
  for (const auto &r : sluice::scan::builtin_rules()) a.push_back(r.id);
  for (auto id : sluice::filters::builtin_scan_rule_ids()) b.emplace_back(id);
  CHECK(a == b);
}
