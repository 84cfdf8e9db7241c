// The scanner: streams split anywhere, the target and fields, placeholders, RE2's rules, compile
// errors and the stop at a block.
#include "vectors.hpp"
#include "scan/literals.hpp"

#include <catch2/catch.hpp>

using namespace sluice::scan;
using namespace scan_test;

TEST_CASE("a match split across two pieces is found at every split point", "[scan][stream]") {
  auto db = builtin_database();
  auto token = github_token();
  std::string body = "{\"note\": \"x\", \"token\": \"" + token + "\"}";
  auto at = body.find(token);
  for (std::size_t split = 0; split <= body.size(); ++split) {
    scanner s(db);
    s.feed("body", std::string_view(body).substr(0, split));
    s.feed("body", std::string_view(body).substr(split));
    s.end("body");
    INFO("split at " << split);
    REQUIRE(rules_of(s) == std::vector<std::string>{"github_token"});
    CHECK(s.findings()[0].offset == at);
    CHECK(s.findings()[0].location == "body");
  }
}

TEST_CASE("a body fed one byte at a time, the token its last bytes", "[scan][stream]") {
  auto db = builtin_database();
  std::string body = "prefix " + github_token();
  scanner s(db);
  for (char c : body) s.feed("body", std::string_view(&c, 1));
  CHECK(s.findings().empty()); // the boundary after the token needs the stream's end
  s.end("body");
  CHECK(rules_of(s) == std::vector<std::string>{"github_token"});
}

TEST_CASE("locations stream apart; a later feed to an ended location starts anew", "[scan][stream]") {
  auto db = builtin_database();
  auto token = github_token();
  scanner s(db, scratch::this_thread(), {false, "", host_mode::enforce});
  s.feed("body", token.substr(0, 10));
  s.feed("ws:message", token.substr(10)); // not the same stream: no token
  s.finish();
  CHECK(s.findings().empty());
  s.feed("body", token);
  s.end("body");
  REQUIRE(s.findings().size() == 1);
  CHECK(s.findings()[0].offset == 0);
}

TEST_CASE("a connection of many messages holds only its open stream", "[scan][stream]") {
  auto db = builtin_database();
  auto token = github_token();
  scanner s(db, scratch::this_thread(), {false, "", host_mode::enforce});
  for (int i = 1; i <= 5000; ++i) {
    const std::string location = "message:" + std::to_string(i);
    s.feed(location, "{\"jsonrpc\":\"2.0\",\"id\":" + std::to_string(i) + "}");
    CHECK(s.streams_held() == 1);
    s.end(location);
    CHECK(s.streams_held() == 0);
  }
  CHECK(s.findings().empty());
  s.feed("message:5001", token.substr(0, 7)); // a token split over a message's pieces, after them all
  s.feed("message:5001", token.substr(7));
  s.end("message:5001");
  REQUIRE(s.findings().size() == 1);
  CHECK(s.findings()[0].location == "message:5001");
  CHECK(s.streams_held() == 0);
  // Report mode, a finding in every message: the list stops growing; a blocking finding still counts.
  scanner r(db, scratch::this_thread(), {false, "", host_mode::report});
  for (int i = 1; i <= 1000; ++i) {
    const std::string location = "message:" + std::to_string(i);
    r.feed(location, "token " + token + " end");
    r.end(location);
  }
  CHECK(r.findings().size() == 256);
  CHECK(r.blocking() == nullptr);
}

