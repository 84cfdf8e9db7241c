#include "filters/host_name.hpp"
#include "filters/policy_loader.hpp"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <unistd.h>

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
bool contains(const std::string &s, const std::string &part) {
  return s.find(part) != std::string::npos;
}
} // namespace

TEST_CASE("a full config loads", "[filters][config]") {
  auto c = load_config_string(R"(
profile = "publish"
[listen]
proxy = "127.0.0.1:3128"
admin = "[::1]:9090"
[policy]
allow = ["api.github.com", "*.example.com:8443", "re:^a+\\.test$"]
deny = ["bad.example.com"]
[upstream]
allow_addresses = ["198.18.0.0/15"]
dns_servers = ["127.0.0.1:5353"]
[upstream.resolve]
"origin.test" = "198.18.0.2"
"multi.test" = ["198.18.0.3", "198.18.0.4"]
[timeouts]
connect = "2s"
idle = 30
io = "500ms"
[limits]
max_header_bytes = 32768
[log]
access_log = "-"
redact_query = false
format = "ocsf"
[skills.code-review]
default_profile = "offline"
escalations = ["network-read"]
allow_domains = ["api.github.com"]
grants = ["GITHUB_TOKEN"]
)",
                              "ok.toml");
  CHECK(c.mode == profile::publish);
  CHECK(c.allow.size() == 3);
  CHECK(c.log_chain); // the access log's chain is on unless [log] chain = false
  CHECK(c.log_signing_key.empty());
  CHECK(c.log_checkpoint_interval == std::chrono::seconds(60));
  CHECK(c.pins.at("origin.test").size() == 1);
  CHECK(c.pins.at("multi.test").size() == 2);
  CHECK(c.timeouts.connect == std::chrono::seconds(2));
  CHECK(c.timeouts.idle == std::chrono::seconds(30));
  CHECK(c.timeouts.io == std::chrono::milliseconds(500));
  CHECK(c.limits.max_header_bytes == 32768);
  CHECK_FALSE(c.redact_query);
  CHECK(c.access_log_format == "ocsf");
  CHECK(c.skills.at("code-review").escalations.at(0) == profile::network_read);
}

