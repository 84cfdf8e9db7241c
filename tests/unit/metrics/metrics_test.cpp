#include "metrics/access_log.hpp"
#include "metrics/live_stats.hpp"
#include "metrics/metrics.hpp"
#include "metrics/textfile.hpp"

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cctype>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <stdexcept>
#include <unistd.h>
#include <string>

using namespace sluice::metrics;

namespace {
std::string run_text(const char *result) {
  metrics m("build");
  m.request({"network-read", "allow", "allowed", "GET", "docs.example.com", 10, 2000, 0.02});
  m.request({"network-read", "deny", "host_not_allowlisted", "GET", "", 0, 0, 0.001});
  m.request({"network-read", "allow", "allowed", "git-upload-pack", "git.example.com", 100, 5000, 0.5, {}, "ssh"});
  m.exec_finished("network-read", result, 1.5, 1700000000);
  return m.serialize();
}
} // namespace

TEST_CASE("textfile merge sums counters and histograms across runs, keeps the latest gauge") {
  auto first = merge_expositions("", run_text("exit_zero"));
  auto merged = merge_expositions(first, run_text("exit_zero"));
  CHECK(merged.find("sluice_exec_commands_total{profile=\"network-read\",result=\"exit_zero\","
                    "skill=\"build\"} 2\n") != std::string::npos);
  CHECK(merged.find("sluice_rule_requests_total{decision=\"allow\",profile=\"network-read\","
                    "protocol=\"http/1.1\",reason=\"allowed\",rule=\"docs.example.com\",skill=\"build\"} 2\n") !=
        std::string::npos);
  CHECK(merged.find("rule=\"none\"") != std::string::npos);
  // Git over SSH counts in the same families, told apart by protocol, its method the Git program.
  CHECK(merged.find("sluice_requests_total{decision=\"allow\",method=\"git-upload-pack\",profile=\"network-read\","
                    "protocol=\"ssh\",reason=\"allowed\"} 2\n") != std::string::npos);
  CHECK(merged.find("sluice_rule_bytes_total{direction=\"out\",profile=\"network-read\","
                    "rule=\"docs.example.com\",skill=\"build\"} 4000\n") != std::string::npos);
  CHECK(merged.find("sluice_exec_duration_seconds_count{profile=\"network-read\",skill=\"build\"} 2\n") !=
        std::string::npos);
  CHECK(merged.find("sluice_exec_duration_seconds_sum{profile=\"network-read\",skill=\"build\"} 3\n") !=
        std::string::npos);
  // A gauge is not summed: the last run's end time stays.
  CHECK(merged.find("sluice_exec_last_end_timestamp_seconds{profile=\"network-read\",skill=\"build\"} "
                    "1700000000\n") != std::string::npos);
  CHECK(merged.find("sluice_connections_active") == std::string::npos);
  // HELP and TYPE once per family.
  auto type = std::string("# TYPE sluice_exec_commands_total counter\n");
  CHECK(merged.find(type) == merged.rfind(type));
}

TEST_CASE("textfile merge adds new series beside the old ones") {
  auto merged = merge_expositions(merge_expositions("", run_text("exit_zero")), run_text("refused"));
  CHECK(merged.find("result=\"exit_zero\",skill=\"build\"} 1\n") != std::string::npos);
  CHECK(merged.find("result=\"refused\",skill=\"build\"} 1\n") != std::string::npos);
}

TEST_CASE("textfile merge refuses a file that is not sluice's") {
  CHECK_THROWS_AS(merge_expositions("node_load1 3\n", run_text("exit_zero")), std::runtime_error);
  CHECK_THROWS_AS(merge_expositions("# TYPE x counter\nx{a=\"1\"} nope\n", run_text("exit_zero")),
                  std::runtime_error);
  CHECK_THROWS_AS(merge_expositions("garbage\n", ""), std::runtime_error);
}

