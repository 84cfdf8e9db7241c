#pragma once
#include "filters/host_matcher.hpp"

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::filters {

// An OAuth2 client ([credentials.NAME.oauth2]): the gateway obtains the access token from the
// token endpoint (RFC 6749: the refresh_token grant when a refresh token is given, else
// client_credentials) and obtains a new one before it expires (credentials/load.hpp).
struct oauth2_config {
  std::string token_url;              // https://...
  std::string client_id;
  std::string client_secret_source;   // a source, as `source` ("env:", "file:", "command:")
  std::string refresh_token_source;   // a source; empty: the client_credentials grant
  std::vector<std::string> scopes;
  std::string refresh_token;          // the one in force (a server may rotate it)
};

// An AWS key pair ([credentials.NAME.aws]): the command gets a placeholder pair shaped like a real
// one (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY); a request to the credential's hosts signed with
// it (SigV4, filters/aws_sigv4) is checked and signed again with the real pair, the session token
// added. A request signed with any other key is refused, never signed again.
struct aws_config {
  // Where the real pair comes from: a credential_process command (AWS's JSON: AccessKeyId,
  // SecretAccessKey, SessionToken, Expiration), or one source each ("env:", "file:", "command:").
  std::string process;                  // "command:PROGRAM ARGS..."; empty: the three below
  std::string access_key_id_source, secret_access_key_source, session_token_source;
  std::string access_key_id, session_token; // loaded (the secret key is credential_config::secret)
  std::string placeholder_secret;           // the command's AWS_SECRET_ACCESS_KEY
};

// One credential of the policy ([credentials.NAME]): a secret sluice reads itself and adds to
// requests for the hosts it belongs to. The secret never enters the sandbox: the command sees only
// the placeholder `sluice-credential-NAME`.
struct credential_config {
  std::string name;
  std::string source;                     // "env:VAR", "file:/path" or "command:ARGV..."
  // How long a value read from a file or a command is used before it is read again (0: for as
  // long as the gateway runs). While serving, a failed refresh keeps the last value.
  std::chrono::milliseconds ttl{0};
  std::vector<std::string> hosts;         // allowlist syntax
  std::string header = "Authorization";
  std::string format = "Bearer {}";       // "{}" is the secret; "basic:USER" for HTTP Basic
  std::string env;                        // variable set to the placeholder inside; default VAR of env:VAR
  // `placeholder`: the shape of what the command sees instead of the secret, for clients that check
  // a token's form before they send it: a kind ("github", "aws-access-key-id"... see
  // placeholder_kinds) or a prefix ("ghp_") padded with random letters and digits to
  // placeholder_length. Empty: "sluice-credential-NAME".
  std::string placeholder_shape;
  unsigned placeholder_length = 40;
  std::string placeholder;                // the placeholder in force (shaped_placeholder); empty: the name's
  std::optional<oauth2_config> oauth2;    // an OAuth2 client instead of `source`
  std::optional<aws_config> aws;          // an AWS key pair instead of `source`
  // When the value is to be read (or obtained) again: loaded + ttl, or 80% into an access token's
  // life; the epoch: never.
  std::chrono::steady_clock::time_point refresh_at{};
  std::string secret;                     // filled by credentials/load.hpp; never logged or printed
  // A file: source without a ttl is read again when the file changes: its device, inode, size and
  // modification time when it was read ("missing" once it could not be).
  std::string file_stamp;
};

// The known kinds of `placeholder`: name, prefix, length and the alphabet of the rest.
struct placeholder_kind {
  std::string_view name, prefix;
  unsigned length;
  std::string_view alphabet;
};
const std::vector<placeholder_kind> &placeholder_kinds();

// The placeholder for `c`: "sluice-credential-NAME" without a shape; with one, random letters and
// digits after the prefix (`random`: exec, a new one per command) or derived from the name (serve:
// the same in every replica and after a restart, so that its clients can be given it).
std::string shaped_placeholder(const credential_config &c, bool random);

// Sets c.placeholder (shaped_placeholder) and, for an AWS pair, the placeholder secret key.
void make_placeholders(credential_config &c, bool random);

// The text a command sees instead of the secret.
std::string credential_placeholder(std::string_view name);

// The argv of a "command:" source (empty when the source is not one, or names nothing); the
// command itself is run by credentials/ (load.hpp).
std::vector<std::string> command_argv(std::string_view source);

// What a request needs done to its header fields.
struct credential_result {
  std::string_view reason;                                  // empty: go on; else refuse with it
  std::string credential;                                   // the credential involved
  std::vector<std::pair<std::string, std::string>> set;     // fields to set (name, value)
  // An AWS request that names no payload hash (x-amz-content-sha256): its signature covers the
  // body's SHA-256, so the whole body is read (bounded) and sign_aws called with its hash.
  bool aws_needs_body = false;
};

// The most body an AWS request without x-amz-content-sha256 may have (it is read whole to be
// hashed before it is signed again).
inline constexpr std::size_t max_aws_body_bytes = 16 * 1024 * 1024;

// The credentials in force for a gateway: pure, built once per policy.
class credential_injector {
public:
  explicit credential_injector(std::vector<credential_config> credentials);

  bool empty() const { return entries_.empty(); }
  // Appends the header names the credentials are sent in (which a Connection header may not name).
  void header_names(std::vector<std::string_view> &out) const {
    for (const auto &e : entries_) out.emplace_back(e.cfg.header);
  }

  // Judges one allowed request: a placeholder bound for a host its credential does not belong to
  // (in a header, Basic credentials included, or in the target) is refused with
  // `credential_host_mismatch`; for a host it belongs to, each placeholder in a header is replaced
  // by the secret, and a credential's header is added when the request has none.
  // AWS credentials: a request signed with the placeholder pair (checked) is signed again with
  // the real one; one signed with another key, or in a way sluice cannot sign again, is refused
  // (aws_signature_refused, aws_signature_invalid, aws_signature_unsupported); one with no AWS
  // signature passes as it is.
  credential_result apply(const std::vector<std::pair<std::string_view, std::string_view>> &fields,
                          std::string_view target, std::string_view host, std::string_view scheme,
                          unsigned port, std::string_view method = "GET") const;
  // The AWS part of apply for credential `name`, with the payload hash given: the body's SHA-256
  // (hex) when apply asked for it, else the request's x-amz-content-sha256. `authority` is the
  // Host the origin sees where `fields` hold none (HTTP/2).
  // Each credential's configuration, its loaded value included (the scanner's own secrets).
  template <class F> void each(F &&f) const {
    for (const auto &e : entries_) f(e.cfg);
  }
  // Whether credential `name` belongs to this host (its `hosts`): its value may be sent there.
  bool belongs_to(std::string_view name, std::string_view host, std::string_view scheme, unsigned port) const;
  credential_result sign_aws(std::string_view name, const std::vector<std::pair<std::string_view, std::string_view>> &fields,
                             std::string_view method, std::string_view target, std::string_view authority,
                             std::string_view payload_hash) const;

private:
  struct entry {
    credential_config cfg;
    host_matcher hosts;
    std::string placeholder;
    std::string value; // the header value when sluice adds the header itself
  };
  std::vector<entry> entries_;
  credential_result apply_aws(const entry &e, const std::vector<std::pair<std::string_view, std::string_view>> &fields,
                              std::string_view target, std::string_view method, std::string_view authority) const;
};

// Base64 (RFC 4648) for HTTP Basic credentials.
std::string base64_encode(std::string_view in);
std::optional<std::string> base64_decode(std::string_view in);

} // namespace sluice::filters
