#pragma once
// AWS Signature Version 4 (header form, AWS4-HMAC-SHA256): the parts sluice needs to check that a
// request was signed with a placeholder key pair and to sign it again with the real one. The
// canonical request follows AWS's rules as the AWS SDKs apply them: S3's path as sent, other
// services' path with dot segments and repeated slashes removed and encoded again; the query
// decoded, encoded with the unreserved set and sorted; the signed fields' values trimmed, inner
// whitespace runs made one space, repeated fields joined by ','. Pure; OpenSSL for SHA-256 and HMAC.
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::filters::sigv4 {

// What an Authorization value "AWS4-HMAC-SHA256 Credential=KEY/DATE/REGION/SERVICE/aws4_request,
// SignedHeaders=a;b, Signature=HEX" holds.
struct authorization {
  std::string access_key, date, region, service;
  std::vector<std::string> signed_headers; // lower case, in the order given
  std::string signature;                   // 64 hex digits
};
// nullopt: not that algorithm, or malformed.
std::optional<authorization> parse_authorization(std::string_view value);

// The request as the origin will see it: `fields` are the header fields (any case; `host` may be
// absent when `authority` is given for it, as in HTTP/2).
struct request {
  std::string_view method;
  std::string_view target; // origin-form: path and query, as sent
  const std::vector<std::pair<std::string_view, std::string_view>> *fields = nullptr;
  std::string_view authority; // the Host value when no host field is among `fields`
};

std::string canonical_request(const request &r, const std::vector<std::string> &signed_headers,
                              std::string_view payload_hash, bool s3);
std::string string_to_sign(std::string_view amz_date, const authorization &scope, std::string_view canonical);
// The signature (hex) of `to_sign` with the secret key for the scope's date, region and service.
std::string signature(std::string_view secret, const authorization &scope, std::string_view to_sign);
// "AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...".
std::string format_authorization(const authorization &a);

std::string sha256_hex(std::string_view data);
// HMAC-SHA256 of `data` under `key`, in hex (also the approvals webhook's signature).
std::string hmac_sha256_hex(std::string_view key, std::string_view data);
// Whether `service` (the scope's) signs S3's way: the path as sent, not normalized.
bool is_s3(std::string_view service);

} // namespace sluice::filters::sigv4
