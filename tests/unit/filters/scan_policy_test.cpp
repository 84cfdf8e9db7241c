// [scan]: the table as data, its errors, the secret names and the per-host modes.
#include "filters/policy.hpp"
#include "filters/policy_loader.hpp"

#include <catch2/catch.hpp>

using namespace sluice::filters;

namespace {
std::string error_of(const std::string &toml) {
  try {
    load_config_string(toml, "test.toml");
  } catch (const config_error &e) {
    return e.what();
  }
  return {};
}
bool contains(const std::string &s, const std::string &part) { return s.find(part) != std::string::npos; }
} // namespace

TEST_CASE("[scan] loads, and its defaults hold without it", "[filters][config][scan]") {
  auto d = load_config_string("", "none.toml");
  CHECK(d.scan.enabled);
  CHECK(d.scan.format == "block");
  CHECK(d.scan.own_secret_names.size() == 7);
  CHECK(d.scan.max_decoded_body_bytes == 256ull << 20);

  auto c = load_config_string(R"(
[scan]
enabled = true
format = "report"
canary = "block"
own_secret_names = ["*TOKEN*", "MY_*_PASS"]
max_decoded_body_bytes = 1048576
report_hosts = ["uploads.example.com"]
off_hosts = ["*.internal.example"]
[scan.actions]
jwt = "off"
acme_key = "report"
[[scan.rule]]
id = "acme_key"
regex = "acme_[a-z0-9]{32}"
[[scan.rule]]
id = "acme.legacy-key"
regex = "ACME-[A-Z]{20}"
action = "report"
)",
                              "scan.toml");
  CHECK(c.scan.format == "report");
  CHECK(c.scan.rules.size() == 2);
  CHECK(c.scan.rules[0].action.empty());
  CHECK(c.scan.rules[1].action == "report");
  CHECK(c.scan.actions.at("jwt") == "off");
  CHECK(c.scan.actions.at("acme_key") == "report");
  CHECK(c.scan.max_decoded_body_bytes == 1048576);
  CHECK(secret_name(c.scan.own_secret_names, "github_token"));
  CHECK(secret_name(c.scan.own_secret_names, "MY_DB_PASS"));
  CHECK(!secret_name(c.scan.own_secret_names, "PATH"));

  policy p(c);
  CHECK(p.scan_hosts().mode_for("uploads.example.com", "https", 443) == scan_hosts::mode::report);
  CHECK(p.scan_hosts().mode_for("a.internal.example", "https", 8443) == scan_hosts::mode::off);
  CHECK(p.scan_hosts().mode_for("api.github.com", "https", 443) == scan_hosts::mode::enforce);
}

TEST_CASE("the default secret names", "[filters][scan]") {
  scan_config s;
  for (auto n : {"GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "PGPASSWORD", "DB_PASSWD", "GOOGLE_APPLICATION_CREDENTIALS",
                 "NPM_AUTH", "api_key"}) {
    CHECK(secret_name(s.own_secret_names, n));
  }
  for (auto n : {"PATH", "HOME", "LANG", "EDITOR", "TERM"}) CHECK(!secret_name(s.own_secret_names, n));
}

TEST_CASE("[scan] errors name the key and the fix", "[filters][config][scan]") {
  CHECK(contains(error_of("[scan]\nenable = true\n"), "enable"));
  CHECK(contains(error_of("[scan]\nformat = \"deny\"\n"), "scan.format must be \"block\" or \"report\""));
  auto bad_re = error_of("[[scan.rule]]\nid = \"x\"\nregex = \"abc(\"\n");
  CHECK(contains(bad_re, "[[scan.rule]] \"x\": regex must be an RE2 regular expression"));
  CHECK(contains(bad_re, "test.toml:"));
  CHECK(contains(error_of("[[scan.rule]]\nid = \"x\"\nregex = \"a*\"\n"), "matches the empty string"));
  CHECK(contains(error_of("[[scan.rule]]\nid = \"jwt\"\nregex = \"abc\"\n"), "is taken"));
  CHECK(contains(error_of("[[scan.rule]]\nid = \"Bad\"\nregex = \"abc\"\n"), "a rule id is a lower-case letter"));
  CHECK(contains(error_of("[[scan.rule]]\nid = \"x\"\nregex = \"abc\"\nseverity = 1\n"), "severity"));
  CHECK(contains(error_of("[scan.actions]\ngithub_tokens = \"off\"\n"), "[scan.actions] github_tokens: no such rule"));
  CHECK(contains(error_of("[scan.actions]\njwt = \"ignore\"\n"), "or \"off\""));
  CHECK(contains(error_of("[scan]\nown_secret_names = [\"*\"]\n"), "own_secret_names"));
  CHECK(contains(error_of("[scan]\nreport_hosts = [\"bad host\"]\n"), "scan.report_hosts"));
  CHECK(contains(error_of("[scan]\nmax_decoded_body_bytes = -1\n"), "max_decoded_body_bytes"));
}
