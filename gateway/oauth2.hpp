#pragma once
// OAuth2 clients as credentials (docs/policy.md, "Credentials"): the gateway asks the token endpoint
// for an access token itself (RFC 6749 section 6, the refresh_token grant, or section 4.4,
// client_credentials), over TLS verified as for any origin, and the token's expires_in says when
// to ask again. Nothing of it is ever inside the sandbox.
#include "filters/policy.hpp"

#include <chrono>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::gateway {

// POSTs `body` to an https:// URL as sluice reaches any origin: the trust of [tls], the pins, DNS
// servers and address rules of [upstream], within 10 s in all. `what` names the other end in
// messages ("token endpoint", "approvals webhook"). Throws std::runtime_error saying what failed.
struct post_result {
  unsigned status = 0;
  std::string body;
};
post_result https_post(const std::string &url, std::string body, const std::string &content_type,
                       std::vector<std::pair<std::string, std::string>> headers, const filters::config &cfg,
                       const std::string &what);

// A value a credential takes from a source of its own (an OAuth2 client secret, an AWS key's part),
// read as load_secret reads one; errors name it "CREDENTIAL.WHAT".
std::string read_source(const filters::credential_config &c, const std::string &what, const std::string &source);

// Fills c.secret with an access token from c.oauth2 (and c.oauth2->refresh_token when the server
// rotates it), and c.refresh_at. `cfg` gives the trust ([tls]), pins, DNS servers and the
// addresses that may be dialled ([upstream]). Throws filters::config_error naming the credential
// and what went wrong (never a secret). Bounded: 10 s in all.
void load_oauth2(filters::credential_config &c, const filters::config &cfg);

// Fills c.aws (the real access key id and session token), c.secret (the secret access key) and
// c.refresh_at (80% of the way to a credential_process's Expiration, or c.ttl on). Throws
// filters::config_error naming the credential and what is wrong (never a secret).
void load_aws(filters::credential_config &c);

// When a JSON Web Token says it expires (its payload's "exp"); nullopt for anything else.
std::optional<std::chrono::system_clock::time_point> jwt_expiry(std::string_view token);

// The credential's value from wherever it comes: load_oauth2, load_aws or filters::load_secret
// (a JWT read from a file or a command is read again 80% of the way to its exp).
void load_credential(filters::credential_config &c, const filters::config &cfg);

} // namespace sluice::gateway