TEST_CASE("config errors name the file, the line and the fix", "[filters][config]") {
  struct row {
    const char *toml;
    const char *expect[3];
  };
  const row rows[] = {
      {"profile = \"network-read\"\nbogus = 1\n", {"test.toml:2:", "unknown key 'bogus'", "known keys"}},
      {"[log]\nformat = \"cef\"\n", {"test.toml:2:", "[log] format", "\"ocsf\""}},
      {"[log]\nsigning_key = \"/etc/key.pem\"\n", {"test.toml:2:", "[log] signing_key", "\"file:/path\""}},
      {"[log]\ncheckpoint_interval = \"0s\"\n", {"test.toml:2:", "checkpoint_interval", "1s to 24h"}},
      {"[log]\nwriter = \"a\\\"b\"\n", {"test.toml:2:", "[log] writer", "quotes"}},
      {"[log]\nchain = false\nsigning_key = \"env:K\"\n", {"test.toml:3:", "chain = false", "drop one"}},
      {"profile = \"readonly\"\n", {"test.toml:1:", "profile", "network-read"}},
      {"[policy]\nallow = [\n  \"ok.com\",\n  \"re:([\"\n]\n", {"test.toml:4:", "bad regex", "re:(["}},
      {"[policy]\nallow = [\"host:70000\"]\n", {"test.toml:2:", "out of range", "1 to 65535"}},
      {"[listen]\nproxy = \"localhost\"\n", {"test.toml:2:", "ADDRESS:PORT", "127.0.0.1:3128"}},
      {"[upstream]\nallow_addresses = [\"10.0.0.0/99\"]\n", {"test.toml:2:", "prefix length", ""}},
      {"[upstream.resolve]\n\"x.test\" = \"not-ip\"\n", {"test.toml:2:", "not an IP address", ""}},
      {"[tls]\nca_cert = \"/nonexistent/ca.pem\"\nca_key = \"/nonexistent/ca.key\"\n",
       {"test.toml:2:", "cannot read file", "permissions"}},
      {"[tls]\nca_cert = \"/x.pem\"\n", {"test.toml:2:", "go together", ""}},
      {"[timeouts]\nconnect = \"soon\"\n", {"test.toml:2:", "not a positive duration", "30s"}},
      {"[limits]\nmax_connections = 0\n", {"test.toml:2:", "max_connections", "from 1"}},
      {"[policy\n", {"test.toml:1:", "TOML", ""}},
      {"[skills.x]\ndefault_profile = \"root\"\n", {"test.toml:2:", "offline", ""}},
      // Found by config_fuzz: non-string array entries were dereferenced as strings.
      {"[policy]\nallow = [222]\n", {"test.toml:2:", "host patterns (strings) or route tables", ""}},
      {"[upstream]\nallow_addresses = [1]\n", {"test.toml:2:", "only strings", ""}},
      {"[skills.x]\nallow_domains = [true]\n", {"test.toml:2:", "host patterns (strings) or route tables", ""}},
      {"[skills.x]\nask_domains = [\"*.com\"]\n", {"test.toml:2:", "skills.x.ask_domains", "top-level"}},
      {"[skills.x]\nask_domains = [{ host = \"a.test\" }]\n", {"test.toml:2:", "only strings", ""}},
      {"[skills.x]\nask_profiles = [\"root\"]\n", {"test.toml:2:", "ask_profiles", "network-read"}},
      {"[skills.x]\nask_profiles = [\"offline\"]\n", {"test.toml:2:", "needs no approval", ""}},
      {"[skills.x]\nask_profiles = \"allowlist\"\n", {"test.toml:2:", "array of profiles", ""}},
      {"[credentials.c]\nsource = \"vault:x\"\nhosts = [\"a.test\"]\n", {"test.toml:2:", "command:PROGRAM", "gh auth token"}},
      {"[credentials.c]\nsource = \"command:  \"\nhosts = [\"a.test\"]\n", {"test.toml:2:", "needs a program", ""}},
      {"[credentials.c]\nsource = \"env:T\"\nttl = \"5m\"\nhosts = [\"a.test\"]\n", {"test.toml:3:", "read once", "command:"}},
      {"[credentials.c]\nsource = \"command:t\"\nttl = \"soon\"\nhosts = [\"a.test\"]\n", {"test.toml:3:", "duration", "50m"}},
      {"[credentials.c]\nsource = \"command:t\"\nttl = \"10ms\"\nhosts = [\"a.test\"]\n", {"test.toml:3:", "at least 1s", ""}},
      {"[credentials.c]\nsource = \"env:T\"\nplaceholder = \"gh p\"\nhosts = [\"a.test\"]\n", {"test.toml:3:", "github", "ghp_"}},
      {"[credentials.c]\nsource = \"env:T\"\nplaceholder = \"github\"\nplaceholder_length = 50\nhosts = [\"a.test\"]\n", {"test.toml:4:", "16 random", ""}},
      {"[credentials.c]\nsource = \"env:T\"\nplaceholder = \"tok_\"\nplaceholder_length = 10\nhosts = [\"a.test\"]\n", {"test.toml:4:", "16 random", ""}},
      {"[credentials.c]\nhosts = [\"a.test\"]\n[credentials.c.oauth2]\ntoken_url = \"http://a.test/t\"\nclient_id = \"i\"\nclient_secret = \"env:S\"\n",
       {"test.toml:3:", "https://", ""}},
      {"[credentials.c]\nhosts = [\"a.test\"]\n[credentials.c.oauth2]\ntoken_url = \"https://a.test/t\"\nclient_id = \"i\"\nclient_secret = \"s3cr3t\"\n",
       {"test.toml:3:", "client_secret must be a source", "command:"}},
      {"[credentials.c]\nsource = \"env:T\"\nhosts = [\"a.test\"]\n[credentials.c.oauth2]\ntoken_url = \"https://a.test/t\"\nclient_id = \"i\"\nclient_secret = \"env:S\"\n",
       {"test.toml:2:", "not source", ""}},
      {"[skills.x]\nssh = \"git.test\"\n", {"test.toml:2:", "list of tables", "paths"}},
      {"[skills.x]\nssh = [{ paths = [\"a/*\"] }]\n", {"test.toml:2:", "needs host", ""}},
      {"[skills.x]\nssh = [{ host = \"Git.Test:22\" }]\n", {"test.toml:2:", "lower case", "Git.Test:22"}},
      {"[skills.x]\nssh = [{ host = \"g.test\", port = 0 }]\n", {"test.toml:2:", "port must be", "65535"}},
      {"[skills.x]\nssh = [{ host = \"g.test\", identity = \"~/.ssh/id\" }]\n", {"test.toml:2:", "ssh-agent", "file:PATH"}},
      {"[skills.x]\nssh = [{ host = \"g.test\", host_key = \"AAAA\" }]\n", {"test.toml:2:", "ssh-ed25519", ""}},
      {"[skills.x]\nssh = [{ host = \"g.test\", paths = [] }]\n", {"test.toml:2:", "non-empty", "org/*"}},
      {"[skills.x]\nssh = [{ host = \"g.test\", forward = true }]\n", {"test.toml:2:", "unknown key 'forward'", ""}},
  };
  for (const auto &r : rows) {
    INFO(r.toml);
    auto msg = error_of(r.toml);
    INFO(msg);
    REQUIRE_FALSE(msg.empty());
    for (auto part : r.expect) {
      CHECK(contains(msg, part));
    }
  }
  CHECK(contains([] {
    try {
      load_config_file("/nonexistent/sluice.toml");
    } catch (const config_error &e) {
      return std::string(e.what());
    }
    return std::string();
  }(), "/nonexistent/sluice.toml"));
}

