#include "filters/h2_translation.hpp"

#include <catch2/catch.hpp>

using namespace sluice::filters;
using namespace std::string_view_literals;
using namespace std::string_literals;

namespace {
using fields = std::vector<h2_field>;
using h1_fields = std::vector<std::pair<std::string_view, std::string_view>>;
using h2_list = std::vector<std::pair<std::string, std::string>>;

// A well-formed GET's pseudo-headers, then `extra`.
fields get(fields extra = {}) {
  fields f{{":method", "GET"}, {":scheme", "https"}, {":authority", "example.com"}, {":path", "/"}};
  f.insert(f.end(), extra.begin(), extra.end());
  return f;
}

std::string_view reason(const fields &f) {
  h2_request out;
  return translate_h2_request(f, out);
}

struct refusal {
  const char *what;
  fields in;
  std::string_view reason;
};
} // namespace

TEST_CASE("h2 request refusals", "[filters][h2]") {
  const refusal cases[] = {
      // Names: lowercase tokens only, ':' only first.
      {"uppercase name", get({{"X-Foo", "1"}}), "h2_uppercase_name"},
      {"uppercase pseudo",
       {{":METHOD", "GET"}, {":scheme", "https"}, {":path", "/"}},
       "h2_uppercase_name"},
      {"empty name", get({{"", "1"}}), "h2_bad_field_name"},
      {"lone colon", get({{":", "1"}}), "h2_bad_field_name"},
      {"space in name", get({{"x y", "1"}}), "h2_bad_field_name"},
      {"colon inside name", get({{"a:b", "1"}}), "h2_bad_field_name"},
      {"double colon", get({{"::path", "/"}}), "h2_bad_field_name"},
      {"control in name", get({{"x\x01", "1"}}), "h2_bad_field_name"},
      {"NUL in name", get({{"x\0y"sv, "1"}}), "h2_bad_field_name"},
      {"non-ASCII name", get({{"caf\xc3\xa9", "1"}}), "h2_bad_field_name"},
      // Values: no NUL/CR/LF (nor other controls), no surrounding whitespace.
      {"NUL in value", get({{"x-a", "a\0b"sv}}), "h2_bad_field_value"},
      {"CR in value", get({{"x-a", "a\rb"}}), "h2_bad_field_value"},
      {"LF in value", get({{"x-a", "a\nb"}}), "h2_bad_field_value"},
      {"CRLF injection", get({{"x-a", "1\r\nhost: evil"}}), "h2_bad_field_value"},
      {"DEL in value", get({{"x-a", "a\x7f"}}), "h2_bad_field_value"},
      {"leading SP", get({{"x-a", " a"}}), "h2_bad_field_value"},
      {"trailing HTAB", get({{"x-a", "a\t"}}), "h2_bad_field_value"},
      {"lone SP", get({{"x-a", " "}}), "h2_bad_field_value"},
      {"LF in :path",
       {{":method", "GET"}, {":scheme", "https"}, {":authority", "a"}, {":path", "/\n"}},
       "h2_bad_field_value"},
      {"NUL in :authority",
       {{":method", "GET"}, {":scheme", "https"}, {":authority", "a\0b"sv}, {":path", "/"}},
       "h2_bad_field_value"},
      {"method with SP",
       {{":method", "GET /x"}, {":scheme", "https"}, {":authority", "a"}, {":path", "/"}},
       "h2_bad_field_value"},
      {"empty method",
       {{":method", ""}, {":scheme", "https"}, {":authority", "a"}, {":path", "/"}},
       "h2_bad_field_value"},
      {"bad scheme",
       {{":method", "GET"}, {":scheme", "1http"}, {":authority", "a"}, {":path", "/"}},
       "h2_bad_field_value"},
      {"SP in :path",
       {{":method", "GET"}, {":scheme", "https"}, {":authority", "a"}, {":path", "/a b"}},
       "h2_bad_field_value"},
      {":protocol not a token",
       {{":method", "CONNECT"},
        {":protocol", "web socket"},
        {":scheme", "https"},
        {":authority", "a"},
        {":path", "/"}},
       "h2_bad_field_value"},
      // Connection-specific fields and TE.
      {"connection", get({{"connection", "close"}}), "h2_connection_header"},
      {"keep-alive", get({{"keep-alive", "timeout=5"}}), "h2_connection_header"},
      {"proxy-connection", get({{"proxy-connection", "keep-alive"}}), "h2_connection_header"},
      {"transfer-encoding", get({{"transfer-encoding", "chunked"}}), "h2_connection_header"},
      {"upgrade", get({{"upgrade", "websocket"}}), "h2_connection_header"},
      {"te gzip", get({{"te", "gzip"}}), "h2_te_not_trailers"},
      {"te list", get({{"te", "trailers, deflate"}}), "h2_te_not_trailers"},
      {"te case", get({{"te", "Trailers"}}), "h2_te_not_trailers"},
      {"te empty", get({{"te", ""}}), "h2_te_not_trailers"},
      // Pseudo-headers.
      {"unknown pseudo", get({{":foo", "1"}}), "h2_pseudo_header"},
      {":status in a request", get({{":status", "200"}}), "h2_pseudo_header"},
      {"duplicate :path", get({{":path", "/admin"}}), "h2_pseudo_header"},
      {"duplicate :method",
       {{":method", "GET"},
        {":method", "POST"},
        {":scheme", "https"},
        {":authority", "a"},
        {":path", "/"}},
       "h2_pseudo_header"},
      {"pseudo after regular",
       {{":method", "GET"},
        {":scheme", "https"},
        {"accept", "*/*"},
        {":authority", "a"},
        {":path", "/"}},
       "h2_pseudo_header"},
      {"missing :method",
       {{":scheme", "https"}, {":authority", "a"}, {":path", "/"}},
       "h2_pseudo_header"},
      {"missing :scheme",
       {{":method", "GET"}, {":authority", "a"}, {":path", "/"}},
       "h2_pseudo_header"},
      {"missing :path",
       {{":method", "GET"}, {":scheme", "https"}, {":authority", "a"}},
       "h2_pseudo_header"},
      {"empty :path",
       {{":method", "GET"}, {":scheme", "https"}, {":authority", "a"}, {":path", ""}},
       "h2_pseudo_header"},
      {"relative :path",
       {{":method", "GET"}, {":scheme", "https"}, {":authority", "a"}, {":path", "index.html"}},
       "h2_pseudo_header"},
      {"absolute-form :path",
       {{":method", "GET"}, {":scheme", "https"}, {":authority", "a"}, {":path", "https://b/"}},
       "h2_pseudo_header"},
      {"* without OPTIONS",
       {{":method", "GET"}, {":scheme", "https"}, {":authority", "a"}, {":path", "*"}},
       "h2_pseudo_header"},
      {":protocol on GET", get({{":protocol", "websocket"}}), "h2_pseudo_header"},
      {"extended CONNECT without :path",
       {{":method", "CONNECT"},
        {":protocol", "websocket"},
        {":scheme", "https"},
        {":authority", "a"}},
       "h2_pseudo_header"},
      // CONNECT.
      {"plain CONNECT",
       {{":method", "CONNECT"}, {":authority", "example.com:443"}},
       "h2_connect_refused"},
      {"CONNECT with :scheme and :path",
       {{":method", "CONNECT"}, {":scheme", "https"}, {":authority", "a:443"}, {":path", "/"}},
       "h2_connect_refused"},
      // Content-Length.
      {"non-digit length", get({{"content-length", "abc"}}), "bad_content_length"},
      {"empty length", get({{"content-length", ""}}), "bad_content_length"},
      {"negative length", get({{"content-length", "-1"}}), "bad_content_length"},
      {"signed length", get({{"content-length", "+5"}}), "bad_content_length"},
      {"length list", get({{"content-length", "3,3"}}), "bad_content_length"},
      {"19 digits", get({{"content-length", "1000000000000000000"}}), "bad_content_length"},
      {"differing lengths", get({{"content-length", "3"}, {"content-length", "4"}}),
       "bad_content_length"},
      // Host and authority.
      {"host disagrees", get({{"host", "evil.example"}}), "bad_host_header"},
      {"host with another port", get({{"host", "example.com:8443"}}), "bad_host_header"},
      {"two hosts",
       {{":method", "GET"}, {":scheme", "https"}, {":path", "/"}, {"host", "a"}, {"host", "a"}},
       "bad_host_header"},
      {"no authority",
       {{":method", "GET"}, {":scheme", "https"}, {":path", "/"}},
       "bad_host_header"},
      {"empty authority",
       {{":method", "GET"}, {":scheme", "https"}, {":authority", ""}, {":path", "/"}},
       "bad_host_header"},
      {"slash in authority",
       {{":method", "GET"}, {":scheme", "https"}, {":authority", "a/b"}, {":path", "/"}},
       "bad_host_header"},
      {"SP in authority",
       {{":method", "GET"}, {":scheme", "https"}, {":authority", "a b"}, {":path", "/"}},
       "bad_host_header"},
      {"userinfo in :authority",
       {{":method", "GET"},
        {":scheme", "https"},
        {":authority", "u:p@example.com"},
        {":path", "/"}},
       "userinfo_in_target"},
      {"userinfo in host",
       {{":method", "GET"}, {":scheme", "https"}, {":path", "/"}, {"host", "u@example.com"}},
       "userinfo_in_target"},
  };
  for (const auto &c : cases) {
    INFO(c.what);
    CHECK(reason(c.in) == c.reason);
  }
}

