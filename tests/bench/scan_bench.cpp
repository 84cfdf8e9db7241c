// The scanner's throughput (docs/benchmarks.md): a 100 MiB body fed in 64 KiB pieces, and 1 KiB
// requests (a scanner each: target, five fields, the body), with the built-in rules, 20 own secrets
// and the canaries. Prints numbers; asserts nothing. Usage: scan_bench [MiB], or
// scan_bench --per-rule FILE: each built-in rule alone on FILE's bytes; --without-each FILE: all
// the built-in rules but each one in turn; --compile: what compiling each part of a run's database
// costs (the built-in rules alone, a run's literals alone: the canaries and 20 own secrets, both,
// and both without the block-mode database); --split FILE [N]: the rules and a run's literals (the
// canaries and N own secrets) in two databases, as exec keeps them, against one of both: each
// compile, and the scan of FILE in two passes against one; --literals FILE: how many literals each
// built-in rule gives Hyperscan's literal matcher (Teddy: 8 buckets up to 32 literals, twice as
// fast a byte as the 16-bucket engine it takes beyond), counted by adding literals that never occur
// until the rate falls, and the rate of the first N rules together (docs/benchmarks.md, "Hyperscan's
// two literal matchers").
#include "scan/body.hpp"
#include "scan/canary.hpp"
#include "scan/database.hpp"
#include "scan/scanner.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

using namespace sluice::scan;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// Text that looks like what agents upload: JSON lines with words, numbers and hashes.
std::string text_body(std::size_t size) {
  static const char *words[] = {"\"name\"", "\"version\"", "\"resolved\"", "https://registry.npmjs.org/",
                                "function", "return", "const", "integrity", "sha512-", "{", "}", ":", ",",
                                "token", "secret", "key", "\n", "  "};
  std::mt19937 rng(42);
  std::string s;
  s.reserve(size);
  while (s.size() < size) {
    s += words[rng() % (sizeof words / sizeof *words)];
    s += std::to_string(rng() % 100000);
    s += ' ';
  }
  s.resize(size);
  return s;
}