TEST_CASE("each table's loader names the line and the fix", "[filters][config]") {
  // Rows for the tables the rows above leave out: one or more per table loader.
  struct row {
    std::string toml;
    const char *expect[2];
  };
  const std::string hash(64, 'a');
  const std::string client = "[roles.a]\n[clients.c]\ntoken_sha256 = \"" + hash + "\"\n";
  const row rows[] = {
      {"[roles.a]\nmode = \"audit\"\n", {"test.toml:2:", "\"enforce\" or \"report\""}},
      {"[roles.\"a b\"]\n", {"test.toml:1:", "a role name uses letters"}},
      {"[roles.a]\nrequests_per_second = 0\n", {"test.toml:2:", "requests_per_second must be a number above 0"}},
      {"[roles.a]\ncredentials = [\"gh\"]\n", {"test.toml:2:", "no [credentials.gh] in this file"}},
      {"roles = 1\n", {"test.toml:1:", "[roles.NAME] sections"}},
      {"[roles.a]\n[clients.c]\ntoken_sha256 = \"abcd\"\nrole = \"a\"\n", {"test.toml:3:", "64 hex digits"}},
      {"[roles.a]\n[clients.c]\nrole = \"a\"\n", {"test.toml:2:", "sluice policy token NAME"}},
      {client, {"test.toml:2:", "needs role = \"ROLE\""}},
      {client + "role = \"b\"\n", {"test.toml:4:", "no [roles.b] in this file"}},
      {client + "role = \"a\"\n[clients.d]\ntoken_sha256 = \"" + hash + "\"\nrole = \"a\"\n",
       {"test.toml:6:", "same token as [clients.c]"}},
      {"[sandbox]\nguarded_names = [\"/etc/x\"]\n", {"test.toml:2:", "not a path"}},
      {"[sandbox]\nrequire_landlock = \"yes\"\n", {"test.toml:2:", "must be true or false"}},
      {"[listen]\nproxy_tls = \"127.0.0.1:3129\"\n", {"test.toml:2:", "needs [tls] proxy_cert and proxy_key"}},
      {"[tls]\nproxy_cert = \"/dev/null\"\nproxy_key = \"/dev/null\"\n",
       {"test.toml:2:", "set listen.proxy_tls = \"ADDRESS:PORT\" too"}},
      {"[tls]\nclient_ca = \"/dev/null\"\n", {"test.toml:2:", "client_ca is the trust for client certificates"}},
      {"[credentials.\"a.b\"]\nsource = \"env:T\"\nhosts = [\"a.test\"]\n", {"test.toml:1:", "a credential name uses"}},
      {"[credentials.c]\nsource = \"env:T\"\n", {"test.toml:1:", "needs hosts = [...]"}},
      {"[credentials.c]\nsource = \"env:T\"\nhosts = [\"a.test\"]\nheader = \"X Y\"\n",
       {"test.toml:4:", "such as Authorization"}},
      {"[credentials.c]\nsource = \"env:T\"\nhosts = [\"a.test\"]\nformat = \"Bearer\"\n",
       {"test.toml:4:", "must hold {} for the secret"}},
      {"[credentials.c]\nhosts = [\"a.test\"]\n[credentials.c.aws]\n", {"test.toml:3:", "needs either process"}},
      {"[credentials.c]\nhosts = [\"a.test\"]\nheader = \"X\"\n[credentials.c.aws]\nprocess = \"aws x\"\n",
       {"test.toml:3:", "an AWS credential signs requests"}},
      {"[credentials.c]\nhosts = [\"a.test\"]\n[credentials.c.aws]\naccess_key_id = \"AKIA\"\nsecret_access_key = \"env:S\"\n",
       {"test.toml:3:", "must be sources"}},
      {"[credentials.c]\nsource = \"env:T\"\nhosts = [\"a.test\"]\n[credentials.c.aws]\nprocess = \"aws x\"\n",
       {"test.toml:2:", "from aws, not source"}},
      {"[credentials.c]\nhosts = [\"a.test\"]\n[credentials.c.oauth2]\ntoken_url = \"https://a.test/t\"\nclient_secret = \"env:S\"\n",
       {"test.toml:3:", "needs client_id"}},
      {"[policy]\nallow = [{ host = \"a.test\", methods = [] }]\n", {"test.toml:2:", "allows nothing"}},
      {"[policy]\nallow = [{ host = \"a.test\", verbs = [\"GET\"] }]\n", {"test.toml:2:", "not 'verbs'"}},
      {"[policy]\nallow = [{ methods = [\"GET\"] }]\n", {"test.toml:2:", "a route needs host"}},
      {"[skills.x]\nwritable = [\"rel/dir\"]\n", {"test.toml:2:", "absolute path or ~/PATH"}},
      {"[skills.x]\nfilesystem = \"rw\"\n", {"test.toml:2:", "\"read-only\" or \"workspace-write\""}},
      {"[skills.x]\ncredentials = [\"nope\"]\n", {"test.toml:2:", "no [credentials.nope] in this file"}},
      {"[upstream.resolve]\n\"1.2.3.4\" = \"198.18.0.2\"\n", {"test.toml:2:", "is not a DNS name"}},
      {"[approvals]\nhosts = [\"a.test\"]\nmax_pending = \"x\"\n", {"test.toml:3:", "from 1 to 1000"}},
  };
  for (const auto &r : rows) {
    INFO(r.toml);
    auto msg = error_of(r.toml);
    INFO(msg);
    REQUIRE_FALSE(msg.empty());
    for (auto part : r.expect) CHECK(contains(msg, part));
  }
}

