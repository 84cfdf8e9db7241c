#include "filters/policy.hpp"
#include "filters/policy_loader.hpp"
#include "filters/route_matcher.hpp"

#include <catch2/catch.hpp>

using namespace sluice::filters;

namespace {

route_rule route(std::string host, std::vector<std::string> methods, std::vector<std::string> paths) {
  route_rule r{std::move(host), std::move(methods), std::move(paths), {}, false, nullptr};
  r.text = describe_route(r);
  return r;
}

} // namespace

TEST_CASE("route paths: one reading or none", "[filters][routes]") {
  struct row {
    const char *target;
    const char *path; // nullptr: unreadable
  };
  const row rows[] = {
      {"/graphql", "/graphql"},
      {"/graphql?x=1", "/graphql"},
      {"/ok?/graphql", "/ok"},               // a query that looks like a path is a query
      {"/gr%61phql", "/graphql"},            // escaped unreserved characters are the characters
      {"/a%2a", "/a%2A"},                    // others keep their escape, hex in upper case
      {"/a/", "/a/"},
      {"/", "/"},
      {"/%2e%2e/admin", nullptr},            // an escaped dot segment
      {"/a/%2E/b", nullptr},
      {"/a/../b", nullptr},
      {"/a/./b", nullptr},
      {"/a//b", nullptr},                    // servers differ on what "//" names
      {"//graphql", nullptr},
      {"/graphql;x=1", nullptr},             // path parameters: Tomcat and Spring drop them
      {"/graphql%3bx", nullptr},
      {"/a%2fb", nullptr},                   // an escaped slash
      {"/a%5cb", nullptr},
      {"/a\\b", nullptr},
      {"/a%00", nullptr},
      {"/a%zz", nullptr},
      {"/a%2", nullptr},
      {"/public/%252e%252e/secret", nullptr}, // a double escape: "%2e" after one more decoding
      {"/public/%252F", nullptr},
      {"/public/%25%32%65", nullptr},         // the same double escape, read out of pieces
      {"/public/%25%34%31", nullptr},
      {"/public/%25", "/public/%25"},         // a lone escaped '%' is no double escape
      {"/public/%25zz", "/public/%25zz"},
      {"/public/%c0%ae%c0%ae/secret", nullptr}, // overlong UTF-8 for '.'
      {"/public/%C1%9C", nullptr},
      {"/public/%e0%80%ae", nullptr},           // three-byte overlong
      {"/public/%f0%80%80%ae", nullptr},        // four-byte overlong
      {"/public/%e0%a0%80", "/public/%E0%A0%80"}, // U+0800, the shortest form: kept
      {"/public/%c3%a9", "/public/%C3%A9"},       // e acute
      {"graphql", nullptr},
      {"", nullptr},
      {"*", nullptr},
  };
  for (const auto &r : rows) {
    INFO(r.target);
    auto got = route_path(r.target);
    if (r.path) {
      REQUIRE(got);
      CHECK(*got == r.path);
    } else {
      CHECK_FALSE(got);
    }
  }
}

TEST_CASE("route path patterns: exact or a prefix, case only folded for deny", "[filters][routes]") {
  CHECK(route_path_matches("/graphql", "/graphql", false));
  CHECK_FALSE(route_path_matches("/graphql", "/graphql/", false));
  CHECK_FALSE(route_path_matches("/graphql", "/GraphQL", false));
  CHECK(route_path_matches("/graphql", "/GraphQL", true));
  CHECK(route_path_matches("/repos/*", "/repos/a/b", false));
  CHECK(route_path_matches("/repos/*", "/repos/", false));
  CHECK_FALSE(route_path_matches("/repos/*", "/repos", false));
  CHECK_FALSE(route_path_matches("/repos/*", "/reposx", false));
  CHECK(route_path_matches("/v1*", "/v1beta", false));
  CHECK(route_path_matches("*", "/anything", false));
}

