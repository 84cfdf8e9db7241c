// [[limits.budget]]: the loader's entries and the ledger's counting (gateway/exchange/limits.hpp):
// rates with a burst, exchanges at once, byte budgets per run, per client and per role.
#include "filters/policy_loader.hpp"
#include "gateway/exchange/limits.hpp"
#include "gateway/exchange/limits_report.hpp"

#include <boost/json/serialize.hpp>
#include <catch2/catch.hpp>

using namespace sluice;
using gateway::exchange::ledger;

namespace {

filters::policy_ptr policy_of(std::string_view toml) {
  return std::make_shared<const filters::policy>(filters::load_config_string(toml, "limits.toml"));
}

std::string load_error(std::string_view toml) {
  try {
    filters::load_config_string(toml, "limits.toml");
  } catch (const std::exception &e) {
    return e.what();
  }
  return {};
}

} // namespace

TEST_CASE("[[limits.budget]] entries are read and checked", "[limits]") {
  auto c = filters::load_config_string(R"(
[[limits.budget]]
name = "api"
hosts = ["api.example.com", "*.uploads.test"]
per = "day"
requests_per_second = 5
burst = 10
connections = 3
bytes_out = 1000
bytes_in = 2000
)", "limits.toml");
  REQUIRE(c.limits.budgets.size() == 1);
  const auto &b = c.limits.budgets[0];
  CHECK(b.name == "api");
  CHECK(b.per == filters::budget_rule::scope::day);
  CHECK(b.requests_per_second == 5);
  CHECK(b.burst == 10);
  CHECK(b.connections == 3);
  CHECK(b.bytes_out == 1000);
  CHECK(b.bytes_in == 2000);
  CHECK(b.hosts.size() == 2);

  CHECK_THAT(load_error("[[limits.budget]]\nhosts = [\"a.test\"]\nbytes_out = 1\n"),
             Catch::Contains("needs name"));
  CHECK_THAT(load_error("[[limits.budget]]\nname = \"x\"\n"), Catch::Contains("limits nothing"));
  CHECK_THAT(load_error("[[limits.budget]]\nname = \"x\"\nper = \"week\"\nbytes_out = 1\n"),
             Catch::Contains("per must be"));
  CHECK_THAT(load_error("[[limits.budget]]\nname = \"x\"\nburst = 3\n"), Catch::Contains("without requests_per_second"));
  CHECK_THAT(load_error("[[limits.budget]]\nname = \"x\"\nbytes_out = 1\n[[limits.budget]]\nname = \"x\"\nbytes_in = 1\n"),
             Catch::Contains("another budget has this name"));
  CHECK_THAT(load_error("[[limits.budget]]\nname = \"x\"\nroles = [\"ops\"]\nbytes_in = 1\n"),
             Catch::Contains("not a [roles.NAME]"));
  CHECK_THAT(load_error("[[limits.budget]]\nname = \"x\"\nhosts = [\"a..b\"]\nbytes_in = 1\n"),
             Catch::Contains("hosts"));
  CHECK_THAT(load_error("[[limits.budget]]\nname = \"x\"\nbytes_in = 1\nbytes = 3\n"), Catch::Contains("bytes"));
}

TEST_CASE("a budget's rate refuses past its burst and says when to retry", "[limits]") {
  auto pol = policy_of(R"(
[[limits.budget]]
name = "slow"
hosts = ["api.test"]
requests_per_second = 0.5
burst = 2
)");
  ledger l;
  auto a = l.admit(*pol, "", "api.test", "https", 443, 100, 0);
  auto b = l.admit(*pol, "", "api.test", "https", 443, 100, 0);
  CHECK(a.reason.empty());
  CHECK(b.reason.empty());
  auto c = l.admit(*pol, "", "api.test", "https", 443, 100, 0);
  CHECK(c.reason == "rate_limited");
  CHECK(c.budget == "slow");
  CHECK(c.retry_after == 2); // one token at 0.5 a second
  CHECK_THAT(c.message, Catch::Contains("0.5 requests a second, 2 at once"));
  // Another host is not under this budget.
  CHECK(l.admit(*pol, "", "other.test", "https", 443, 100, 0).charged == nullptr);
  CHECK(l.admit(*pol, "", "other.test", "https", 443, 100, 0).reason.empty());
}

