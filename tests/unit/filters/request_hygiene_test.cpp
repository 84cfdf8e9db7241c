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

TEST_CASE("Connection may not strip what was checked or what the gateway sets", "[filters][hygiene]") {
  // Connection: host would strip Host after it was checked: the origin sees no Host at all.
  for (auto token : {"host", "Host", "close, host", "content-length", "Transfer-Encoding", "authorization",
                     "proxy-authorization", "keep-alive,  HOST "}) {
    INFO(token);
    CHECK(check("GET", "/", {{"Host", "a"}, {"Connection", token}}, profile::publish) == "connection_strips_field");
  }
  request_view guarded{"GET", "/", {{"Host", "a"}, {"Connection", "x-api-key"}}, {"X-Api-Key"}};
  CHECK(check_request(guarded, profile::publish) == "connection_strips_field");
  // The rest are stripped as before (TE travels with "Connection: TE"; Upgrade with an upgrade).
  for (auto token : {"close", "keep-alive", "te", "x-custom", "upgrade"}) {
    INFO(token);
    CHECK(check("GET", "/", {{"Host", "a"}, {"Connection", token}}, profile::publish).empty());
  }
  CHECK(is_framing_error("connection_strips_field"));
}

TEST_CASE("framing-like names with '_'", "[filters][hygiene]") {
  CHECK(check("POST", "/", {{"Content-Length", "3"}, {"Transfer_Encoding", "chunked"}}, profile::publish) ==
        "underscore_framing_field");
  CHECK(check("POST", "/", {{"Transfer-Encoding", "chunked"}, {"content_length", "3"}}, profile::publish) ==
        "underscore_framing_field");
  CHECK(check("GET", "/", {{"Host", "a"}, {"Transfer_Encoding", "chunked"}}).empty()); // no body
  CHECK(check("POST", "/", {{"Content-Length", "3"}, {"X_Custom_Field", "1"}}, profile::publish).empty());
  CHECK(is_framing_error("underscore_framing_field"));
}

TEST_CASE("upgrades: only a well-formed WebSocket handshake, never h2c", "[filters][hygiene]") {
  std::vector<std::pair<std::string_view, std::string_view>> ws = {
      {"Host", "a"}, {"Connection", "Upgrade"}, {"Upgrade", "websocket"},
      {"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}, {"Sec-WebSocket-Version", "13"}};
  for (auto p : {profile::network_read, profile::publish}) {
    CHECK(check("GET", "/", ws, p).empty()); // whether it may pass is the policy's
    CHECK(check_request({"GET", "/", ws}, p).empty());
    CHECK(is_websocket_upgrade({"GET", "/", ws}));
    CHECK(check("POST", "/", ws, p) == "upgrade_refused");
    auto no_key = ws;
    no_key.erase(no_key.begin() + 3);
    CHECK(check("GET", "/", no_key, p) == "upgrade_refused");
    // RFC 6455 section 4.1: the key is a base64 16-byte nonce, and there is one of it.
    for (std::string_view key : {"hello", "aGVsbG8=", "dGhlIHNhbXBsZSBub25jZQ=", "dGhlIHNhbXBsZSBub25jZQ==x",
                                 "dGhlIHNhbXBsZSBub25j!Q==", "dGhlIHNhbXBsZSBub25jZQ==dGhlIHNhbXBsZQ==", ""}) {
      auto bad_key = ws;
      bad_key[3].second = key;
      CHECK(check("GET", "/", bad_key, p) == "upgrade_refused");
    }
    auto two_keys = ws;
    two_keys.emplace_back("Sec-WebSocket-Key", "AAAAAAAAAAAAAAAAAAAAAA==");
    CHECK(check("GET", "/", two_keys, p) == "upgrade_refused");
    auto old_version = ws;
    old_version[4].second = "8";
    CHECK(check("GET", "/", old_version, p) == "upgrade_refused");
    auto no_connection = ws;
    no_connection[1].second = "keep-alive";
    CHECK(check("GET", "/", no_connection, p) == "upgrade_refused");
    CHECK(check("GET", "/", {{"Upgrade", "websocket"}}, p) == "upgrade_refused");
    CHECK(check("GET", "/", {{"Connection", "Upgrade, HTTP2-Settings"}, {"Upgrade", "h2c"}}, p) == "h2c_refused");
    CHECK(check("GET", "/", {{"Connection", "Upgrade"}, {"Upgrade", "h2c, websocket"}}, p) == "h2c_refused");
    CHECK(check("GET", "/", {{"Connection", "Upgrade"}, {"Upgrade", "TLS/1.2"}}, p) == "upgrade_refused");
  }
  CHECK_FALSE(is_websocket_upgrade({"GET", "/", {{"Host", "a"}}}));
  CHECK_FALSE(is_websocket_upgrade({"GET", "/", {{"Upgrade", "foo"}}}));
}

TEST_CASE("read-only semantics in network-read", "[filters][hygiene]") {
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
