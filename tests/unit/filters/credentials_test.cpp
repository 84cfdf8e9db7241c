#include "filters/credentials.hpp"

#include <catch2/catch.hpp>

using namespace sluice::filters;

namespace {
credential_config make(const char *name, std::vector<std::string> hosts, const char *format) {
  credential_config c;
  c.name = name;
  c.source = "env:X";
  c.hosts = std::move(hosts);
  c.format = format;
  c.secret = "SECRET";
  return c;
}
using fields = std::vector<std::pair<std::string_view, std::string_view>>;
} // namespace

TEST_CASE("a placeholder is replaced for its own hosts and refused elsewhere", "[filters][credentials]") {
  credential_injector inj({make("gh", {"api.github.com", "*.githubusercontent.com"}, "Bearer {}")});
  auto r = inj.apply(fields{{"Authorization", "Bearer sluice-credential-gh"}}, "/x", "api.github.com", "https", 443);
  CHECK(r.reason.empty());
  REQUIRE(r.set.size() == 1);
  CHECK(r.set[0] == std::pair<std::string, std::string>{"Authorization", "Bearer SECRET"});

  // Absent header: added with the format.
  // The placeholder as a label of another host's name (http://PLACEHOLDER.evil.test/) is refused too.
  CHECK(inj.apply(fields{}, "/", "sluice-credential-gh.evil.test", "https", 443).reason == "credential_host_mismatch");
  r = inj.apply(fields{{"Accept", "*/*"}}, "/", "raw.githubusercontent.com", "https", 443);
  REQUIRE(r.set.size() == 1);
  CHECK(r.set[0].second == "Bearer SECRET");

  // The user's own Authorization is left alone.
  r = inj.apply(fields{{"authorization", "Bearer mine"}}, "/", "api.github.com", "https", 443);
  CHECK(r.set.empty());

  // Another host: in a header, in a Basic pair, in the query, on another port: refused.
  struct row {
    fields f;
    std::string_view target, host;
    unsigned port;
  };
  const std::string basic = "Basic " + base64_encode("x:sluice-credential-gh");
  const row hostile[] = {
      {{{"Authorization", "Bearer sluice-credential-gh"}}, "/", "evil.test", 443},
      {{{"X-Anything", "pre sluice-credential-gh post"}}, "/", "evil.test", 443},
      {{{"Authorization", basic}}, "/", "evil.test", 443},
      {{}, "/?t=sluice-credential-gh", "evil.test", 443},
      {{{"Authorization", "Bearer sluice-credential-gh"}}, "/", "api.github.com", 8443},
      {{{"Authorization", "Bearer sluice-credential-gh"}}, "/", "github.com", 443},
  };
  for (const auto &h : hostile) {
    INFO(h.host << h.target);
    auto res = inj.apply(h.f, h.target, h.host, "https", h.port);
    CHECK(res.reason == "credential_host_mismatch");
    CHECK(res.credential == "gh");
    CHECK(res.set.empty());
  }
  // Nothing for hosts the credential does not belong to when no placeholder is sent.
  CHECK(inj.apply(fields{}, "/", "evil.test", "https", 443).set.empty());
}

TEST_CASE("HTTP Basic credentials for git", "[filters][credentials]") {
  credential_injector inj({make("git", {"git.example.com"}, "basic:oauth2")});
  auto r = inj.apply(fields{}, "/repo.git/info/refs", "git.example.com", "https", 443);
  REQUIRE(r.set.size() == 1);
  CHECK(r.set[0].second == "Basic " + base64_encode("oauth2:SECRET"));
  // A placeholder inside Basic (git with GIT_TOKEN in a URL or helper) becomes the secret.
  r = inj.apply(fields{{"Authorization", "Basic " + base64_encode("me:sluice-credential-git")}}, "/",
                "git.example.com", "https", 443);
  REQUIRE(r.set.size() == 1);
  CHECK(r.set[0].second == "Basic " + base64_encode("me:SECRET"));
}

TEST_CASE("base64 round trip and refusal of garbage", "[filters][credentials]") {
  CHECK(base64_encode("git:s3") == "Z2l0OnMz");
  CHECK(base64_decode("Z2l0OnMz") == std::optional<std::string>("git:s3"));
  CHECK_FALSE(base64_decode("Z2l0OnM").has_value());
  CHECK_FALSE(base64_decode("Z2l0*nMz").has_value());
}

TEST_CASE("command sources: argv split at spaces", "[filters][credentials]") {
  CHECK(command_argv("command:gh auth  token") == std::vector<std::string>{"gh", "auth", "token"});
  CHECK(command_argv("command:   ").empty());
  CHECK(command_argv("file:/x").empty());
}

TEST_CASE("shaped placeholders: a kind or a prefix, random per command or derived", "[filters][credentials]") {
  credential_config c;
  c.name = "gh";
  CHECK(shaped_placeholder(c, true) == "sluice-credential-gh");
  c.placeholder_shape = "github";
  auto a = shaped_placeholder(c, true), b = shaped_placeholder(c, true);
  CHECK(a.size() == 40);
  CHECK(a.rfind("ghp_", 0) == 0);
  CHECK(a != b); // random per command
  CHECK(a.find_first_not_of("ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") == std::string::npos);
  CHECK(shaped_placeholder(c, false) == shaped_placeholder(c, false)); // derived: the same each time
  c.placeholder_shape = "aws-access-key-id";
  auto k = shaped_placeholder(c, true);
  CHECK((k.size() == 20 && k.rfind("AKIA", 0) == 0));
  CHECK(k.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") == std::string::npos);
  c.placeholder_shape = "tok_";
  c.placeholder_length = 24;
  auto p = shaped_placeholder(c, true);
  CHECK((p.size() == 24 && p.rfind("tok_", 0) == 0));
  // The injector replaces the shaped placeholder, and refuses it at another host.
  c.placeholder = p;
  c.hosts = {"api.test"};
  c.secret = "real";
  credential_injector inj({c});
  std::string auth = "Bearer " + p;
  auto r = inj.apply({{"Authorization", auth}}, "/", "api.test", "https", 443);
  REQUIRE(r.set.size() == 1);
  CHECK(r.set[0].second == "Bearer real");
  CHECK(inj.apply({{"Authorization", auth}}, "/", "other.test", "https", 443).reason == "credential_host_mismatch");
}
