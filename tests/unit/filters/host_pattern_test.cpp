#include "filters/host_pattern.hpp"

#include <catch2/catch.hpp>

using sluice::filters::parse_host_pattern;
using sluice::filters::pattern_error;
using sluice::filters::regex_domain_suffixes;
using sluice::filters::require_constrainable;

TEST_CASE("a regex's literal domain suffix becomes the CA's name constraint", "[filters][host_pattern]") {
  struct row {
    const char *regex;
    std::vector<std::string> domains; // empty: no name-constraint equivalent, refused in allow lists
  };
  const row rows[] = {
      {"api\\.github\\.com", {"api.github.com"}},
      {"(api|www)\\.github\\.com", {"github.com"}},
      {"pkg[0-9]+\\.example\\.org", {"example.org"}},
      {"^a+\\.test$", {"test"}},
      {"[a-z]+-ci\\.example\\.org", {"example.org"}},
      {"a\\.test|b\\.example\\.org", {"a.test", "b.example.org"}},
      {"x\\.example\\.com|y\\.example\\.com", {"x.example.com", "y.example.com"}},
      {".*\\.Example\\.COM", {"example.com"}},
      {"[|(]x\\.example\\.com", {"example.com"}},
      // Hostile or unconstrainable shapes.
      {".*", {}},
      {"[a-z]+", {}},
      {".*hub\\.com|.*", {}},
      {"github\\.(com|org)", {}},
      {"github\\.com?", {}},
      {"(foo\\.com)?", {}},
      {"example\\.com.*", {}},
      {"example\\.com\\d", {}},
      {"abc.*", {}},
      {"x\\.\\.com", {}},
      {"a\\.com|", {}},
  };
  for (const auto &r : rows) {
    INFO(r.regex);
    CHECK(regex_domain_suffixes(r.regex) == r.domains);
  }
}

TEST_CASE("allow entries must be constrainable, deny entries need not be", "[filters][host_pattern]") {
  CHECK_NOTHROW(require_constrainable(parse_host_pattern("re:[a-z]+\\.example\\.com:8443")));
  CHECK_NOTHROW(require_constrainable(parse_host_pattern("api.github.com")));
  try {
    require_constrainable(parse_host_pattern("re:.*"));
    FAIL("re:.* was accepted");
  } catch (const pattern_error &e) {
    CHECK(std::string(e.what()).find("'re:.*'") != std::string::npos);
    CHECK(std::string(e.what()).find("literal domain suffix") != std::string::npos);
  }
  CHECK(parse_host_pattern("re:.*").domains.empty());
}
