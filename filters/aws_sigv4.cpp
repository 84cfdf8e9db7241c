#include "filters/aws_sigv4.hpp"

#include "filters/client_identity.hpp"

#include <algorithm>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

namespace sluice::filters::sigv4 {
namespace {

constexpr std::string_view algorithm = "AWS4-HMAC-SHA256";

bool iequal(std::string_view a, std::string_view b) {
  auto low = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [&](char x, char y) { return low(x) == low(y); });
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto &c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.' || c == '~';
}

std::string encode(std::string_view s, bool keep_slash) {
  static constexpr char digits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (unreserved(c) || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += digits[c >> 4];
      out += digits[c & 15];
    }
  }
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX escapes decoded; a '%' not followed by two hex digits stays as it is.
std::string decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// RFC 3986 section 5.2.4, and repeated slashes made one, as AWS's services read a path.
std::string normalize_path(std::string_view path) {
  if (path.empty()) return "/";
  std::vector<std::string_view> out;
  std::size_t at = 0;
  while (at <= path.size()) {
    auto slash = path.find('/', at);
    auto seg = path.substr(at, slash == std::string_view::npos ? std::string_view::npos : slash - at);
    if (!seg.empty() && seg != ".") {
      if (seg == "..") {
        if (!out.empty()) out.pop_back();
      } else {
        out.push_back(seg);
      }
    }
    if (slash == std::string_view::npos) break;
    at = slash + 1;
  }
  std::string r = path.front() == '/' ? "/" : "";
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (i) r += '/';
    r += out[i];
  }
  if (path.back() == '/' && !out.empty()) r += '/';
  return r.empty() ? "/" : r;
}

std::string canonical_query(std::string_view query) {
  if (query.empty()) return {};
  std::vector<std::pair<std::string, std::string>> pairs;
  std::size_t at = 0;
  while (at <= query.size()) {
    auto amp = query.find('&', at);
    auto item = query.substr(at, amp == std::string_view::npos ? std::string_view::npos : amp - at);
    if (!item.empty()) {
      auto eq = item.find('=');
      std::string_view k = item.substr(0, eq);
      std::string_view v = eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1);
      pairs.emplace_back(encode(decode(k), false), encode(decode(v), false));
    }
    if (amp == std::string_view::npos) break;
    at = amp + 1;
  }
  std::sort(pairs.begin(), pairs.end());
  std::string out;
  for (const auto &[k, v] : pairs) {
    if (!out.empty()) out += '&';
    out.append(k).append("=").append(v);
  }
  return out;
}

std::string hmac(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char *>(data.data()),
       data.size(), out, &len);
  return std::string(reinterpret_cast<char *>(out), len);
}

bool hex64(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) { return hex_value(c) >= 0 && !(c >= 'A' && c <= 'F'); });
}

bool token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
           return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
         });
}

} // namespace

