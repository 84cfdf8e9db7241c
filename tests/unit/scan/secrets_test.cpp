// The caller's own secrets and the run's canaries: matched raw, percent-encoded, inside base64 at
// every alignment and in hex; named, never echoed.
#include "vectors.hpp"
#include "scan/canary.hpp"
#include "scan/literals.hpp"

#include <catch2/catch.hpp>

using namespace sluice::scan;
using namespace scan_test;

namespace {

const std::string value = "s3cr3t-Value/with+chars=and~more";

database_ptr secrets_database() {
  database_spec spec;
  spec.rules = builtin_rules();
  spec.own_secrets = {{"MY_SERVICE_TOKEN", value, {"api.example.com", "*.uploads.example.com"}},
                      {"SHORT_KEY", "1234567", {}},
                      {"HOME_AUTH", "/home/me/.Xauthority", {}}};
  return database::compile(std::move(spec));
}

// `s` is `prefix` then `n` characters of `alphabet`.
bool shaped(const std::string &s, std::string_view prefix, std::string_view alphabet, std::size_t n) {
  return s.size() == prefix.size() + n && s.starts_with(prefix) &&
         s.find_first_not_of(alphabet, prefix.size()) == std::string::npos;
}
constexpr std::string_view base62 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

void check_no_value_in(const finding &f) {
  for (const auto &field : {f.rule, f.location, f.name, std::string(f.encoding)}) {
    CHECK(field.find(value) == std::string::npos);
    CHECK(field.find(value.substr(0, 8)) == std::string::npos);
  }
}

} // namespace

TEST_CASE("base64 forms keep only what the value alone decides", "[scan][secrets]") {
  CHECK(base64_encode("") == "");
  CHECK(base64_encode("f") == "Zg==");
  CHECK(base64_encode("fo") == "Zm8=");
  CHECK(base64_encode("foobar") == "Zm9vYmFy");
  CHECK(percent_encode("a b/~") == "a%20b%2F~");
  CHECK(hex_encode("\x01\xab", true) == "01AB");
  // Raw, three base64 alignments, hex lower and upper; no percent form (nothing to encode).
  CHECK(literal_forms("abcdefgz").size() == 6);
  CHECK(literal_forms("abcdefgh").size() == 5); // its hex has no letters: one hex form
  CHECK(!matchable_secret("1234567"));
  CHECK(!matchable_secret("12345678"));
  CHECK(!matchable_secret("/run/user/1000/bus"));
  CHECK(!matchable_secret("FALSE"));
  CHECK(matchable_secret("hunter2hunter2"));
}

TEST_CASE("own secrets in every encoding, named and never echoed", "[scan][secrets]") {
  auto db = secrets_database();
  CHECK(db->skipped_secrets() == std::vector<std::string>{"SHORT_KEY", "HOME_AUTH"});
  std::vector<std::pair<std::string, std::string>> placements = {
      {"raw", "{\"v\": \"" + value + "\"}"},
      {"percent", "a=1&v=" + percent_encode(value) + "&b=2"},
      {"hex", "payload=" + hex_encode(value, false)},
      {"hex", "PAYLOAD=" + hex_encode(value, true)},
  };
  for (std::size_t prefix = 0; prefix < 3; ++prefix) {
    for (std::size_t suffix = 0; suffix < 3; ++suffix) {
      // Inside a longer base64 string, at each alignment, and in base64url.
      auto b64 = base64_encode(std::string(prefix + 3, 'p') + value + std::string(suffix, 's'));
      placements.push_back({"base64", "data=" + b64});
      std::string url = b64;
      std::replace(url.begin(), url.end(), '+', '-');
      std::replace(url.begin(), url.end(), '/', '_');
      placements.push_back({"base64", "data=" + url + "."});
    }
  }
  for (const auto &[encoding, body] : placements) {
    INFO(encoding << ": " << body);
    scanner s(db, scratch::this_thread(), {true, "evil.example.net", host_mode::enforce});
    s.feed("body", body);
    s.end("body");
    REQUIRE(s.findings().size() == 1);
    const auto &f = s.findings()[0];
    CHECK(f.rule == "own_secret");
    CHECK(f.kind == kind::own_secret);
    CHECK(f.name == "MY_SERVICE_TOKEN");
    CHECK(f.allowed_hosts == std::vector<std::string>{"api.example.com", "*.uploads.example.com"});
    CHECK(f.encoding == encoding);
    CHECK(f.action == action::block);
    check_no_value_in(f);
  }
}

TEST_CASE("an own secret may go to its own host", "[scan][secrets]") {
  auto db = secrets_database();
  for (std::string host : {"api.example.com", "API.example.com", "eu.uploads.example.com"}) {
    scanner s(db, scratch::this_thread(), {true, host, host_mode::enforce});
    s.scan_field("authorization", "Bearer " + value);
    CHECK(s.findings().empty());
  }
  for (std::string host : {"example.com", "uploads.example.com", "api.example.com.evil.net"}) {
    scanner other(db, scratch::this_thread(), {true, host, host_mode::enforce});
    other.scan_field("authorization", "Bearer " + value);
    INFO(host);
    CHECK(other.findings().size() == 1);
  }
  scanner short_values(db);
  short_values.scan_whole("body", "pin=1234567 home=/home/me/.Xauthority");
  CHECK(short_values.findings().empty());
}

TEST_CASE("canaries: unique per set, well-formed, planted, caught in any encoding", "[scan][canary]") {
  auto a = make_canaries(), b = make_canaries();
  REQUIRE(a.values.size() == 4);
  for (std::size_t i = 0; i < a.values.size(); ++i) CHECK(a.values[i].value != b.values[i].value);
  CHECK(shaped(a.values[0].value, "AKIA", "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16));
  CHECK(shaped(a.values[1].value, "", "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/+", 40));
  CHECK(shaped(a.values[2].value, "ghp_", base62, 36));
  CHECK(a.values[2].value.substr(34) == github_checksum(a.values[2].value.substr(4, 30)));
  CHECK(shaped(a.values[3].value, "", base62, 32));
  REQUIRE(a.files.size() == 3);
  CHECK(a.files[0].path == ".aws/credentials");
  CHECK(a.files[0].contents.find(a.values[0].value) != std::string::npos);
  CHECK(a.files[1].contents == "GITHUB_TOKEN=" + a.values[2].value + "\n");
  CHECK(a.files[2].contents.find("password " + a.values[3].value) != std::string::npos);

  auto values = a.values;
  database_spec spec;
  spec.rules = builtin_rules();
  spec.canaries = a.values;
  auto db = database::compile(std::move(spec));
  for (const auto &c : values) {
    for (const auto &body : {c.value, base64_encode("x:" + c.value), hex_encode(c.value, false)}) {
      // Even where the host says off: nobody sends a canary by accident.
      scanner s(db, scratch::this_thread(), {true, "anywhere.example", host_mode::off});
      s.scan_whole("field:authorization", body);
      INFO(c.name << ": " << body);
      REQUIRE(s.blocking());
      CHECK(s.blocking()->kind == kind::canary);
      CHECK(s.blocking()->rule == "canary");
      CHECK(s.blocking()->name == c.name);
    }
  }
  // The canary comes before the format rule the value also fits.
  scanner s(db);
  s.scan_whole("body", "key=" + values[0].value);
  REQUIRE(s.blocking());
  CHECK(s.blocking()->kind == kind::canary);
}
