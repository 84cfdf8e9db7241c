#include "exec/profile_resolver.hpp"
#include "exec/environment.hpp"
#include "filters/policy_loader.hpp"
#include "credentials/load.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <toml++/toml.h>
#include <unistd.h>

namespace sluice::exec {
namespace {

bool readable(const std::string &path) { return ::access(path.c_str(), R_OK) == 0; }

// A skill's grant list names `name` itself or "*".
bool grants(const std::vector<std::string> &list, const std::string &name) {
  return std::find(list.begin(), list.end(), name) != list.end() ||
         std::find(list.begin(), list.end(), "*") != list.end();
}

std::string names(const std::vector<filters::profile> &ps) {
  std::string out;
  for (auto p : ps) out += (out.empty() ? "" : ", ") + std::string(filters::to_string(p));
  return out.empty() ? "none" : out;
}

// A repository policy: [policy] allow (intersected with the trusted list), deny (added), and
// profile (only a stronger one). Anything else in it is refused.
void apply_repo_policy(const std::string &path, resolved_exec &out) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error &e) {
    throw refusal("repository policy " + path + ":" + std::to_string(e.source().begin.line) + ": " +
                  std::string(e.description()) + "; fix it or remove the file");
  }
  for (auto &&[k, v] : root) {
    if (k.str() == "unix_sockets" || k.str() == "skills") {
      // A grant: a repository's own file could hand its commands Docker's socket.
      throw refusal("repository policy " + path + ":" + std::to_string(v.source().begin.line) + ": key '" +
                    std::string(k.str()) + "' is not allowed here; a repository may only narrow, and Unix sockets "
                    "and skills are granted by the trusted policy ([skills.NAME] unix_sockets) or the "
                    "command line (--allow-unix-socket)");
    }
    if (k.str() != "profile" && k.str() != "policy" && k.str() != "filesystem") {
      throw refusal("repository policy " + path + ":" + std::to_string(v.source().begin.line) +
                    ": key '" + std::string(k.str()) +
                    "' is not allowed here; a repository may only set profile (stronger), "
                    "filesystem = \"read-only\" and [policy] allow/deny (narrower)");
    }
  }
  if (auto s = root["profile"].value<std::string>()) {
    auto p = filters::parse_profile(*s);
    if (!p) throw refusal("repository policy " + path + ": unknown profile '" + *s + "'");
    if (strength(*p) < strength(out.gateway.mode)) {
      throw refusal("repository policy " + path + " asks for profile " + *s + ", weaker than " +
                    std::string(filters::to_string(out.gateway.mode)) +
                    "; a repository may only narrow the policy");
    }
    out.gateway.mode = *p;
  }
  if (auto fs = root["filesystem"].value<std::string>()) {
    if (*fs == "read-only") {
      out.read_only_workspace = true;
    } else if (*fs != "workspace-write" || out.read_only_workspace) {
      throw refusal("repository policy " + path + ": filesystem = \"" + *fs +
                    "\" is not allowed; a repository may only narrow it to \"read-only\"");
    }
  }
  if (auto *pol = root["policy"].as_table()) {
    for (auto &&[k, v] : *pol) {
      if (k.str() != "allow" && k.str() != "deny") {
        throw refusal("repository policy " + path + ":" + std::to_string(v.source().begin.line) + ": [policy] " +
                      std::string(k.str()) + " is not allowed here; a repository may only narrow allow and deny "
                      "(TCP, host services and sockets are granted by the trusted policy)");
      }
    }
    auto hosts_only = [&](const toml::node &e, const char *key) {
      auto s = e.value<std::string>();
      if (!s) {
        throw refusal("repository policy " + path + ":" + std::to_string(e.source().begin.line) +
                      ": [policy] " + key + " may list host patterns only; routes (methods and "
                      "paths) belong in the trusted policy");
      }
      return *s;
    };
    if (auto *deny = (*pol)["deny"].as_array()) {
      for (auto &&e : *deny) out.gateway.deny.push_back(hosts_only(e, "deny"));
    }
    if (auto *allow = (*pol)["allow"].as_array()) {
      std::vector<std::string> repo;
      for (auto &&e : *allow) repo.push_back(hosts_only(e, "allow"));
      // A route survives when the repository lists its host.
      std::erase_if(out.gateway.allow_routes, [&](const filters::route_rule &r) {
        return std::find(repo.begin(), repo.end(), r.host) == repo.end();
      });
      // Intersection: an entry survives only when the trusted policy already had it.
      std::vector<std::string> kept;
      for (auto &a : out.gateway.allow) {
        if (std::find(repo.begin(), repo.end(), a) != repo.end()) kept.push_back(a);
      }
      out.gateway.allow = std::move(kept);
      // TCP entries and host services survive when the repository names their host (or host:port).
      auto named = [&](const std::string &host, unsigned port) {
        return std::find(repo.begin(), repo.end(), host) != repo.end() ||
               std::find(repo.begin(), repo.end(), host + ":" + std::to_string(port)) != repo.end();
      };
      std::erase_if(out.gateway.tcp, [&](const filters::tcp_rule &r) { return !named(r.host, r.port); });
      std::erase_if(out.gateway.host_services, [&](const filters::host_service &s) {
        return !named(std::string(filters::host_service_name), s.port);
      });
    }
  }
  out.repo_policy = path;
}

} // namespace

