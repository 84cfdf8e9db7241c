// The one judge (gateway/exchange/judge.hpp), fed the same requests in each form a codec hands
// over: an HTTP/1.1 absolute-form request to the proxy, an HTTP/1.1 origin-form request inside a
// terminated tunnel, and an h2 stream (:scheme and :authority) inside one. Every form must get the
// same decision: the judge has no protocol branches.
#include "filters/policy_loader.hpp"
#include "filters/git_upload_pack.hpp"
#include "gateway/exchange/body.hpp"
#include "gateway/exchange/judge.hpp"

#include <catch2/catch.hpp>

using namespace sluice;
using gateway::exchange::field_list;
using gateway::exchange::judge;
using gateway::exchange::judging;
using gateway::exchange::outcome;
using gateway::exchange::request;
using gateway::exchange::tunnel_target;
using gateway::exchange::verdict;

namespace {

enum class form { absolute, tunnel, h2 };

struct judged {
  verdict v;
  outcome o;
};

// `fields` are the request's own (no Host: each form names its origin its own way).
judged judge_as(form f, const filters::policy &pol, std::string_view method, const std::string &path,
                field_list fields = {}, const std::string &host = "api.example.com", unsigned port = 443) {
  static const std::string scheme = "https";
  const std::string authority = port == 443 ? host : host + ":" + std::to_string(port);
  tunnel_target t{host, port, "https"};
  const std::string absolute = scheme + "://" + authority + path;
  request r;
  r.method = method;
  judging j{pol};
  switch (f) {
  case form::absolute:
    r.target = absolute;
    fields.emplace_back("host", authority);
    break;
  case form::tunnel:
    r.target = path;
    fields.emplace_back("host", authority);
    j.tunnel = &t;
    break;
  case form::h2:
    r.target = path;
    r.scheme = scheme;
    r.authority = authority;
    r.version = 20;
    j.tunnel = &t;
    break;
  }
  r.fields = &fields;
  judged out;
  out.v = judge(r, j, out.o);
  return out;
}

std::shared_ptr<const filters::policy> policy_of(const std::string &toml) {
  return std::make_shared<const filters::policy>(filters::load_config_string(toml, "judge_test.toml"));
}

} // namespace

TEST_CASE("the judge decides alike for HTTP/1.1, inside a tunnel and over h2", "[gateway][judge]") {
  auto pol = policy_of("profile = \"network-read\"\n"
                       "[policy]\n"
                       "allow = [\"api.example.com\", \"git.example.com\"]\n"
                       "deny = [{ host = \"api.example.com\", paths = [\"/admin\"] }]\n");
  struct row {
    std::string_view method;
    std::string path;
    field_list fields;
    std::string host;
    std::string_view reason; // empty: allowed
    bool git_read = false;
  };
  const std::vector<row> rows = {
      {"GET", "/repos", {}, "api.example.com", ""},
      {"HEAD", "/repos?page=2", {}, "api.example.com", ""},
      {"POST", "/repos", {}, "api.example.com", "method_not_allowed"},
      {"GET", "/", {}, "other.example.com", "host_not_allowlisted"},
      {"GET", "/admin", {}, "api.example.com", "route_denied"},
      {"GET", "/admin/", {}, "api.example.com", "route_denied"},
      {"GET", "/a/../admin", {}, "api.example.com", "ambiguous_target"},
      {"POST", "/org/repo.git/git-upload-pack", {{"content-type", "application/x-git-upload-pack-request"}},
       "git.example.com", "", true},
      {"POST", "/org/repo.git/git-upload-pack", {}, "git.example.com", "method_not_allowed"},
      {"POST", "/org/repo.git/git-receive-pack", {}, "git.example.com", "git_push_refused"},
  };
  for (const auto &r : rows) {
    for (form f : {form::absolute, form::tunnel, form::h2}) {
      INFO(r.method << " " << r.host << r.path << " as form " << static_cast<int>(f));
      auto [v, o] = judge_as(f, *pol, r.method, r.path, r.fields, r.host);
      CHECK(v.reason == r.reason);
      CHECK(v.git_read == r.git_read);
      CHECK(o.host == r.host);
      CHECK(o.port == 443);
      CHECK(o.target == r.path);
      if (r.reason.empty()) CHECK(v.bodyless == (r.method != "POST"));
    }
  }
}