TEST_CASE("a skill's ask lists", "[filters][config]") {
  auto c = load_config_string("[skills.x]\nask_domains = [\"*.ask.test\", \"api.example.com:8443\"]\n"
                              "ask_profiles = [\"allowlist\", \"publish\"]\n",
                              "test.toml");
  const auto &s = c.skills.at("x");
  CHECK(s.ask_domains == std::vector<std::string>{"*.ask.test", "api.example.com:8443"});
  CHECK(s.ask_profiles == std::vector<profile>{profile::allowlist, profile::publish});
  CHECK(s.allow_domains.empty()); // asking widens nothing by itself
}

TEST_CASE("a skill's Git over SSH hosts", "[filters][config][ssh]") {
  auto c = load_config_string("[skills.x]\nssh = [{ host = \"github.com\", paths = [\"org/*\"] }]\n"
                              "[[skills.y.ssh]]\nhost = \"git.internal\"\nport = 2222\nuser = \"gitlab\"\n"
                              "identity = \"file:/k\"\nhost_key = \"ssh-ed25519 AAAA\"\n",
                              "test.toml");
  auto s = c.skills.at("x").ssh;
  const auto &y = c.skills.at("y").ssh;
  s.insert(s.end(), y.begin(), y.end());
  REQUIRE(s.size() == 2);
  CHECK((s[0].host == "github.com" && s[0].port == 22 && s[0].user == "git" && s[0].identity == "ssh-agent"));
  CHECK(s[0].text == "ssh://github.com org/*");
  CHECK((s[1].port == 2222 && s[1].user == "gitlab" && s[1].identity == "file:/k"));
  CHECK(s[1].host_key == "ssh-ed25519 AAAA");
  CHECK(s[1].text == "ssh://git.internal:2222");
  CHECK_THROWS(load_config_string("[policy]\nssh = [{ host = \"github.com\" }]\n", "test.toml"));
}

