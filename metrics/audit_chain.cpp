// The chain's primitives (audit_chain.hpp): line hashes, the Ed25519 keys that sign and check
// checkpoints, the checkpoint line. The verifier is audit_verify.cpp.
#include "metrics/audit_chain.hpp"

#include "metrics/json_text.hpp"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <cctype>
#include <stdexcept>

namespace sluice::metrics {

namespace {

std::string to_hex(const unsigned char *p, std::size_t n) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (std::size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[p[i] >> 4];
    out[2 * i + 1] = digits[p[i] & 15];
  }
  return out;
}

std::string base64(std::string_view raw) {
  std::string out(4 * ((raw.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char *>(out.data()),
                          reinterpret_cast<const unsigned char *>(raw.data()), static_cast<int>(raw.size()));
  out.resize(n < 0 ? 0 : static_cast<std::size_t>(n));
  return out;
}

// Strict base64 (no line breaks inside); nullopt-like empty result with ok=false when it is not.
std::string unbase64(std::string_view text, bool &ok) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.remove_suffix(1);
  while (!text.empty() && (text.front() == ' ' || text.front() == '\n')) text.remove_prefix(1);
  ok = false;
  if (text.empty() || text.size() % 4 != 0) return {};
  for (char c : text) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '/' && c != '=') return {};
  }
  std::string out(text.size() / 4 * 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char *>(out.data()),
                          reinterpret_cast<const unsigned char *>(text.data()), static_cast<int>(text.size()));
  if (n < 0) return {};
  std::size_t pad = text.ends_with("==") ? 2 : text.ends_with("=") ? 1 : 0;
  out.resize(static_cast<std::size_t>(n) - pad);
  ok = true;
  return out;
}

struct pkey_free {
  void operator()(EVP_PKEY *k) const { EVP_PKEY_free(k); }
};
using pkey_ptr = std::unique_ptr<EVP_PKEY, pkey_free>;

std::string raw_public(EVP_PKEY *k) {
  std::string raw(32, '\0');
  std::size_t n = raw.size();
  if (EVP_PKEY_get_raw_public_key(k, reinterpret_cast<unsigned char *>(raw.data()), &n) != 1 || n != 32) {
    throw std::runtime_error("the key is not an Ed25519 key");
  }
  return raw;
}

// A PEM key (public or private, `want_private`), else nullptr.
pkey_ptr read_pem(std::string_view text, bool want_private) {
  std::string pem(text);
  if (!pem.empty() && pem.back() != '\n') pem.push_back('\n');
  BIO *bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  EVP_PKEY *k = want_private ? PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr)
                             : PEM_read_bio_PUBKEY(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  return pkey_ptr(k);
}

} // namespace

struct line_hasher::impl {
  EVP_MD *md = EVP_MD_fetch(nullptr, "SHA256", nullptr); // fetched once, not per line
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  ~impl() {
    EVP_MD_CTX_free(ctx);
    EVP_MD_free(md);
  }
};

line_hasher::line_hasher() : impl_(std::make_unique<impl>()) {
  if (!impl_->md || !impl_->ctx) throw std::runtime_error("OpenSSL has no SHA-256");
}
line_hasher::~line_hasher() = default;

std::string line_hasher::hex(std::string_view line) {
  unsigned char digest[32];
  unsigned int n = 0;
  EVP_DigestInit_ex(impl_->ctx, impl_->md, nullptr);
  EVP_DigestUpdate(impl_->ctx, line.data(), line.size());
  EVP_DigestFinal_ex(impl_->ctx, digest, &n);
  return to_hex(digest, n);
}

std::string key_id_of(std::string_view raw_public_key) {
  unsigned char digest[32];
  unsigned int n = 0;
  EVP_Digest(raw_public_key.data(), raw_public_key.size(), digest, &n, EVP_sha256(), nullptr);
  return to_hex(digest, 8);
}

struct chain_signer::key {
  pkey_ptr pkey;
};

chain_signer::chain_signer(std::unique_ptr<key> k) : key_(std::move(k)) { key_id_ = key_id_of(raw_public(key_->pkey.get())); }
chain_signer::~chain_signer() = default;

std::unique_ptr<chain_signer> chain_signer::from_text(std::string_view text) {
  pkey_ptr k;
  if (text.find("-----BEGIN") != std::string_view::npos) {
    k = read_pem(text, true);
    if (!k) throw std::runtime_error("the signing key's PEM is not a private key OpenSSL can read");
  } else {
    bool ok = false;
    std::string der = unbase64(text, ok);
    if (!ok) throw std::runtime_error("the signing key is neither PEM nor base64");
    if (der.size() == 32) {
      k.reset(EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr,
                                           reinterpret_cast<const unsigned char *>(der.data()), der.size()));
    } else {
      const auto *p = reinterpret_cast<const unsigned char *>(der.data());
      k.reset(d2i_AutoPrivateKey(nullptr, &p, static_cast<long>(der.size())));
    }
    if (!k) throw std::runtime_error("the signing key's base64 is not a raw Ed25519 key nor a DER private key");
  }
  if (EVP_PKEY_get_base_id(k.get()) != EVP_PKEY_ED25519) {
    throw std::runtime_error("the signing key is not an Ed25519 key; make one with openssl genpkey -algorithm ed25519");
  }
  auto holder = std::make_unique<key>();
  holder->pkey = std::move(k);
  return std::unique_ptr<chain_signer>(new chain_signer(std::move(holder)));
}

