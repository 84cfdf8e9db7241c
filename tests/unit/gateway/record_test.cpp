// exchange::record: an outcome is written exactly once, by whoever holds the request last.
#include "gateway/exchange/record.hpp"

#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

namespace {

using namespace sluice::gateway::exchange;

struct log_of : recorder {
  std::vector<std::string> lines;
  void record_outcome(outcome &o) noexcept override { lines.push_back(std::string(o.reason) + " " + o.host); }
};

} // namespace

TEST_CASE("a record writes its outcome once, when it goes or is settled") {
  log_of log;
  SECTION("at the end of its scope") {
    {
      record r(log);
      r.host = "a.test";
      r.reason = "allowed";
    }
    CHECK(log.lines == std::vector<std::string>{"allowed a.test"});
  }
  SECTION("settled early, then gone: one line, as it was when settled") {
    {
      record r(log);
      r.reason = "host_not_allowlisted";
      r.settle();
      r.reason = "allowed";
      r.settle();
    }
    CHECK(log.lines == std::vector<std::string>{"host_not_allowlisted "});
  }
  SECTION("moved: only the new owner writes") {
    std::unique_ptr<record> kept;
    {
      record r(log);
      r.host = "b.test";
      kept = std::make_unique<record>(std::move(r));
      kept->reason = "client_aborted";
    }
    CHECK(log.lines.empty());
    kept.reset();
    CHECK(log.lines == std::vector<std::string>{"client_aborted b.test"});
  }
  SECTION("never decided (no reason): nothing is written") {
    {
      record r(log);
      r.method = "CONNECT";
      r.host = "c.test";
    }
    CHECK(log.lines.empty());
  }
}
