// The loader's [skills.NAME] tables: each skill's profiles, domains, grants, environment,
// filesystem, credentials, approvals and Git over SSH hosts.
#include "filters/policy_loader_detail.hpp"

namespace sluice::filters::loading {
namespace {

// `unix_sockets = ["/path", { path = "/path", root_equivalent = true }]`: each an absolute path or
// ~/PATH; whether the socket exists is asked when a command runs (exec/unix_sockets.cpp).
std::vector<unix_socket_rule> unix_sockets_of(const loader &l, const toml::table &s, const std::string &where) {
  std::vector<unix_socket_rule> out;
  auto *n = s.get("unix_sockets");
  if (!n) return out;
  auto *arr = n->as_array();
  if (!arr) l.fail(*n, where + " unix_sockets must be an array of paths or { path = ..., root_equivalent = true }");
  for (auto &&e : *arr) {
    unix_socket_rule r;
    if (auto p = e.value<std::string>()) {
      r.path = *p;
    } else if (auto *t = e.as_table()) {
      l.check_keys(*t, where + " unix_sockets entry", {"path", "root_equivalent"});
      r.path = l.string_of(*t, "path", where + " unix_sockets", "");
      r.root_equivalent = l.bool_of(*t, "root_equivalent", where + " unix_sockets", false);
    } else {
      l.fail(e, where + " unix_sockets: each entry is a path or { path = ..., root_equivalent = true }");
    }
    if (r.path.empty() || (r.path[0] != '/' && r.path.rfind("~/", 0) != 0)) {
      l.fail(e, where + " unix_sockets: \"" + r.path + "\" must be an absolute path or ~/PATH");
    }
    out.push_back(std::move(r));
  }
  return out;
}

} // namespace

void loader::load_skills(const toml::table &root, config &c) const {
  auto *t = root["skills"].as_table();
  if (!t) return;
  for (auto &&[k, v] : *t) {
    auto *s = v.as_table();
    std::string where = "[skills." + std::string(k.str()) + "]";
    if (!s) fail(v, "skills." + std::string(k.str()) + " must be a table");
    check_keys(*s, where, {"default_profile", "escalations", "allow_domains", "grants",
                           "keep_env", "filesystem", "filesystem_escalations", "credentials",
                           "writable", "ask_domains", "ask_profiles", "nested_userns", "ssh", "journal",
                           "tcp", "host_services", "unix_sockets"});
    skill_config sk;
    sk.name = std::string(k.str());
    if (auto *p = s->get("default_profile")) sk.default_profile = profile_of(*p, where + " default_profile");
    if (auto *arr = (*s)["escalations"].as_array()) {
      for (auto &&e : *arr) sk.escalations.push_back(profile_of(e, where + " escalations"));
    }
    entries_of(*s, "allow_domains", "skills." + sk.name, sk.allow_domains, sk.allow_routes);
    ssh_entries_of(*s, where, sk.ssh);
    tcp_entries_of(*s, where, sk.tcp);
    host_services_of(*s, where, sk.host_services);
    sk.unix_sockets = unix_sockets_of(*this, *s, where);
    sk.grants = strings_of(*s, "grants", "skills." + sk.name);
    sk.keep_env = strings_of(*s, "keep_env", "skills." + sk.name);
    sk.credentials = strings_of(*s, "credentials", "skills." + sk.name);
    sk.writable = strings_of(*s, "writable", "skills." + sk.name);
    if (s->get("nested_userns")) sk.nested_userns = bool_of(*s, "nested_userns", "skills." + sk.name, false);
    if (s->get("journal")) sk.journal = bool_of(*s, "journal", "skills." + sk.name, false);
    check_patterns(*s, "ask_domains", "skills." + sk.name);
    sk.ask_domains = strings_of(*s, "ask_domains", "skills." + sk.name);
    if (auto *n = s->get("ask_profiles")) {
      auto *arr = n->as_array();
      if (!arr) fail(*n, where + " ask_profiles must be an array of profiles");
      for (auto &&e : *arr) {
        auto p = profile_of(e, where + " ask_profiles");
        if (p == profile::offline) fail(e, where + " ask_profiles: offline needs no approval; leave it out");
        sk.ask_profiles.push_back(p);
      }
    }
    for (const auto &w : sk.writable) {
      if (w.empty() || (w[0] != '/' && w.rfind("~/", 0) != 0)) {
        fail_at(*s, "writable", where + " writable: \"" + w + "\" must be an absolute path or ~/PATH");
      }
    }
    check_credential_names(*s, where, sk.credentials, c);
    auto fs_of = [&](const toml::node &n, const std::string &what) {
      auto v = n.value<std::string>();
      if (!v || (*v != "read-only" && *v != "workspace-write")) {
        fail(n, what + " must be \"read-only\" or \"workspace-write\"");
      }
      return *v == "read-only";
    };
    if (auto *f = s->get("filesystem")) sk.read_only_workspace = fs_of(*f, where + " filesystem");
    sk.may_write_workspace = !sk.read_only_workspace;
    if (auto *arr = (*s)["filesystem_escalations"].as_array()) {
      for (auto &&e : *arr) {
        if (!fs_of(e, where + " filesystem_escalations")) sk.may_write_workspace = true;
      }
    }
    c.skills[sk.name] = std::move(sk);
  }
}

} // namespace sluice::filters::loading