TEST_CASE("the target: path and query parameters, raw and percent-decoded", "[scan][target]") {
  auto db = builtin_database();
  auto token = github_token();
  {
    scanner s(db);
    s.scan_target("/search/issues?page=2&q=" + token + "&per_page=10");
    REQUIRE(s.findings().size() == 1);
    CHECK(s.findings()[0].location == "query:q");
    CHECK(s.findings()[0].offset == 0);
  }
  {
    scanner s(db);
    auto encoded = percent_encode(token);
    encoded.replace(encoded.find('_'), 1, "%5F"); // as a client that encodes more than it must
    s.scan_target("/search?q=note%20" + encoded);
    REQUIRE(s.findings().size() == 1);
    CHECK(s.findings()[0].location == "query:q");
  }
  {
    scanner s(db);
    s.scan_target("/upload?" + token + "=1");
    REQUIRE(s.findings().size() == 1);
    CHECK(s.findings()[0].location == "query"); // the name is the secret: not named
  }
  {
    scanner s(db);
    s.scan_target("/repos/" + token + "/issues");
    REQUIRE(s.findings().size() == 1);
    CHECK(s.findings()[0].location == "path");
    CHECK(s.findings()[0].offset == 7);
  }
  {
    scanner s(db);
    s.scan_target("/a%2Fb?q=" + percent_encode(percent_encode("x/" + token))); // encoded twice
    CHECK(rules_of(s) == std::vector<std::string>{"github_token"});
  }
  {
    scanner s(db);
    s.scan_target("https://api.github.com/repos/o/r/issues?state=open&labels=bug,help%20wanted");
    CHECK(s.findings().empty());
  }
}

TEST_CASE("fields: raw, decoded, and Basic credentials", "[scan][fields]") {
  auto db = builtin_database();
  auto token = github_token();
  scanner s(db);
  s.scan_field("User-Agent", "curl/8.0");
  s.scan_field("Authorization", "Basic " + base64_encode("x-access-token:" + token));
  REQUIRE(s.findings().size() == 1);
  CHECK(s.findings()[0].location == "field:authorization");
  scanner c(db);
  c.scan_field("Cookie", "session=abc; t=" + percent_encode("\"" + token + "\""));
  REQUIRE(c.findings().size() == 1);
  CHECK(c.findings()[0].location == "field:cookie");
}