TEST_CASE("durations", "[filters][config]") {
  CHECK(parse_duration("30s") == std::chrono::seconds(30));
  CHECK(parse_duration("5m") == std::chrono::minutes(5));
  CHECK(parse_duration("250ms") == std::chrono::milliseconds(250));
  CHECK(parse_duration("7") == std::chrono::seconds(7));
  CHECK(parse_duration("14d") == std::chrono::hours(14 * 24)); // [sandbox] journal_max_age
  CHECK_THROWS(parse_duration("1w"));
  CHECK_THROWS(parse_duration("s"));
}

TEST_CASE("[sandbox] journal settings", "[filters][config]") {
  auto c = load_config_string("[sandbox]\njournal = true\njournal_max_age = \"3d\"\njournal_max_size = 512\n", "t.toml");
  CHECK(c.journal);
  CHECK(c.journal_max_age == std::chrono::hours(72));
  CHECK(c.journal_max_bytes == 512ull << 20);
  CHECK_FALSE(load_config_string("", "t.toml").journal);
  auto sk = load_config_string("[skills.agent]\njournal = true\n[skills.other]\n", "t.toml");
  CHECK(sk.skills.at("agent").journal == std::optional<bool>(true));
  CHECK_FALSE(sk.skills.at("other").journal.has_value());
  CHECK(contains(error_of("[sandbox]\njournal_max_age = \"5m\"\n"), "an hour or more"));
  CHECK(contains(error_of("[sandbox]\njournal_max_size = 1\n"), "journal_max_size"));
}

TEST_CASE("agent listeners", "[filters][config]") {
  auto c = load_config_string("[listen]\nproxy = \"127.0.0.1:3128\"\n"
                              "[listen.agents.claude]\naddress = \"127.0.0.1:3129\"\nuids = [1000, 0]\n"
                              "[listen.agents.codex-2]\naddress = \"[::1]:3130\"\nuids = [1001]\n",
                              "test.toml");
  REQUIRE(c.agents.size() == 2);
  CHECK(c.agents[0].name == "claude");
  CHECK(c.agents[0].address == "127.0.0.1:3129");
  CHECK(c.agents[0].uids == std::vector<unsigned>{1000, 0});
  CHECK(c.agents[1].name == "codex-2");
  CHECK(contains(error_of("[listen.agents.x]\naddress = \"10.0.0.1:3129\"\nuids = [1]\n"), "must be a loopback"));
  CHECK(contains(error_of("[listen.agents.x]\naddress = \"127.0.0.1:3129\"\n"), "needs uids"));
  CHECK(contains(error_of("[listen.agents.x]\naddress = \"127.0.0.1:3129\"\nuids = [-1]\n"), "user ids"));
  CHECK(contains(error_of("[listen.agents.X]\naddress = \"127.0.0.1:3129\"\nuids = [1]\n"), "agent name"));
  CHECK(contains(error_of("[listen.agents.x]\naddress = \"127.0.0.1:3129\"\nuids = [1]\nport = 1\n"),
                 "unknown key 'port'"));
  CHECK(contains(error_of("[listen]\nagents = 1\n"), "listen.agents must be a table"));
}

