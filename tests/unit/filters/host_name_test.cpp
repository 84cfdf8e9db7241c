#include "filters/host_name.hpp"

#include <catch2/catch.hpp>

using sluice::filters::parse_host;
using sluice::filters::split_authority;
using sluice::filters::parse_listen_address;

TEST_CASE("parse_host normalizes or refuses hostile hosts", "[filters][host_name]") {
  struct row {
    const char *raw;
    const char *name;   // expected normalized name, or nullptr when refused
    const char *reason; // expected reason when refused
  };
  const row rows[] = {
      {"api.github.com", "api.github.com", nullptr},
      {"API.GitHub.COM", "api.github.com", nullptr},
      {"api.github.com.", "api.github.com", nullptr},
      {"api.github.com..", nullptr, "invalid_host"},
      {"a..b.com", nullptr, "invalid_host"},
      {".github.com", nullptr, "invalid_host"},
      {"-bad.com", nullptr, "invalid_host"},
      {"under_score.example.com", "under_score.example.com", nullptr},
      {"exa mple.com", nullptr, "invalid_host"},
      {"ex%61mple.com", nullptr, "invalid_host"},
      {"github.com@evil.com", nullptr, "invalid_host"},
      {"bücher.de", nullptr, "non_ascii_host"},
      {"xn--bcher-kva.de", "xn--bcher-kva.de", nullptr},
      {"127.0.0.1", "127.0.0.1", nullptr},
      {"2130706433", nullptr, "ambiguous_host"},
      {"0177.0.0.1", nullptr, "ambiguous_host"},
      {"0x7f.0.0.1", nullptr, "ambiguous_host"},
      {"0x7f000001", nullptr, "ambiguous_host"},
      {"127.1", nullptr, "ambiguous_host"},
      {"127.0.0.01", nullptr, "ambiguous_host"},
      {"256.1.1.1", nullptr, "ambiguous_host"},
      {"1.2.3.4.5", nullptr, "ambiguous_host"},
      {"[::1]", "::1", nullptr},
      {"[::ffff:127.0.0.1]", "127.0.0.1", nullptr},
      {"[::ffff:7f00:1]", "127.0.0.1", nullptr},
      {"[fe80::1%25eth0]", nullptr, "invalid_host"},
      {"[::1", nullptr, "invalid_host"},
      {"", nullptr, "invalid_host"},
      {"a.b.c.123abc", "a.b.c.123abc", nullptr},
  };
  for (const auto &r : rows) {
    INFO("host: " << r.raw);
    auto res = parse_host(r.raw);
    if (r.name) {
      REQUIRE(res.host);
      CHECK(res.host->name == r.name);
    } else {
      CHECK_FALSE(res.host);
      CHECK(res.reason == r.reason);
    }
  }
}

TEST_CASE("overlong labels and names are refused", "[filters][host_name]") {
  CHECK_FALSE(parse_host(std::string(64, 'a') + ".com").host);
  CHECK(parse_host(std::string(63, 'a') + ".com").host);
  std::string longname;
  for (int i = 0; i < 60; ++i) longname += "abcd.";
  longname += "com";
  CHECK_FALSE(parse_host(longname).host);
}

TEST_CASE("split_authority takes ports 1..65535 only", "[filters][host_name]") {
  std::string_view host;
  unsigned port = 0;
  CHECK(split_authority("example.com:443", host, port));
  CHECK(host == "example.com");
  CHECK(port == 443);
  CHECK(split_authority("[::1]:8443", host, port));
  CHECK(host == "[::1]");
  CHECK(port == 8443);
  CHECK(split_authority("example.com", host, port));
  CHECK(port == 0);
  CHECK_FALSE(split_authority("example.com:0", host, port));
  CHECK_FALSE(split_authority("example.com:65536", host, port));
  CHECK_FALSE(split_authority("example.com:99999999", host, port));
  CHECK_FALSE(split_authority("example.com:-1", host, port));
  CHECK_FALSE(split_authority("example.com:", host, port));
  CHECK_FALSE(split_authority("::1:443", host, port));
  CHECK_FALSE(split_authority(":443", host, port));
}

TEST_CASE("listen addresses are an IP literal and a port", "[filters][host_name]") {
  auto v4 = parse_listen_address("127.0.0.1:3128");
  REQUIRE(v4);
  CHECK(v4->ip.to_string() == "127.0.0.1");
  CHECK(v4->port == 3128);
  auto v6 = parse_listen_address("[::1]:9090");
  REQUIRE(v6);
  CHECK(v6->ip.to_string() == "::1");
  CHECK(v6->port == 9090);
  CHECK_FALSE(parse_listen_address("127.0.0.1"));       // no port
  CHECK_FALSE(parse_listen_address("127.0.0.1:0"));     // port 0
  CHECK_FALSE(parse_listen_address("127.0.0.1:http"));  // not a number
  CHECK_FALSE(parse_listen_address("localhost:3128"));  // a name, not an address
  CHECK_FALSE(parse_listen_address("::1:3128"));        // IPv6 without brackets
  CHECK_FALSE(parse_listen_address(""));
}

TEST_CASE("a name in a hosts file, for the dns_error message", "[filters][host_name]") {
  const char *hosts = "127.0.0.1\tlocalhost\n"
                      "# 10.9.9.9 commented.test\n"
                      "10.0.0.5   build.internal  Build-Alias   # trailing comment\n"
                      "  ::1 ip6-localhost\r\n";
  using sluice::filters::hosts_file_address;
  CHECK(hosts_file_address(hosts, "build.internal") == std::optional<std::string>("10.0.0.5"));
  CHECK(hosts_file_address(hosts, "build-alias") == std::optional<std::string>("10.0.0.5"));
  CHECK(hosts_file_address(hosts, "ip6-localhost") == std::optional<std::string>("::1"));
  CHECK_FALSE(hosts_file_address(hosts, "commented.test").has_value());
  CHECK_FALSE(hosts_file_address(hosts, "10.0.0.5").has_value());
  CHECK_FALSE(hosts_file_address(hosts, "internal").has_value());
}
