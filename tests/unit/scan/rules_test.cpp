// Each built-in rule: a vector of its documented format is found with the rule's id, and a
// near miss is not found at all.
#include "vectors.hpp"

#include <catch2/catch.hpp>

using namespace sluice::scan;
using namespace scan_test;

namespace {

struct vector_pair {
  std::string rule, positive, near_miss;
};

std::vector<vector_pair> vectors() {
  return {
      {"github_token", "ghp_" + alnum(36), "ghp_" + alnum(35)},
      {"github_token", "ghs_" + alnum(36, 3), "ghx_" + alnum(36, 3)},
      {"github_fine_grained_token", "github_pat_" + alnum(22) + "_" + alnum(59),
       "github_pat_" + alnum(22) + "_" + alnum(40)},
      {"gitlab_token", "glpat-" + urlsafe(20), "glpat-" + urlsafe(12)},
      {"aws_access_key_id", "AKIAIOSFODNN7EXAMPLE", "AKIAiosfodnn7example"},
      {"aws_access_key_id", "ASIA" + of("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16), "AKIA" + of("ABCDEFGHIJ", 15)},
      {"aws_secret_access_key", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
       "aws_secret_access_key = \"see the docs\"\n"},
      {"aws_secret_access_key", R"({"SecretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"})",
       R"({"SecretAccessKey": "wJalrXUtnFEMI/K7MDENG"})"},
      {"anthropic_api_key", "sk-ant-api03-" + urlsafe(93) + "AA", "sk-ant-api03-" + urlsafe(20)},
      {"openai_api_key", "sk-proj-" + urlsafe(120), "sk-proj-" + urlsafe(12)},
      {"openai_api_key", "sk-" + alnum(20) + "T3BlbkFJ" + alnum(20), "sk-" + alnum(48)},
      {"slack_token", "xoxb-123456789012-1234567890123-" + alnum(24), "xoxq-123456789012-" + alnum(24)},
      {"slack_webhook_url", "https://hooks.slack.com/services/T0AB12CD3/B0CD45EF6/" + alnum(24),
       "https://hooks.slack.com/services/T0AB12CD3/"},
      {"stripe_secret_key", "sk_live_" + alnum(24), "sk_test_" + alnum(24)},
      {"stripe_secret_key", "rk_live_" + alnum(24, 5), "rk_live_" + alnum(10)},
      {"google_api_key", "AIza" + urlsafe(35), "AIza" + urlsafe(20)},
      {"npm_token", "npm_" + alnum(36), "npm_" + alnum(30)},
      {"pypi_token", "pypi-AgEIcHlwaS5vcmc" + urlsafe(80), "pypi-AgEIcHlwaS5vcmc" + urlsafe(10)},
      {"pypi_token", "pypi-AgENdGVzdC5weXBpLm9yZw" + urlsafe(80), "pypi-" + urlsafe(80)},
      {"private_key", "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA" + alnum(64) + "\n" + alnum(64),
       R"(const char *marker = "-----BEGIN PRIVATE KEY-----";)"},
      {"private_key", R"({"key": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA)" + alnum(70) + "\"}",
       "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA" + alnum(64)},
      {"jwt",
       "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ."
       "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
       "eyJhbGciOiJIUzI1NiJ9.e30.abc"},
      {"huggingface_token", "hf_" + letters(34), "hf_hub_download_" + letters(20)},
      {"sendgrid_api_key", "SG." + urlsafe(22) + "." + urlsafe(43), "SG." + urlsafe(10) + "." + urlsafe(10)},
      {"twilio_api_key", "SK" + hex(32), "SK" + hex(31)},
      {"digitalocean_token", "dop_v1_" + hex(64), "dop_v1_" + hex(40)},
      {"shopify_token", "shpat_" + hex(32), "shpat_" + hex(16)},
  };
}

} // namespace

TEST_CASE("every built-in rule has a vector here", "[scan][rules]") {
  auto v = vectors();
  for (const auto &r : builtin_rules()) {
    INFO(r.id);
    CHECK(std::any_of(v.begin(), v.end(), [&](const vector_pair &p) { return p.rule == r.id; }));
    CHECK(valid_rule_id(r.id));
    CHECK(r.kind == kind::format);
  }
}

TEST_CASE("each format rule finds its vector and not its near miss", "[scan][rules]") {
  auto db = builtin_database();
  CHECK(db->re2_rules().empty()); // every built-in rule runs in Hyperscan
  for (const auto &v : vectors()) {
    INFO(v.rule << ": " << v.positive);
    for (const auto &around : {std::pair<std::string, std::string>{"", ""}, {"token=", "&x=1"}, {"\"", "\",\n"}}) {
      scanner s(db);
      s.scan_whole("body", around.first + v.positive + around.second);
      CHECK(rules_of(s) == std::vector<std::string>{v.rule});
      REQUIRE(!s.findings().empty());
      CHECK(s.findings()[0].location == "body");
      CHECK(s.findings()[0].kind == kind::format);
      CHECK(s.findings()[0].action == action::block);
      if (v.positive.rfind("https://", 0) != 0 && v.positive[0] != '{') {
        CHECK(s.findings()[0].offset == around.first.size());
      }
    }
    scanner miss(db);
    miss.scan_whole("body", "x " + v.near_miss + " y");
    INFO("near miss: " << v.near_miss);
    CHECK(miss.findings().empty());
  }
}

TEST_CASE("a prefix alone is no finding", "[scan][rules]") {
  auto db = builtin_database();
  for (std::string text : {"sk-", "sk-ant-", "ghp_", "AKIA", "xoxb-", "AIza", "npm_", "eyJ", "-----BEGIN",
                           "curl -H 'Authorization: token ghp_...' https://api.github.com",
                           "export OPENAI_API_KEY=sk-...", "my-task-sk-123"}) {
    scanner s(db);
    s.scan_whole("body", text);
    INFO(text);
    CHECK(s.findings().empty());
  }
}

TEST_CASE("a token inside a longer word is no finding", "[scan][rules]") {
  auto db = builtin_database();
  scanner s(db);
  s.scan_whole("body", "xghp_" + alnum(36) + " ghp_" + alnum(36) + "x AKIAIOSFODNN7EXAMPLEX");
  CHECK(s.findings().empty());
}