TEST_CASE("[approvals] and what a person may allow", "[filters][config][approvals]") {
  auto c = load_config_string("[approvals]\nhosts = [\"*.pypi.org\"]\ntimeout = \"90s\"\nmax_pending = 4\n", "t.toml");
  CHECK(c.approvals.hosts == std::vector<std::string>{"*.pypi.org"});
  CHECK(c.approvals.timeout == std::chrono::seconds(90));
  CHECK(c.approvals.max_pending == 4);
  policy p(c);
  CHECK(p.askable("files.pypi.org", "https", 443));
  CHECK_FALSE(p.askable("example.com", "https", 443));
  // A person's yes counts as an allowlist entry, nothing more: deny entries still apply.
  auto parsed = parse_host("files.pypi.org");
  REQUIRE(parsed.host);
  CHECK_FALSE(p.decide("GET", "https", *parsed.host, 443, "/").allowed);
  auto d = p.decide_approved("GET", "https", *parsed.host, 443, "/");
  CHECK(d.allowed);
  CHECK(d.rule == "approved");
  CHECK_FALSE(p.decide_approved("POST", "https", *parsed.host, 443, "/").allowed); // network-read still
  CHECK(contains(error_of("[approvals]\ntimeout = \"30s\"\n"), "needs hosts"));
  CHECK(contains(error_of("[approvals]\nhosts = [\"a.test\"]\ntimeout = \"20m\"\n"), "1s"));
  CHECK(contains(error_of("[approvals]\nhosts = [\"a.test\"]\nmax_pending = 0\n"), "max_pending"));
  CHECK(contains(error_of("[approvals]\nhosts = [\"a.test\"]\nwebhook = \"http://x.test/\"\nwebhook_secret = \"env:S\"\n"),
                 "https://"));
  CHECK(contains(error_of("[approvals]\nhosts = [\"a.test\"]\nwebhook = \"https://x.test/\"\n"), "go together"));
  CHECK(contains(error_of("[approvals]\nhosts = [\"a.test\"]\nsurprise = 1\n"), "surprise"));
}

TEST_CASE("[roles.NAME] approvals: what a person may allow for one role's clients", "[filters][config][approvals]") {
  auto c = load_config_string("[approvals]\nhosts = [\"*.pypi.org\"]\n[roles.dev]\n[roles.ci]\napprovals = []\n"
                              "[roles.docs]\napprovals = [\"*.readthedocs.io\"]\n", "t.toml");
  policy p(c);
  const auto &roles = p.role_policies();
  CHECK(roles.at("dev")->askable("files.pypi.org", "https", 443));        // inherits [approvals] hosts
  CHECK_FALSE(roles.at("ci")->askable("files.pypi.org", "https", 443));   // none
  CHECK(roles.at("docs")->askable("x.readthedocs.io", "https", 443));
  CHECK_FALSE(roles.at("docs")->askable("files.pypi.org", "https", 443)); // instead, not besides
  CHECK(c.asks());
  // Roles alone may ask; [approvals] then holds only the shared settings.
  auto only = load_config_string("[approvals]\ntimeout = \"30s\"\n[roles.docs]\napprovals = [\"*.readthedocs.io\"]\n", "t.toml");
  CHECK(only.asks());
  CHECK(contains(error_of("[roles.docs]\napprovals = [\"*.readthedocs.io\"]\n"), "needs an [approvals] table"));
  CHECK(contains(error_of("[approvals]\nhosts = [\"a.test\"]\n[roles.docs]\napprovals = [\"re:.*\"]\n"), "roles.docs"));
}

TEST_CASE("[[approvals.allowed]]: a host allowed always is on every allowlist of the file", "[filters][config][approvals]") {
  // As sluice appends it: after the file's last table.
  auto c = load_config_string("[policy]\nallow = [\"a.test\"]\n[roles.ci]\nallow = [\"c.test\"]\n"
                              "[skills.default]\nallow_domains = [\"d.test\"]\n"
                              "[approvals]\nhosts = [\"*.pypi.org\"]\n[log]\naccess_log = \"/dev/null\"\n\n"
                              "# allowed always\n[[approvals.allowed]]\nhost = \"files.pypi.org\"\n"
                              "[[approvals.allowed]]\nhost = \"x.pypi.org:8443\"\n", "t.toml");
  CHECK(c.approvals.allowed == std::vector<std::string>{"files.pypi.org", "x.pypi.org:8443"});
  CHECK(c.allow == std::vector<std::string>{"a.test", "files.pypi.org", "x.pypi.org:8443"});
  CHECK(c.roles.at("ci").allow == std::vector<std::string>{"c.test", "files.pypi.org", "x.pypi.org:8443"});
  CHECK(c.skills.at("default").allow_domains == std::vector<std::string>{"d.test", "files.pypi.org", "x.pypi.org:8443"});
  policy p(c);
  auto host = parse_host("files.pypi.org");
  REQUIRE(host.host);
  auto d = p.decide("GET", "https", *host.host, 443, "/");
  CHECK(d.allowed);
  CHECK_FALSE(p.decide("POST", "https", *host.host, 443, "/").allowed); // the profile still applies
  // Without hosts to ask about, what was allowed stays allowed.
  CHECK(load_config_string("[[approvals.allowed]]\nhost = \"a.test\"\n", "t.toml").allow ==
        std::vector<std::string>{"a.test"});
  CHECK(contains(error_of("[[approvals.allowed]]\nhost = \"re:.*\"\n"), "approvals.allowed"));
  CHECK(contains(error_of("[[approvals.allowed]]\nname = \"a.test\"\n"), "name"));
  CHECK(contains(error_of("[approvals]\nallowed = [\"a.test\"]\n"), "[[approvals.allowed]]"));
}

