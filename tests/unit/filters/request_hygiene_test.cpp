#include "filters/request_hygiene.hpp"

#include <catch2/catch.hpp>

using namespace sluice::filters;

namespace {
std::string_view check(std::string_view method, std::string_view target,
                       std::vector<std::pair<std::string_view, std::string_view>> fields,
                       profile p = profile::network_read) {
  return check_request({method, target, std::move(fields)}, p);
}
} // namespace

TEST_CASE("smuggling shapes are framing errors", "[filters][hygiene]") {
  CHECK(check("GET", "/", {{"Host", "a"}}).empty());
  CHECK(check("POST", "/", {{"Content-Length", "3"}, {"Transfer-Encoding", "chunked"}},
              profile::publish) == "content_length_with_transfer_encoding");
  CHECK(check("POST", "/", {{"Content-Length", "3"}, {"Content-Length", "3"}}, profile::publish) ==
        "duplicate_content_length");
  CHECK(check("POST", "/", {{"Content-Length", "3, 3"}}, profile::publish) == "bad_content_length");
  CHECK(check("POST", "/", {{"Content-Length", "-1"}}, profile::publish) == "bad_content_length");
  CHECK(check("POST", "/", {{"Transfer-Encoding", "chunked, identity"}}, profile::publish) ==
        "bad_transfer_encoding");
  CHECK(check("POST", "/", {{"Transfer-Encoding", "gzip"}}, profile::publish) ==
        "bad_transfer_encoding");
  CHECK(check("POST", "/", {{"Transfer-Encoding", "chunked"}, {"Transfer-Encoding", "chunked"}},
              profile::publish) == "bad_transfer_encoding");
  CHECK(check("GET", "/", {{"Host", "a"}, {"Host", "b"}}) == "bad_host_header");
  CHECK(check("GET", "/", {{"X-A", std::string_view("a\0b", 3)}}) == "control_character");
  CHECK(is_framing_error("duplicate_content_length"));
  CHECK_FALSE(is_framing_error("upgrade_refused"));
}

TEST_CASE("read-only semantics in network-read", "[filters][hygiene]") {
  CHECK(check("GET", "/", {{"Upgrade", "websocket"}}) == "upgrade_refused");
  CHECK(check("GET", "/", {{"Upgrade", "h2c"}}, profile::publish) == "upgrade_refused");
  CHECK(check("GET", "/", {{"X-HTTP-Method-Override", "DELETE"}}) == "method_override_refused");
  CHECK(check("GET", "/", {{"X-Method-Override", "PUT"}}) == "method_override_refused");
  CHECK(check("GET", "/", {{"Content-Length", "5"}}) == "body_on_read_method");
  CHECK(check("GET", "/", {{"Transfer-Encoding", "chunked"}}) == "body_on_read_method");
  CHECK(check("GET", "/", {{"Content-Length", "0"}}).empty());
  CHECK(check("POST", "/", {{"Content-Length", "5"}}, profile::publish).empty());
}

TEST_CASE("ambiguous request targets", "[filters][hygiene]") {
  const char *bad[] = {"/a/../b", "/a/%2e%2e/b", "/a/%2E%2e/b", "/..", "/a/./b", "/a\\b",
                       "/a#frag",  "/a b",        "relative",    "",    "/a/..%2fb", "/%5c"};
  for (auto t : bad) {
    INFO(t);
    CHECK_FALSE(target_is_unambiguous(t));
  }
  const char *good[] = {"/", "/a/b?x=1", "*", "/a..b/c", "/.well-known/x", "/a?q=../x"};
  for (auto t : good) {
    INFO(t);
    CHECK(target_is_unambiguous(t));
  }
}

TEST_CASE("methods by profile", "[filters][method_policy]") {
  CHECK(method_allowed(profile::network_read, "GET"));
  CHECK(method_allowed(profile::network_read, "HEAD"));
  CHECK(method_allowed(profile::network_read, "OPTIONS"));
  for (auto m : {"POST", "PUT", "DELETE", "PATCH", "PROPFIND", "get", "Get", "TRACE", "CONNECT", ""}) {
    INFO(m);
    CHECK_FALSE(method_allowed(profile::network_read, m));
  }
  CHECK(method_allowed(profile::publish, "POST"));
  CHECK(method_allowed(profile::publish, "DELETE"));
  CHECK_FALSE(method_allowed(profile::publish, "TRACE"));
  CHECK_FALSE(method_allowed(profile::publish, "post"));
  CHECK_FALSE(method_allowed(profile::offline, "GET"));
}
