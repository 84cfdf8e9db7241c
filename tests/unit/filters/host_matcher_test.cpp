#include "filters/host_matcher.hpp"
#include "filters/host_name.hpp"

#include <catch2/catch.hpp>

using sluice::filters::host_matcher;
using sluice::filters::pattern_error;

namespace {
// Matches a raw host the way the gateway does: normalize first, then look up.
std::optional<std::string> match(const host_matcher &m, const char *raw, const char *scheme = "https",
                                 unsigned port = 443) {
  auto h = sluice::filters::parse_host(raw);
  if (!h.host) return std::nullopt;
  const std::string *text = m.match(h.host->name, scheme, port);
  if (!text) return std::nullopt;
  return *text;
}
} // namespace

TEST_CASE("exact, subdomain and regex patterns", "[filters][host_matcher]") {
  host_matcher m({"api.github.com", "*.githubusercontent.com", "re:pkg[0-9]+\\.example\\.org",
                  "198.18.0.2:8443", "[::1]:9000"});
  struct row {
    const char *host;
    const char *scheme;
    unsigned port;
    const char *rule; // nullptr: no match
  };
  const row rows[] = {
      {"api.github.com", "https", 443, "api.github.com"},
      {"API.GITHUB.COM.", "https", 443, "api.github.com"},
      {"api.github.com", "http", 80, "api.github.com"},
      {"api.github.com", "https", 8443, nullptr},
      {"api.github.com", "http", 443, nullptr},
      {"github.com", "https", 443, nullptr},
      {"evilapi.github.com", "https", 443, nullptr},
      {"api.github.com.evil.com", "https", 443, nullptr},
      {"evilgithub.com", "https", 443, nullptr},
      {"githubusercontent.com", "https", 443, nullptr},
      {"raw.githubusercontent.com", "https", 443, "*.githubusercontent.com"},
      {"a.b.githubusercontent.com", "https", 443, "*.githubusercontent.com"},
      {"raw.githubusercontent.com.evil.com", "https", 443, nullptr},
      {"pkg12.example.org", "https", 443, "re:pkg[0-9]+\\.example\\.org"},
      {"pkg12.example.org.evil.com", "https", 443, nullptr},
      {"xpkg12.example.org", "https", 443, nullptr},
      {"198.18.0.2", "https", 8443, "198.18.0.2:8443"},
      {"198.18.0.2", "https", 443, nullptr},
      {"[::ffff:198.18.0.2]", "https", 8443, "198.18.0.2:8443"},
      {"3323068418", "https", 8443, nullptr}, // decimal form of 198.18.0.2: refused upstream
      {"[::1]", "https", 9000, "[::1]:9000"},
  };
  for (const auto &r : rows) {
    INFO(r.host << " " << r.scheme << " " << r.port);
    auto got = match(m, r.host, r.scheme, r.port);
    if (r.rule) {
      REQUIRE(got);
      CHECK(*got == r.rule);
    } else {
      CHECK_FALSE(got);
    }
  }
}

TEST_CASE("bad patterns fail the load with the pattern named", "[filters][host_matcher]") {
  const char *bad[] = {"",          "re:",        "re:([a-z",    "*.com",      "a.*.com",
                       "*github.com", "host:0",   "host:70000",  "host:abc",   "bücher.de",
                       "*.1.2.3.4", "0x7f.1"};
  for (auto p : bad) {
    INFO(p);
    CHECK_THROWS_AS(host_matcher({p}), pattern_error);
  }
  try {
    host_matcher({"re:([a-z"});
  } catch (const pattern_error &e) {
    CHECK(std::string(e.what()).find("re:([a-z") != std::string::npos);
  }
}

TEST_CASE("a decision costs the same with 100,000 rules", "[filters][host_matcher]") {
  std::vector<std::string> rules;
  for (int i = 0; i < 100000; ++i) rules.push_back("host" + std::to_string(i) + ".example.com");
  rules.push_back("*.wild.example.net");
  host_matcher m(rules);
  CHECK(m.match("host99999.example.com", "https", 443));
  CHECK(m.match("a.wild.example.net", "https", 443));
  CHECK_FALSE(m.match("host100000.example.com", "https", 443));
}