TEST_CASE("a head's fields at once find what each field on its own finds, and where", "[scan][fields]") {
  auto db = builtin_database();
  auto token = github_token();
  using fields = std::vector<std::pair<std::string_view, std::string_view>>;
  auto basic = "Basic " + base64_encode("x-access-token:" + token);
  auto cookie = "session=abc; t=" + percent_encode("\"" + token + "\"");
  auto aws = std::string("AKIA") + of("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16);
  std::string split_a = "-----BEGIN PRIVATE KEY-----", split_b = alnum(64);
  std::string note = "key " + aws; // the fields below view these strings: they outlive them
  for (const fields &f : {fields{{"User-Agent", "curl/8.0"}, {"Accept", "*/*"}},
                          fields{{"User-Agent", "curl/8.0"}, {"Authorization", basic}},
                          fields{{"Cookie", cookie}, {"Accept", "*/*"}},
                          fields{{"X-Note", note}, {"X-Other", token}},
                          // a match only across two values is none: each value stands alone
                          fields{{"X-A", split_a}, {"X-B", split_b}}}) {
    scanner one(db), all(db);
    for (auto [n, v] : f) one.scan_field(n, v);
    all.scan_fields(f);
    std::vector<std::string> a, b;
    for (const auto &x : one.findings()) a.push_back(x.rule + "@" + x.location);
    for (const auto &x : all.findings()) b.push_back(x.rule + "@" + x.location);
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    CHECK(a == b);
    CHECK(one.stopped() == all.stopped());
  }
}

TEST_CASE("a placeholder shaped like a token is no finding; a real token beside it is", "[scan][placeholders]") {
  auto placeholder = "ghp_" + alnum(36, 99);
  auto openai_placeholder = "sk-proj-" + alnum(156, 98);
  database_spec spec;
  spec.rules = builtin_rules();
  spec.placeholders = {placeholder, openai_placeholder};
  auto db = database::compile(std::move(spec));
  {
    scanner s(db);
    s.scan_field("Authorization", "Bearer " + placeholder);
    s.scan_field("Authorization", "Bearer " + openai_placeholder);
    s.scan_target("/x?token=" + placeholder);
    CHECK(s.findings().empty());
    CHECK(!s.stopped());
  }
  {
    // Split anywhere, a placeholder then a real token in one body.
    std::string body = openai_placeholder + " " + placeholder + " " + github_token();
    for (std::size_t split = 0; split <= body.size(); split += 7) {
      scanner s(db);
      s.feed("body", std::string_view(body).substr(0, split));
      s.feed("body", std::string_view(body).substr(split));
      s.end("body");
      INFO("split at " << split);
      REQUIRE(s.findings().size() == 1);
      CHECK(s.findings()[0].offset == body.rfind("ghp_"));
    }
  }
}

TEST_CASE("a rule Hyperscan refuses is matched by RE2, across pieces too", "[scan][fallback]") {
  database_spec spec;
  spec.rules = builtin_rules();
  spec.rules.push_back({"internal_id", R"((?U)internal-id-[0-9]{6,}\b)", kind::custom, action::block});
  spec.rules.push_back({"greek_key", R"(\p{Greek}{3}-key-[0-9]{4})", kind::custom, action::report});
  auto db = database::compile(std::move(spec));
  REQUIRE(db->re2_rules().size() == 2);
  CHECK(db->re2_rules()[0].rule == "internal_id");
  CHECK(db->re2_rules()[1].rule == "greek_key");
  CHECK(db->re2_rules()[1].reason.find("Unicode") != std::string::npos);

  std::string body = std::string(5000, 'a') + " internal-id-123456789 and \xce\xb1\xce\xb2\xce\xb3-key-1234 z";
  auto at = body.find("internal-id");
  for (std::size_t split : {std::size_t{0}, at + 3, at + 15, at + 20, at + 21, body.size() - 3, body.size()}) {
    scanner s(db, scratch::this_thread(), {false, "", host_mode::enforce});
    s.feed("body", std::string_view(body).substr(0, split));
    s.feed("body", std::string_view(body).substr(split));
    s.end("body");
    INFO("split at " << split);
    CHECK(rules_of(s) == std::vector<std::string>{"greek_key", "internal_id"});
    for (const auto &f : s.findings()) {
      if (f.rule == "internal_id") CHECK(f.offset == at);
      if (f.rule == "greek_key") CHECK(f.action == action::report);
      CHECK(f.kind == kind::custom);
    }
  }
  scanner whole(db);
  whole.scan_whole("field:x-id", "internal-id-0000001");
  CHECK(rules_of(whole) == std::vector<std::string>{"internal_id"});
  scanner cut(db);
  cut.feed("body", "internal-id-000000"); // the \b needs what follows
  CHECK(cut.findings().empty());
  cut.feed("body", "1x");
  cut.end("body");
  CHECK(cut.findings().empty());
}

TEST_CASE("compile errors name the rule and the reason", "[scan][compile]") {
  auto error_of = [](rule r) {
    database_spec spec;
    spec.rules = {std::move(r)};
    try {
      database::compile(std::move(spec));
    } catch (const compile_error &e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto bad = error_of({"my_rule", "abc(", kind::custom, action::block});
  CHECK(bad.find("\"my_rule\"") != std::string::npos);
  CHECK(bad.find("RE2") != std::string::npos);
  CHECK(error_of({"empty", "x*", kind::custom, action::block}).find("empty string") != std::string::npos);
  CHECK(error_of({"Bad Id", "abc", kind::custom, action::block}).find("\"Bad Id\"") != std::string::npos);
  database_spec twice;
  twice.rules = {{"a", "abc", kind::custom, action::block}, {"a", "def", kind::custom, action::block}};
  CHECK_THROWS_WITH(database::compile(std::move(twice)), Catch::Contains("used twice"));
}

TEST_CASE("the scan stops at the first certain block, after matches at the same offset", "[scan][stop]") {
  auto db = builtin_database();
  std::string body = github_token() + " " + std::string(100, 'x') + " AKIAIOSFODNN7EXAMPLE";
  scanner s(db);
  s.feed("body", body);
  CHECK(s.stopped());
  CHECK(rules_of(s) == std::vector<std::string>{"github_token"});
  s.feed("body", " npm_" + alnum(36) + " ");
  s.scan_whole("path", "/" + github_token());
  CHECK(s.findings().size() == 1);
  REQUIRE(s.blocking());
  CHECK(s.blocking()->rule == "github_token");

  scanner all(db, scratch::this_thread(), {false, "", host_mode::enforce});
  all.feed("body", body);
  all.end("body");
  CHECK(rules_of(all) == std::vector<std::string>{"aws_access_key_id", "github_token"});
}

TEST_CASE("host modes: report lets through, off scans for canaries only", "[scan][hosts]") {
  auto db = builtin_database();
  scanner r(db, scratch::this_thread(), {true, "gist.github.com", host_mode::report});
  r.scan_whole("body", github_token());
  REQUIRE(r.findings().size() == 1);
  CHECK(r.findings()[0].action == action::report);
  CHECK(!r.blocking());
  CHECK(!r.stopped());
  scanner off(db, scratch::this_thread(), {true, "x", host_mode::off});
  off.scan_whole("body", github_token());
  CHECK(off.findings().empty());
}

TEST_CASE("one scratch serves databases compiled after it was fitted", "[scan][scratch]") {
  scratch sc;
  auto small = builtin_database();
  database_spec spec;
  spec.rules = builtin_rules();
  for (int i = 0; i < 50; ++i) spec.own_secrets.push_back({"S" + std::to_string(i), alnum(40, i), {}});
  auto big = database::compile(std::move(spec));
  scanner a(small, sc), b(big, sc);
  a.feed("body", "x " + github_token().substr(0, 20));
  b.feed("body", "y " + alnum(40, 7));
  a.feed("body", github_token().substr(20) + " ");
  b.end("body");
  CHECK(rules_of(a) == std::vector<std::string>{"github_token"});
  CHECK(rules_of(b) == std::vector<std::string>{"own_secret"});
}

TEST_CASE("without the block-mode database, whole values are found alike (a run of sluice exec)", "[scan][block]") {
  auto with = builtin_database();
  database_spec spec;
  spec.rules = builtin_rules();
  spec.block_database = false;
  auto without = database::compile(std::move(spec));
  REQUIRE(with->hs_block() != nullptr);
  REQUIRE(without->hs_block() == nullptr);
  auto token = github_token();
  auto basic = "Basic " + base64_encode("x-access-token:" + token);
  auto aws = std::string("AKIA") + of("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16);
  using fields = std::vector<std::pair<std::string_view, std::string_view>>;
  const fields head{{"User-Agent", "curl/8.0"}, {"Authorization", basic}, {"X-Note", aws}};
  auto found = [&](const database_ptr &db) {
    scanner_options every; // every finding, not only the first certain block
    every.stop_at_block = false;
    scanner s(db, scratch::this_thread(), every);
    // the same scanner's whole-value stream serves one value after another, each on its own
    s.scan_target("/search/issues?page=2&q=" + token + "&per_page=10");
    s.scan_target("/repos/o/r");
    s.scan_fields(head);
    s.scan_field("X-End", "ends in AKIA"); // a prefix at a value's end: no match carried over
    s.scan_field("X-Next", of("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16));
    std::vector<std::string> out;
    for (const auto &f : s.findings()) out.push_back(f.rule + "@" + f.location + ":" + std::to_string(f.offset));
    std::sort(out.begin(), out.end());
    return out;
  };
  auto a = found(with), b = found(without);
  CHECK(a == b);
  CHECK(a.size() == 3);
}
