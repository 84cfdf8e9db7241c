// When the access log's lines reach the file: together after an event loop's ready work on a thread
// that defers its flushes (a gateway worker), at once everywhere else, and never later than the
// size and age bounds, a rotation or the log's close.
#include "metrics/access_log.hpp"
#include "temp_file.hpp"

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace sluice::metrics;

namespace {

std::size_t lines_in(const std::string &path) { return testing::lines_of(path).size(); }

// Stands for a worker's event loop: what the log asks to run later is kept, and run when the test
// says the loop got to it. Cleared when the test ends, as a worker's thread ends.
struct queued_loop {
  std::vector<std::function<void()>> asked;
  queued_loop() {
    access_log::defer_flushes_here([this](std::function<void()> f) { asked.push_back(std::move(f)); });
  }
  ~queued_loop() { access_log::defer_flushes_here({}); }
  void run() {
    auto now = std::move(asked);
    asked.clear();
    for (auto &f : now) f();
  }
};

// A log written from a thread that stands for a worker: its loop, the log and a record to write.
struct worker_log {
  testing::temp_file f;
  queued_loop loop;
  access_log log{f.path, "cmd", "", false};
  access_record r;
  std::size_t lines() const { return lines_in(f.path); }
};

} // namespace

TEST_CASE("a thread without a deferrer writes each line at once", "[metrics][access_log]") {
  testing::temp_file f;
  access_log log(f.path, "cmd", "", false);
  access_record r;
  log.write(r);
  CHECK(lines_in(f.path) == 1);
  log.write(r);
  CHECK(lines_in(f.path) == 2);
}

TEST_CASE_METHOD(worker_log, "a worker's lines go out together once its loop runs the flush it asked for once",
                 "[metrics][access_log]") {
  for (int i = 0; i < 5; ++i) log.write(r);
  CHECK(lines() == 0);
  REQUIRE(loop.asked.size() == 1); // one flush asked for the five lines
  loop.run();
  CHECK(lines() == 5);
  // The next line asks again.
  log.write(r);
  CHECK(loop.asked.size() == 1);
  loop.run();
  CHECK(lines() == 6);
}

TEST_CASE_METHOD(worker_log, "another thread's line joins the held ones; its own loop is not asked twice",
                 "[metrics][access_log]") {
  log.write(r);
  std::thread([&] {
    queued_loop other;
    log.write(r); // a flush is already asked for: held with the first
    CHECK(other.asked.empty());
  }).join();
  CHECK(lines() == 0);
  loop.run();
  CHECK(lines() == 2);
}

TEST_CASE_METHOD(worker_log, "held lines are written at the size bound, the age bound, flush(), a rotation and close",
                 "[metrics][access_log]") {
  SECTION("size") {
    std::string long_target(2000, 'a');
    r.target = long_target;
    std::size_t n = 0;
    while (lines() == 0) {
      log.write(r);
      REQUIRE(++n < 2 * access_log::flush_at / long_target.size());
    }
    CHECK(n * long_target.size() >= access_log::flush_at / 2);
    CHECK(lines() == n);
  }
  SECTION("age") {
    log.write(r);
    std::this_thread::sleep_for(access_log::max_hold + std::chrono::milliseconds(20));
    log.write(r); // the loop never ran its flush: the second line finds the first too old
    CHECK(lines() == 2);
  }
  SECTION("flush(), as the gateway calls it once its workers stopped") {
    log.write(r);
    log.flush();
    CHECK(lines() == 1);
    loop.asked.clear(); // the stopped loop's flush never runs
    log.write(r);       // a flush is asked for again
    CHECK(loop.asked.size() == 1);
  }
  SECTION("rotation: the old file gets its lines, and close the new file's") {
    testing::temp_file rotated;
    log.write(r);
    REQUIRE(std::rename(f.path.c_str(), rotated.path.c_str()) == 0);
    CHECK(log.reopen().empty());
    CHECK(lines_in(rotated.path) == 1);
    log.write(r);
    CHECK(lines() == 0);
    log.close(); // the held line is written
    CHECK(lines() == 1);
  }
  SECTION("the interval tick writes what is held") {
    log.write(r);
    log.checkpoint_if_due();
    CHECK(lines() == 1);
  }
}
