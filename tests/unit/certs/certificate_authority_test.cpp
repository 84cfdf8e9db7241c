#include "certs/certificate_authority.hpp"
#include "certs/leaf_cache.hpp"

#include <catch2/catch.hpp>
#include <openssl/x509_vfy.h>

using namespace sluice::certs;

namespace {
// Verifies `leaf` against `ca` alone, as a client that trusts only the CA would, for `host`.
int verify(X509 *ca, X509 *leaf, const std::string &host, bool is_ip) {
  X509_STORE *store = X509_STORE_new();
  X509_STORE_add_cert(store, ca);
  X509_STORE_CTX *ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, leaf, nullptr);
  X509_VERIFY_PARAM *param = X509_STORE_CTX_get0_param(ctx);
  if (is_ip) {
    X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
  } else {
    X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size());
  }
  int ok = X509_verify_cert(ctx);
  int err = ok == 1 ? X509_V_OK : X509_STORE_CTX_get_error(ctx);
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  return err;
}

std::string san_of(X509 *cert) {
  auto *names = static_cast<GENERAL_NAMES *>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  std::string out;
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names); ++i) {
    auto *gn = sk_GENERAL_NAME_value(names, i);
    if (gn->type == GEN_DNS) {
      out += "DNS:" + std::string(reinterpret_cast<const char *>(ASN1_STRING_get0_data(gn->d.dNSName)));
    } else if (gn->type == GEN_IPADD) {
      out += "IP:" + std::to_string(ASN1_STRING_length(gn->d.iPAddress)) + "bytes";
    }
  }
  GENERAL_NAMES_free(names);
  return out;
}
} // namespace

TEST_CASE("minted leaves verify against the CA with the right SANs", "[certs]") {
  name_constraint_set nc{true, {"api.github.com", ".githubusercontent.com"}, {"198.18.0.2"}};
  auto ca = certificate_authority::generate("test CA", std::chrono::hours(1), nc);
  auto leaf = ca.mint("api.github.com", false, std::chrono::hours(24));
  CHECK(verify(ca.cert(), leaf.get(), "api.github.com", false) == X509_V_OK);
  CHECK(san_of(leaf.get()) == "DNS:api.github.com");
  CHECK(verify(ca.cert(), leaf.get(), "other.github.com", false) == X509_V_ERR_HOSTNAME_MISMATCH);

  auto sub = ca.mint("raw.githubusercontent.com", false, std::chrono::hours(1));
  CHECK(verify(ca.cert(), sub.get(), "raw.githubusercontent.com", false) == X509_V_OK);

  auto ip = ca.mint("198.18.0.2", true, std::chrono::hours(1));
  CHECK(san_of(ip.get()) == "IP:4bytes");
  CHECK(verify(ca.cert(), ip.get(), "198.18.0.2", true) == X509_V_OK);

  // The key is P-256 and the leaf never outlives its CA.
  EVP_PKEY *pub = X509_get0_pubkey(leaf.get());
  CHECK(EVP_PKEY_get_base_id(pub) == EVP_PKEY_EC);
  CHECK(ASN1_TIME_compare(X509_get0_notAfter(leaf.get()), X509_get0_notAfter(ca.cert())) <= 0);
  CHECK(X509_check_ca(leaf.get()) == 0);
}

TEST_CASE("name constraints reject leaves for unlisted names", "[certs]") {
  name_constraint_set nc{true, {"api.github.com"}, {}};
  auto ca = certificate_authority::generate("test CA", std::chrono::hours(1), nc);
  auto evil = ca.mint("evil.com", false, std::chrono::hours(1));
  CHECK(verify(ca.cert(), evil.get(), "evil.com", false) == X509_V_ERR_PERMITTED_VIOLATION);
  auto ip = ca.mint("127.0.0.1", true, std::chrono::hours(1));
  CHECK(verify(ca.cert(), ip.get(), "127.0.0.1", true) == X509_V_ERR_EXCLUDED_VIOLATION);
  auto apex = certificate_authority::generate(
      "wild", std::chrono::hours(1), name_constraint_set{true, {".github.com"}, {}});
  auto apex_leaf = apex.mint("github.com", false, std::chrono::hours(1));
  CHECK(verify(apex.cert(), apex_leaf.get(), "github.com", false) != X509_V_OK);
}

TEST_CASE("serials are random and leaves are cached per host", "[certs]") {
  auto ca = certificate_authority::generate("test CA", std::chrono::hours(1), {});
  auto a = ca.mint("a.test", false, std::chrono::hours(1));
  auto b = ca.mint("a.test", false, std::chrono::hours(1));
  CHECK(ASN1_INTEGER_cmp(X509_get0_serialNumber(a.get()), X509_get0_serialNumber(b.get())) != 0);
  leaf_cache cache(ca, std::chrono::hours(1), 4);
  auto first = cache.get("a.test", false);
  auto second = cache.get("a.test", false);
  CHECK_FALSE(first.cached);
  CHECK(second.cached);
  CHECK(first.cert.get() == second.cert.get());
  for (int i = 0; i < 10; ++i) cache.get("h" + std::to_string(i) + ".test", false);
  CHECK(cache.get("h9.test", false).cached);
}

TEST_CASE("a CA pair round-trips through PEM and a mismatched key is refused", "[certs]") {
  auto ca = certificate_authority::generate("pem CA", std::chrono::hours(1), {});
  auto cert = x509_from_pem(ca.cert_pem());
  auto key = private_key_from_pem(ca.key_pem());
  CHECK(X509_check_private_key(cert.get(), key.get()) == 1);
  auto other = certificate_authority::generate("other", std::chrono::hours(1), {});
  CHECK(X509_check_private_key(cert.get(), other.key()) != 1);
  CHECK_THROWS_AS(certificate_authority::load("/nonexistent.pem", "/nonexistent.key"), crypto_error);
}
