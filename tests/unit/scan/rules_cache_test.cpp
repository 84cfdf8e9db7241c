// The compiled rules kept between runs (database_spec::rules_cache_dir): written once, read after,
// the same findings as one database of everything; never a run's values in the file; a damaged or
// foreign file compiled again; the canaries and placeholders seen before the rules may stop a scan.
#include "vectors.hpp"
#include "scan/canary.hpp"

#include <catch2/catch.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iterator>

using namespace sluice::scan;
using namespace scan_test;

namespace {

struct temp_dir {
  std::string path;
  temp_dir() {
    char t[] = "/tmp/sluice-rules-cache-XXXXXX";
    REQUIRE(::mkdtemp(t) != nullptr);
    path = t;
  }
  ~temp_dir() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    if (DIR *d = ::opendir(path.c_str())) {
      while (auto *e = ::readdir(d)) {
        if (e->d_name[0] != '.') out.push_back(path + "/" + e->d_name);
      }
      ::closedir(d);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
};

std::string read(const std::string &file) {
  std::ifstream f(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

const std::string own_value = "sv-" + alnum(30, 5);
const std::string placeholder = "ghp_" + alnum(36, 99) + "-placeholder-of-sluice";

// A run's spec: the built-in rules, one placeholder, the canaries and one own secret.
database_spec run_spec(const canary_set &canaries, const std::string &cache_dir) {
  database_spec spec;
  spec.rules = builtin_rules();
  spec.placeholders = {placeholder};
  spec.canaries = canaries.values;
  spec.own_secrets = {{"MY_TOKEN", own_value, {}}};
  spec.block_database = false;
  spec.rules_cache_dir = cache_dir;
  return spec;
}

// Every finding of a body fed in 7-byte pieces and of the same bytes as one whole value.
std::vector<std::string> every_finding(const database_ptr &db, const std::string &body) {
  scanner_options every;
  every.stop_at_block = false;
  scanner s(db, scratch::this_thread(), every);
  for (std::size_t at = 0; at < body.size(); at += 7) s.feed("body", std::string_view(body).substr(at, 7));
  s.end("body");
  s.scan_whole("field:x-all", body);
  std::vector<std::string> out;
  for (const auto &f : s.findings()) out.push_back(f.rule + "@" + f.location + ":" + std::to_string(f.offset));
  std::sort(out.begin(), out.end());
  return out;
}

std::string sample_body(const canary_set &canaries) {
  std::string body = "{\"a\": \"" + github_token() + "\", \"placeholder\": \"" + placeholder + "\", \"own\": \"" +
                     own_value + "\", \"aws\": \"AKIA" + of("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16) + "\"";
  for (const auto &c : canaries.values) body += ", \"" + c.name + "\": \"" + c.value + "\"";
  return body + "}";
}

} // namespace

TEST_CASE("the rules are compiled once, then read; the findings are one database's", "[scan][rules_cache]") {
  temp_dir dir;
  auto canaries = make_canaries();
  auto body = sample_body(canaries);
  auto first = database::compile(run_spec(canaries, dir.path));
  CHECK_FALSE(first->rules_from_cache());
  REQUIRE(first->hs_streams().size() == 2);
  auto files = dir.files();
  REQUIRE(files.size() == 1);
  CHECK(files[0].find("/rules-") != std::string::npos);
  struct stat st {};
  REQUIRE(::stat(files[0].c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);

  auto again = database::compile(run_spec(canaries, dir.path));
  CHECK(again->rules_from_cache());
  CHECK(dir.files() == files);

  auto one = database::compile(run_spec(canaries, ""));
  CHECK(one->hs_streams().size() == 1);
  auto expected = every_finding(one, body);
  CHECK(std::count_if(expected.begin(), expected.end(), [](const std::string &f) { return f.starts_with("canary@"); }) ==
        static_cast<long>(2 * canaries.values.size()));
  CHECK(std::find_if(expected.begin(), expected.end(), [](const std::string &f) {
          return f.starts_with("own_secret@body");
        }) != expected.end());
  CHECK(every_finding(first, body) == expected);
  CHECK(every_finding(again, body) == expected);
}

TEST_CASE("the file holds the rules, never a run's canaries or the caller's secrets", "[scan][rules_cache]") {
  temp_dir dir;
  auto canaries = make_canaries();
  database::compile(run_spec(canaries, dir.path));
  REQUIRE(dir.files().size() == 1);
  auto bytes = read(dir.files()[0]);
  CHECK(bytes.size() > 1000);
  CHECK(bytes.find(own_value) == std::string::npos);
  for (const auto &c : canaries.values) CHECK(bytes.find(c.value) == std::string::npos);
  // A later run's canaries are new, the rules the same: the same file serves it.
  auto next = database::compile(run_spec(make_canaries(), dir.path));
  CHECK(next->rules_from_cache());
}

TEST_CASE("a damaged, shared or emptied file is compiled again and written over", "[scan][rules_cache]") {
  temp_dir dir;
  auto canaries = make_canaries();
  auto body = sample_body(canaries);
  auto expected = every_finding(database::compile(run_spec(canaries, "")), body);
  database::compile(run_spec(canaries, dir.path));
  const auto file = dir.files().at(0);
  const auto good = read(file);

  SECTION("damaged") {
    std::string bad = good;
    for (std::size_t i = 200; i < bad.size(); i += 97) bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bad;
  }
  SECTION("cut short") { std::ofstream(file, std::ios::binary | std::ios::trunc) << good.substr(0, good.size() / 2); }
  SECTION("emptied") { std::ofstream(file, std::ios::binary | std::ios::trunc); }
  SECTION("writable by others") { REQUIRE(::chmod(file.c_str(), 0666) == 0); }
  SECTION("a symlink") {
    REQUIRE(::rename(file.c_str(), (dir.path + "/elsewhere").c_str()) == 0);
    REQUIRE(::symlink((dir.path + "/elsewhere").c_str(), file.c_str()) == 0);
  }

  auto db = database::compile(run_spec(canaries, dir.path));
  CHECK_FALSE(db->rules_from_cache());
  CHECK(every_finding(db, body) == expected);
  struct stat st {};
  REQUIRE(::lstat(file.c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(database::compile(run_spec(canaries, dir.path))->rules_from_cache());
}

TEST_CASE("other rules take another file; the oldest past sixteen go", "[scan][rules_cache]") {
  temp_dir dir;
  auto canaries = make_canaries();
  for (int i = 0; i < 18; ++i) {
    auto spec = run_spec(canaries, dir.path);
    spec.rules.push_back({"team-id", "team-" + std::to_string(i) + "-[0-9a-f]{24}", kind::custom});
    auto db = database::compile(std::move(spec));
    CHECK_FALSE(db->rules_from_cache());
    scanner s(db);
    s.scan_whole("body", "x team-" + std::to_string(i) + "-" + hex(24) + " y");
    CHECK(rules_of(s) == std::vector<std::string>{"team-id"});
  }
  CHECK(dir.files().size() == 16);
  database::compile(run_spec(canaries, dir.path));
  CHECK(dir.files().size() == 16);
}

TEST_CASE("a temporary file a killed run left is let go once it is an hour old", "[scan][rules_cache]") {
  temp_dir dir;
  const auto stale = dir.path + "/.rules-Ab12Cd", fresh = dir.path + "/.rules-Ef34Gh";
  std::ofstream(stale) << "half a database";
  std::ofstream(fresh) << "being written";
  struct timespec old_times[2] = {{std::time(nullptr) - 7200, 0}, {std::time(nullptr) - 7200, 0}};
  REQUIRE(::utimensat(AT_FDCWD, stale.c_str(), old_times, 0) == 0);
  database::compile(run_spec(make_canaries(), dir.path)); // writes its file, then trims
  CHECK(::access(stale.c_str(), F_OK) != 0);
  CHECK(::access(fresh.c_str(), F_OK) == 0);
}

TEST_CASE("with the rules apart, a canary after a certain block is still the one that decides", "[scan][rules_cache]") {
  temp_dir dir;
  auto canaries = make_canaries();
  const auto &canary = canaries.values.at(0).value;
  std::string body = "token=" + github_token() + " " + std::string(20000, '.') + " key=" + canary + " end";
  auto db = database::compile(run_spec(canaries, dir.path));
  scanner s(db); // stops at the first certain block
  s.feed("body", body);
  s.end("body");
  REQUIRE(s.blocking() != nullptr);
  CHECK(s.blocking()->kind == kind::canary);
}

TEST_CASE("with the rules apart, a placeholder that ends in a later piece still takes its token back",
          "[scan][rules_cache]") {
  temp_dir dir;
  auto canaries = make_canaries();
  auto db = database::compile(run_spec(canaries, dir.path));
  // The token inside the placeholder ends in the first piece, the placeholder in the second; the
  // own secret comes far enough after to make the token's finding look certain to its pass alone.
  const auto cut = std::string("x ").size() + 40 + 5;
  const std::string body = "x " + placeholder + " " + std::string(2000, '.') + " " + own_value + " ";
  scanner s(db);
  s.feed("body", std::string_view(body).substr(0, cut));
  s.feed("body", std::string_view(body).substr(cut));
  s.end("body");
  CHECK(rules_of(s) == std::vector<std::string>{"own_secret"});
}

TEST_CASE("a run's new placeholders leave the kept rules as they are", "[scan][rules_cache]") {
  temp_dir dir;
  auto canaries = make_canaries();
  auto spec = run_spec(canaries, dir.path);
  spec.placeholders = {"ghp_" + alnum(36, 1)};
  CHECK_FALSE(database::compile(std::move(spec))->rules_from_cache());
  spec = run_spec(canaries, dir.path);
  spec.placeholders = {"ghp_" + alnum(36, 2)}; // exec draws a shaped placeholder for every command
  auto db = database::compile(std::move(spec));
  CHECK(db->rules_from_cache());
  CHECK(dir.files().size() == 1);
  scanner s(db);
  s.scan_whole("body", "a " + ("ghp_" + alnum(36, 2)) + " b");
  CHECK(s.findings().empty());
}

TEST_CASE("placeholders and real tokens in one piece: each placeholder's token taken back, a real one kept",
          "[scan][rules_cache][placeholders]") {
  temp_dir dir;
  auto canaries = make_canaries();
  const std::string first = "ghp_" + alnum(36, 41), second = "ghp_" + alnum(36, 42), real = "ghp_" + alnum(36, 43);
  for (const std::string cache : {std::string(), dir.path}) {
    auto spec = run_spec(canaries, cache);
    spec.placeholders = {first, second};
    auto db = database::compile(std::move(spec));
    INFO("rules apart: " << !cache.empty());
    {
      // the first placeholder's token precedes the second placeholder in the same piece
      scanner s(db);
      s.feed("body", "x " + first + " y " + second + " z");
      s.end("body");
      CHECK(s.findings().empty());
    }
    {
      // the same rule in a placeholder, then for real: the real one is a finding
      scanner_options every;
      every.stop_at_block = false;
      scanner s(db, scratch::this_thread(), every);
      s.feed("body", "x " + first + " y " + real + " z");
      s.end("body");
      REQUIRE(rules_of(s) == std::vector<std::string>{"github_token"});
      CHECK(s.findings()[0].offset == 2 + first.size() + 3);
    }
  }
}