TEST_CASE("live stats: totals, destinations capped, denials newest first and capped") {
  live_stats s;
  s.record({"GET", "a.test", 443, "/x", "a.test", "allow", "allowed", 200, 5, 100});
  s.record({"POST", "a.test", 443, "/y?REDACTED", "a.test", "deny", "method_not_allowed", 403, 0, 0});
  for (std::size_t i = 0; i < live_stats::max_destinations + 10; ++i) {
    s.record({"GET", "h" + std::to_string(i) + ".test", 80, "/", "", "deny", "host_not_allowlisted",
              403, 0, 0});
  }
  auto snap = s.snapshot();
  auto &totals = snap.at("totals").as_object();
  CHECK(totals.at("allowed").to_number<int>() == 1);
  CHECK(totals.at("denied").to_number<int>() == 2 + static_cast<int>(live_stats::max_destinations) + 9);
  CHECK(totals.at("bytes_out").to_number<int>() == 100);
  auto &dests = snap.at("destinations").as_array();
  CHECK(dests.size() == live_stats::max_destinations + 1); // the cap plus "(other)"
  bool other = false;
  for (auto &d : dests) {
    if (d.at("destination") == "(other)") {
      other = true;
      CHECK(d.at("denied").to_number<int>() == 11);
    }
    if (d.at("destination") == "a.test:443") {
      CHECK(d.at("allowed").to_number<int>() == 1);
      CHECK(d.at("denied").to_number<int>() == 1);
      CHECK(d.at("rule") == "a.test");
    }
  }
  CHECK(other);
  auto &denials = snap.at("denials").as_array();
  CHECK(denials.size() == live_stats::max_denials);
  CHECK(denials[0].at("host") == "h1009.test");
}

TEST_CASE("redact_target hides the query only") {
  CHECK(redact_target("/a?token=1", true) == "/a?REDACTED");
  CHECK(redact_target("/a?token=1", false) == "/a?token=1");
  CHECK(redact_target("/a", true) == "/a");
}

TEST_CASE("the access log writes one JSON object a line, every field escaped", "[metrics][access_log]") {
  char path[] = "/tmp/sluice-access-log-XXXXXX";
  int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  {
    access_log log(path, "cmd-1", "sk\"ill", false);
    access_record r;
    r.profile = "network-read";
    r.method = "GET";
    r.scheme = "https";
    r.host = "docs.example.com";
    r.port = 443;
    std::string target = std::string("/a\"b\\c\n\t\x01\x1f") + "\xc3\xa9/\xe2\x82\xac";
    r.target = target;
    r.rule = "allow[0]";
    r.decision = "allow";
    r.reason = "allowed";
    r.status = 200;
    r.bytes_in = 18446744073709551615ull;
    r.bytes_out = 0;
    r.duration_seconds = 0.0012346;
    r.client = "agent-1";
    log.write(r);
    r.duration_seconds = 12.5;
    r.target = "";
    log.write(r);
  }
  std::ifstream in(path);
  std::string first, second, rest;
  std::getline(in, first);
  std::getline(in, second);
  CHECK_FALSE(std::getline(in, rest));
  ::unlink(path);
  auto o = boost::json::parse(first).as_object();
  CHECK(o.size() == 21);
  CHECK(o.begin()->key() == "time"); // the documented order, time first
  CHECK(o.at("protocol").as_string() == "http/1.1");
  CHECK_FALSE(o.contains("ws_close_code")); // WebSocket fields on WebSocket lines only
  CHECK(o.at("skill").as_string() == "sk\"ill");
  CHECK(o.at("path").as_string() == std::string("/a\"b\\c\n\t\x01\x1f") + "\xc3\xa9/\xe2\x82\xac");
  CHECK(o.at("port").as_int64() == 443);
  CHECK(o.at("bytes_in").as_uint64() == 18446744073709551615ull);
  CHECK(o.at("duration_seconds").as_double() == 0.001235); // to the microsecond
  CHECK(first.find("\"duration_seconds\":0.001235,") != std::string::npos);
  CHECK(o.at("agent").as_string() == "");
  CHECK(o.at("client").as_string() == "agent-1");
  CHECK(o.at("entry").as_string() == "proxy");
  CHECK(first.find('\n') == std::string::npos);
  CHECK(first.find("\\u0001") != std::string::npos);
  auto p = boost::json::parse(second).as_object();
  CHECK(p.at("duration_seconds").as_double() == 12.5);
  CHECK(second.find("\"duration_seconds\":12.500000,") != std::string::npos);
  CHECK(p.at("path").as_string() == "");
}

TEST_CASE("the access log's time is UTC with milliseconds", "[metrics][access_log]") {
  char path[] = "/tmp/sluice-access-log-XXXXXX";
  int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  auto before = std::time(nullptr);
  {
    access_log log(path, "cmd-1", "", false);
    log.write({});
  }
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  ::unlink(path);
  std::string t(boost::json::parse(line).as_object().at("time").as_string());
  REQUIRE(t.size() == 24);
  std::tm tm{};
  REQUIRE(::strptime(t.c_str(), "%Y-%m-%dT%H:%M:%S", &tm) == t.c_str() + 19);
  auto at = ::timegm(&tm);
  CHECK(at >= before);
  CHECK(at <= std::time(nullptr));
  CHECK(t[19] == '.');
  CHECK(std::isdigit(static_cast<unsigned char>(t[20])));
  CHECK(t[23] == 'Z');
}