TEST_CASE("h2 request translation", "[filters][h2]") {
  h2_request r;
  REQUIRE(translate_h2_request(get({{"accept", "*/*"}, {"x-empty", ""}}), r).empty());
  CHECK(r.method == "GET");
  CHECK(r.scheme == "https");
  CHECK(r.authority == "example.com");
  CHECK(r.path == "/");
  CHECK(r.protocol.empty());
  CHECK_FALSE(r.content_length);
  CHECK(r.fields == h2_list{{"accept", "*/*"}, {"x-empty", ""}});

  SECTION("cookie crumbs join into one field where the first stood") {
    REQUIRE(
        translate_h2_request(
            get({{"cookie", "a=1"}, {"accept", "*/*"}, {"cookie", "b=2"}, {"cookie", "c=3"}}), r)
            .empty());
    CHECK(r.fields == h2_list{{"cookie", "a=1; b=2; c=3"}, {"accept", "*/*"}});
  }
  SECTION("equal content-length duplicates fold into one") {
    REQUIRE(
        translate_h2_request(get({{"content-length", "5"}, {"content-length", "5"}}), r).empty());
    CHECK(r.content_length == 5u);
    CHECK(r.fields == h2_list{{"content-length", "5"}});
    REQUIRE(translate_h2_request(get({{"content-length", "999999999999999999"}}), r).empty());
    CHECK(r.content_length == 999999999999999999u);
    REQUIRE(translate_h2_request(get({{"content-length", "0"}}), r).empty());
    CHECK(r.content_length == 0u);
  }
  SECTION("host agreeing with :authority, any case, is folded into authority") {
    REQUIRE(translate_h2_request(get({{"host", "EXAMPLE.com"}, {"accept", "*/*"}}), r).empty());
    CHECK(r.authority == "example.com");
    CHECK(r.fields == h2_list{{"accept", "*/*"}});
  }
  SECTION("host alone stands for :authority") {
    REQUIRE(translate_h2_request({{":method", "GET"},
                                  {":scheme", "http"},
                                  {":path", "/x?y=1"},
                                  {"host", "example.com:8080"}},
                                 r)
                .empty());
    CHECK(r.authority == "example.com:8080");
    CHECK(r.fields.empty());
  }
  SECTION("te: trailers is kept") {
    REQUIRE(translate_h2_request(get({{"te", "trailers"}}), r).empty());
    CHECK(r.fields == h2_list{{"te", "trailers"}});
  }
  SECTION("OPTIONS *") {
    REQUIRE(
        translate_h2_request(
            {{":method", "OPTIONS"}, {":scheme", "https"}, {":authority", "a"}, {":path", "*"}}, r)
            .empty());
    CHECK(r.path == "*");
  }
  SECTION("inner HTAB and obs-text pass; the HTTP/1.1 path judges them") {
    REQUIRE(translate_h2_request(get({{"x-a", "a\tb"}, {"x-b", "caf\xc3\xa9"}}), r).empty());
    CHECK(r.fields.size() == 2);
  }
  SECTION("pseudo-headers in any order, IPv6 authority") {
    REQUIRE(translate_h2_request({{":path", "/"},
                                  {":authority", "[::1]:8443"},
                                  {":method", "POST"},
                                  {":scheme", "https"}},
                                 r)
                .empty());
    CHECK(r.method == "POST");
    CHECK(r.authority == "[::1]:8443");
  }
  SECTION("extended CONNECT is returned for the session to judge") {
    REQUIRE(translate_h2_request({{":method", "CONNECT"},
                                  {":protocol", "websocket"},
                                  {":scheme", "https"},
                                  {":path", "/chat"},
                                  {":authority", "example.com"},
                                  {"sec-websocket-version", "13"}},
                                 r)
                .empty());
    CHECK(r.method == "CONNECT");
    CHECK(r.protocol == "websocket");
    CHECK(r.path == "/chat");
    CHECK(r.fields == h2_list{{"sec-websocket-version", "13"}});
  }
}

