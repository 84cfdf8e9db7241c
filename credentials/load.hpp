#pragma once
// The I/O of credentials: a credential_config (filters/credentials.hpp), as the policy loader
// recorded it, gets its value here: read from a source (sources.cpp: "env:", "file:", "command:"),
// obtained from an OAuth2 token endpoint (oauth2.cpp) or an AWS credential_process or sources
// (aws.cpp). filters/ only matches requests to the values; whoever loads a config loads its
// credentials' values with this (gateway start-up and its refresh thread, serve's reload, exec).
//
// OAuth2 clients as credentials (docs/policy.md, "Credentials"): the gateway asks the token endpoint
// for an access token itself (RFC 6749 section 6, the refresh_token grant, or section 4.4,
// client_credentials), over TLS verified as for any origin (gateway/https_post.hpp), and the
// token's expires_in says when to ask again. Nothing of it is ever inside the sandbox.
#include "filters/policy.hpp"

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::credentials {

// Reads the secret of `c` from its source. Throws config_error naming the credential and the
// source (never the value) when it is missing or empty. A "command:" source runs its argv (split
// at spaces, found on PATH, no shell) as the caller, stdin /dev/null, for at most
// command_timeout; the secret is its standard output, one line.
void load_secret(filters::credential_config &c);
inline constexpr std::chrono::seconds command_timeout{10};

// A key that is not a header value (a PEM key: [log] signing_key) from a source, read as
// load_secret reads one but with its line breaks kept; errors name it `name`.
std::string read_key_source(const std::string &name, const std::string &source);

// What a "command:" source printed (trailing line breaks dropped), run as load_secret runs it.
// Throws config_error naming the credential when it fails, hangs, or prints nothing.
std::string command_output(const filters::credential_config &c);

// The stamp (credential_config::file_stamp) of the file a "file:" source names now.
std::string file_stamp(std::string_view source);

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

// The credential's value from wherever it comes: load_oauth2, load_aws or load_secret
// (a JWT read from a file or a command is read again 80% of the way to its exp).
void load_credential(filters::credential_config &c, const filters::config &cfg);

} // namespace sluice::credentials