TEST_CASE("deny routes take the trailing-slash twin, allow routes stay exact", "[filters][routes]") {
  CHECK(route_path_matches("/public/exact", "/public/exact/", true));
  CHECK(route_path_matches("/public/exact", "/PUBLIC/Exact/", true));
  CHECK(route_path_matches("/public/dir/", "/public/dir", true));
  CHECK_FALSE(route_path_matches("/public/exact", "/public/exact//", true));
  CHECK_FALSE(route_path_matches("/public/exact", "/public/exactx", true));
  CHECK_FALSE(route_path_matches("/public/exact", "/public/exac", true));
  CHECK_FALSE(route_path_matches("/public/exact", "/public/exact/", false));
  CHECK(route_path_matches("/admin/*", "/admin", true));
  CHECK(route_path_matches("/admin/*", "/Admin", true));
  CHECK_FALSE(route_path_matches("/admin/*", "/admin", false));
  CHECK_FALSE(route_path_matches("/admin/*", "/adminx", true));
  CHECK_FALSE(route_path_matches("/*", "", true));
  CHECK(route_path_matches("/", "/", true));
}

TEST_CASE("route definitions: what a route may say", "[filters][routes]") {
  CHECK(route("api.github.com", {"POST"}, {"/graphql"}).text == "api.github.com POST /graphql");
  CHECK(route("api.github.com", {}, {}).text == "api.github.com * *");
  CHECK(route("h.test", {"GET", "HEAD"}, {"/a/*", "/b%7e"}).text == "h.test GET,HEAD /a/*,/b~");
  CHECK_THROWS_AS(route("h.test", {"TRACE"}, {}), pattern_error);
  CHECK_THROWS_AS(route("h.test", {"CONNECT"}, {}), pattern_error);
  CHECK_THROWS_AS(route("h.test", {"PO ST"}, {}), pattern_error);
  CHECK_THROWS_AS(route("h.test", {}, {"graphql"}), pattern_error);
  CHECK_THROWS_AS(route("h.test", {}, {"/a*b"}), pattern_error);
  CHECK_THROWS_AS(route("h.test", {}, {"/a?b"}), pattern_error);
  CHECK_THROWS_AS(route("h.test", {}, {"/a//b"}), pattern_error);
  CHECK_THROWS_AS(route("h.test", {}, {"/a/../b"}), pattern_error);
  CHECK_THROWS_AS(route("h.test", {}, {"/a;b"}), pattern_error);
}

TEST_CASE("routes in the policy: narrow, widen from the trusted file, deny by path", "[filters][routes]") {
  config c;
  c.mode = profile::network_read;
  c.allow = {"plain.test"};
  c.allow_routes = {route("api.test", {"POST"}, {"/v1/messages"}), route("docs.test", {}, {"/guide/*"})};
  c.deny_routes = {route("plain.test", {}, {"/admin", "/private/*"})};
  policy p(c);
  struct row {
    const char *method, *host, *target;
    bool allowed;
    const char *reason_or_rule;
  };
  const row rows[] = {
      // A route widens network-read by one POST path, and nothing else on that host.
      {"POST", "api.test", "/v1/messages", true, "api.test POST /v1/messages"},
      {"POST", "api.test", "/v1/messages?beta=1", true, "api.test POST /v1/messages"},
      {"POST", "api.test", "/v1/other", false, "method_not_allowed"},
      {"GET", "api.test", "/v1/messages", false, "route_not_allowed"},
      {"POST", "api.test", "/v1//messages", false, "method_not_allowed"},
      {"POST", "api.test", "/v1/messages;x", false, "method_not_allowed"},
      {"POST", "api.test", "/V1/MESSAGES", false, "method_not_allowed"},
      {"POST", "api.test", "/x/%2e%2e/v1/messages", false, "method_not_allowed"},
      {"POST", "api.test", "/ok?/v1/messages", false, "method_not_allowed"},
      {"TRACE", "api.test", "/v1/messages", false, "method_not_allowed"},
      // A route without methods takes the profile's, on its paths only.
      {"GET", "docs.test", "/guide/intro", true, "docs.test * /guide/*"},
      {"GET", "docs.test", "/gu%69de/intro", true, "docs.test * /guide/*"},
      {"POST", "docs.test", "/guide/intro", false, "method_not_allowed"},
      {"GET", "docs.test", "/other", false, "route_not_allowed"},
      {"GET", "docs.test", "/guide//intro", false, "ambiguous_path"},
      // Deny routes: every spelling of a denied path, and unreadable paths, are denied.
      {"GET", "plain.test", "/", true, "plain.test"},
      {"GET", "plain.test", "/admin", false, "route_denied"},
      {"GET", "plain.test", "/ADMIN", false, "route_denied"},
      {"GET", "plain.test", "/%61dmin", false, "route_denied"},
      {"GET", "plain.test", "/admin;jsessionid=1", false, "route_denied"},
      {"GET", "plain.test", "//admin", false, "route_denied"},
      {"GET", "plain.test", "/private/x", false, "route_denied"},
      // ... and its trailing-slash twin, which many servers serve as the same resource.
      {"GET", "plain.test", "/admin/", false, "route_denied"},
      {"GET", "plain.test", "/Admin/?x=1", false, "route_denied"},
      {"GET", "plain.test", "/private", false, "route_denied"},
      {"GET", "plain.test", "/admin/x", true, "plain.test"},
      {"GET", "plain.test", "/privatex", true, "plain.test"},
      {"GET", "other.test", "/", false, "host_not_allowlisted"},
  };
  for (const auto &r : rows) {
    INFO(r.method << " " << r.host << r.target);
    auto d = p.decide(r.method, "https", r.host, 443, r.target);
    CHECK(d.allowed == r.allowed);
    if (r.allowed) {
      CHECK(d.rule == r.reason_or_rule);
    } else {
      CHECK(d.reason == r.reason_or_rule);
    }
  }
  // Under publish a route narrows: GET only, where the host has no plain entry.
  config pub = c;
  pub.mode = profile::publish;
  pub.allow_routes = {route("api.test", {"GET"}, {})};
  policy pp(pub);
  CHECK(pp.decide("GET", "https", "api.test", 443, "/x").allowed);
  CHECK(pp.decide("DELETE", "https", "api.test", 443, "/x").reason == "route_not_allowed");
  CHECK(pp.decide("DELETE", "https", "plain.test", 443, "/x").allowed);
  // CONNECT: a route's host is a tunnel's; under allowlist, which does not open it, it is refused.
  CHECK(p.decide_connect("api.test", 443).allowed);
  config al = c;
  al.mode = profile::allowlist;
  CHECK(policy(al).decide_connect("api.test", 443).reason == "route_needs_termination");
  CHECK(policy(al).decide_connect("plain.test", 443).allowed);
  // Routes' hosts are in the allow matcher: name constraints and capture ports cover them.
  CHECK(p.allow_matcher().match("api.test", "https", 443));
}