TEST_CASE("h1 response head to h2 header list", "[filters][h2]") {
  h1_fields in{{"Content-Type", "text/html"},
               {"Connection", "close, X-Hop"},
               {"X-Hop", "1"},
               {"Keep-Alive", "timeout=5"},
               {"Transfer-Encoding", "chunked"},
               {"Upgrade", "h2c"},
               {"Proxy-Connection", "close"},
               {"TE", "trailers"},
               {"Set-Cookie", "a=1"},
               {"Set-Cookie", "b=2"},
               {"Content-Length", "5"}};
  CHECK(h2_response_fields(200, in) == h2_list{{":status", "200"},
                                               {"content-type", "text/html"},
                                               {"set-cookie", "a=1"},
                                               {"set-cookie", "b=2"},
                                               {"content-length", "5"}});

  SECTION("every Connection field counts, names compared in any case") {
    h1_fields named{{"connection", "x-a"},
                    {"X-A", "1"},
                    {"CONNECTION", " ,X-B , "},
                    {"x-b", "2"},
                    {"X-C", "3"}};
    CHECK(h2_response_fields(404, named) == h2_list{{":status", "404"}, {"x-c", "3"}});
  }
  SECTION("fields HTTP/2 cannot carry are left out, values trimmed") {
    h1_fields odd{{"X-Nul", "a\0b"sv}, {"X-Cr", "a\rb"}, {"Bad Name", "1"},
                  {":status", "500"},  {"", "1"},        {"X-Pad", " v \t"}};
    CHECK(h2_response_fields(204, odd) == h2_list{{":status", "204"}, {"x-pad", "v"}});
  }
  CHECK(h2_response_fields(304, {}) == h2_list{{":status", "304"}});
}

