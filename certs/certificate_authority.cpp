// p256_public_copy uses the EC_KEY API, deprecated in OpenSSL 3 (the comment there says why).
#define OPENSSL_SUPPRESS_DEPRECATED
#include "certs/certificate_authority.hpp"

#include <cstring>
#include <fstream>
#include <mutex>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/rand.h>
#include <sstream>

namespace sluice::certs {
namespace {

void check(bool ok, const char *what) {
  if (!ok) throw crypto_error(std::string(what) + ": " + openssl_error_string());
}

// A random, positive 127-bit serial (RFC 5280 allows 20 octets; the top bit stays clear).
void set_random_serial(X509 *cert) {
  unsigned char bytes[16];
  check(RAND_bytes(bytes, sizeof bytes) == 1, "RAND_bytes");
  bytes[0] &= 0x7f;
  bytes[0] |= 0x01;
  BIGNUM *bn = BN_bin2bn(bytes, sizeof bytes, nullptr);
  check(bn != nullptr, "BN_bin2bn");
  ASN1_INTEGER *serial = BN_to_ASN1_INTEGER(bn, nullptr);
  BN_free(bn);
  check(serial != nullptr, "BN_to_ASN1_INTEGER");
  X509_set_serialNumber(cert, serial);
  ASN1_INTEGER_free(serial);
}

void add_ext(X509 *cert, X509 *issuer, int nid, const std::string &value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  std::unique_ptr<X509_EXTENSION, x509_ext_deleter> ext(
      X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  check(ext != nullptr, ("extension " + value).c_str());
  check(X509_add_ext(cert, ext.get(), -1) == 1, "X509_add_ext");
}

std::string ip_constraint(const std::string &ip) {
  if (ip.find(':') != std::string::npos) {
    return "IP:" + ip + "/ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
  }
  return "IP:" + ip + "/255.255.255.255";
}

std::string read_file(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw crypto_error("cannot read '" + path + "'; check the path and its permissions");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The random generator a new CA starts: HMAC-DRBG over SHA-256 (NIST SP 800-90A, like OpenSSL's
// default CTR-DRBG). Its first use is about 0.8 ms cheaper on the way to every exec's start: the
// CTR-DRBG's first fetch builds every cipher OpenSSL has, the HMAC-DRBG's the digests, which the
// CA's signature needs anyway. Only possible before the process's first random byte; afterwards
// (a CA made later in a process that already used OpenSSL) the generator in place is kept.
void choose_random_generator() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (RAND_set_DRBG_type(nullptr, "HMAC-DRBG", nullptr, nullptr, "SHA256") != 1) ERR_clear_error();
  });
}

// A legacy copy (an EC_KEY, an API OpenSSL 3 deprecates but keeps) of a P-256 key's public half,
// for X509_set_pubkey: a provider key is encoded by OpenSSL 3's encoders, whose first use builds
// every encoder the providers offer (about 1.3 ms, on the way to every exec's start, and again on
// the first leaf); a legacy key is encoded by its own method (about 10 us) and stays decoded in the
// certificate, as X509_get0_pubkey, verification and TLS need. No private part is copied.
evp_pkey_ptr p256_public_copy(EVP_PKEY *key) {
  unsigned char point[65];
  std::size_t len = 0;
  check(EVP_PKEY_is_a(key, "EC") &&
            EVP_PKEY_get_octet_string_param(key, OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY, point,
                                            sizeof point, &len) == 1 &&
            len == sizeof point,
        "P-256 public key");
  EC_KEY *ec = EC_KEY_new_by_curve_name(NID_X9_62_prime256v1);
  if (!ec || EC_KEY_oct2key(ec, point, len, nullptr) != 1) {
    EC_KEY_free(ec);
    check(false, "EC_KEY_oct2key");
  }
  evp_pkey_ptr pub(EVP_PKEY_new());
  if (!pub || EVP_PKEY_assign_EC_KEY(pub.get(), ec) != 1) {
    EC_KEY_free(ec);
    check(false, "EVP_PKEY_assign_EC_KEY");
  }
  return pub;
}

} // namespace

evp_pkey_ptr generate_p256_key() {
  evp_pkey_ptr key(EVP_EC_gen("P-256"));
  check(key != nullptr, "EVP_EC_gen(P-256)");
  return key;
}

certificate_authority certificate_authority::generate(const std::string &common_name,
                                                      std::chrono::seconds validity,
                                                      const name_constraint_set &constraints) {
  choose_random_generator();
  certificate_authority ca;
  ca.key_ = generate_p256_key();
  ca.leaf_key_ = generate_p256_key();
  ca.leaf_public_ = p256_public_copy(ca.leaf_key_.get());
  ca.cert_.reset(X509_new());
  X509 *c = ca.cert_.get();
  check(X509_set_version(c, 2) == 1, "X509_set_version");
  set_random_serial(c);
  X509_gmtime_adj(X509_getm_notBefore(c), -300); // tolerate small clock skew in clients
  X509_gmtime_adj(X509_getm_notAfter(c), static_cast<long>(validity.count()));
  X509_NAME *name = X509_get_subject_name(c);
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char *>("sluice"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char *>(common_name.c_str()), -1, -1,
                             0);
  X509_set_issuer_name(c, name);
  check(X509_set_pubkey(c, p256_public_copy(ca.key_.get()).get()) == 1, "X509_set_pubkey");
  add_ext(c, c, NID_basic_constraints, "critical,CA:TRUE,pathlen:0");
  add_ext(c, c, NID_key_usage, "critical,keyCertSign,cRLSign");
  add_ext(c, c, NID_subject_key_identifier, "hash");
  if (constraints.constrain) {
    std::string nc = "critical";
    for (const auto &d : constraints.dns) nc += ",permitted;DNS:" + d;
    for (const auto &ip : constraints.ip) nc += ",permitted;" + ip_constraint(ip);
    if (constraints.dns.empty()) {
      nc += ",permitted;DNS:invalid"; // RFC 6761 name: no DNS name at all is permitted
    }
    if (constraints.ip.empty()) {
      nc += ",excluded;IP:0.0.0.0/0.0.0.0,excluded;IP:::/::";
    }
    add_ext(c, c, NID_name_constraints, nc);
  }
  check(X509_sign(c, ca.key_.get(), EVP_sha256()) > 0, "X509_sign");
  return ca;
}

certificate_authority certificate_authority::load(const std::string &cert_file,
                                                  const std::string &key_file) {
  certificate_authority ca;
  try {
    ca.cert_ = x509_from_pem(read_file(cert_file));
  } catch (const crypto_error &e) {
    throw crypto_error("CA certificate '" + cert_file + "': " + e.what() +
                       "; create one with `sluice ca init`");
  }
  try {
    ca.key_ = private_key_from_pem(read_file(key_file));
  } catch (const crypto_error &e) {
    throw crypto_error("CA key '" + key_file + "': " + e.what() +
                       "; create one with `sluice ca init`");
  }
  if (X509_check_private_key(ca.cert_.get(), ca.key_.get()) != 1) {
    throw crypto_error("CA key '" + key_file + "' does not belong to certificate '" + cert_file +
                       "'; pass the pair written by the same `sluice ca init`");
  }
  if (X509_check_ca(ca.cert_.get()) == 0) {
    throw crypto_error("'" + cert_file + "' is not a CA certificate (no basicConstraints CA:TRUE)");
  }
  ca.leaf_key_ = generate_p256_key();
  ca.leaf_public_ = p256_public_copy(ca.leaf_key_.get());
  return ca;
}

x509_ptr certificate_authority::mint(const std::string &host, bool is_ip,
                                     std::chrono::seconds validity) const {
  x509_ptr leaf(X509_new());
  X509 *c = leaf.get();
  check(X509_set_version(c, 2) == 1, "X509_set_version");
  set_random_serial(c);
  X509_gmtime_adj(X509_getm_notBefore(c), -300);
  X509_gmtime_adj(X509_getm_notAfter(c), static_cast<long>(validity.count()));
  // Never outlive the CA: a client would reject the chain anyway, and with a worse message.
  if (ASN1_TIME_compare(X509_get0_notAfter(c), X509_get0_notAfter(cert_.get())) > 0) {
    X509_set1_notAfter(c, X509_get0_notAfter(cert_.get()));
  }
  X509_NAME *name = X509_get_subject_name(c);
  // An IP leaf carries no CN: OpenSSL would check a dotted CN against DNS name constraints.
  const char *field = is_ip ? "O" : "CN";
  const std::string value = is_ip ? std::string("sluice leaf") : host;
  X509_NAME_add_entry_by_txt(name, field, MBSTRING_ASC,
                             reinterpret_cast<const unsigned char *>(value.c_str()), -1, -1, 0);
  X509_set_issuer_name(c, X509_get_subject_name(cert_.get()));
  check(X509_set_pubkey(c, leaf_public_.get()) == 1, "X509_set_pubkey");
  add_ext(c, cert_.get(), NID_basic_constraints, "critical,CA:FALSE");
  add_ext(c, cert_.get(), NID_key_usage, "critical,digitalSignature");
  add_ext(c, cert_.get(), NID_ext_key_usage, "serverAuth");
  add_ext(c, cert_.get(), NID_subject_key_identifier, "hash");
  add_ext(c, cert_.get(), NID_authority_key_identifier, "keyid:always");
  add_ext(c, cert_.get(), NID_subject_alt_name, (is_ip ? "IP:" : "DNS:") + host);
  check(X509_sign(c, key_.get(), EVP_sha256()) > 0, "X509_sign");
  return leaf;
}

} // namespace sluice::certs
