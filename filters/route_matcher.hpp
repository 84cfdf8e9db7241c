#pragma once
#include "filters/host_matcher.hpp"
#include "filters/mcp_rule.hpp"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::filters {

// An allow or deny entry that names methods and paths, not only a host (docs/policy.md, "Rules
// per route"): `{ host = "api.github.com", methods = ["POST"], paths = ["/graphql"] }`.
struct route_rule {
  std::string host;                 // a host pattern, as in the plain entries
  std::vector<std::string> methods; // empty: the methods the profile allows
  std::vector<std::string> paths;   // empty: every path; "/x" exact, "/x/*" (any "...*") a prefix
  std::string text;                 // its name in logs, metrics and replies: "HOST METHODS PATHS"
  // websocket = true: a WebSocket upgrade of a GET this route covers may pass under network-read
  // (publish lets every allowed GET upgrade). Trusted policy only, like every route.
  bool websocket = false;
  // mcp = { ... }: the route carries MCP; a POST it covers passes (whatever the profile's methods)
  // once every JSON-RPC call in its body passes this rule. Trusted policy only. Null: not MCP.
  std::shared_ptr<const mcp_rule> mcp;
};

// The path of a request target as routes compare it: the part before '?', with percent-escapes of
// unreserved characters decoded ("/gr%61phql" is "/graphql") and the others' hex in upper case.
// nullopt for a path routes cannot read one way only: an empty one or one not starting with '/', a
// bad escape, an escaped '/' or '\', a dot segment, "//" or ';' (servers differ on what
// "/a//b" and "/a;x" name).
std::optional<std::string> route_path(std::string_view target);

// Whether a route's path pattern matches `path` (route_path's): exact, or a prefix when the
// pattern ends in '*'. A `deny` route compares without case and takes a path's trailing-slash
// twin ("/x" and "/x/"; "/x/*" takes "/x"), as servers that ignore either would serve it.
bool route_path_matches(std::string_view pattern, std::string_view path, bool deny);

// Checks a route's method and path lists and returns its text; throws pattern_error naming what
// is wrong (a path that is not one route_path would keep, TRACE or CONNECT, a bad token).
std::string describe_route(route_rule &r);

// A compiled list of routes, allow or deny. Pure: const methods, no I/O.
class route_matcher {
public:
  route_matcher() = default;
  // `deny`: a path routes cannot read (route_path's nullopt) matches, and paths compare without
  // case, so that no spelling of a denied path slips through; an allow route matches neither.
  route_matcher(std::vector<route_rule> rules, bool deny);

  // The first rule covering the request, or nullptr. `profile_allows`: whether the profile alone
  // allows the method (a rule without methods takes the profile's). `websocket`: only rules with
  // websocket = true count. `mcp`: only rules with an mcp table count.
  const route_rule *match(std::string_view method, std::string_view target, std::string_view host,
                          std::string_view scheme, unsigned port, bool profile_allows,
                          bool websocket = false, bool mcp = false) const;
  // The first rule whose host matches, whatever the method and path (a CONNECT's authority).
  const route_rule *match_host(std::string_view host, std::string_view scheme, unsigned port) const;

  const std::vector<route_rule> &rules() const { return rules_; }
  bool empty() const { return rules_.empty(); }

private:
  std::vector<route_rule> rules_;
  std::vector<host_matcher> hosts_; // one per rule
  bool deny_ = false;
};

} // namespace sluice::filters
