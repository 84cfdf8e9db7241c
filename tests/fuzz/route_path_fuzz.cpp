// Fuzzes the route path reader and matcher. Invariants: a path route_path reads is read again as
// itself (one reading only), holds no "//", ';', dot segment or escaped '/', and an exact pattern
// made from it matches it, as does every prefix pattern of it; a deny route's folded comparison
// matches whatever the exact one does.
#include "filters/route_matcher.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  auto split = text.find('\n');
  std::string target = text.substr(0, split);
  std::string pattern = split == std::string::npos ? "/" : text.substr(split + 1);
  auto path = sluice::filters::route_path(target);
  if (path) {
    auto again = sluice::filters::route_path(*path);
    if (!again || *again != *path) __builtin_trap();
    if (path->find("//") != std::string::npos || path->find(';') != std::string::npos ||
        path->find("/./") != std::string::npos || path->find("/../") != std::string::npos ||
        path->find("%2F") != std::string::npos || path->front() != '/') {
      __builtin_trap();
    }
    if (!sluice::filters::route_path_matches(*path, *path, false)) __builtin_trap();
    for (std::size_t n = 0; n <= path->size(); n += 1 + n / 4) {
      if (!sluice::filters::route_path_matches(path->substr(0, n) + "*", *path, false)) __builtin_trap();
    }
    if (sluice::filters::route_path_matches(pattern, *path, false) &&
        !sluice::filters::route_path_matches(pattern, *path, true)) {
      __builtin_trap();
    }
  }
  sluice::filters::route_rule r;
  r.host = "h.test";
  r.paths = {pattern};
  try {
    (void)sluice::filters::describe_route(r);
  } catch (const sluice::filters::pattern_error &) {
  }
  return 0;
}