TEST_CASE("the judge: a request must name the tunnel's own origin", "[gateway][judge]") {
  auto pol = policy_of("profile = \"publish\"\n[policy]\nallow = [\"api.example.com\", \"b.example.com\"]\n");
  tunnel_target t{"api.example.com", 443, "https"};
  for (bool h2 : {false, true}) {
    INFO("h2 " << h2);
    field_list fields;
    if (!h2) fields.emplace_back("host", "b.example.com");
    request r;
    r.method = "GET";
    r.target = "/";
    r.fields = &fields;
    if (h2) {
      r.scheme = "https";
      r.authority = "b.example.com";
      r.version = 20;
    }
    outcome o;
    CHECK(judge(r, judging{*pol, &t}, o).reason == "host_mismatch");
    // The right host on another port, or in the other scheme, is another origin.
    if (h2) {
      r.authority = "api.example.com:8443";
    } else {
      fields[0].second = "api.example.com:8443";
    }
    CHECK(judge(r, judging{*pol, &t}, o).reason == "host_mismatch");
    if (h2) {
      r.authority = "api.example.com";
      r.scheme = "http";
      CHECK(judge(r, judging{*pol, &t}, o).reason == "host_mismatch");
    }
  }
  // Absolute-form inside the tunnel is held to it too.
  field_list fields{{"host", "b.example.com"}};
  request r;
  r.method = "GET";
  r.target = "https://b.example.com/";
  r.fields = &fields;
  outcome o;
  CHECK(judge(r, judging{*pol, &t}, o).reason == "host_mismatch");
}

TEST_CASE("the judge: absolute-form targets and Host", "[gateway][judge]") {
  auto pol = policy_of("profile = \"publish\"\n[policy]\nallow = [\"api.example.com\", \"[::1]:8080\"]\n");
  auto one = [&](std::string_view target, std::string_view host, unsigned version = 11) {
    field_list fields;
    if (!host.empty()) fields.emplace_back("host", host);
    request r;
    r.method = "GET";
    r.target = target;
    r.fields = &fields;
    r.version = version;
    outcome o;
    return std::string(judge(r, judging{*pol}, o).reason);
  };
  CHECK(one("https://api.example.com/x", "api.example.com") == "");
  CHECK(one("https://api.example.com/x", "") == "bad_host_header");
  CHECK(one("https://api.example.com/x", "", 10) == ""); // HTTP/1.0 needs no Host
  CHECK(one("https://api.example.com/x", "api.example.com:444") == "host_mismatch");
  CHECK(one("https://api.example.com:443/x", "api.example.com") == "");
  CHECK(one("https://user@api.example.com/x", "api.example.com") == "userinfo_in_target");
  CHECK(one("https://api.example.com/x#f", "api.example.com") == "ambiguous_target");
  CHECK(one("ftp://api.example.com/x", "api.example.com") == "unsupported_scheme");
  CHECK(one("https://api.example.com:/x", "api.example.com") == "invalid_host");
  CHECK(one("https://api.example.com:0/x", "api.example.com") == "invalid_host");
  CHECK(one("/x", "api.example.com") == "not_a_proxy_request");
  CHECK(one("http://[::1]:8080/x", "[::1]:8080") == "");
}

TEST_CASE("the judge: WebSocket upgrades are HTTP/1.1 GETs", "[gateway][judge]") {
  auto pol = policy_of("profile = \"publish\"\n[policy]\nallow = [\"api.example.com\"]\n");
  field_list ws{{"connection", "Upgrade"}, {"upgrade", "websocket"}, {"sec-websocket-version", "13"},
                {"sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="}};
  for (form f : {form::absolute, form::tunnel}) {
    auto [v, o] = judge_as(f, *pol, "GET", "/socket", ws);
    CHECK(v.reason == "");
    CHECK(v.websocket);
    CHECK(o.protocol == "websocket");
  }
  auto [v, o] = judge_as(form::h2, *pol, "GET", "/socket", ws);
  CHECK_FALSE(v.reason.empty()); // h2 carries no Upgrade: refused, never passed as an upgrade
}