int strength(filters::profile p) {
  switch (p) {
  case filters::profile::offline: return 3;
  case filters::profile::network_read: return 2;
  case filters::profile::publish: return 1;
  case filters::profile::allowlist: return 0;
  }
  return 0;
}

std::vector<std::string> trusted_policy_dirs() {
  std::vector<std::string> out;
  if (const char *xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg) {
    out.push_back(std::string(xdg) + "/sluice");
  } else if (const char *home = std::getenv("HOME"); home && *home) {
    out.push_back(std::string(home) + "/.config/sluice");
  }
  out.push_back("/etc/sluice");
  return out;
}

filters::config load_trusted_policy(const std::string &explicit_file) {
  if (!explicit_file.empty()) return filters::load_config_file(explicit_file);
  for (const auto &dir : trusted_policy_dirs()) {
    std::string c = dir + "/policy.toml";
    if (readable(c)) return filters::load_config_file(c);
  }
  return filters::builtin_config();
}

namespace {

// The skill asked for (the policy's default_skill when none), or a refusal naming those there are.
const filters::skill_config &find_skill(const filters::config &trusted, const std::string &name) {
  auto it = trusted.skills.find(name);
  if (it == trusted.skills.end()) {
    std::string known;
    for (auto &[n, s] : trusted.skills) known += (known.empty() ? "" : ", ") + n;
    throw refusal("unknown skill '" + name + "' in policy " + trusted.source +
                  "; known skills: " + (known.empty() ? "none" : known) +
                  " (add [skills." + name + "] to the policy file)");
  }
  return it->second;
}

// The profile asked for (the skill's default when none): one the skill declares, and publish only
// with its confirmation.
filters::profile choose_profile(const exec_request &req, const filters::skill_config &skill,
                                const resolved_exec &out, const filters::config &trusted) {
  auto mode = req.profile.value_or(skill.default_profile);
  // A profile the skill lets a person approve (ask_profiles) is declared for whoever runs exec:
  // the hook asks that person before it passes such a command on.
  auto listed = [&](const std::vector<filters::profile> &list) {
    return std::find(list.begin(), list.end(), mode) != list.end();
  };
  bool declared = mode == skill.default_profile || listed(skill.escalations) || listed(skill.ask_profiles);
  if (!declared) {
    throw refusal("profile " + std::string(filters::to_string(mode)) + " is not allowed for skill '" +
                  out.skill + "' (default " + std::string(filters::to_string(skill.default_profile)) +
                  ", escalations: " + names(skill.escalations) + "); declare it under [skills." +
                  out.skill + "] escalations in " + trusted.source);
  }
  if (mode == filters::profile::publish && !req.confirm_side_effects) {
    throw refusal("the publish profile can change things outside this machine; pass "
                  "--confirm-external-side-effects to run it");
  }
  return mode;
}

// The environment: credential variables the skill grants (--allow-env), non-secret ones kept.
void resolve_environment(const exec_request &req, const filters::skill_config &skill, filters::profile mode,
                         const filters::config &trusted, resolved_exec &out) {
  for (const auto &name : req.allow_env) {
    if (mode == filters::profile::allowlist) {
      throw refusal("--allow-env " + name + ": the allowlist profile passes tunnels sluice cannot "
                    "inspect, so it takes no credential grants; use network-read or publish");
    }
    if (!grants(skill.grants, name)) {
      throw refusal("--allow-env " + name + ": skill '" + out.skill + "' does not grant it; add \"" +
                    name + "\" to grants under [skills." + out.skill + "] in " + trusted.source);
    }
    out.grants.push_back(name);
  }
  out.keep = skill.keep_env;
  for (const auto &name : req.keep_env) {
    const char *value = std::getenv(name.c_str());
    if (is_credential_name(name) || (value && is_credential_value(value))) {
      throw refusal("--keep-env " + name + ": it " +
                    (is_credential_name(name) ? std::string("looks like a credential")
                                              : std::string("holds a URL with a password")) +
                    "; pass it with --allow-env " + name + ", which needs a grant under [skills." +
                    out.skill + "] in " + trusted.source);
    }
    out.keep.push_back(name);
  }
}

// The filesystem: the workspace read-only or writable, the sandbox's settings, the directories
// granted writable (the skill's, then --allow-write).
void resolve_filesystem(const exec_request &req, const filters::skill_config &skill, const filters::config &trusted,
                        resolved_exec &out) {
  out.read_only_workspace = req.read_only.value_or(skill.read_only_workspace);
  if (!out.read_only_workspace && !skill.may_write_workspace) {
    throw refusal("--filesystem workspace-write is not allowed for skill '" + out.skill +
                  "' (default read-only); declare it under [skills." + out.skill +
                  "] filesystem_escalations in " + trusted.source);
  }
  out.require_landlock = trusted.require_landlock;
  out.nested_userns = skill.nested_userns.value_or(trusted.nested_userns);
  out.journal = skill.journal.value_or(trusted.journal);
  out.credential_files = trusted.credential_files;
  out.max_workspace_entries = trusted.max_workspace_entries;
  out.guarded_names = trusted.guarded_names;
  out.caches = trusted.caches;
  out.caches.insert(out.caches.end(), req.caches.begin(), req.caches.end());
  const char *home = std::getenv("HOME");
  for (const auto &w : skill.writable) {
    std::string path = w;
    if (path.rfind("~/", 0) == 0) {
      if (!home || home[0] != '/') {
        throw refusal("[skills." + out.skill + "] writable \"" + w + "\" in " + trusted.source +
                      " names the home, but HOME is unset; set HOME or give an absolute path");
      }
      path = home + path.substr(1);
    }
    out.writable.push_back({path, "[skills." + out.skill + "] writable in " + trusted.source});
  }
  for (const auto &w : req.allow_write) {
    if (w.empty()) throw refusal("--allow-write: the path is empty; name a directory");
    std::string path = w[0] == '/' ? w : req.working_dir + "/" + w;
    out.writable.push_back({path, "--allow-write"});
  }
}

// The gateway's configuration: the trusted policy with the skill's allowlist, routes and SSH hosts
// and the profile chosen, plus --allow-domain's hosts.
void resolve_gateway(const exec_request &req, const filters::skill_config &skill, const filters::config &trusted,
                     filters::profile mode, resolved_exec &out) {
  out.skill_config = skill;
  out.gateway = trusted;
  out.gateway.mode = mode;
  out.gateway.skills.clear();
  out.gateway.allow = skill.allow_domains;
  out.gateway.allow_routes = skill.allow_routes;
  out.gateway.ssh = skill.ssh; // Git over SSH: the skill's hosts only (never --allow-domain's)
  out.gateway.tcp = skill.tcp; // TCP and the host's ports: the skill's only, as SSH
  out.gateway.host_services = skill.host_services;
  for (const auto &d : req.allow_domains) {
    try {
      filters::host_matcher compiled({d}); // a bad regex is reported first, with RE2's words
      filters::require_constrainable(filters::parse_host_pattern(d));
    } catch (const filters::pattern_error &e) {
      throw refusal(std::string("--allow-domain: ") + e.what());
    }
    out.gateway.allow.push_back(d);
  }
  out.gateway.access_log.clear(); // exec writes its own log (--access-log)
}

// One credential asked for (--credential NAME): granted by the skill, on hosts the allowlist
// already has; its secret is read here, by sluice, and never enters the sandbox.
filters::credential_config grant_credential(const std::string &name, const filters::skill_config &skill,
                                            const filters::config &trusted, filters::profile mode,
                                            resolved_exec &out) {
  auto def = std::find_if(trusted.credentials.begin(), trusted.credentials.end(),
                          [&](const filters::credential_config &c) { return c.name == name; });
  if (def == trusted.credentials.end()) {
    throw refusal("--credential " + name + ": no [credentials." + name + "] in " + trusted.source +
                  "; define it there (source, hosts, header, format)");
  }
  if (!grants(skill.credentials, name)) {
    throw refusal("--credential " + name + ": skill '" + out.skill + "' does not grant it; add \"" +
                  name + "\" to credentials under [skills." + out.skill + "] in " + trusted.source);
  }
  if (mode != filters::profile::network_read && mode != filters::profile::publish) {
    throw refusal("--credential " + name + ": the " + std::string(filters::to_string(mode)) +
                  " profile has no request sluice could add it to; use network-read or publish");
  }
  std::vector<std::string> listed_hosts = out.gateway.allow;
  for (const auto &r : out.gateway.allow_routes) listed_hosts.push_back(r.host);
  filters::host_matcher allowlist(listed_hosts);
  for (const auto &h : def->hosts) {
    auto p = filters::parse_host_pattern(h);
    bool listed = std::find(listed_hosts.begin(), listed_hosts.end(), h) != listed_hosts.end();
    if (!listed && p.type == filters::host_pattern::kind::exact) {
      unsigned port = p.port ? p.port : 443;
      listed = allowlist.match(p.value, "https", port) != nullptr;
    }
    if (!listed) {
      throw refusal("--credential " + name + ": its host " + h + " is not on the allowlist; a "
                    "credential only goes where requests may go (--allow-domain " + h + ")");
    }
  }
  if (!def->env.empty() && std::find(out.grants.begin(), out.grants.end(), def->env) != out.grants.end()) {
    throw refusal("--credential " + name + " with --allow-env " + def->env + " would hand the "
                  "secret to the command; drop --allow-env " + def->env);
  }
  auto c = *def;
  try {
    credentials::load_credential(c, trusted); // an OAuth2 token is had with the trusted [tls] and [upstream]
  } catch (const filters::config_error &e) {
    throw refusal(e.what());
  }
  filters::make_placeholders(c, true); // a shaped one is new for every command
  if (!c.env.empty()) out.placeholders.push_back(c.env + "=" + c.placeholder);
  if (c.aws) {
    out.placeholders.push_back("AWS_ACCESS_KEY_ID=" + c.placeholder);
    out.placeholders.push_back("AWS_SECRET_ACCESS_KEY=" + c.aws->placeholder_secret);
  }
  return c;
}

} // namespace

