// The loader's [[limits.budget]] entries: rates, exchanges at once and byte budgets per set of
// hosts, counted per run, per client or per client and day (docs/policy.md, "Limits and budgets").
#include "filters/policy_loader_detail.hpp"

#include <algorithm>
#include <cstdlib>

namespace sluice::filters::loading {

namespace {

bool budget_name_ok(std::string_view n) {
  if (n.empty() || n.size() > 64) return false;
  return std::all_of(n.begin(), n.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.';
  });
}

} // namespace

void loader::budgets_of(const toml::node &n, const toml::table &root, config &c) const {
  auto *arr = n.as_array();
  if (!arr) fail(n, "limits.budget must be an array of tables: [[limits.budget]] with name = \"...\"");
  const auto *roles = root["roles"].as_table();
  for (auto &&e : *arr) {
    auto *t = e.as_table();
    if (!t) fail(e, "each [[limits.budget]] must be a table");
    check_keys(*t, "[[limits.budget]]", {"name", "hosts", "roles", "per", "requests_per_second", "burst",
                                         "connections", "bytes_out", "bytes_in"});
    budget_rule b;
    b.name = string_of(*t, "name", "[[limits.budget]]", "");
    if (!budget_name_ok(b.name)) {
      fail(e, "[[limits.budget]] needs name = \"NAME\" (lower-case letters, digits, '-', '_' or '.', at most "
              "64): it names the budget in refusals, metrics and the summary");
    }
    const std::string where = "[[limits.budget]] " + b.name;
    for (const auto &other : c.limits.budgets) {
      if (other.name == b.name) fail(e, where + ": another budget has this name; names must be unique");
    }
    b.hosts = strings_of(*t, "hosts", where);
    for (const auto &h : b.hosts) {
      try {
        host_matcher m({h}, true);
      } catch (const pattern_error &err) {
        fail_at(*t, "hosts", where + " hosts: " + err.what());
      }
    }
    b.roles = strings_of(*t, "roles", where);
    for (const auto &r : b.roles) {
      if (!roles || !roles->contains(r)) {
        fail_at(*t, "roles", where + " roles names \"" + r + "\", which is not a [roles.NAME] of this file");
      }
    }
    auto per = string_of(*t, "per", where, "client");
    if (per == "run") b.per = budget_rule::scope::run;
    else if (per == "client") b.per = budget_rule::scope::client;
    else if (per == "day") b.per = budget_rule::scope::day;
    else fail_at(*t, "per", where + " per must be \"run\" (all clients together), \"client\" (each on its own) "
                                   "or \"day\" (each client, refilled at 00:00 UTC)");
    for (auto key : {"requests_per_second", "burst"}) {
      auto *v = t->get(key);
      if (!v) continue;
      auto d = v->value<double>();
      if (!d || !(*d > 0) || *d > 1e6) fail(*v, where + " " + key + " must be a number above 0 (at most 1000000)");
      (std::string_view(key) == "burst" ? b.burst : b.requests_per_second) = *d;
    }
    if (b.burst > 0 && b.requests_per_second == 0) {
      fail_at(*t, "burst", where + " sets burst without requests_per_second: the burst is what may come at "
                                   "once above that rate");
    }
    b.connections = static_cast<std::uint64_t>(int_of(*t, "connections", where, 0, 1, 1'000'000));
    b.bytes_out = static_cast<std::uint64_t>(int_of(*t, "bytes_out", where, 0, 1, INT64_MAX));
    b.bytes_in = static_cast<std::uint64_t>(int_of(*t, "bytes_in", where, 0, 1, INT64_MAX));
    if (b.requests_per_second == 0 && b.connections == 0 && b.bytes_out == 0 && b.bytes_in == 0) {
      fail(e, where + " limits nothing: set requests_per_second, connections, bytes_out or bytes_in");
    }
    c.limits.budgets.push_back(std::move(b));
  }
}

void loader::shared_limits_of(const toml::node &n, config &c) const {
  auto *t = n.as_table();
  if (!t) fail(n, "limits.shared must be a table: [limits.shared] with redis = \"HOST:PORT\"");
  check_keys(*t, "[limits.shared]", {"redis", "fail_open", "timeout", "key_prefix"});
  auto &s = c.limits.shared;
  s.redis = string_of(*t, "redis", "[limits.shared]", "");
  auto colon = s.redis.rfind(':');
  bool ok = colon != std::string::npos && colon > 0 && colon + 1 < s.redis.size() &&
            std::all_of(s.redis.begin() + static_cast<long>(colon) + 1, s.redis.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  if (ok) {
    long port = std::strtol(s.redis.c_str() + colon + 1, nullptr, 10);
    ok = port > 0 && port < 65536;
  }
  if (!ok) {
    fail_at(*t, "redis", "[limits.shared] redis must be \"HOST:PORT\" (a Redis server every replica reaches, "
                         "for example \"redis:6379\")");
  }
  s.fail_open = bool_of(*t, "fail_open", "[limits.shared]", false);
  s.timeout = duration_within(*t, "timeout", s.timeout, std::chrono::milliseconds(10), std::chrono::seconds(10),
                              "[limits.shared] timeout must be a duration from \"10ms\" to \"10s\" (how long a "
                              "request waits for Redis before fail_open decides)");
  s.key_prefix = string_of(*t, "key_prefix", "[limits.shared]", s.key_prefix);
  if (!budget_name_ok(s.key_prefix)) {
    fail_at(*t, "key_prefix", "[limits.shared] key_prefix must be lower-case letters, digits, '-', '_' or '.'");
  }
}

} // namespace sluice::filters::loading
