// The loader's [scan] table: the secret scanner's kinds, rules, hosts and bounds (filters/scan_policy.hpp).
#include "filters/policy_loader_detail.hpp"

#include <re2/re2.h>
#include <algorithm>

namespace sluice::filters::loading {
namespace {

bool rule_id(std::string_view id) {
  if (id.empty() || id.size() > 64 || id[0] < 'a' || id[0] > 'z') return false;
  return id.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_.-") == std::string_view::npos;
}

bool builtin(std::string_view id) {
  const auto &ids = builtin_scan_rule_ids();
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

} // namespace

std::string loader::scan_action_of(const toml::table &t, std::string_view key, const std::string &where,
                                   std::string def, bool may_be_off) const {
  auto v = string_of(t, key, where, def);
  if (v.empty() && !t.get(key)) return v; // unset, no default: the kind's
  if (v == "block" || v == "report" || (may_be_off && v == "off")) return v;
  fail_at(t, key, where + "." + std::string(key) + " must be \"block\" or \"report\"" +
                      (may_be_off ? " or \"off\" (the rule not looked for)" : "") + ", not \"" + v + "\"");
}

void loader::scan_rules_of(const toml::node &n, scan_config &s) const {
  const std::string what = "[[scan.rule]] tables, each with id = \"NAME\" and regex = \"RE2\" (action and hosts optional)";
  auto *arr = n.as_array();
  if (!arr) fail(n, "scan.rule must be " + what);
  for (auto &&e : *arr) {
    auto *t = e.as_table();
    if (!t) fail(e, "scan.rule must be " + what);
    check_keys(*t, "[[scan.rule]]", {"id", "regex", "action", "hosts"});
    scan_rule_config r;
    r.id = string_of(*t, "id", "[[scan.rule]]", "");
    r.pattern = string_of(*t, "regex", "[[scan.rule]]", "");
    if (!rule_id(r.id)) {
      fail(e, "[[scan.rule]] id = \"" + r.id + "\": a rule id is a lower-case letter, then lower-case letters, "
              "digits, '_', '-' or '.' (at most 64); it names the rule in the log and in [scan.actions]");
    }
    if (builtin(r.id) || r.id == "own_secret" || r.id == "canary" ||
        std::any_of(s.rules.begin(), s.rules.end(), [&](const scan_rule_config &o) { return o.id == r.id; })) {
      fail(e, "[[scan.rule]] id = \"" + r.id + "\" is taken (a built-in rule or another [[scan.rule]]); "
              "choose another id (or set a built-in rule's action in [scan.actions])");
    }
    RE2::Options o;
    o.set_log_errors(false);
    RE2 re(r.pattern, o);
    if (r.pattern.empty() || !re.ok()) {
      fail(e, "[[scan.rule]] \"" + r.id + "\": regex must be an RE2 regular expression" +
                  (r.pattern.empty() ? std::string(" (it is missing)") : ": " + re.error()));
    }
    if (RE2::PartialMatch("", re)) {
      fail(e, "[[scan.rule]] \"" + r.id + "\": the pattern matches the empty string and so every request; "
              "make it match at least one character");
    }
    r.action = scan_action_of(*t, "action", "[[scan.rule]]", "", false);
    check_patterns(*t, "hosts", "scan.rule");
    r.hosts = strings_of(*t, "hosts", "scan.rule");
    s.rules.push_back(std::move(r));
  }
}

void loader::load_scan(const toml::table &root, config &c) const {
  auto *n = root.get("scan");
  if (!n) return;
  auto *t = n->as_table();
  if (!t) fail(*n, "scan must be a table: [scan] (the secret scanner's settings)");
  check_keys(*t, "[scan]", {"enabled", "canaries", "caller_secrets", "rules", "rule", "format", "custom",
                            "own_secret", "canary", "actions", "report_hosts", "off_hosts", "own_secret_names",
                            "max_decoded_body_bytes"});
  auto &s = c.scan;
  s.enabled = bool_of(*t, "enabled", "scan", s.enabled);
  s.canaries = bool_of(*t, "canaries", "scan", s.canaries);
  s.caller_secrets = bool_of(*t, "caller_secrets", "scan", s.caller_secrets);
  s.builtin_rules = bool_of(*t, "rules", "scan", s.builtin_rules);
  s.format = scan_action_of(*t, "format", "scan", s.format, false);
  s.custom = scan_action_of(*t, "custom", "scan", s.custom, false);
  s.own_secret = scan_action_of(*t, "own_secret", "scan", s.own_secret, false);
  s.canary = scan_action_of(*t, "canary", "scan", s.canary, false);
  if (auto *r = t->get("rule")) scan_rules_of(*r, s);
  if (auto *a = t->get("actions")) {
    auto *at = a->as_table();
    if (!at) fail(*a, "scan.actions must be a table: [scan.actions] with RULE_ID = \"block\" | \"report\" | \"off\"");
    for (auto &&[key, v] : *at) {
      std::string id(key.str());
      bool custom = std::any_of(s.rules.begin(), s.rules.end(), [&](const scan_rule_config &r) { return r.id == id; });
      if (!builtin(id) && !custom) {
        fail(v, "[scan.actions] " + id + ": no such rule; name a built-in rule (docs/policy.md, \"What leaves\") "
                "or the id of a [[scan.rule]] table");
      }
      s.actions[id] = scan_action_of(*at, key.str(), "[scan.actions]", "", true);
    }
  }
  check_patterns(*t, "report_hosts", "scan");
  check_patterns(*t, "off_hosts", "scan");
  s.report_hosts = strings_of(*t, "report_hosts", "scan");
  s.off_hosts = strings_of(*t, "off_hosts", "scan");
  if (t->get("own_secret_names")) {
    s.own_secret_names = strings_of(*t, "own_secret_names", "scan");
    for (const auto &p : s.own_secret_names) {
      if (p.empty() || p.find_first_not_of("*") == std::string::npos ||
          p.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_*") != std::string::npos) {
        fail_at(*t, "own_secret_names", "[scan] own_secret_names: \"" + p + "\" must be a variable name pattern "
                "(letters, digits, '_' and '*' wildcards, such as \"*TOKEN*\"), not only wildcards");
      }
    }
  }
  s.max_decoded_body_bytes = static_cast<std::uint64_t>(
      int_of(*t, "max_decoded_body_bytes", "scan", static_cast<std::int64_t>(s.max_decoded_body_bytes), 0, INT64_MAX));
}

} // namespace sluice::filters::loading