TEST_CASE("load_admin_access: where approvals --config reaches serve", "[filters][config][approvals]") {
  char path[] = "/tmp/sluice-admin-access-XXXXXX";
  int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  auto write = [&](const std::string &text) { std::ofstream(path) << text; };
  // Only [listen] and [approvals] are read: a CA key serve's user alone can read does not matter.
  write("[listen]\nadmin = \"127.0.0.1:9090\"\n[approvals]\nhosts = [\"a.test\"]\ntoken_file = \"/etc/t\"\n"
        "[tls]\nca_cert = \"/nonexistent/ca.pem\"\nca_key = \"/nonexistent/ca.key\"\n");
  auto a = load_admin_access(path);
  CHECK(a.admin == "127.0.0.1:9090");
  CHECK(a.token_file == "/etc/t");
  write("[listen]\nproxy = \"127.0.0.1:3128\"\n");
  CHECK(load_admin_access(path).admin.empty());
  write("[listen]\nadmin = \"localhost\"\n");
  auto message = [&] {
    try {
      load_admin_access(path);
    } catch (const config_error &e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(contains(message(), std::string(path) + ":2: listen.admin = 'localhost' is not ADDRESS:PORT"));
  ::unlink(path);
  CHECK(contains(message(), std::string(path) + ": cannot open the config file"));
}

TEST_CASE("[decider]: a program or an endpoint, which requests, deadlines", "[filters][config][decider]") {
  auto c = load_config_string("[decider]\ncommand = \"/usr/bin/python3 /etc/sluice/d.py --x\"\nwhen = \"all\"\n"
                              "timeout = \"500ms\"\nmax_in_flight = 8\ncache_seconds = 0\n",
                              "t.toml");
  CHECK(c.decider.configured());
  CHECK(c.decider.command == std::vector<std::string>{"/usr/bin/python3", "/etc/sluice/d.py", "--x"});
  CHECK(c.decider.all);
  CHECK(c.decider.timeout == std::chrono::milliseconds(500));
  CHECK(c.decider.max_in_flight == 8);
  CHECK(c.decider.cache_seconds == std::chrono::seconds(0));
  auto e = load_config_string("[decider]\nurl = \"https://opa.test:8181/v1/data/sluice/decision\"\n", "t.toml");
  CHECK(e.decider.url == "https://opa.test:8181/v1/data/sluice/decision");
  CHECK_FALSE(e.decider.all);
  CHECK(e.decider.timeout == std::chrono::seconds(2));
  CHECK_FALSE(load_config_string("", "t.toml").decider.configured());
  CHECK(contains(error_of("[decider]\nwhen = \"all\"\n"), "exactly one of command"));
  CHECK(contains(error_of("[decider]\ncommand = \"a\"\nurl = \"https://x.test/\"\n"), "exactly one of command"));
  CHECK(contains(error_of("[decider]\nurl = \"http://x.test/\"\n"), "https://"));
  CHECK(contains(error_of("[decider]\ncommand = \"a\"\nwhen = \"sometimes\"\n"), "undecided"));
  CHECK(contains(error_of("[decider]\ncommand = \"a\"\ntimeout = \"5m\"\n"), "10ms"));
  CHECK(contains(error_of("[decider]\ncommand = \"a\"\nmax_in_flight = 0\n"), "max_in_flight"));
  CHECK(contains(error_of("[decider]\ncommand = \"a\"\nsurprise = 1\n"), "surprise"));
}