resolved_exec resolve_exec(const exec_request &req) {
  filters::config trusted;
  try {
    trusted = load_trusted_policy(req.policy_file);
  } catch (const filters::config_error &e) {
    throw refusal(std::string(e.what()));
  }
  resolved_exec out;
  out.policy_source = trusted.source;
  out.skill = req.skill.empty() ? trusted.default_skill : req.skill;
  const auto &skill = find_skill(trusted, out.skill);
  auto mode = choose_profile(req, skill, out, trusted);
  resolve_environment(req, skill, mode, trusted, out);
  resolve_filesystem(req, skill, trusted, out);
  resolve_gateway(req, skill, trusted, mode, out);
  out.unix_sockets = grant_sockets(skill.unix_sockets, out.skill, trusted.source, req.unix_sockets, req.working_dir);
  // Credentials: only those asked for, granted by the skill, on hosts the allowlist already has.
  std::vector<filters::credential_config> granted;
  for (const auto &name : req.credentials) granted.push_back(grant_credential(name, skill, trusted, mode, out));
  out.gateway.credentials = std::move(granted);
  if (!req.working_dir.empty()) {
    std::string repo = req.working_dir + "/.sluice/policy.toml";
    if (readable(repo)) apply_repo_policy(repo, out);
  }
  return out;
}

} // namespace sluice::exec
