#include "certs/java_truststore.hpp"
#include "certs/openssl_handles.hpp"

#include <openssl/pkcs12.h>

namespace sluice::certs {

std::string make_java_truststore(X509 *cert, const std::string &password) {
  STACK_OF(PKCS12_SAFEBAG) *bags = nullptr;
  PKCS12_SAFEBAG *bag = PKCS12_add_cert(&bags, cert);
  if (!bag) throw crypto_error("PKCS12_add_cert: " + openssl_error_string());
  PKCS12_add_friendlyname(bag, "sluice", -1);
  // 2.16.840.1.113894.746875.1.1 (Oracle JDK trusted key usage) = anyExtendedKeyUsage: without it
  // Java ignores a certificate-only PKCS12 entry.
  ASN1_OBJECT *any_eku = OBJ_txt2obj("2.5.29.37.0", 1);
  int ok = PKCS12_add1_attr_by_txt(bag, "2.16.840.1.113894.746875.1.1", V_ASN1_OBJECT,
                                   reinterpret_cast<const unsigned char *>(any_eku), -1);
  ASN1_OBJECT_free(any_eku);
  if (!ok) {
    sk_PKCS12_SAFEBAG_pop_free(bags, PKCS12_SAFEBAG_free);
    throw crypto_error("trusted-key-usage attribute: " + openssl_error_string());
  }
  STACK_OF(PKCS7) *safes = nullptr;
  // The password guards nothing secret (the CA certificate is public): an unencrypted safe and a
  // single MAC iteration keep this off the start-up path of every exec.
  ok = PKCS12_add_safe(&safes, bags, -1, 1, password.c_str()); // -1: an unencrypted safe
  sk_PKCS12_SAFEBAG_pop_free(bags, PKCS12_SAFEBAG_free);
  if (!ok) throw crypto_error("PKCS12_add_safe: " + openssl_error_string());
  PKCS12 *p12 = PKCS12_add_safes(safes, 0);
  sk_PKCS7_pop_free(safes, PKCS7_free);
  if (!p12) throw crypto_error("PKCS12_add_safes: " + openssl_error_string());
  PKCS12_set_mac(p12, password.c_str(), -1, nullptr, 0, 1, nullptr);
  bio_ptr b(BIO_new(BIO_s_mem()));
  i2d_PKCS12_bio(b.get(), p12);
  PKCS12_free(p12);
  char *data = nullptr;
  long n = BIO_get_mem_data(b.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

} // namespace sluice::certs
