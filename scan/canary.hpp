#pragma once
// Canaries: per-run, well-formed fake secrets that sluice exec plants where a command looking for
// credentials looks (docs/policy.md, "What leaves"). Nobody sends one by accident, so a canary in
// any request, to any host, is refused (403 canary_detected). The shapes:
//  - aws_access_key_id: AKIA and 16 characters of base32's alphabet (A-Z, 2-7), as AWS's are;
//  - aws_secret_access_key: 40 characters of base64's alphabet;
//  - github_token: ghp_, 30 base62 characters and a 6-character CRC32 checksum of them in base62
//    (the scheme GitHub describes for its tokens; not checked against GitHub's own);
//  - netrc_password: 32 base62 characters.
// The random part of each comes from OpenSSL's RAND_bytes.
#include "scan/database.hpp"

#include <string>
#include <vector>

namespace sluice::scan {

// A file to plant, its path relative to the command's (private) home, and its contents.
struct planted_file {
  std::string path; // ".aws/credentials", ".env", ".netrc"
  std::string contents;
};

struct canary_set {
  std::vector<secret> values;      // name and value of each canary (no allowed_hosts)
  std::vector<planted_file> files; // where they are planted
};

// A new set, unique to this call. Throws std::runtime_error when the random generator fails.
canary_set make_canaries();

// The 6-character base62 checksum of a GitHub token's random part.
std::string github_checksum(std::string_view random_part);

} // namespace sluice::scan
