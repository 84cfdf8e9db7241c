#pragma once
// The access log's tamper-evident chain (docs/metrics.md, "The chain"): every line carries the
// SHA-256 of the line before it from the same writer (prev_hash) and its place (seq); checkpoint
// lines, themselves links of the chain, sign it with Ed25519 (OpenSSL's EVP_PKEY). A verifier
// with the public key tells a record removed, inserted, reordered or edited, a checkpoint that
// does not verify, and what after the last checkpoint is not signed.
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::metrics {

// prev_hash of a chain's first record: nothing came before it.
inline constexpr std::string_view chain_genesis =
    "0000000000000000000000000000000000000000000000000000000000000000";
// What a checkpoint's signature covers: this, then the checkpoint's line up to `,"sig":`.
inline constexpr std::string_view checkpoint_context = "sluice audit checkpoint v1\n";

// SHA-256 of lines, hex, with one digest context kept between lines (the log's mutex guards it).
class line_hasher {
public:
  line_hasher();
  ~line_hasher();
  line_hasher(const line_hasher &) = delete;
  line_hasher &operator=(const line_hasher &) = delete;
  // The hash of `line` (its bytes without the newline) as 64 lowercase hex digits.
  std::string hex(std::string_view line);

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// An Ed25519 key that signs checkpoints: the operator's ([log] signing_key) or one made for a run.
class chain_signer {
public:
  // A PEM private key, or the base64 of its DER (PKCS#8) or of the raw 32-byte private key.
  // Throws std::runtime_error saying what is wrong (never the key).
  static std::unique_ptr<chain_signer> from_text(std::string_view text);
  static std::unique_ptr<chain_signer> generate();
  ~chain_signer();
  chain_signer(const chain_signer &) = delete;
  chain_signer &operator=(const chain_signer &) = delete;

  // Base64 of the signature of checkpoint_context + `message`.
  std::string sign(std::string_view message) const;
  std::string public_pem() const;
  std::string public_base64() const; // the raw 32-byte public key
  std::string private_pem() const;
  const std::string &key_id() const { return key_id_; }

private:
  struct key;
  explicit chain_signer(std::unique_ptr<key> k);
  std::unique_ptr<key> key_;
  std::string key_id_;
};

// A public key that checks checkpoints (`sluice audit verify --key`).
class chain_verifier_key {
public:
  // A PEM public (or private) key, or the base64 of the raw 32-byte public key. Throws
  // std::runtime_error saying what is wrong.
  static chain_verifier_key from_text(std::string_view text);
  bool verify(std::string_view message, std::string_view signature_base64) const;
  const std::string &key_id() const { return key_id_; }

private:
  std::string raw_; // the 32-byte public key
  std::string key_id_;
};

// The key id: the first 8 bytes of SHA-256 over the raw public key, hex.
std::string key_id_of(std::string_view raw_public_key);

// A checkpoint line (no newline): `prev_hash` is the hash of the writer's previous line, so the
// signature covers the chain up to and including it; `final`: the writer closed its log.
std::string checkpoint_line(std::string_view time_text, std::string_view writer, std::uint64_t seq,
                            std::string_view prev_hash, bool final, const chain_signer *signer);

// `sluice audit verify`: the files in order (rotated ones first), one chain per writer.
struct verify_request {
  std::vector<std::string> files;
  std::string key_text; // the public key (empty: the chain only, signatures not checked)
  std::string writer;   // only this writer's chain (empty: all)
  bool running = false; // a writer may still be running: its unsigned tail is reported, not failed
};
// Writes one line per finding to `out` and a last line with the verdict; returns 0 (verified) or
// 1 (tampering, or something not signed). Throws std::runtime_error for a file it cannot read.
int verify_chain(const verify_request &req, std::ostream &out);

} // namespace sluice::metrics
