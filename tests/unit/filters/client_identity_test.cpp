#include "filters/client_identity.hpp"
#include "filters/policy_loader.hpp"

#include <catch2/catch.hpp>

using namespace sluice::filters;

namespace {
// The config of a fleet: two roles, three clients (test tokens: "alpha-token", "beta-token", ...).
config fleet() {
  std::string text = R"(
profile = "network-read"
[policy]
allow = ["docs.example.com", "api.example.com"]
deny = ["bad.example.com"]
[credentials.gh]
source = "env:GH_TOKEN_TEST"
hosts = ["api.example.com"]
[roles.read]
credentials = ["gh"]
[roles.write]
profile = "publish"
allow = ["api.example.com"]
deny = ["api.example.com:8443"]
requests_per_second = 5
bytes_per_second = 4096
[roles.trial]
mode = "report"
allow = []
)";
  for (auto [name, role] : {std::pair{"alpha", "read"}, {"beta", "write"}, {"gamma", "trial"}}) {
    text += "[clients." + std::string(name) + "]\ntoken_sha256 = \"" +
            to_hex(sha256(std::string(name) + "-token")) + "\"\nrole = \"" + role + "\"\n";
  }
  return load_config_string(text, "fleet.toml");
}

std::string basic(std::string_view pair) {
  // Base64 of a short ASCII pair, by the table (the test does not trust the code under test).
  static const char *t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < pair.size(); i += 3) {
    unsigned v = (unsigned char)pair[i] << 16 | (unsigned char)pair[i + 1] << 8 | (unsigned char)pair[i + 2];
    for (int k = 18; k >= 0; k -= 6) out += t[(v >> k) & 63];
  }
  if (pair.size() - i == 1) {
    unsigned v = (unsigned char)pair[i] << 16;
    out += t[(v >> 18) & 63];
    out += t[(v >> 12) & 63];
    out += "==";
  } else if (pair.size() - i == 2) {
    unsigned v = (unsigned char)pair[i] << 16 | (unsigned char)pair[i + 1] << 8;
    out += t[(v >> 18) & 63];
    out += t[(v >> 12) & 63];
    out += t[(v >> 6) & 63];
    out += '=';
  }
  return "Basic " + out;
}
} // namespace

