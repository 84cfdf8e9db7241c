// The loader's entries for what is not HTTP: `tcp = [{ host, port, profiles }]` (a skill's, and
// serve's [policy]) and a skill's `host_services = [{ port, tcp }]` (docs/policy.md, "Beyond HTTP").
#include "filters/policy_loader_detail.hpp"

#include <set>

namespace sluice::filters::loading {

namespace {
unsigned port_in(const loader &l, const toml::table &t, const std::string &at, const char *example) {
  auto *p = t.get("port");
  if (!p) l.fail(t, at + ": an entry needs port = NUMBER, as in " + std::string(example));
  auto n = p->value<std::int64_t>();
  if (!n || *n < 1 || *n > 65535) l.fail(*p, at + ": port must be a number 1-65535");
  return static_cast<unsigned>(*n);
}
} // namespace

void loader::tcp_entries_of(const toml::table &t, const std::string &where, std::vector<tcp_rule> &out) const {
  auto *node = t.get("tcp");
  if (!node) return;
  const std::string at = where + " tcp";
  const char *example = "{ host = \"db.internal\", port = 5432 }";
  auto *arr = node->as_array();
  if (!arr) fail(*node, at + " must be a list of tables such as " + example);
  for (auto &&e : *arr) {
    auto *rt = e.as_table();
    if (!rt) fail(e, at + " must hold tables such as " + example);
    check_keys(*rt, at + " entry", {"host", "port", "profiles"});
    tcp_rule r;
    auto host = (*rt)["host"].value<std::string>();
    if (!host) fail(e, at + ": an entry needs host = \"NAME\" (the name the command connects to)");
    auto parsed = parse_host(*host);
    if (!parsed.host || parsed.host->ip || parsed.host->name != *host || *host == host_service_name) {
      fail(*rt->get("host"), at + ": host must be a host name in lower case, no port, pattern or address "
                                  "(got '" + *host + "'); the host's own ports are host_services");
    }
    r.host = *host;
    r.port = port_in(*this, *rt, at, example);
    if (auto *ps = rt->get("profiles")) {
      auto *list = ps->as_array();
      if (!list || list->empty()) fail(*ps, at + ": profiles must be a non-empty list such as [\"publish\"]");
      for (auto &&x : *list) {
        auto p = profile_of(x, at + " profiles");
        if (p == profile::offline) fail(x, at + " profiles: nothing passes offline; leave it out");
        r.profiles.push_back(p);
      }
    }
    r.text = "tcp://" + r.host + ":" + std::to_string(r.port);
    out.push_back(std::move(r));
  }
}

void loader::host_services_of(const toml::table &t, const std::string &where, std::vector<host_service> &out) const {
  auto *node = t.get("host_services");
  if (!node) return;
  const std::string at = where + " host_services";
  const char *example = "{ port = 3000 }";
  auto *arr = node->as_array();
  if (!arr) fail(*node, at + " must be a list of tables such as " + std::string(example));
  std::set<unsigned> seen;
  for (auto &&e : *arr) {
    auto *rt = e.as_table();
    if (!rt) fail(e, at + " must hold tables such as " + std::string(example) + " or { port = 6379, tcp = true }");
    check_keys(*rt, at + " entry", {"port", "tcp"});
    host_service s;
    s.port = port_in(*this, *rt, at, example);
    if (!seen.insert(s.port).second) fail(e, at + ": port " + std::to_string(s.port) + " is named twice");
    s.tcp = bool_of(*rt, "tcp", at, false);
    s.text = std::string(host_service_name) + ":" + std::to_string(s.port);
    out.push_back(s);
  }
}

} // namespace sluice::filters::loading