TEST_CASE("route tables in the config file", "[filters][routes]") {
  auto c = load_config_string(R"(
[policy]
allow = ["plain.test", { host = "api.test", methods = ["POST"], paths = ["/graphql"] },
         { host = "docs.test", methods = "read-only" }]
deny = [{ host = "plain.test", paths = ["/admin"] }]
[skills.agent]
default_profile = "network-read"
allow_domains = ["a.test", { host = "model.test", methods = ["POST"], paths = ["/v1/messages"] }]
)", "t.toml");
  CHECK(c.allow == std::vector<std::string>{"plain.test"});
  REQUIRE(c.allow_routes.size() == 2);
  CHECK(c.allow_routes[0].text == "api.test POST /graphql");
  CHECK(c.allow_routes[1].text == "docs.test GET,HEAD,OPTIONS *");
  REQUIRE(c.deny_routes.size() == 1);
  CHECK(c.deny_routes[0].text == "plain.test * /admin");
  REQUIRE(c.skills.at("agent").allow_routes.size() == 1);
  CHECK(c.skills.at("agent").allow_domains == std::vector<std::string>{"a.test"});
  auto bad = [](const char *text) {
    try {
      load_config_string(text, "t.toml");
    } catch (const config_error &e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(bad("[policy]\nallow = [{ host = \"a.test\", method = [\"POST\"] }]\n").find("not 'method'") != std::string::npos);
  CHECK(bad("[policy]\nallow = [{ methods = [\"POST\"] }]\n").find("needs host") != std::string::npos);
  CHECK(bad("[policy]\nallow = [{ host = \"a.test\", methods = [] }]\n").find("allows nothing") != std::string::npos);
  CHECK(bad("[policy]\nallow = [{ host = \"a.test\", methods = \"writes\" }]\n").find("read-only") != std::string::npos);
  CHECK(bad("[policy]\nallow = [{ host = \"a.test\", paths = [\"/a//b\"] }]\n").find("'//'") != std::string::npos);
  CHECK(bad("[policy]\nallow = [{ host = \"a.test\", methods = [\"TRACE\"] }]\n").find("TRACE") != std::string::npos);
  CHECK(bad("[policy]\nallow = [{ host = \"re:(\" }]\n").find("t.toml") != std::string::npos);
  CHECK(bad("[policy]\nallow = [3]\n").find("route tables") != std::string::npos);
}
