#include "scan/literals.hpp"

#include <openssl/crypto.h>
#include <algorithm>
#include <cctype>

namespace sluice::scan {
namespace {

constexpr char hex_lower[] = "0123456789abcdef";
constexpr char hex_upper[] = "0123456789ABCDEF";

// Copies of a secret made on the way are wiped before they are freed.
void wipe(std::string &s) {
  if (!s.empty()) OPENSSL_cleanse(s.data(), s.size());
}

void escaped(std::string &out, unsigned char c) {
  out += "\\x";
  out += hex_lower[c >> 4];
  out += hex_lower[c & 15];
}

bool unreserved(unsigned char c) {
  return std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~';
}

// One hex digit as a percent-encoding may write it: a digit, or a letter in either case.
void hex_digit_class(std::string &out, unsigned v) {
  if (v < 10) {
    out += hex_upper[v];
  } else {
    out += '[';
    out += hex_upper[v];
    out += hex_lower[v];
    out += ']';
  }
}

std::string percent_pattern(std::string_view value) {
  std::string p;
  for (unsigned char c : value) {
    if (unreserved(c)) {
      escaped(p, c);
      continue;
    }
    // A reserved byte may be left as it is or encoded (encodeURI and encodeURIComponent differ).
    p += "(?:";
    escaped(p, c);
    p += "|%";
    hex_digit_class(p, c >> 4);
    hex_digit_class(p, c & 15);
    p += ')';
  }
  return p;
}

// The characters of base64(prefix + value) that depend on the value alone: after `prefix` bytes
// (0, 1 or 2), the first 0, 2 or 3 characters mix in the prefix, and past floor(4 * total / 3)
// characters they mix in what follows the value.
std::string base64_pattern(std::string_view value, std::size_t prefix) {
  std::string bytes(prefix, '\0');
  bytes += value;
  auto b64 = base64_encode(bytes);
  static constexpr std::size_t skip[] = {0, 2, 3};
  auto end = 4 * bytes.size() / 3;
  std::string p;
  for (std::size_t i = skip[prefix]; i < end; ++i) {
    char c = b64[i];
    if (c == '+') {
      p += "(?:[+\\-]|%2[Bb])";
    } else if (c == '/') {
      p += "(?:[/_]|%2[Ff])";
    } else {
      escaped(p, static_cast<unsigned char>(c));
    }
  }
  wipe(bytes);
  wipe(b64);
  return p;
}

} // namespace

bool matchable_secret(std::string_view v) {
  if (v.size() < min_secret_length) return false;
  if (v.front() == '/' || v.starts_with("./") || v.starts_with("~/")) return false; // a path
  if (std::all_of(v.begin(), v.end(), [](unsigned char c) { return std::isdigit(c); })) return false;
  std::string lower(v);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower != "true" && lower != "false";
}

std::string base64_encode(std::string_view bytes) {
  static constexpr char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    unsigned v = static_cast<unsigned char>(bytes[i]) << 16 | static_cast<unsigned char>(bytes[i + 1]) << 8 |
                 static_cast<unsigned char>(bytes[i + 2]);
    out += alphabet[v >> 18];
    out += alphabet[(v >> 12) & 63];
    out += alphabet[(v >> 6) & 63];
    out += alphabet[v & 63];
  }
  if (auto rest = bytes.size() - i) {
    unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    if (rest == 2) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += alphabet[v >> 18];
    out += alphabet[(v >> 12) & 63];
    out += rest == 2 ? alphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string percent_encode(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    if (unreserved(c)) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex_upper[c >> 4];
      out += hex_upper[c & 15];
    }
  }
  return out;
}

std::string hex_encode(std::string_view bytes, bool upper) {
  const char *digits = upper ? hex_upper : hex_lower;
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::string literal_pattern(std::string_view value) {
  std::string p;
  for (unsigned char c : value) escaped(p, c);
  return p;
}

std::vector<literal_form> literal_forms(std::string_view value) {
  std::vector<literal_form> forms;
  auto add = [&](std::string pattern, std::string_view encoding) {
    bool seen = std::any_of(forms.begin(), forms.end(), [&](const literal_form &f) { return f.pattern == pattern; });
    if (!pattern.empty() && !seen) {
      forms.push_back({std::move(pattern), encoding});
    } else {
      wipe(pattern);
    }
  };
  add(literal_pattern(value), "raw");
  if (!std::all_of(value.begin(), value.end(), [](unsigned char c) { return unreserved(c); })) {
    add(percent_pattern(value), "percent");
  }
  for (std::size_t prefix = 0; prefix < 3; ++prefix) add(base64_pattern(value, prefix), "base64");
  for (bool upper : {false, true}) {
    auto hex = hex_encode(value, upper);
    add(literal_pattern(hex), "hex");
    wipe(hex);
  }
  return forms;
}

} // namespace sluice::scan
