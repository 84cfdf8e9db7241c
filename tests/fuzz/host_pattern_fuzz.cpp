// Fuzzes pattern parsing, host normalization and matching. Invariants: a host accepted by
// parse_host normalizes to itself, and an exact pattern made from it matches it.
#include "filters/host_matcher.hpp"
#include "filters/host_name.hpp"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  try {
    sluice::filters::host_matcher m({text});
    (void)m.match("api.github.com", "https", 443);
    (void)m.match(text, "http", 80);
  } catch (const sluice::filters::pattern_error &) {
  }
  auto h = sluice::filters::parse_host(text);
  if (h.host) {
    auto again = sluice::filters::parse_host(h.host->ip && h.host->ip->is_v6()
                                                 ? "[" + h.host->name + "]"
                                                 : h.host->name);
    if (!again.host || again.host->name != h.host->name) __builtin_trap();
    if (!h.host->ip) {
      sluice::filters::host_matcher exact({h.host->name});
      if (!exact.match(h.host->name, "https", 443)) __builtin_trap();
    }
  }
  std::string_view host;
  unsigned port;
  (void)sluice::filters::split_authority(text, host, port);
  return 0;
}
