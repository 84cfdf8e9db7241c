#pragma once
// Test vectors for the scanner's tests: strings of a given alphabet and length, deterministic.
#include "scan/database.hpp"
#include "scan/rule.hpp"
#include "scan/scanner.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace scan_test {

inline std::string of(std::string_view alphabet, std::size_t n, std::size_t seed = 7) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += alphabet[(i * 31 + seed * 17 + i * i) % alphabet.size()];
  return s;
}
inline std::string alnum(std::size_t n, std::size_t seed = 7) {
  return of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", n, seed);
}
inline std::string urlsafe(std::size_t n, std::size_t seed = 7) {
  return of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-", n, seed);
}
inline std::string hex(std::size_t n, std::size_t seed = 7) { return of("0123456789abcdef", n, seed); }
inline std::string letters(std::size_t n, std::size_t seed = 7) {
  return of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", n, seed);
}

inline std::string github_token() { return "ghp_" + alnum(36); }

inline sluice::scan::database_ptr builtin_database() {
  sluice::scan::database_spec spec;
  spec.rules = sluice::scan::builtin_rules();
  return sluice::scan::database::compile(std::move(spec));
}

// The rule ids of a scanner's findings, sorted.
inline std::vector<std::string> rules_of(const sluice::scan::scanner &s) {
  std::vector<std::string> out;
  for (const auto &f : s.findings()) out.push_back(f.rule);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

} // namespace scan_test
