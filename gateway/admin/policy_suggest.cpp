#include "gateway/admin/policy_suggest.hpp"
#include "filters/client_identity.hpp"
#include "filters/route_matcher.hpp"

#include <boost/json.hpp>
#include <fstream>
#include <map>
#include <ostream>
#include <set>
#include <stdexcept>

namespace sluice::gateway {
namespace {

namespace js = boost::json;

// Refusals an allow entry lifts; anything else is not a list's to lift.
bool liftable(std::string_view reason) {
  for (auto r : {"host_not_allowlisted", "method_not_allowed", "route_not_allowed", "offline",
                 "route_needs_termination"}) {
    if (reason == r) return true;
  }
  return false;
}

struct host_seen {
  std::set<std::string> methods; // of requests (CONNECT aside)
  std::set<std::string> paths;
  bool any_path = false;    // a request whose path routes cannot name one way, or only CONNECTs
  bool passthrough = false; // refused as needing termination (allowlist): routes cannot hold
  std::size_t requests = 0;
  std::set<std::string> reasons;
};

// An MCP route's calls (docs/policy.md, "MCP routes"): the tools and methods it was sent, and
// those its mcp table refused or would have (report mode).
struct mcp_seen {
  std::set<std::string> tools;           // every tool called, allowed or not (but denied ones)
  std::set<std::string> methods;         // methods refused as not allowed
  std::set<std::string> denied;          // tools a deny_tools pattern names: never suggested
  std::size_t refused = 0;
};

struct group {
  std::set<std::string> clients;
  std::map<std::string, host_seen> hosts; // by host pattern ("name" or "name:port")
  std::map<std::string, mcp_seen> mcp;    // by the MCP route's rule
  std::size_t suggested = 0, denied_by_entry = 0, other = 0;
};

std::string quoted(std::string_view s) { return js::serialize(js::value(js::string(s))); }

// The paths of one route: exact ones, or their longest common directory with '*' when there are
// too many to list.
std::vector<std::string> route_paths(const std::set<std::string> &paths) {
  constexpr std::size_t max_listed = 12;
  if (paths.size() <= max_listed) return {paths.begin(), paths.end()};
  std::string common = *paths.begin();
  for (const auto &p : paths) {
    std::size_t i = 0;
    while (i < common.size() && i < p.size() && common[i] == p[i]) ++i;
    common.resize(i);
  }
  common.resize(common.rfind('/') + 1); // a directory, never half a segment
  return {common + "*"};
}

std::string text_of(const js::object &o, std::string_view key) {
  if (auto *v = o.if_contains(key); v && v->is_string()) return std::string(v->as_string());
  return {};
}

std::vector<std::string> split_commas(const std::string &s) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= s.size() && !s.empty()) {
    auto comma = s.find(',', at);
    out.push_back(s.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

// A line of an MCP route (it has mcp_method): its tools join the route's list. True when it was
// refused by the route's mcp table (reasons mcp_tool_*, mcp_method_not_allowed), which only an
// mcp table lifts.
bool mcp_line(const js::object &o, std::string_view decision, std::string_view reason, group &g) {
  auto &m = g.mcp[text_of(o, "rule")];
  const bool refused = decision == "deny" || decision == "would_deny";
  for (const auto &tool : split_commas(text_of(o, "mcp_tool"))) {
    if (reason == "mcp_tool_denied" && refused) {
      m.denied.insert(tool);
    } else {
      m.tools.insert(tool);
    }
  }
  if (refused && reason == "mcp_method_not_allowed") {
    for (const auto &method : split_commas(text_of(o, "mcp_method"))) {
      if (method != "initialize" && method != "ping" && method != "tools/list" && method != "tools/call" &&
          !method.starts_with("notifications/")) {
        m.methods.insert(method);
      }
    }
  }
  const bool ours = refused && (reason == "mcp_tool_not_allowed" || reason == "mcp_tool_denied" ||
                                reason == "mcp_method_not_allowed");
  if (ours) ++m.refused;
  return ours;
}

// The mcp tables that would have admitted what a role's MCP routes refused: every tool seen on
// the route (the allowed ones too: the list replaces the route's), deny_tools' aside.
void print_mcp(const group &g, std::ostream &out) {
  auto list = [](const std::set<std::string> &names) {
    std::string s;
    for (const auto &n : names) s += (s.empty() ? "" : ", ") + quoted(n);
    return s;
  };
  for (const auto &[rule, m] : g.mcp) {
    if (m.refused == 0) continue;
    out << "# MCP route " << rule << ": " << m.refused << " refused request" << (m.refused == 1 ? "" : "s")
        << "; with this mcp table it would have admitted " << (m.refused == 1 ? "it" : "them") << "\n";
    out << "  mcp = { allow_tools = [" << list(m.tools) << "]";
    if (!m.methods.empty()) out << ", allow_methods = [" << list(m.methods) << "]";
    out << " },";
    if (!m.denied.empty()) out << " # deny_tools refused " << list(m.denied) << ": not suggested";
    out << "\n";
  }
}

std::size_t mcp_refusals(const group &g) {
  std::size_t n = 0;
  for (const auto &[rule, m] : g.mcp) n += m.refused;
  return n;
}

// The allow entries that would have admitted a role's refused requests, one per host.
void print_hosts(const group &g, std::ostream &out) {
  for (const auto &[pattern, h] : g.hosts) {
    std::string reasons;
    for (const auto &r : h.reasons) reasons += (reasons.empty() ? "" : ", ") + r;
    std::string note = " # " + std::to_string(h.requests) + " request" + (h.requests == 1 ? "" : "s") +
                       ": " + reasons;
    if (h.passthrough || h.methods.empty() || h.any_path) {
      // Only CONNECTs were seen (their requests never came), a path that routes cannot name,
      // or a profile that does not open tunnels: the host itself is the narrowest entry.
      out << "  " << quoted(pattern) << "," << note << "\n";
      continue;
    }
    out << "  { host = " << quoted(pattern) << ", methods = [";
    bool first = true;
    for (const auto &m : h.methods) {
      out << (first ? "" : ", ") << quoted(m);
      first = false;
    }
    out << "], paths = [";
    first = true;
    for (const auto &p : route_paths(h.paths)) {
      out << (first ? "" : ", ") << quoted(p);
      first = false;
    }
    out << "] }," << note << "\n";
  }
}

} // namespace

int run_policy_suggest(const std::string &access_log, const std::string &client, std::ostream &out) {
  std::ifstream f(access_log, std::ios::binary);
  if (!f) {
    throw std::runtime_error("--access-log '" + access_log +
                             "': cannot open it; give the file [log] access_log writes");
  }
  std::map<std::string, group> groups; // by role ("" for the file's own [policy])
  std::size_t lines = 0, unreadable = 0, matched = 0;
  std::string line;
  while (std::getline(f, line)) {
    ++lines;
    if (line.empty()) continue;
    js::error_code ec;
    auto v = js::parse(line, ec);
    if (ec || !v.is_object()) {
      ++unreadable;
      continue;
    }
    const auto &o = v.as_object();
    std::string who = text_of(o, "client"), decision = text_of(o, "decision"), reason = text_of(o, "reason");
    if (!client.empty() && who != client) continue;
    if (o.contains("mcp_method")) {
      auto &g = groups[text_of(o, "role")];
      if (!who.empty()) g.clients.insert(who);
      if (mcp_line(o, decision, reason, g)) {
        ++matched;
        continue;
      }
    }
    if (decision != "deny" && decision != "would_deny") continue;
    ++matched;
    auto &g = groups[text_of(o, "role")];
    if (!who.empty()) g.clients.insert(who);
    if (!liftable(reason)) {
      (reason == "host_denied" || reason == "route_denied" ? g.denied_by_entry : g.other)++;
      continue;
    }
    ++g.suggested;
    std::string host = text_of(o, "host"), scheme = text_of(o, "scheme"), method = text_of(o, "method");
    std::int64_t port = 0;
    if (auto *p = o.if_contains("port"); p && (p->is_int64() || p->is_uint64())) {
      port = p->to_number<std::int64_t>();
    }
    bool default_port = port == 0 || (port == 443 && scheme != "http") || (port == 80 && scheme == "http");
    std::string pattern = (host.find(':') != std::string::npos ? "[" + host + "]" : host) +
                          (default_port ? "" : ":" + std::to_string(port));
    auto &h = g.hosts[pattern];
    ++h.requests;
    h.reasons.insert(reason);
    if (reason == "route_needs_termination") h.passthrough = true;
    if (method == "CONNECT" || method == "-" || method.empty()) {
      h.any_path = true;
      continue;
    }
    h.methods.insert(method);
    if (auto p = filters::route_path(text_of(o, "path"))) {
      h.paths.insert(*p);
    } else {
      h.any_path = true;
    }
  }
  std::string scope = client.empty() ? "" : " of client " + client;
  if (groups.empty() || matched == 0) {
    out << "# nothing to suggest: no request" << scope << " in " << access_log
        << " was refused (" << lines << " lines read";
    if (unreadable) out << ", " << unreadable << " not JSON";
    out << ")\n";
    return 0;
  }
  for (const auto &[role, g] : groups) {
    const std::size_t refused = g.suggested + mcp_refusals(g);
    if (refused + g.denied_by_entry + g.other == 0) continue; // only allowed MCP calls
    std::string names;
    for (const auto &c : g.clients) names += (names.empty() ? "" : ", ") + c;
    out << "# " << (role.empty() ? std::string("[policy]") : "[roles." + role + "]");
    if (!names.empty()) out << " (client" << (g.clients.size() == 1 ? " " : "s ") << names << ")";
    out << ": " << refused << " refused request" << (refused == 1 ? "" : "s");
    if (!g.hosts.empty()) {
      out << "; these entries, added to its allow list, would have admitted " << (g.suggested == 1 ? "it" : "them");
    }
    out << "\n";
    if (g.denied_by_entry) {
      out << "# " << g.denied_by_entry << " more refused by a deny entry (host_denied, route_denied): "
          << "remove the entry to allow them; nothing suggested\n";
    }
    if (g.other) {
      out << "# " << g.other << " more refused for reasons no allow entry lifts (addresses, "
          << "malformed or ambiguous requests): see their reason in the log\n";
    }
    print_mcp(g, out);
    print_hosts(g, out);
  }
  if (unreadable) out << "# " << unreadable << " lines were not JSON and were skipped\n";
  return 0;
}

int run_policy_token(const std::string &name, const std::string &role, std::ostream &out) {
  auto token = filters::new_token();
  out << "# The token of client " << name << ": give it to the client (Proxy-Authorization Basic "
      << name << ":TOKEN or Bearer TOKEN, or\n# a proxy URL http://" << name
      << ":TOKEN@HOST:PORT). sluice keeps only its hash; this is the one time it is shown.\n"
      << token << "\n\n# Add to the policy file ([roles." << role << "] must exist):\n"
      << "[clients." << name << "]\n"
      << "token_sha256 = \"" << filters::to_hex(filters::sha256(token)) << "\"\n"
      << "role = \"" << role << "\"\n";
  return 0;
}

} // namespace sluice::gateway
