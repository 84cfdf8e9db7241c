#pragma once
// Inside the config loader (policy_loader.cpp): the field readers every table's loader shares
// (policy_loader_fields.cpp) and one function per top-level table, in files by concern:
// policy_loader_network.cpp ([listen], [policy], [tls], [upstream]), policy_loader_settings.cpp
// ([timeouts], [limits], [log], [sandbox]), policy_loader_approvals.cpp ([approvals]),
// policy_loader_credentials.cpp ([credentials]), policy_loader_identity.cpp ([roles], [clients]),
// policy_loader_skills.cpp ([skills]), policy_loader_services.cpp (tcp and host_services entries)
// and policy_loader_scan.cpp ([scan]). Only the loader's own files include this.
#include "filters/policy.hpp"
#include "filters/policy_loader.hpp"

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>
#include <toml++/toml.h>

namespace sluice::filters::loading {

// A credential's value comes from "env:VAR", "file:/path" or "command:PROGRAM ARGS...".
bool is_credential_source(const std::string &v);

// Carries the file name so that every message starts with "FILE:LINE:".
struct loader {
  std::string source;

  // The whole file: the top level's keys checked, then each table's loader in turn (the order is
  // the order of the messages: a later table may refer to an earlier one's names).
  config load(const toml::table &root) const;

  // Top-level tables, each read into `c`; absent tables leave the defaults.
  void load_top_level(const toml::table &root, config &c) const; // profile, default_skill
  void load_listen(const toml::table &root, config &c) const;
  void load_policy(const toml::table &root, config &c) const;
  void load_tls(const toml::table &root, config &c) const;       // and listen.proxy_tls's pairing with it
  void load_upstream(const toml::table &root, config &c) const;
  void load_timeouts(const toml::table &root, config &c) const;
  void load_limits(const toml::table &root, config &c) const;
  // [[limits.budget]] (policy_loader_limits.cpp); `root` for the [roles] its entries name.
  void budgets_of(const toml::node &n, const toml::table &root, config &c) const;
  void shared_limits_of(const toml::node &n, config &c) const; // [limits.shared]
  void load_log(const toml::table &root, config &c) const;
  void load_sandbox(const toml::table &root, config &c) const;
  void load_approvals(const toml::table &root, config &c) const;
  void load_credentials(const toml::table &root, config &c) const;
  void load_roles(const toml::table &root, config &c) const;     // [roles.NAME], then load_clients
  void load_clients(const toml::table &root, config &c) const;
  void load_skills(const toml::table &root, config &c) const;
  void load_scan(const toml::table &root, config &c) const;
  void load_decider(const toml::table &root, config &c) const; // policy_loader_decider.cpp
  // After the roles (which may ask): [approvals] needs hosts unless a role asks.
  void require_approvals_hosts(const toml::table &root, const config &c) const;
  // After the skills: each host a person allowed always joins every allowlist of the file.
  static void add_allowed_always(config &c);

  // Parts of [credentials.NAME] (policy_loader_credentials.cpp).
  credential_config credential_of(const std::string &name, const toml::node &v) const;
  void credential_source_of(const toml::table &ct, const std::string &where, credential_config &cc) const;

  // Parts of [scan] (policy_loader_scan.cpp): an action ("block", "report", with may_be_off also
  // "off"; unset and no default: ""), and [[scan.rules]].
  std::string scan_action_of(const toml::table &t, std::string_view key, const std::string &where,
                             std::string def, bool may_be_off) const;
  void scan_rules_of(const toml::node &n, scan_config &s) const;

  // Field readers: `where` is how the message names the table ("listen", "[skills.NAME]").
  [[noreturn]] void fail(const toml::node &n, const std::string &msg) const;
  [[noreturn]] void fail_at(const toml::table &t, std::string_view key, const std::string &msg) const;
  void check_keys(const toml::table &t, const std::string &where,
                  std::initializer_list<std::string_view> known) const;
  std::string string_of(const toml::table &t, std::string_view key, const std::string &where,
                        std::string def) const;
  bool bool_of(const toml::table &t, std::string_view key, const std::string &where, bool def) const;
  std::int64_t int_of(const toml::table &t, std::string_view key, const std::string &where,
                      std::int64_t def, std::int64_t min, std::int64_t max) const;
  // A duration written as text ("90s", "14d") within [min, max]; else `message` at its line.
  std::chrono::milliseconds duration_within(const toml::table &t, std::string_view key, std::chrono::milliseconds def,
                                            std::chrono::milliseconds min, std::chrono::milliseconds max,
                                            const std::string &message) const;
  std::chrono::milliseconds duration_of(const toml::table &t, std::string_view key,
                                        const std::string &where,
                                        std::chrono::milliseconds def) const;
  std::vector<std::string> strings_of(const toml::table &t, std::string_view key,
                                      const std::string &where) const;
  profile profile_of(const toml::node &n, const std::string &what) const;
  void check_patterns(const toml::table &t, std::string_view key, const std::string &where) const;
  // An allow or deny list whose entries are host patterns or route tables
  // ({ host = PATTERN, methods = [...] | "read-only", paths = [...] }).
  void entries_of(const toml::table &t, std::string_view key, const std::string &where,
                  std::vector<std::string> &hosts, std::vector<route_rule> &routes) const;
  void check_readable(const toml::table &t, std::string_view key, const std::string &path) const;
  // A route's `mcp = { allow_tools = [...], deny_tools = [...], allow_methods = [...] }`.
  std::shared_ptr<const mcp_rule> mcp_of(const toml::node &n, const std::string &at) const;
  // `ssh = [{ host = "github.com", paths = ["org/*"], port = 22, user = "git",
  // identity = "ssh-agent" | "file:PATH", host_key = "TYPE BASE64" }]`: Git over SSH hosts.
  void ssh_entries_of(const toml::table &t, const std::string &where, std::vector<ssh_rule> &out) const;
  // `tcp = [{ host, port, profiles }]` and `host_services = [{ port, tcp }]`
  // (policy_loader_services.cpp).
  void tcp_entries_of(const toml::table &t, const std::string &where, std::vector<tcp_rule> &out) const;
  void host_services_of(const toml::table &t, const std::string &where, std::vector<host_service> &out) const;
  // A skill's or a role's `credentials`: each a [credentials.NAME] of this file, or "*".
  void check_credential_names(const toml::table &t, const std::string &where,
                              const std::vector<std::string> &names, const config &c) const;
  static bool is_name(std::string_view n);
};

} // namespace sluice::filters::loading
