// Google Benchmark: the cost of one policy decision (host normalization, deny and allow lookups,
// method check) with 100,000 allowlist rules, for an exact hit, a wildcard hit and a miss.
#include "filters/policy.hpp"

#include <benchmark/benchmark.h>

namespace {

const sluice::filters::policy &big_policy() {
  static const sluice::filters::policy p([] {
    sluice::filters::config c;
    c.mode = sluice::filters::profile::network_read;
    for (int i = 0; i < 99'990; ++i) c.allow.push_back("host" + std::to_string(i) + ".example.com");
    for (int i = 0; i < 10; ++i) c.allow.push_back("*.zone" + std::to_string(i) + ".example.net");
    for (int i = 0; i < 1000; ++i) c.deny.push_back("bad" + std::to_string(i) + ".example.com");
    return c;
  }());
  return p;
}

void decide(benchmark::State &state, const char *host) {
  const auto &p = big_policy();
  for (auto _ : state) {
    auto d = p.decide("GET", "https", host, 443);
    benchmark::DoNotOptimize(d);
  }
}

} // namespace

BENCHMARK_CAPTURE(decide, exact_hit, "host77777.example.com");
BENCHMARK_CAPTURE(decide, wildcard_hit, "a.b.zone7.example.net");
BENCHMARK_CAPTURE(decide, miss, "not-listed.example.org");
BENCHMARK_MAIN();
