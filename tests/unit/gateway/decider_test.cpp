// The decider's question and answer (gateway/decider/protocol.hpp): what is asked, what is
// understood back, what is refused, and what the cache keeps.
#include "gateway/decider/protocol.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <catch2/catch.hpp>

using namespace sluice::gateway;
namespace js = boost::json;

namespace {
decider::answer parse(std::string_view text) { return decider::parse_result(js::parse(text)); }
} // namespace

TEST_CASE("the decider's question carries the exchange, never a credential", "[decider]") {
  exchange::field_list fields{{"Host", "api.test"}, {"User-Agent", "curl/8"}, {"Authorization", "Bearer s3cret"},
                              {"Cookie", "a=s3cret"}, {"Proxy-Authorization", "Basic s3cret"}, {"Accept", "a"},
                              {"accept", "b"}};
  exchange::request r;
  r.fields = &fields;
  exchange::verdict v;
  v.reason = "host_not_allowlisted";
  exchange::outcome o;
  o.method = "GET";
  o.scheme = "https";
  o.host = "api.test";
  o.port = 443;
  o.target = "/v1/items?q=1";
  auto q = decider::question(r, v, o, {"alice", "dev", "", "", "network-read"});
  CHECK(q.at("path") == "/v1/items");
  CHECK(q.at("query") == "q=1");
  CHECK(q.at("port") == 443);
  CHECK(q.at("client") == "alice");
  CHECK(q.at("role") == "dev");
  CHECK(q.at("protocol") == "http/1.1");
  CHECK(q.at("file").at("reason") == "host_not_allowlisted");
  const auto &f = q.at("fields").as_object();
  CHECK(f.at("user-agent") == "curl/8");
  CHECK(f.at("accept") == "a, b");
  CHECK_FALSE(f.contains("authorization"));
  CHECK_FALSE(f.contains("cookie"));
  CHECK_FALSE(f.contains("proxy-authorization"));
  CHECK(js::serialize(q).find("s3cret") == std::string::npos);
}

TEST_CASE("answers the decider may give", "[decider]") {
  CHECK(parse("true").kind == decider::answer::allow);
  CHECK(parse("false").kind == decider::answer::deny);
  CHECK(parse(R"({"allow": true})").kind == decider::answer::allow);
  auto a = parse(R"({"decision":"deny","status":451,"reason":"no\nway"})");
  CHECK(a.kind == decider::answer::deny);
  CHECK(a.status == 451);
  CHECK(a.message == "no way");
  a = parse(R"({"decision":"allow","set_fields":{"x-team":"a"},"remove_fields":["x-debug"]})");
  REQUIRE(a.kind == decider::answer::allow);
  CHECK(a.set == std::vector<std::pair<std::string, std::string>>{{"x-team", "a"}});
  CHECK(a.remove == std::vector<std::string>{"x-debug"});
  CHECK(parse(R"({"decision":"ask"})").kind == decider::answer::ask);
  CHECK(parse(R"({"decision":"body"})").kind == decider::answer::body);
}

TEST_CASE("a body the decider asked for: text as it is, anything else in base64", "[decider]") {
  js::object q;
  decider::add_body(q, "caf\xc3\xa9 {\"a\": 1}");
  CHECK(q.at("body").as_string() == "caf\xc3\xa9 {\"a\": 1}");
  CHECK(q.at("body_bytes").as_uint64() == 14);
  CHECK_FALSE(q.contains("body_base64"));
  // Not UTF-8: a lone continuation byte, an overlong '/', a surrogate, a cut sequence, a NUL is fine.
  for (std::string bad : {"\x80", "\xc0\xaf", "\xed\xa0\x80", "ok \xe2\x82"}) {
    js::object b;
    decider::add_body(b, bad);
    CHECK_FALSE(b.contains("body"));
    CHECK(b.at("body_bytes").as_uint64() == bad.size());
  }
  js::object bin;
  decider::add_body(bin, std::string("\xff\x00\x01", 3));
  CHECK(bin.at("body_base64").as_string() == "/wAB");
  js::object nul;
  decider::add_body(nul, std::string("a\0b", 3));
  CHECK(nul.at("body").as_string().size() == 3);
  js::object empty;
  decider::add_body(empty, "");
  CHECK(empty.at("body").as_string().empty());
}

TEST_CASE("answers sluice refuses whole", "[decider]") {
  for (auto text : {R"({"decision":"maybe"})", R"({})", R"("allow")", R"({"decision":"deny","status":200})",
                    R"({"decision":"allow","set_fields":{"host":"evil.test"}})",
                    R"({"decision":"allow","set_fields":{"content-length":"0"}})",
                    R"({"decision":"allow","set_fields":{"proxy-authorization":"x"}})",
                    R"({"decision":"allow","set_fields":{"x-a":"1\r\nx-b: 2"}})",
                    R"({"decision":"allow","set_fields":{"bad name":"1"}})",
                    R"({"decision":"allow","remove_fields":["transfer-encoding"]})"}) {
    INFO(text);
    auto a = parse(text);
    CHECK(a.kind == decider::answer::unavailable);
    CHECK_FALSE(a.message.empty());
  }
}

TEST_CASE("the cache keeps what the decider said, on what it said, bounded", "[decider]") {
  decider::answer_cache cache(std::chrono::seconds(60), 2);
  js::object q1{{"host", "a.test"}, {"path", "/x"}, {"method", "GET"}};
  js::object q2{{"host", "a.test"}, {"path", "/x"}, {"method", "POST"}};
  js::object q3{{"host", "a.test"}, {"path", "/y"}, {"method", "GET"}};
  auto a = parse(R"({"decision":"allow","cache":{"seconds":30,"keys":["path","host"]}})");
  cache.keep(q1, a);
  auto hit = cache.find(q2); // equal in host and path: the method was not among the keys
  REQUIRE(hit);
  CHECK(hit->cached);
  CHECK(hit->kind == decider::answer::allow);
  CHECK_FALSE(cache.find(q3));
  // Not kept: an answer without cache keys, an ask, a failure.
  decider::answer_cache other(std::chrono::seconds(60), 10);
  other.keep(q1, parse(R"({"decision":"allow"})"));
  other.keep(q1, parse(R"({"decision":"ask","cache":{"seconds":30,"keys":["host"]}})"));
  other.keep(q1, parse(R"({"decision":"body","cache":{"seconds":30,"keys":["host"]}})"));
  CHECK_FALSE(other.find(q1));
  // cache_seconds = 0: nothing is kept.
  decider::answer_cache off(std::chrono::seconds(0), 10);
  off.keep(q1, a);
  CHECK_FALSE(off.find(q1));
  // Bounded: a third entry past two starts over rather than grows.
  cache.keep(q3, a);
  cache.keep(js::object{{"host", "b.test"}, {"path", "/z"}}, a);
  int kept = 0;
  for (auto *q : {&q1, &q3}) kept += cache.find(*q) ? 1 : 0;
  CHECK(kept <= 1);
}
