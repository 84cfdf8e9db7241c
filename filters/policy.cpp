#include "filters/policy.hpp"

#include <algorithm>

namespace sluice::filters {

// A deny rule without a port denies the host on every port: the conservative reading.
namespace {

// The config a role's clients are judged by: the file's, with the role's profile and lists, the
// file's deny list kept, and only the credentials the role names.
config role_view(const config &top, const role_config &r) {
  config c = top;
  c.roles.clear();
  c.clients.clear();
  c.role = r.name;
  c.report = r.report;
  if (r.mode_set) c.mode = r.mode;
  if (r.approvals_set) c.approvals.hosts = r.approvals;
  if (r.allow_set) {
    c.allow = r.allow;
    c.allow_routes = r.allow_routes;
  }
  c.deny.insert(c.deny.end(), r.deny.begin(), r.deny.end());
  c.deny_routes.insert(c.deny_routes.end(), r.deny_routes.begin(), r.deny_routes.end());
  c.credentials.clear();
  for (const auto &cc : top.credentials) {
    for (const auto &name : r.credentials) {
      if (name == "*" || name == cc.name) {
        c.credentials.push_back(cc);
        break;
      }
    }
  }
  return c;
}

std::vector<std::string> with_route_hosts(std::vector<std::string> hosts, const std::vector<route_rule> &routes) {
  for (const auto &r : routes) hosts.push_back(r.host);
  return hosts;
}

// A host service is an allowlisted host for HTTP: host.sluice.internal on its port.
std::vector<std::string> with_host_services(std::vector<std::string> hosts, const std::vector<host_service> &services) {
  for (const auto &s : services) hosts.push_back(s.text);
  return hosts;
}

} // namespace

policy::policy(config cfg)
    : cfg_(std::move(cfg)), allow_(with_route_hosts(with_host_services(cfg_.allow, cfg_.host_services), cfg_.allow_routes)),
      plain_(with_host_services(cfg_.allow, cfg_.host_services)),
      deny_(cfg_.deny, true), askable_(cfg_.approvals.hosts), allow_routes_(cfg_.allow_routes, false), deny_routes_(cfg_.deny_routes, true),
      credentials_(cfg_.credentials), scan_hosts_(cfg_.scan) {
  const auto &rules = cfg_.limits.budgets;
  for (std::size_t i = 0; i < rules.size(); ++i) {
    const auto &roles = rules[i].roles;
    if (!roles.empty() && std::find(roles.begin(), roles.end(), cfg_.role) == roles.end()) continue;
    budgets_.push_back({i, host_matcher(rules[i].hosts, true)});
  }
  for (const auto &[name, r] : cfg_.roles) {
    auto p = std::make_shared<policy>(role_view(cfg_, r));
    p->rps_ = r.requests_per_second;
    p->bps_ = r.bytes_per_second;
    roles_.emplace(name, std::move(p));
  }
}

const client_config *policy::client(std::string_view name) const {
  auto it = cfg_.clients.find(std::string(name));
  return it == cfg_.clients.end() ? nullptr : &it->second;
}

void policy::budgets_for(std::string_view host, std::string_view scheme, unsigned port,
                         std::vector<std::size_t> &out) const {
  for (const auto &b : budgets_) {
    if (b.hosts.patterns().empty() || b.hosts.match(host, scheme, port)) out.push_back(b.index);
  }
}

policy_ptr policy::for_client(std::string_view name) const {
  const auto *c = client(name);
  if (!c) return nullptr;
  auto it = roles_.find(c->role);
  return it == roles_.end() ? nullptr : it->second;
}

host_parse_result policy::normalized(std::string_view raw_host) {
  // The gateway passes normalized names, which write an IPv6 literal without its brackets.
  if (!raw_host.empty() && raw_host.front() != '[' && raw_host.find(':') != std::string_view::npos) {
    return parse_host("[" + std::string(raw_host) + "]");
  }
  return parse_host(raw_host);
}

decision policy::decide_host(std::string_view scheme, const host_name &h, unsigned port,
                             const std::string *&rule, bool approved) const {
  const auto &host = h.name;
  // "localhost" names this machine whatever DNS says; refuse it before any lookup.
  if (!h.ip && (host == "localhost" || host.ends_with(".localhost"))) {
    if (!allow_.match(host, scheme, port)) {
      return decision::deny("localhost_refused");
    }
  }
  if (const auto *d = deny_.match(host, scheme, port)) {
    return decision::deny("host_denied", *d);
  }
  rule = allow_.match(host, scheme, port);
  if (!rule && approved) {
    static const std::string approved_rule = "approved";
    rule = &approved_rule;
  }
  if (!rule) {
    return decision::deny("host_not_allowlisted");
  }
  return decision{true, "allowed", {}};
}

decision policy::decide(std::string_view method, std::string_view scheme, std::string_view raw_host,
                        unsigned port, std::string_view target) const {
  auto parsed = normalized(raw_host);
  if (!parsed.host) {
    return decision::deny(parsed.reason);
  }
  return reported(decide_rules(method, scheme, *parsed.host, port, target));
}

decision policy::decide(std::string_view method, std::string_view scheme, const host_name &host, unsigned port,
                        std::string_view target) const {
  return reported(decide_rules(method, scheme, host, port, target));
}

decision policy::decide_connect(std::string_view raw_host, unsigned port) const {
  return reported(connect_rules(raw_host, port));
}

decision policy::decide_approved(std::string_view method, std::string_view scheme, const host_name &host,
                                 unsigned port, std::string_view target) const {
  return decide_rules(method, scheme, host, port, target, true);
}

decision policy::decide_connect_approved(std::string_view raw_host, unsigned port) const {
  return connect_rules(raw_host, port, true);
}

bool policy::askable(std::string_view host, std::string_view scheme, unsigned port) const {
  return !cfg_.approvals.hosts.empty() && askable_.match(host, scheme, port) != nullptr;
}

decision policy::reported(decision d) const {
  if (d.allowed || !cfg_.report) return d;
  // What the role's lists, profile and routes refuse; never a malformed name, "localhost" or an
  // ambiguous path (those are not policy but protocol).
  static constexpr std::string_view relaxed[] = {"host_denied", "host_not_allowlisted", "route_denied",
                                                 "method_not_allowed", "route_not_allowed", "offline",
                                                 "route_needs_termination", "websocket_refused"};
  for (auto r : relaxed) {
    if (d.reason == r) {
      d.allowed = true;
      d.would_deny = true;
      return d;
    }
  }
  return d;
}

decision policy::decide_rules(std::string_view method, std::string_view scheme, const host_name &h, unsigned port,
                              std::string_view target, bool approved) const {
  const std::string *rule = nullptr; // set once the host is allowed
  auto d = decide_host(scheme, h, port, rule, approved);
  if (!d.allowed) {
    return d;
  }
  const auto &host = h.name;
  if (const auto *r = deny_routes_.match(method, target, host, scheme, port, true)) {
    return decision::deny("route_denied", r->text);
  }
  // TRACE (and CONNECT inside a tunnel) pass no profile and no route.
  const bool profile_allows = method_allowed(cfg_.mode, method);
  const auto *plain = plain_.match(host, scheme, port);
  if (!plain && approved && !allow_.match(host, scheme, port)) plain = rule; // allowed by a person: as a plain entry
  if (plain && profile_allows) {
    return decision::allow(*plain);
  }
  bool forbidden = method == "TRACE" || method == "CONNECT";
  if (const auto *r = forbidden ? nullptr : allow_routes_.match(method, target, host, scheme, port, profile_allows)) {
    return decision::allow(r->text); // a route from the trusted policy may widen the profile
  }
  if (plain || !profile_allows) {
    return decision::deny("method_not_allowed", plain ? *plain : *rule);
  }
  return decision::deny(route_path(target) ? "route_not_allowed" : "ambiguous_path", *rule);
}

decision policy::decide_websocket(std::string_view scheme, const host_name &host, unsigned port,
                                  std::string_view target, std::string rule) const {
  if (cfg_.mode != profile::network_read) {
    return decision::allow(std::move(rule));
  }
  if (const auto *r = allow_routes_.match("GET", target, host.name, scheme, port, true, true)) {
    return decision::allow(r->text);
  }
  return reported(decision::deny("websocket_refused", std::move(rule)));
}

const route_rule *policy::mcp_route(std::string_view scheme, const host_name &host, unsigned port,
                                    std::string_view target, bool websocket) const {
  return allow_routes_.match(websocket ? "GET" : "POST", target, host.name, scheme, port, true, websocket, true);
}

const ssh_rule *policy::ssh_host(std::string_view host, unsigned port) const {
  for (const auto &r : cfg_.ssh) {
    if (r.host == host && r.port == port) return &r;
  }
  return nullptr;
}

const tcp_rule *policy::tcp_entry(std::string_view host, unsigned port) const {
  if (cfg_.mode == profile::offline) return nullptr;
  for (const auto &r : cfg_.tcp) {
    if (r.host != host || r.port != port) continue;
    if (r.profiles.empty() || std::find(r.profiles.begin(), r.profiles.end(), cfg_.mode) != r.profiles.end()) return &r;
  }
  return nullptr;
}

const host_service *policy::host_service_on(unsigned port) const {
  for (const auto &s : cfg_.host_services) {
    if (s.port == port) return &s;
  }
  return nullptr;
}

bool policy::tcp_granted(std::string_view host, unsigned port) const {
  if (cfg_.mode == profile::offline) return false;
  if (host == host_service_name) {
    const auto *s = host_service_on(port);
    return s && s->tcp;
  }
  return tcp_entry(host, port) != nullptr;
}

decision policy::decide_tcp(std::string_view host, unsigned port) const {
  if (cfg_.mode == profile::offline) return decision::deny("offline");
  if (host == host_service_name) {
    const auto *s = host_service_on(port);
    if (!s) return reported(decision::deny("host_service_not_granted"));
    if (!s->tcp) return reported(decision::deny("tcp_not_allowed", s->text));
    return decision::allow(s->text);
  }
  if (const auto *d = deny_.match(host, "tcp", port)) return reported(decision::deny("host_denied", *d));
  if (const auto *r = tcp_entry(host, port)) return decision::allow(r->text);
  return reported(decision::deny("tcp_not_allowed"));
}

decision policy::decide_ssh(std::string_view host, unsigned port, git_ssh_service service,
                            std::string_view repository) const {
  if (cfg_.mode == profile::offline) return decision::deny("offline");
  const auto *r = ssh_host(host, port);
  if (!r) return reported(decision::deny("ssh_host_not_allowed"));
  if (service == git_ssh_service::receive_pack && cfg_.mode == profile::network_read) {
    return reported(decision::deny("git_push_refused", r->text));
  }
  if (!ssh_repository_matches(r->paths, repository)) {
    return reported(decision::deny("ssh_repository_not_allowed", r->text));
  }
  return decision::allow(r->text);
}

decision policy::connect_rules(std::string_view raw_host, unsigned port, bool approved) const {
  if (cfg_.mode == profile::offline) {
    return decision::deny("offline");
  }
  auto parsed = normalized(raw_host);
  if (!parsed.host) {
    return decision::deny(parsed.reason);
  }
  const auto &host = parsed.host->name;
  const std::string *rule = nullptr;
  auto d = decide_host("https", *parsed.host, port, rule, approved);
  if (!d.allowed) return d;
  // allowlist passes tunnels it does not open: a route's methods and paths could not be held there.
  if (cfg_.mode == profile::allowlist && !approved && !plain_.match(host, "https", port)) {
    return decision::deny("route_needs_termination", *rule);
  }
  return decision::allow(*rule);
}

decision policy::decide_address(const boost::asio::ip::address &addr,
                                const std::vector<boost::asio::ip::address> &own) const {
  for (const auto &r : cfg_.allow_addresses) {
    if (r.contains(addr)) {
      return decision::allow({});
    }
  }
  auto c = classify(addr, own);
  if (c == address_class::global) {
    return decision::allow({});
  }
  return decision::deny("destination_address_denied");
}

} // namespace sluice::filters