TEST_CASE("hashes and hex", "[filters][identity]") {
  CHECK(to_hex(sha256("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(from_hex("00ff10") == std::string("\x00\xff\x10", 3));
  CHECK(from_hex("0g").empty());
  CHECK(from_hex("abc").empty());
  auto t1 = new_token(), t2 = new_token();
  CHECK(t1.size() == 43);
  CHECK(t1 != t2);
  CHECK(t1.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") == std::string::npos);
}

TEST_CASE("Proxy-Authorization: Basic NAME:TOKEN and Bearer TOKEN", "[filters][identity]") {
  auto c = fleet();
  auto m = identify_header(c, basic("alpha:alpha-token"));
  REQUIRE(m.client);
  CHECK(m.client->name == "alpha");
  CHECK(m.client->role == "read");
  m = identify_header(c, "Bearer beta-token");
  REQUIRE(m.client);
  CHECK(m.client->name == "beta");
  m = identify_header(c, "bearer   gamma-token  "); // scheme without case, spaces around
  REQUIRE(m.client);
  CHECK(m.client->name == "gamma");
  // Wrong: another client's token under this name, an unknown name, no colon, bad base64.
  CHECK(identify_header(c, basic("alpha:beta-token")).reason == "proxy_auth_invalid");
  CHECK(identify_header(c, basic("delta:alpha-token")).reason == "proxy_auth_invalid");
  CHECK(identify_header(c, basic("alpha-token")).reason == "proxy_auth_invalid");
  CHECK(identify_header(c, basic("alpha:")).reason == "proxy_auth_invalid");
  CHECK(identify_header(c, "Basic !!!!").reason == "proxy_auth_invalid");
  CHECK(identify_header(c, "Basic YWxwaGE6YWxwaGEtdG9rZW4").reason == "proxy_auth_invalid"); // padding cut
  CHECK(identify_header(c, "Bearer nope").reason == "proxy_auth_invalid");
  // Absent or a scheme sluice does not take: a challenge, not "invalid".
  CHECK(identify_header(c, "").reason == "proxy_auth_required");
  CHECK(identify_header(c, "Digest username=alpha").reason == "proxy_auth_required");
  CHECK(identify_header(c, "Basic").reason == "proxy_auth_required");
  // SOCKS5 username/password.
  CHECK(identify(c, "beta", "beta-token").client);
  CHECK_FALSE(identify(c, "beta", "").client);
  CHECK_FALSE(identify_token(c, "").client);
}

TEST_CASE("a role's policy: its profile and lists, the file's deny list, its credentials", "[filters][identity]") {
  auto c = fleet();
  policy top(c);
  CHECK(top.requires_identity());
  CHECK(top.for_client("nobody") == nullptr);
  auto read = top.for_client("alpha");
  auto write = top.for_client("beta");
  auto trial = top.for_client("gamma");
  REQUIRE(read);
  REQUIRE(write);
  REQUIRE(trial);
  CHECK(read->cfg().role == "read");
  CHECK_FALSE(read->requires_identity());
  // read inherits [policy] allow and the profile.
  CHECK(read->decide("GET", "https", "docs.example.com", 443).allowed);
  CHECK(read->decide("POST", "https", "api.example.com", 443).reason == "method_not_allowed");
  CHECK(read->cfg().credentials.size() == 1);
  // write: publish, its own allowlist, the file's deny list as well as its own.
  CHECK(write->decide("POST", "https", "api.example.com", 443).allowed);
  CHECK(write->decide("GET", "https", "docs.example.com", 443).reason == "host_not_allowlisted");
  CHECK(write->decide("GET", "https", "bad.example.com", 443).reason == "host_denied");
  CHECK(write->cfg().credentials.empty());
  CHECK(write->requests_per_second() == 5);
  CHECK(write->bytes_per_second() == 4096);
  CHECK(read->requests_per_second() == 0);
  // trial reports: what enforce refuses by list or profile is let through and marked.
  auto d = trial->decide("POST", "https", "anything.example.net", 443);
  CHECK(d.allowed);
  CHECK(d.would_deny);
  CHECK(d.reason == "host_not_allowlisted");
  d = trial->decide("GET", "https", "bad.example.com", 443);
  CHECK(d.would_deny);
  CHECK(d.reason == "host_denied");
  CHECK(trial->decide_connect("other.example.org", 443).would_deny);
  // Never a malformed name, localhost or an address class.
  CHECK_FALSE(trial->decide("GET", "https", "0x7f.1", 443).allowed);
  CHECK_FALSE(trial->decide("GET", "http", "localhost", 80).allowed);
  CHECK_FALSE(trial->decide_address(boost::asio::ip::make_address("169.254.169.254")).allowed);
  CHECK_FALSE(trial->decide_address(boost::asio::ip::make_address("10.1.2.3")).allowed);
  // The file's own policy, without a client, does not report.
  CHECK_FALSE(top.decide("GET", "https", "anything.example.net", 443).allowed);
}

TEST_CASE("[clients] and [roles] errors name the fix", "[filters][identity]") {
  auto error_of = [](const std::string &toml) -> std::string {
    try {
      load_config_string(toml, "t.toml");
    } catch (const config_error &e) {
      return e.what();
    }
    return {};
  };
  auto h = "\"" + to_hex(sha256("x")) + "\"";
  CHECK_THAT(error_of("[clients.a]\ntoken_sha256 = " + h + "\nrole = \"r\"\n"),
             Catch::Contains("t.toml:") && Catch::Contains("no [roles.r]"));
  CHECK_THAT(error_of("[roles.r]\n[clients.a]\ntoken_sha256 = \"xyz\"\nrole = \"r\"\n"),
             Catch::Contains("64 hex digits") && Catch::Contains("never the token itself"));
  CHECK_THAT(error_of("[roles.r]\n[clients.a]\ntoken_sha256 = " + h + "\n"), Catch::Contains("needs role"));
  CHECK_THAT(error_of("[roles.r]\n[clients.a]\ntoken_sha256 = " + h + "\nrole = \"r\"\ntoken = \"x\"\n"),
             Catch::Contains("unknown key 'token'"));
  CHECK_THAT(error_of("[roles.r]\nrequests_per_second = 0\n"), Catch::Contains("above 0"));
  CHECK_THAT(error_of("[roles.r]\nbytes_per_second = 10\n"), Catch::Contains("from 1024"));
  CHECK_THAT(error_of("[roles.r]\nprofile = \"everything\"\n"), Catch::Contains("offline, network-read"));
  CHECK_THAT(error_of("[roles.r]\nallow = [\"re:.*\"]\n"), Catch::Contains("roles.r.allow"));
  CHECK(error_of("[roles.r]\n[clients.a]\ntoken_sha256 = " + h + "\nrole = \"r\"\n").empty());
}

TEST_CASE("a client by its certificate: a SAN URI or DNS name, exactly one client", "[filters][identity]") {
  // check_readable opens the files the config names: any readable file stands in for the PEMs.
  std::string f = "\"/etc/hostname\"";
  std::string text = "[listen]\nproxy_tls = \"127.0.0.1:3129\"\n[tls]\nproxy_cert = " + f +
                     "\nproxy_key = " + f + "\nclient_ca = " + f + R"(
[roles.read]
[roles.narrow]
allow = ["docs.example.com"]
[clients.builder]
certificate = "spiffe://agents.example/ns/ci/sa/builder"
role = "read"
[clients.scout]
certificate = "Scout.Agents.Example"
role = "narrow"
[clients.both]
certificate = "spiffe://agents.example/ns/ci/sa/both"
token_sha256 = ")" + to_hex(sha256("both-token")) + R"("
role = "read"
)";
  auto cfg = load_config_string(text, "certs.toml");
  CHECK(cfg.proxy_tls_listen == "127.0.0.1:3129");
  CHECK(cfg.clients.at("scout").certificate == "scout.agents.example"); // DNS names in lower case
  CHECK(cfg.clients.at("builder").token_sha256.empty());

  certificate_names uri{{"spiffe://agents.example/ns/ci/sa/builder"}, {}};
  CHECK(identify_certificate(cfg, uri).client == &cfg.clients.at("builder"));
  certificate_names dns{{}, {"scout.agents.example"}};
  CHECK(identify_certificate(cfg, dns).client == &cfg.clients.at("scout"));
  // A URI identity is never matched by a DNS name with the same text, nor by a prefix.
  certificate_names wrong_kind{{}, {"spiffe://agents.example/ns/ci/sa/builder"}};
  CHECK(identify_certificate(cfg, wrong_kind).reason == "proxy_auth_invalid");
  certificate_names prefix{{"spiffe://agents.example/ns/ci/sa/builder/x", "spiffe://agents.example/ns/ci/sa"}, {}};
  CHECK(identify_certificate(cfg, prefix).client == nullptr);
  // Two clients in one certificate: ambiguous, refused.
  certificate_names two{{"spiffe://agents.example/ns/ci/sa/builder"}, {"scout.agents.example"}};
  CHECK(identify_certificate(cfg, two).client == nullptr);
  CHECK(identify_certificate(cfg, {}).client == nullptr);
  // A certificate-only client has no token: no token matches it.
  CHECK(identify(cfg, "builder", "").client == nullptr);
  CHECK(identify(cfg, "builder", "anything").client == nullptr);
  CHECK(identify(cfg, "both", "both-token").client == &cfg.clients.at("both"));

  auto error_of = [&](const std::string &toml) -> std::string {
    try {
      load_config_string(toml, "t.toml");
    } catch (const config_error &e) {
      return e.what();
    }
    return {};
  };
  CHECK_THAT(error_of("[roles.r]\n[clients.a]\ncertificate = \"spiffe://x/y\"\nrole = \"r\"\n"),
             Catch::Contains("client_ca is not set"));
  std::string tls = "[listen]\nproxy_tls = \"127.0.0.1:3129\"\n[tls]\nproxy_cert = " + f + "\nproxy_key = " + f +
                    "\nclient_ca = " + f + "\n[roles.r]\n";
  CHECK_THAT(error_of(tls + "[clients.a]\ncertificate = \"not a name\"\nrole = \"r\"\n"),
             Catch::Contains("neither a URI"));
  CHECK_THAT(error_of(tls + "[clients.a]\ncertificate = \"10.0.0.1\"\nrole = \"r\"\n"),
             Catch::Contains("neither a URI"));
  CHECK_THAT(error_of(tls + "[clients.a]\ncertificate = \"a.example\"\nrole = \"r\"\n[clients.b]\n"
                            "certificate = \"A.example\"\nrole = \"r\"\n"),
             Catch::Contains("same certificate identity as [clients.a]"));
  CHECK_THAT(error_of(tls + "[clients.a]\nrole = \"r\"\n"), Catch::Contains("or certificate ="));
  CHECK_THAT(error_of("[listen]\nproxy_tls = \"127.0.0.1:3129\"\n"), Catch::Contains("needs [tls] proxy_cert"));
  CHECK_THAT(error_of("[tls]\nproxy_cert = " + f + "\nproxy_key = " + f + "\n"),
             Catch::Contains("set listen.proxy_tls"));
  CHECK_THAT(error_of("[listen]\nproxy_tls = \"127.0.0.1:3129\"\n[tls]\nproxy_cert = " + f + "\n"),
             Catch::Contains("go together"));
  CHECK_THAT(error_of("[listen]\nproxy_tls = \"nowhere\"\n"), Catch::Contains("listen.proxy_tls = 'nowhere'"));
}