std::string binary_body(std::size_t size) {
  std::mt19937 rng(7);
  std::string s(size, '\0');
  for (auto &c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

// One scan of `body` as a request body with `db`: a scanner of its own, in 64 KiB pieces.
void scan_body(const database_ptr &db, const std::string &body) {
  scanner s(db);
  body_scan b(s, "", 0, "body");
  for (std::size_t at = 0; at < body.size(); at += 64 * 1024) b.feed(std::string_view(body).substr(at, 64 * 1024));
  b.finish();
}

void stream(const char *what, const database_ptr &db, const std::string &body) {
  auto t = clock_type::now();
  scanner s(db, scratch::this_thread(), {false, "", host_mode::enforce});
  for (std::size_t at = 0; at < body.size(); at += 65536) s.feed("body", std::string_view(body).substr(at, 65536));
  s.end("body");
  auto secs = seconds_since(t);
  std::printf("%-34s %8.0f MB/s  (%zu findings)\n", what, body.size() / secs / 1e6, s.findings().size());
}

void requests(const database_ptr &db, int n) {
  auto body = text_body(1024);
  std::string target = "/api/v4/projects/1234/issues?search=flaky+test&state=opened&per_page=20&page=3";
  auto t = clock_type::now();
  std::size_t findings = 0;
  for (int i = 0; i < n; ++i) {
    scanner s(db, scratch::this_thread(), {true, "gitlab.example.com", host_mode::enforce});
    s.scan_target(target);
    s.scan_field("user-agent", "python-requests/2.31.0");
    s.scan_field("accept", "application/json");
    s.scan_field("content-type", "application/json");
    s.scan_field("cookie", "_gitlab_session=0123456789abcdef0123456789abcdef; event_filter=all");
    s.scan_field("authorization", "Bearer sluice-credential-gitlab");
    body_scan b(s, "", 0);
    b.feed(body);
    b.finish();
    findings += s.findings().size();
  }
  auto secs = seconds_since(t);
  auto bytes = static_cast<double>(n) * (body.size() + target.size() + 200);
  std::printf("%-34s %8.0f requests/s, %.0f MB/s, %.1f us each (%zu findings)\n", "1 KiB requests", n / secs,
              bytes / secs / 1e6, secs / n * 1e6, findings);
}

} // namespace

// What each built-in rule costs alone on `body` (a database of that one rule): where a body's
// scan spends its time.
void per_rule(const std::string &body, bool drop) {
  std::vector<rule> all = builtin_rules();
  all.push_back({"(all built-in rules)", ""});
  for (const auto &r : all) {
    database_spec spec;
    spec.rules = r.pattern.empty() ? builtin_rules() : std::vector<rule>{r};
    if (drop && !r.pattern.empty()) { // all the rules but this one: what it adds to the whole
      spec.rules = builtin_rules();
      std::erase_if(spec.rules, [&](const rule &x) { return x.id == r.id; });
    }
    auto t = clock_type::now();
    auto db = database::compile(std::move(spec));
    const double compile_ms = seconds_since(t) * 1e3;
    t = clock_type::now();
    scan_body(db, body);
    std::printf("  %-28s %6.2f GB/s, compiled in %5.1f ms\n", r.id.c_str(), body.size() / seconds_since(t) / 1e9,
                compile_ms);
  }
}

// `rules` in one database scanning `body` (64 KiB pieces, streaming), GB/s: the best of five rounds,
// each of at least 64 MiB (the body again and again), so that a round lasts milliseconds.
double rate_of(std::vector<rule> rules, const std::string &body) {
  database_spec spec;
  spec.rules = std::move(rules);
  spec.block_database = false;
  auto db = database::compile(std::move(spec));
  const std::size_t times = std::max<std::size_t>(1, (std::size_t{64} << 20) / std::max<std::size_t>(body.size(), 1));
  double best = 0;
  for (int round = 0; round < 5; ++round) {
    auto t = clock_type::now();
    for (std::size_t i = 0; i < times; ++i) scan_body(db, body);
    best = std::max(best, static_cast<double>(body.size() * times) / seconds_since(t) / 1e9);
  }
  return best;
}

// `n` rules of one six-byte literal each that text does not hold: rare letters and digits in turn,
// each of the six bytes varying (literals sharing a rare first byte would let Hyperscan skip ahead
// to that byte and hide the matcher's cost).
std::vector<rule> fillers(std::size_t n) {
  std::vector<rule> out;
  for (std::size_t i = 0; i < n; ++i) {
    std::string lit;
    for (std::size_t v = i * 7919 + 13, k = 0; k < 3; ++k, v /= 60) {
      lit += "qzjxkv"[v % 6];
      lit += static_cast<char>('0' + (v / 6) % 10);
    }
    out.push_back({"filler-" + std::to_string(i), lit});
  }
  return out;
}

// Each built-in rule's literals: the most fillers that, added to the rule, keep the scan on the
// 8-bucket engine (a rate nearer 32 fillers' than 33 fillers'), taken from 32. Then the first N rules
// together, N from 1 to all: where the set leaves the faster engine.
void literals(const std::string &body) {
  const double slim = rate_of(fillers(32), body), fat = rate_of(fillers(33), body);
  std::printf("32 literals alone %.2f GB/s, 33 alone %.2f GB/s\n", slim, fat);
  // Between the two, on a ratio scale: the engines differ by about twice.
  auto on_slim = [&](std::vector<rule> rules) { return rate_of(std::move(rules), body) > std::sqrt(slim * fat); };
  for (const auto &r : builtin_rules()) {
    std::size_t lo = 0, hi = 32; // the most fillers that stay slim, found by halves
    if (!on_slim({r})) {
      std::printf("  %-28s slow alone (not the literal matcher)\n", r.id.c_str());
      continue;
    }
    while (lo < hi) {
      const std::size_t mid = (lo + hi + 1) / 2;
      auto rules = fillers(mid);
      rules.push_back(r);
      if (on_slim(std::move(rules))) lo = mid;
      else hi = mid - 1;
    }
    std::printf("  %-28s %2zu literals\n", r.id.c_str(), 32 - lo);
  }
  std::vector<rule> first;
  for (const auto &r : builtin_rules()) {
    first.push_back(r);
    std::printf("  the first %2zu rules together %6.2f GB/s\n", first.size(), rate_of(first, body));
  }
}

// Compile time (wall and this process's CPU, both Hyperscan modes) of each part, median of `rounds`.
void compile_parts(int rounds) {
  auto literals = [](database_spec &spec) {
    spec.canaries = make_canaries().values;
    for (int i = 0; i < 20; ++i) {
      spec.own_secrets.push_back({"SECRET_" + std::to_string(i), "value-" + std::to_string(i * 7919) + "-Qx9zLk2", {}});
    }
  };
  struct part {
    const char *what;
    bool rules, secrets, block;
  };
  for (const part &p : {part{"built-in rules", true, false, true}, part{"canaries + 20 own secrets", false, true, true},
                        part{"both (a run's database)", true, true, true},
                        part{"both, streaming database only", true, true, false}}) {
    std::vector<double> wall, cpu;
    for (int i = 0; i < rounds; ++i) {
      database_spec spec;
      spec.block_database = p.block;
      if (p.rules) spec.rules = builtin_rules();
      if (p.secrets) literals(spec);
      auto t = clock_type::now();
      auto c = std::clock();
      auto db = database::compile(std::move(spec));
      cpu.push_back(double(std::clock() - c) / CLOCKS_PER_SEC * 1e3);
      wall.push_back(seconds_since(t) * 1e3);
    }
    std::sort(wall.begin(), wall.end());
    std::sort(cpu.begin(), cpu.end());
    std::printf("%-30s compile %6.1f ms wall, %6.1f ms CPU (median of %d)\n", p.what, wall[wall.size() / 2],
                cpu[cpu.size() / 2], rounds);
  }
}

// The database split in two, as exec could keep it: the rules (the same every run) and a run's
// literals (its canaries and `secrets` own secrets), each compiled alone, against one database of
// both: compile time of each, and the scan of `body` in one pass against two.
void split(const std::string &body, int secrets) {
  auto literals = [&](database_spec &spec) {
    spec.canaries = make_canaries().values;
    for (int i = 0; i < secrets; ++i) {
      spec.own_secrets.push_back({"SECRET_" + std::to_string(i), "value-" + std::to_string(i * 7919) + "-Qx9zLk2", {}});
    }
  };
  auto build = [&](bool rules, bool lits) {
    database_spec spec;
    spec.block_database = false;
    if (rules) spec.rules = builtin_rules();
    if (lits) literals(spec);
    auto t = clock_type::now();
    auto db = database::compile(std::move(spec));
    std::printf("  compile %-10s %6.1f ms\n", rules && lits ? "both" : rules ? "rules" : "literals", seconds_since(t) * 1e3);
    return db;
  };
  auto both = build(true, true), rules = build(true, false), lits = build(false, true);
  auto pass = [&](std::vector<database_ptr> dbs) {
    auto t = clock_type::now();
    for (auto &db : dbs) scan_body(db, body);
    return body.size() / seconds_since(t) / 1e9;
  };
  for (int r = 0; r < 3; ++r) {
    std::printf("  one database %.2f GB/s; rules then literals %.2f GB/s; rules alone %.2f, literals alone %.2f\n",
                pass({both}), pass({rules, lits}), pass({rules}), pass({lits}));
  }
}

int main(int argc, char **argv) {
  const std::string mode = argc > 2 ? argv[1] : "";
  if (argc > 1 && std::string(argv[1]) == "--compile") {
    compile_parts(argc > 2 ? std::atoi(argv[2]) : 5);
    return 0;
  }
  if (mode == "--split" || mode == "--per-rule" || mode == "--without-each" || mode == "--literals") {
    std::FILE *f = std::fopen(argv[2], "rb");
    if (!f) {
      std::fprintf(stderr, "scan_bench: cannot read %s\n", argv[2]);
      return 2;
    }
    std::string body;
    char buf[65536];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) body.append(buf, n);
    std::fclose(f);
    if (mode == "--split") {
      split(body, argc > 3 ? std::atoi(argv[3]) : 0);
      return 0;
    }
    if (mode == "--literals") {
      literals(body);
      return 0;
    }
    per_rule(body, mode == "--without-each");
    return 0;
  }
  std::size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 100;
  auto t = clock_type::now();
  database_spec spec;
  spec.rules = builtin_rules();
  spec.canaries = make_canaries().values;
  for (int i = 0; i < 20; ++i) {
    spec.own_secrets.push_back({"SECRET_" + std::to_string(i), "value-" + std::to_string(i * 7919) + "-Qx9zLk2", {}});
  }
  auto db = database::compile(std::move(spec));
  std::printf("compile: %.1f ms, stream state %zu bytes, RE2 rules %zu\n", seconds_since(t) * 1e3,
              db->stream_bytes(), db->re2_rules().size());
  stream("text body (MiB given)", db, text_body(mib << 20));
  stream("random bytes (MiB given)", db, binary_body(mib << 20));
  requests(db, 100'000);
}