TEST_CASE("a byte budget counts heads, announced bodies and what moved", "[limits]") {
  auto pol = policy_of(R"(
[[limits.budget]]
name = "drip"
bytes_out = 1000
bytes_in = 500
)");
  ledger l;
  auto a = l.admit(*pol, "", "x.test", "https", 443, 400, 0);
  REQUIRE(a.reason.empty());
  // A head and body that do not fit what is left are refused before anything goes.
  auto big = l.admit(*pol, "", "x.test", "https", 443, 300, 400);
  CHECK(big.reason == "budget_exhausted");
  CHECK_THAT(big.message, Catch::Contains("used 400 of its bytes_out = 1000"));
  CHECK_THAT(big.message, Catch::Contains("does not refill"));
  // What moved is charged as it goes: past the limit, the exchange is told to stop.
  CHECK(a.charged->moved(500, 100));
  CHECK_FALSE(a.charged->moved(700, 100)); // 400 + 700 > 1000
  a.charged->release();
  auto next = l.admit(*pol, "", "x.test", "https", 443, 10, 0);
  CHECK(next.reason == "budget_exhausted");
  auto rows = l.snapshot();
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].bytes_out == 1100);
  CHECK(rows[0].bytes_in == 100);
  CHECK(rows[0].requests == 1);
  CHECK(rows[0].refused == 2);
  CHECK(rows[0].open == 0);
  auto json = boost::json::serialize(gateway::exchange::budgets_json(rows));
  CHECK_THAT(json, Catch::Contains("\"bytesOutLeft\":0"));
  CHECK_THAT(json, Catch::Contains("\"bytesInLeft\":400"));
  auto text = gateway::exchange::budgets_prometheus(rows);
  CHECK_THAT(text, Catch::Contains("sluice_budget_remaining_bytes{budget=\"drip\",client=\"\",direction=\"in\"} 400"));
}

TEST_CASE("exchanges at once are held until released", "[limits]") {
  auto pol = policy_of("[[limits.budget]]\nname = \"two\"\nconnections = 2\n");
  ledger l;
  auto a = l.admit(*pol, "", "x.test", "https", 443, 0, 0);
  auto b = l.admit(*pol, "", "x.test", "https", 443, 0, 0);
  auto c = l.admit(*pol, "", "x.test", "https", 443, 0, 0);
  CHECK(c.reason == "rate_limited");
  CHECK_THAT(c.message, Catch::Contains("2 exchanges at once"));
  a.charged.reset(); // the meter's end frees its place
  CHECK(l.admit(*pol, "", "x.test", "https", 443, 0, 0).reason.empty());
}

TEST_CASE("per client budgets count each client, per run all together, roles choose theirs", "[limits]") {
  auto top = policy_of(R"(
[roles.dev]
[roles.ops]
[clients.alice]
role = "dev"
token_sha256 = "2bd806c97f0e00af1a1fc3328fa763a9269723c8db8fac4f93af71db186d6e90"
[clients.bob]
role = "dev"
token_sha256 = "81b637d8fcd2c6da6359e6963113a1170de795e4b725b84d1e0b4cfd9ec58ce9"
[clients.carol]
role = "ops"
token_sha256 = "2bd806c97f0e00af1a1fc3328fa763a9269723c8db8fac4f93af71db186d6e91"
[[limits.budget]]
name = "each"
bytes_out = 100
[[limits.budget]]
name = "shared"
per = "run"
roles = ["dev"]
bytes_out = 150
)");
  auto dev = top->for_client("alice");
  auto ops = top->for_client("carol");
  REQUIRE(dev);
  REQUIRE(ops);
  CHECK(dev->budgets().size() == 2);
  CHECK(ops->budgets().size() == 1); // "shared" is dev's only
  ledger l;
  CHECK(l.admit(*dev, "alice", "x.test", "https", 443, 90, 0).reason.empty());
  CHECK(l.admit(*dev, "alice", "x.test", "https", 443, 20, 0).budget == "each"); // alice's 100
  CHECK(l.admit(*dev, "bob", "x.test", "https", 443, 50, 0).reason.empty());     // bob has his own
  CHECK(l.admit(*dev, "bob", "x.test", "https", 443, 20, 0).budget == "shared"); // 90 + 50 + 20 > 150
  CHECK(l.admit(*ops, "carol", "x.test", "https", 443, 90, 0).reason.empty());   // not under "shared"
}

TEST_CASE("a day's budget names when it refills", "[limits]") {
  auto pol = policy_of("[[limits.budget]]\nname = \"daily\"\nper = \"day\"\nbytes_out = 10\n");
  ledger l;
  auto a = l.admit(*pol, "", "x.test", "https", 443, 11, 0);
  CHECK(a.reason == "budget_exhausted");
  CHECK(a.retry_after > 0);
  CHECK(a.retry_after <= 86400);
  CHECK_THAT(a.message, Catch::Contains("refills at 00:00 UTC"));
}