std::optional<authorization> parse_authorization(std::string_view value) {
  value = trim(value);
  if (value.substr(0, algorithm.size()) != algorithm || value.size() == algorithm.size() ||
      value[algorithm.size()] != ' ') {
    return std::nullopt;
  }
  value.remove_prefix(algorithm.size() + 1);
  authorization a;
  bool credential = false, headers = false, sig = false;
  while (!value.empty()) {
    auto comma = value.find(',');
    auto part = trim(value.substr(0, comma));
    value = comma == std::string_view::npos ? std::string_view() : value.substr(comma + 1);
    auto eq = part.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    auto name = part.substr(0, eq), v = part.substr(eq + 1);
    if (name == "Credential" && !credential) {
      std::vector<std::string_view> scope;
      std::size_t at = 0;
      while (true) {
        auto slash = v.find('/', at);
        scope.push_back(v.substr(at, slash == std::string_view::npos ? std::string_view::npos : slash - at));
        if (slash == std::string_view::npos) break;
        at = slash + 1;
      }
      if (scope.size() != 5 || scope[4] != "aws4_request" || scope[1].size() != 8 ||
          !std::all_of(scope[1].begin(), scope[1].end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return std::nullopt;
      }
      for (int i : {0, 2, 3}) {
        if (!token(scope[i])) return std::nullopt;
      }
      a.access_key = scope[0];
      a.date = scope[1];
      a.region = scope[2];
      a.service = scope[3];
      credential = true;
    } else if (name == "SignedHeaders" && !headers) {
      std::size_t at = 0;
      while (at <= v.size()) {
        auto semi = v.find(';', at);
        auto h = v.substr(at, semi == std::string_view::npos ? std::string_view::npos : semi - at);
        if (!token(h) || lower(h) != h) return std::nullopt;
        a.signed_headers.emplace_back(h);
        if (semi == std::string_view::npos) break;
        at = semi + 1;
      }
      if (a.signed_headers.size() > 64) return std::nullopt;
      headers = true;
    } else if (name == "Signature" && !sig) {
      if (!hex64(v)) return std::nullopt;
      a.signature = v;
      sig = true;
    } else {
      return std::nullopt;
    }
  }
  if (!credential || !headers || !sig) return std::nullopt;
  return a;
}

bool is_s3(std::string_view service) { return service == "s3" || service.substr(0, 3) == "s3-" || service == "s3express"; }

std::string canonical_request(const request &r, const std::vector<std::string> &signed_headers,
                              std::string_view payload_hash, bool s3) {
  auto q = r.target.find('?');
  std::string_view path = r.target.substr(0, q);
  std::string_view query = q == std::string_view::npos ? std::string_view() : r.target.substr(q + 1);
  std::string out;
  out.reserve(256 + r.target.size());
  out.append(r.method).append("\n");
  if (s3) {
    out.append(path.empty() ? std::string_view("/") : path);
  } else {
    out.append(encode(normalize_path(path), true));
  }
  out.append("\n").append(canonical_query(query)).append("\n");
  for (const auto &h : signed_headers) {
    std::string value;
    bool any = false;
    for (const auto &[n, v] : *r.fields) {
      if (!iequal(n, h)) continue;
      if (any) value += ',';
      any = true;
      // Trimmed, and runs of whitespace inside made one space.
      bool space = false;
      for (char c : trim(v)) {
        if (c == ' ' || c == '\t') {
          space = true;
          continue;
        }
        if (space) value += ' ';
        space = false;
        value += c;
      }
    }
    if (!any && h == "host") value = r.authority;
    out.append(h).append(":").append(value).append("\n");
  }
  out.append("\n");
  for (std::size_t i = 0; i < signed_headers.size(); ++i) {
    if (i) out += ';';
    out += signed_headers[i];
  }
  out.append("\n").append(payload_hash);
  return out;
}

std::string string_to_sign(std::string_view amz_date, const authorization &scope, std::string_view canonical) {
  std::string out(algorithm);
  out.append("\n").append(amz_date).append("\n");
  out.append(scope.date).append("/").append(scope.region).append("/").append(scope.service).append("/aws4_request\n");
  out.append(sha256_hex(canonical));
  return out;
}

std::string signature(std::string_view secret, const authorization &scope, std::string_view to_sign) {
  std::string key = hmac("AWS4" + std::string(secret), scope.date);
  key = hmac(key, scope.region);
  key = hmac(key, scope.service);
  key = hmac(key, "aws4_request");
  return to_hex(hmac(key, to_sign));
}

std::string format_authorization(const authorization &a) {
  std::string out(algorithm);
  out.append(" Credential=").append(a.access_key).append("/").append(a.date).append("/").append(a.region);
  out.append("/").append(a.service).append("/aws4_request, SignedHeaders=");
  for (std::size_t i = 0; i < a.signed_headers.size(); ++i) {
    if (i) out += ';';
    out += a.signed_headers[i];
  }
  out.append(", Signature=").append(a.signature);
  return out;
}

std::string hmac_sha256_hex(std::string_view key, std::string_view data) { return to_hex(hmac(key, data)); }

std::string sha256_hex(std::string_view data) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char *>(data.data()), data.size(), d);
  return to_hex(std::string_view(reinterpret_cast<char *>(d), sizeof d));
}

} // namespace sluice::filters::sigv4
