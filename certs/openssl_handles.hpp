#pragma once
#include <memory>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdexcept>
#include <string>

namespace sluice::certs {

// RAII owners for the OpenSSL objects this folder creates.
struct evp_pkey_deleter { void operator()(EVP_PKEY *p) const { EVP_PKEY_free(p); } };
struct x509_deleter { void operator()(X509 *p) const { X509_free(p); } };
struct bio_deleter { void operator()(BIO *p) const { BIO_free_all(p); } };
struct x509_ext_deleter { void operator()(X509_EXTENSION *p) const { X509_EXTENSION_free(p); } };
struct general_names_deleter { void operator()(GENERAL_NAMES *p) const { GENERAL_NAMES_free(p); } };
struct name_constraints_deleter { void operator()(NAME_CONSTRAINTS *p) const { NAME_CONSTRAINTS_free(p); } };

using evp_pkey_ptr = std::unique_ptr<EVP_PKEY, evp_pkey_deleter>;
using x509_ptr = std::unique_ptr<X509, x509_deleter>;
using bio_ptr = std::unique_ptr<BIO, bio_deleter>;

// An X509 shared between the cache and the sessions that use it (X509_up_ref under the hood).
using shared_x509 = std::shared_ptr<X509>;
shared_x509 share(x509_ptr cert);

// The OpenSSL error queue as one line, for exceptions at start-up.
std::string openssl_error_string();

struct crypto_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string to_pem(X509 *cert);
std::string private_key_to_pem(EVP_PKEY *key);
x509_ptr x509_from_pem(const std::string &pem);
evp_pkey_ptr private_key_from_pem(const std::string &pem);

} // namespace sluice::certs