TEST_CASE("an h2 origin's response head to an h2 client, its strings taken over", "[filters][h2]") {
  // What the h2 origin's session handed over: its own ":status" first, names as nghttp2 let them.
  h2_list head{{":status", "200"},   {"content-type", "text/html"}, {"connection", "x-a"},
               {"x-a", "1"},         {"keep-alive", "timeout=5"},   {"te", "trailers"},
               {"x-pad", " v \t"},   {"x-nul", "a\0b"s},            {"set-cookie", "a=1"},
               {"set-cookie", "b=2"}, {"content-length", "5"}};
  // Names are lowercased all the same (a head from elsewhere may not be).
  head.emplace_back("X-Upper", "u");
  CHECK(h2_response_fields_from_h2(203, std::move(head)) == h2_list{{":status", "203"},
                                                                    {"content-type", "text/html"},
                                                                    {"x-pad", "v"},
                                                                    {"set-cookie", "a=1"},
                                                                    {"set-cookie", "b=2"},
                                                                    {"content-length", "5"},
                                                                    {"x-upper", "u"}});
  // The same as the HTTP/1.1 head's list for the same fields.
  h1_fields h1{{"Content-Type", "text/html"}, {"Connection", "close, X-B"}, {"X-B", "2"}, {"X-C", "3"}};
  h2_list owned;
  for (auto [n, v] : h1) owned.emplace_back(std::string(n), std::string(v));
  CHECK(h2_response_fields_from_h2(200, std::move(owned)) == h2_response_fields(200, h1));
  CHECK(h2_response_fields_from_h2(304, {}) == h2_list{{":status", "304"}});
}

TEST_CASE("trailer fields to an h2 client", "[filters][h2]") {
  h1_fields in{{":status", "200"},          {"grpc-status", "0"},
               {"grpc-message", "ok%20done"}, {"Content-Length", "9"},
               {"connection", "x-a"},         {"x-a", "1"},
               {"Set-Cookie", "a=1"},         {"Authorization", "Bearer t"},
               {"Host", "example.com"},       {"Transfer-Encoding", "chunked"},
               {"X-Checksum", "abc"},         {"grpc-status-details-bin", "CAE"}};
  CHECK(h2_trailer_fields(in) == h2_list{{"grpc-status", "0"},
                                         {"grpc-message", "ok%20done"},
                                         {"x-checksum", "abc"},
                                         {"grpc-status-details-bin", "CAE"}});
  CHECK(h2_trailer_fields({}).empty());
}
