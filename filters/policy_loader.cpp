// The config loader: parses the TOML and hands each top-level table to its own loader
// (policy_loader_detail.hpp lists them and their files).
#include "filters/policy_loader.hpp"
#include "filters/policy_loader_detail.hpp"

#include <charconv>
#include <fstream>
#include <sstream>

namespace sluice::filters {
namespace loading {

config loader::load(const toml::table &root) const {
  config c;
  c.source = source;
  check_keys(root, "the top level",
             {"profile", "listen", "policy", "tls", "upstream", "timeouts", "limits", "log",
              "skills", "default_skill", "sandbox", "credentials", "roles", "clients", "approvals", "scan", "decider"});
  load_top_level(root, c);
  load_listen(root, c);
  load_policy(root, c);
  load_tls(root, c);
  load_upstream(root, c);
  load_timeouts(root, c);
  load_limits(root, c);
  load_log(root, c);
  load_sandbox(root, c);
  load_approvals(root, c);
  load_scan(root, c);
  load_decider(root, c);
  load_credentials(root, c); // before the roles and skills that name them
  load_roles(root, c);
  require_approvals_hosts(root, c);
  load_skills(root, c);
  add_allowed_always(c);
  return c;
}

void loader::load_top_level(const toml::table &root, config &c) const {
  if (auto *n = root.get("profile")) c.mode = profile_of(*n, "profile");
  c.default_skill = string_of(root, "default_skill", "", c.default_skill);
}

} // namespace loading

std::chrono::milliseconds parse_duration(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  if (i == 0 || i > 12) throw std::invalid_argument("bad duration");
  std::int64_t n = 0;
  std::from_chars(text.data(), text.data() + i, n);
  auto unit = text.substr(i);
  if (unit.empty() || unit == "s") return std::chrono::seconds(n);
  if (unit == "ms") return std::chrono::milliseconds(n);
  if (unit == "m") return std::chrono::minutes(n);
  if (unit == "h") return std::chrono::hours(n);
  if (unit == "d") return std::chrono::hours(24 * n);
  throw std::invalid_argument("bad duration unit");
}

namespace {

toml::table parse_toml(std::string_view text, const std::string &source_name) {
  try {
    return toml::parse(text, source_name);
  } catch (const toml::parse_error &e) {
    throw config_error(source_name + ":" + std::to_string(e.source().begin.line) + ": " +
                       std::string(e.description()) + "; fix the TOML syntax");
  }
}

std::string read_config_file(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    throw config_error(path + ": cannot open the config file; check the path and its permissions");
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

} // namespace

config load_config_string(std::string_view text, const std::string &source_name) {
  loading::loader l{source_name};
  return l.load(parse_toml(text, source_name));
}

config load_config_file(const std::string &path) {
  return load_config_string(read_config_file(path), path);
}

admin_access load_admin_access(const std::string &path) {
  auto root = parse_toml(read_config_file(path), path);
  loading::loader l{path};
  config c;
  l.load_listen(root, c);
  l.load_approvals(root, c);
  return {c.admin_listen, c.approvals.token_file};
}

config builtin_config() {
  config c;
  c.source = "built-in";
  c.mode = profile::offline;
  skill_config s;
  s.name = "default";
  s.default_profile = profile::offline;
  s.escalations = {profile::network_read, profile::allowlist, profile::publish};
  s.grants = {"*"}; // the built-in policy trusts its caller; a policy file narrows this per skill
  s.credentials = {"*"};
  c.skills["default"] = s;
  return c;
}

} // namespace sluice::filters
