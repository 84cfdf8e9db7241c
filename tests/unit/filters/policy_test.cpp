#include "filters/policy.hpp"

#include <catch2/catch.hpp>

using namespace sluice::filters;
using boost::asio::ip::make_address;

TEST_CASE("deny beats allow, methods follow the profile", "[filters][policy]") {
  config c;
  c.mode = profile::network_read;
  c.allow = {"*.github.com", "api.github.com"};
  c.deny = {"gist.github.com"};
  policy p(c);
  auto d = p.decide("GET", "https", "api.github.com", 443);
  CHECK(d.allowed);
  CHECK(d.rule == "api.github.com");
  d = p.decide("GET", "https", "gist.github.com", 443);
  CHECK_FALSE(d.allowed);
  CHECK(d.reason == "host_denied");
  CHECK(d.rule == "gist.github.com");
  config c2 = c;
  c2.allow = {"gist.github.com:8443"};
  d = policy(c2).decide("GET", "https", "gist.github.com", 8443);
  CHECK(d.reason == "host_denied"); // a portless deny rule covers every port
  d = p.decide("POST", "https", "api.github.com", 443);
  CHECK_FALSE(d.allowed);
  CHECK(d.reason == "method_not_allowed");
  d = p.decide("GET", "https", "github.com", 443);
  CHECK(d.reason == "host_not_allowlisted");
  d = p.decide("GET", "https", "0x7f.1", 443);
  CHECK(d.reason == "ambiguous_host");
  d = p.decide("GET", "http", "localhost", 80);
  CHECK(d.reason == "localhost_refused");
  d = p.decide("GET", "http", "foo.localhost", 80);
  CHECK(d.reason == "localhost_refused");
}

TEST_CASE("addresses: special ranges refused unless the policy lists them", "[filters][policy]") {
  config c;
  c.allow_addresses = {parse_address_range("198.18.0.0/15")};
  policy p(c);
  CHECK(p.decide_address(make_address("198.18.0.2")).allowed);
  CHECK(p.decide_address(make_address("8.8.8.8")).allowed);
  for (auto a : {"127.0.0.1", "10.1.2.3", "169.254.169.254", "::1", "fd00:ec2::254", "100.64.1.1",
                 "::ffff:127.0.0.1", "64:ff9b::a00:1", "0.0.0.0", "224.0.0.1"}) {
    INFO(a);
    auto d = p.decide_address(make_address(a));
    CHECK_FALSE(d.allowed);
    CHECK(d.reason == "destination_address_denied");
  }
}

TEST_CASE("Git over SSH: fetch under network-read, push under publish, repository paths", "[filters][policy][ssh]") {
  config c;
  c.mode = profile::network_read;
  ssh_rule r;
  r.host = "git.test";
  r.paths = {"org/*"};
  r.text = "ssh://git.test org/*";
  c.ssh = {r};
  policy p(c);
  CHECK(p.ssh_host("git.test", 22) != nullptr);
  CHECK(p.ssh_host("git.test", 2222) == nullptr);
  CHECK(p.ssh_host("other.test", 22) == nullptr);
  auto d = p.decide_ssh("git.test", 22, git_ssh_service::upload_pack, "org/repo.git");
  CHECK(d.allowed);
  CHECK(d.rule == "ssh://git.test org/*");
  CHECK(p.decide_ssh("git.test", 22, git_ssh_service::upload_archive, "org/repo.git").allowed);
  CHECK(p.decide_ssh("git.test", 22, git_ssh_service::receive_pack, "org/repo.git").reason == "git_push_refused");
  CHECK(p.decide_ssh("git.test", 22, git_ssh_service::upload_pack, "other/repo.git").reason ==
        "ssh_repository_not_allowed");
  CHECK(p.decide_ssh("else.test", 22, git_ssh_service::upload_pack, "org/repo.git").reason == "ssh_host_not_allowed");
  c.mode = profile::publish;
  CHECK(policy(c).decide_ssh("git.test", 22, git_ssh_service::receive_pack, "org/repo.git").allowed);
  c.mode = profile::offline;
  CHECK(policy(c).decide_ssh("git.test", 22, git_ssh_service::upload_pack, "org/repo.git").reason == "offline");
}