TEST_CASE("the judge: what a person allowed, and what may be held", "[gateway][judge]") {
  auto pol = policy_of("profile = \"publish\"\n[approvals]\nhosts = [\"*.ask.test\"]\n");
  field_list fields{{"host", "a.ask.test"}};
  request r;
  r.method = "GET";
  r.target = "https://a.ask.test/";
  r.fields = &fields;
  outcome o;
  auto v = judge(r, judging{*pol}, o);
  CHECK(v.reason == "host_not_allowlisted");
  CHECK_FALSE(v.ask); // the codec cannot hold it
  r.can_hold = true;
  v = judge(r, judging{*pol}, o);
  CHECK(v.ask);
  judging once{*pol};
  once.approved_next = true;
  CHECK(judge(r, once, o).reason == "");
  judging tunnel{*pol};
  tunnel.approved_host = "a.ask.test";
  tunnel.approved_port = 443;
  CHECK(judge(r, tunnel, o).reason == "");
  struct run_list : gateway::exchange::run_approvals {
    bool allowed_for_run(const std::string &host, unsigned port) const override {
      return host == "a.ask.test" && port == 443;
    }
  } run;
  judging for_run{*pol};
  for_run.for_run = &run;
  CHECK(judge(r, for_run, o).reason == "");
}

TEST_CASE("the exchange: the authority a Host field names", "[gateway][judge]") {
  using gateway::exchange::authority;
  CHECK(authority("https", "api.example.com", 443) == "api.example.com");
  CHECK(authority("https", "api.example.com", 80) == "api.example.com:80");
  CHECK(authority("http", "api.example.com", 80) == "api.example.com");
  CHECK(authority("http", "::1", 8080) == "[::1]:8080");
  CHECK(authority("https", "2001:db8::1", 443) == "[2001:db8::1]");
}

TEST_CASE("the exchange: a body judged whole, the same for every protocol", "[gateway][judge]") {
  using gateway::exchange::judge_body;
  auto pol = policy_of("profile = \"network-read\"\n[policy]\nallow = [\"git.example.com\"]\n");
  field_list git{{"content-type", "application/x-git-upload-pack-request"}};
  auto [v, o] = judge_as(form::h2, *pol, "POST", "/org/repo.git/git-upload-pack", git, "git.example.com");
  REQUIRE(v.reason == "");
  REQUIRE(v.git_read);
  CHECK(gateway::exchange::whole_body_limit(v) == sluice::filters::max_git_request_bytes);
  const std::string negotiation = "0032want " + std::string(40, 'a') + "\n00000009done\n";
  CHECK(judge_body(v, o, *pol, git, "POST", negotiation).reason == "");
  CHECK(judge_body(v, o, *pol, git, "POST", "0014command=push\n0000").reason == "git_request_refused");
  CHECK(judge_body(v, o, *pol, git, "POST", std::string(sluice::filters::max_git_request_bytes + 1, '0')).reason ==
        "body_too_large");
  field_list brotli = git;
  brotli.emplace_back("content-encoding", "br");
  auto no = judge_body(v, o, *pol, brotli, "POST", negotiation);
  CHECK(no.reason == "git_request_refused");
  CHECK(no.rule == o.rule);
}

TEST_CASE("the judge names the decider for what the file leaves undecided, never for its refusals",
          "[gateway][judge][decider]") {
  const std::string rules = "profile = \"network-read\"\n[policy]\nallow = [\"api.example.com\"]\n"
                            "deny = [\"denied.example.com\"]\n[decider]\ncommand = \"/bin/true\"\n";
  auto pol = policy_of(rules);
  auto all = policy_of(rules + "when = \"all\"\n");
  for (form f : {form::absolute, form::tunnel, form::h2}) {
    INFO("form " << static_cast<int>(f));
    auto miss = judge_as(f, *pol, "GET", "/", {}, "other.example.com");
    CHECK(miss.v.reason == "host_not_allowlisted");
    CHECK(miss.v.decide);
    CHECK_FALSE(judge_as(f, *pol, "GET", "/", {}, "api.example.com").v.decide);     // undecided only
    CHECK(judge_as(f, *all, "GET", "/", {}, "api.example.com").v.decide);           // when = "all"
    auto denied = judge_as(f, *all, "GET", "/", {}, "denied.example.com");
    CHECK(denied.v.reason == "host_denied");
    CHECK_FALSE(denied.v.decide);                                                  // a deny entry stands
    auto write = judge_as(f, *all, "POST", "/", {}, "api.example.com");
    CHECK(write.v.reason == "method_not_allowed");
    CHECK_FALSE(write.v.decide);                                                   // so do the methods
  }
  auto none = policy_of("profile = \"network-read\"\n[policy]\nallow = [\"api.example.com\"]\n");
  CHECK_FALSE(judge_as(form::absolute, *none, "GET", "/", {}, "other.example.com").v.decide);
}
