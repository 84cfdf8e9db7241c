#include "scan/canary.hpp"

#include <boost/crc.hpp>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <sys/random.h>

namespace sluice::scan {
namespace {

constexpr std::string_view base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
constexpr std::string_view base32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
constexpr std::string_view base64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// `n` characters of `alphabet`, uniformly (bytes past the last whole multiple of its size are
// drawn again). From getrandom(2), not RAND_bytes: exec plans its canaries on the way to the
// command's start, and OpenSSL's first use there (its configuration and providers loaded: about
// 1.3 ms) would be paid before the sandbox exists instead of on the gateway's thread beside it.
std::string random_text(std::string_view alphabet, std::size_t n) {
  std::string out;
  const unsigned limit = 256 - 256 % alphabet.size();
  while (out.size() < n) {
    unsigned char buf[64];
    if (::getrandom(buf, sizeof buf, 0) != static_cast<ssize_t>(sizeof buf)) {
      throw std::runtime_error(std::string("the random generator failed (canaries): getrandom: ") +
                               std::strerror(errno));
    }
    for (unsigned char b : buf) {
      if (b < limit && out.size() < n) out += alphabet[b % alphabet.size()];
    }
  }
  return out;
}

} // namespace

std::string github_checksum(std::string_view random_part) {
  boost::crc_32_type crc;
  crc.process_bytes(random_part.data(), random_part.size());
  auto v = crc.checksum();
  std::string out(6, '0');
  for (int i = 5; i >= 0 && v; --i) {
    out[static_cast<std::size_t>(i)] = base62[v % 62];
    v /= 62;
  }
  return out;
}

canary_set make_canaries() {
  canary_set c;
  auto key_id = "AKIA" + random_text(base32, 16);
  auto secret_key = random_text(base64, 40);
  auto random = random_text(base62, 30);
  auto github = "ghp_" + random + github_checksum(random);
  auto password = random_text(base62, 32);
  c.values = {{"aws_access_key_id", key_id, {}},
              {"aws_secret_access_key", secret_key, {}},
              {"github_token", github, {}},
              {"netrc_password", password, {}}};
  // Where a command hunting for credentials reads them, but where no tool picks them up on its
  // own: a named AWS profile (the SDKs read [default] unasked), a .netrc machine no client contacts
  // (git and Python's requests send a matching machine's password unasked), a .env in the home
  // (loaders read the project's).
  c.files = {
      {".aws/credentials", "[deploy]\naws_access_key_id = " + key_id + "\naws_secret_access_key = " + secret_key +
                               "\n"},
      {".env", "GITHUB_TOKEN=" + github + "\n"},
      {".netrc", "machine git.build.internal\n  login deploy\n  password " + password + "\n"},
  };
  return c;
}

} // namespace sluice::scan