std::unique_ptr<chain_signer> chain_signer::generate() {
  EVP_PKEY *k = EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
  if (!k) throw std::runtime_error("OpenSSL could not make an Ed25519 key");
  auto holder = std::make_unique<key>();
  holder->pkey.reset(k);
  return std::unique_ptr<chain_signer>(new chain_signer(std::move(holder)));
}

std::string chain_signer::sign(std::string_view message) const {
  std::string tbs(checkpoint_context);
  tbs.append(message);
  unsigned char sig[64];
  std::size_t n = sizeof sig;
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  // Ed25519 hashes the message itself: no digest is named (NULL), and the whole message goes in
  // one call.
  bool ok = ctx && EVP_DigestSignInit(ctx, nullptr, nullptr, nullptr, key_->pkey.get()) == 1 &&
            EVP_DigestSign(ctx, sig, &n, reinterpret_cast<const unsigned char *>(tbs.data()), tbs.size()) == 1;
  EVP_MD_CTX_free(ctx);
  if (!ok) throw std::runtime_error("OpenSSL could not sign a checkpoint");
  return base64(std::string_view(reinterpret_cast<const char *>(sig), n));
}

std::string chain_signer::public_pem() const {
  BIO *bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PUBKEY(bio, key_->pkey.get());
  char *data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<std::size_t>(n));
  BIO_free(bio);
  return out;
}

std::string chain_signer::private_pem() const {
  BIO *bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, key_->pkey.get(), nullptr, nullptr, 0, nullptr, nullptr);
  char *data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<std::size_t>(n));
  BIO_free(bio);
  return out;
}

std::string chain_signer::public_base64() const { return base64(raw_public(key_->pkey.get())); }

chain_verifier_key chain_verifier_key::from_text(std::string_view text) {
  chain_verifier_key out;
  if (text.find("-----BEGIN") != std::string_view::npos) {
    pkey_ptr k = read_pem(text, false);
    if (!k) k = read_pem(text, true); // the private key serve signs with holds its public half
    if (!k || EVP_PKEY_get_base_id(k.get()) != EVP_PKEY_ED25519) {
      throw std::runtime_error("the PEM is not an Ed25519 public key (openssl pkey -in KEY -pubout)");
    }
    out.raw_ = raw_public(k.get());
  } else {
    bool ok = false;
    out.raw_ = unbase64(text, ok);
    if (!ok || out.raw_.size() != 32) {
      throw std::runtime_error("the key is neither PEM nor the base64 of a raw 32-byte Ed25519 public key");
    }
  }
  out.key_id_ = key_id_of(out.raw_);
  return out;
}

bool chain_verifier_key::verify(std::string_view message, std::string_view signature_base64) const {
  bool ok = false;
  std::string sig = unbase64(signature_base64, ok);
  if (!ok || sig.size() != 64) return false;
  pkey_ptr k(EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr,
                                         reinterpret_cast<const unsigned char *>(raw_.data()), raw_.size()));
  if (!k) return false;
  std::string tbs(checkpoint_context);
  tbs.append(message);
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  ok = ctx && EVP_DigestVerifyInit(ctx, nullptr, nullptr, nullptr, k.get()) == 1 &&
       EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char *>(sig.data()), sig.size(),
                        reinterpret_cast<const unsigned char *>(tbs.data()), tbs.size()) == 1;
  EVP_MD_CTX_free(ctx);
  return ok;
}

std::string checkpoint_line(std::string_view time_text, std::string_view writer, std::uint64_t seq,
                            std::string_view prev_hash, bool final, const chain_signer *signer) {
  using namespace json_text;
  std::string line("{\"type\":\"checkpoint\",\"time\":");
  line.append(time_text);
  field(line, ",\"writer\":", writer);
  field(line, ",\"seq\":", seq);
  field(line, ",\"prev_hash\":", prev_hash);
  line.append(final ? ",\"final\":true" : ",\"final\":false");
  if (signer) {
    field(line, ",\"key_id\":", signer->key_id());
    // The signature covers every byte before it: the fields above, in this order.
    std::string sig = signer->sign(line);
    field(line, ",\"sig\":", sig);
  }
  line.push_back('}');
  return line;
}

} // namespace sluice::metrics
