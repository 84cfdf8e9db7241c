#pragma once
// The patterns one secret value is matched by (own secrets and canaries): the value raw,
// percent-encoded, inside base64 at each of its three alignments, and in hex. Each is a pattern in
// the syntax Hyperscan and RE2 share, every byte of the value written as \xHH (so no value can
// change the pattern's meaning).
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::scan {

// Values shorter than this are not matched: an 8-byte value's base64 middle is already only 10
// characters, and shorter ones (PINs, "true", a port) would match ordinary traffic.
inline constexpr std::size_t min_secret_length = 8;

// Whether a value is worth a matcher: long enough, and not a shape that is no secret (a path, a
// number, a boolean).
bool matchable_secret(std::string_view value);

struct literal_form {
  std::string pattern;
  std::string_view encoding; // "raw", "percent", "base64", "hex"
};

// Every form of `value` (distinct patterns only). For base64, the value is encoded after 0, 1 and
// 2 bytes of prefix and only the characters that depend on the value alone are kept, so it is found
// wherever it sits inside a longer base64 string; '+' and '/' also match base64url's '-' and '_' and
// their percent-encodings.
std::vector<literal_form> literal_forms(std::string_view value);

// The raw form only (placeholders: what the command is given instead of a credential).
std::string literal_pattern(std::string_view value);

// Encoders the forms are built with (and the tests check them by).
std::string base64_encode(std::string_view bytes);
std::string percent_encode(std::string_view bytes); // RFC 3986 unreserved kept, the rest %XX
std::string hex_encode(std::string_view bytes, bool upper);

} // namespace sluice::scan
