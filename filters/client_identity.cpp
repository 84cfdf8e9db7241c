#include "filters/client_identity.hpp"

#include <algorithm>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <memory>
#include <stdexcept>

namespace sluice::filters {
namespace {

bool same(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool scheme_is(std::string_view value, std::string_view scheme, std::string_view &rest) {
  if (value.size() <= scheme.size() || value[scheme.size()] != ' ') return false;
  for (std::size_t i = 0; i < scheme.size(); ++i) {
    char c = value[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != scheme[i]) return false;
  }
  rest = trim(value.substr(scheme.size() + 1));
  return true;
}

// Standard base64 with padding (RFC 7617 uses it); nothing else is accepted.
bool decode_base64(std::string_view in, std::string &out) {
  if (in.empty() || in.size() % 4 != 0 || in.size() > 4096) return false;
  for (char c : in) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
              c == '/' || c == '=';
    if (!ok) return false;
  }
  out.assign(in.size() / 4 * 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char *>(out.data()),
                          reinterpret_cast<const unsigned char *>(in.data()), static_cast<int>(in.size()));
  if (n < 0) return false;
  std::size_t pad = in.ends_with("==") ? 2 : in.ends_with("=") ? 1 : 0;
  out.resize(static_cast<std::size_t>(n) - pad);
  return true;
}

} // namespace

std::string sha256(std::string_view text) {
  // Every request of an identified client hashes its token: the digest is fetched once (EVP_sha256()
  // would look it up in the provider store on each call) and each thread reuses one context.
  static EVP_MD *const md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  struct ctx_free {
    void operator()(EVP_MD_CTX *c) const { EVP_MD_CTX_free(c); }
  };
  thread_local std::unique_ptr<EVP_MD_CTX, ctx_free> ctx(EVP_MD_CTX_new());
  std::string out(32, '\0');
  unsigned int len = 0;
  if (!md || !ctx || EVP_DigestInit_ex2(ctx.get(), md, nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), text.data(), text.size()) != 1 ||
      EVP_DigestFinal_ex(ctx.get(), reinterpret_cast<unsigned char *>(out.data()), &len) != 1 || len != 32) {
    throw std::runtime_error("SHA-256 failed");
  }
  return out;
}

std::string to_hex(std::string_view raw) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(raw.size() * 2);
  for (unsigned char c : raw) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::string from_hex(std::string_view hex) {
  auto value = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.size() % 2 != 0) return {};
  std::string out;
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    int hi = value(hex[i]), lo = value(hex[i + 1]);
    if (hi < 0 || lo < 0) return {};
    out += static_cast<char>(hi * 16 + lo);
  }
  return out;
}

client_match identify(const config &cfg, std::string_view name, std::string_view token) {
  std::string hash = sha256(token);
  auto it = cfg.clients.find(std::string(name));
  // A name not in [clients] is compared with a hash no token has, so that the time taken does not
  // tell names that exist from names that do not.
  static const std::string nobody(32, '\0');
  bool known = it != cfg.clients.end();
  bool ok = same(hash, known ? it->second.token_sha256 : nobody) && known && !token.empty();
  if (!ok) return {nullptr, "proxy_auth_invalid"};
  return {&it->second, {}};
}

client_match identify_token(const config &cfg, std::string_view token) {
  std::string hash = sha256(token);
  const client_config *found = nullptr;
  for (const auto &[name, c] : cfg.clients) {
    if (same(hash, c.token_sha256) && !found) found = &c; // every hash compared, none skipped
  }
  if (!found || token.empty()) return {nullptr, "proxy_auth_invalid"};
  return {found, {}};
}

client_match identify_header(const config &cfg, std::string_view value) {
  value = trim(value);
  if (value.empty()) return {nullptr, "proxy_auth_required"};
  std::string_view rest;
  if (scheme_is(value, "basic", rest)) {
    std::string pair;
    if (!decode_base64(rest, pair)) return {nullptr, "proxy_auth_invalid"};
    auto colon = pair.find(':');
    if (colon == std::string::npos) return {nullptr, "proxy_auth_invalid"};
    return identify(cfg, std::string_view(pair).substr(0, colon), std::string_view(pair).substr(colon + 1));
  }
  if (scheme_is(value, "bearer", rest)) return identify_token(cfg, rest);
  return {nullptr, "proxy_auth_required"};
}

client_match identify_certificate(const config &cfg, const certificate_names &names) {
  const client_config *found = nullptr;
  for (const auto &[name, c] : cfg.clients) {
    if (c.certificate.empty()) continue;
    const auto &pool = c.certificate_is_uri() ? names.uris : names.dns;
    if (std::find(pool.begin(), pool.end(), c.certificate) == pool.end()) continue;
    if (found) return {nullptr, "proxy_auth_invalid"}; // names two clients
    found = &c;
  }
  if (!found) return {nullptr, "proxy_auth_invalid"};
  return {found, {}};
}

std::string new_token() {
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof raw) != 1) throw std::runtime_error("no random bytes for a token");
  std::string b64(48, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char *>(b64.data()), raw, sizeof raw);
  b64.resize(static_cast<std::size_t>(n));
  for (auto &c : b64) c = c == '+' ? '-' : c == '/' ? '_' : c;
  while (!b64.empty() && b64.back() == '=') b64.pop_back();
  return b64;
}

} // namespace sluice::filters
