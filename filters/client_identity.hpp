#pragma once
#include "filters/policy.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace sluice::filters {

// Who a request on the proxy listener comes from ([clients] of serve).
struct client_match {
  const client_config *client = nullptr; // null: not identified
  // Why not: proxy_auth_required (no credentials, or a scheme sluice does not take) or
  // proxy_auth_invalid (credentials that match no client).
  std::string_view reason;
};

// The SHA-256 of `text`, 32 raw bytes.
std::string sha256(std::string_view text);
// Lower-case hex of raw bytes, and back (empty on anything but 2N hex digits).
std::string to_hex(std::string_view raw);
std::string from_hex(std::string_view hex);

// A client by name and token (Basic NAME:TOKEN, SOCKS5 username/password). The token's hash is
// compared in constant time, and a name not in [clients] costs the same comparison.
client_match identify(const config &cfg, std::string_view name, std::string_view token);
// A client by token alone (Bearer TOKEN): compared with every client's hash, none skipped.
client_match identify_token(const config &cfg, std::string_view token);
// A Proxy-Authorization value: "Basic BASE64(NAME:TOKEN)" or "Bearer TOKEN".
client_match identify_header(const config &cfg, std::string_view proxy_authorization);

// The identities a verified client certificate carries: its subjectAltName URIs and DNS names (the
// subject's common name is never used: anyone may write anything there).
struct certificate_names {
  std::vector<std::string> uris;
  std::vector<std::string> dns; // lower case
};
// A client by its verified certificate: the one [clients] entry whose `certificate` is among the
// names. None: proxy_auth_invalid; a certificate naming two clients is refused the same way
// (ambiguous: it could be either).
client_match identify_certificate(const config &cfg, const certificate_names &names);

// A new random token (32 bytes, base64url without padding) for `sluice policy token`.
std::string new_token();

} // namespace sluice::filters
