#include "certs/openssl_handles.hpp"

#include <openssl/err.h>
#include <openssl/pem.h>

namespace sluice::certs {

shared_x509 share(x509_ptr cert) { return shared_x509(cert.release(), X509_free); }

std::string openssl_error_string() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

namespace {
std::string bio_string(BIO *b) {
  char *data = nullptr;
  long n = BIO_get_mem_data(b, &data);
  return std::string(data, static_cast<std::size_t>(n));
}
} // namespace

std::string to_pem(X509 *cert) {
  bio_ptr b(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(b.get(), cert);
  return bio_string(b.get());
}

std::string private_key_to_pem(EVP_PKEY *key) {
  bio_ptr b(BIO_new(BIO_s_mem()));
  PEM_write_bio_PrivateKey(b.get(), key, nullptr, nullptr, 0, nullptr, nullptr);
  return bio_string(b.get());
}

x509_ptr x509_from_pem(const std::string &pem) {
  bio_ptr b(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  x509_ptr c(PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr));
  if (!c) throw crypto_error("not a PEM certificate: " + openssl_error_string());
  return c;
}

evp_pkey_ptr private_key_from_pem(const std::string &pem) {
  bio_ptr b(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  evp_pkey_ptr k(PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, nullptr));
  if (!k) throw crypto_error("not a PEM private key: " + openssl_error_string());
  return k;
}

} // namespace sluice::certs
