#pragma once
#include "certs/openssl_handles.hpp"

#include <chrono>
#include <string>
#include <vector>

namespace sluice::certs {

// What the CA's name constraints permit: DNS names (exact hosts and ".suffix" for subdomain
// patterns) and IP addresses. An empty constraint set with `constrain` true permits nothing.
struct name_constraint_set {
  bool constrain = false;
  std::vector<std::string> dns;     // "api.github.com" or ".github.com"
  std::vector<std::string> ip;      // "198.18.0.2" or "::1"
};

// A certificate authority that signs leaves for the hosts the gateway terminates. It owns the CA key
// and one leaf key (ECDSA P-256) shared by every leaf it mints, so minting costs one signature.
class certificate_authority {
public:
  // A new CA in memory: ECDSA P-256, valid for `validity`, name-constrained when asked.
  static certificate_authority generate(const std::string &common_name,
                                        std::chrono::seconds validity,
                                        const name_constraint_set &constraints);
  // A CA loaded from PEM files (`sluice ca init`). Throws crypto_error naming the file.
  static certificate_authority load(const std::string &cert_file, const std::string &key_file);

  // Mints a leaf for a DNS name or IP literal (canonical text), valid for at most `validity` and
  // never beyond the CA.
  x509_ptr mint(const std::string &host, bool is_ip, std::chrono::seconds validity) const;

  X509 *cert() const { return cert_.get(); }
  EVP_PKEY *key() const { return key_.get(); }
  EVP_PKEY *leaf_key() const { return leaf_key_.get(); }
  std::string cert_pem() const { return to_pem(cert_.get()); }
  std::string key_pem() const { return private_key_to_pem(key_.get()); }

private:
  certificate_authority() = default;
  x509_ptr cert_;
  evp_pkey_ptr key_;
  evp_pkey_ptr leaf_key_;
  evp_pkey_ptr leaf_public_; // leaf_key_'s public half, as every leaf carries it (see mint)
};

evp_pkey_ptr generate_p256_key();

} // namespace sluice::certs
