// `sluice audit verify FILE... --key PUB`: checks the access log's tamper-evident chain
// (metrics/audit_chain.hpp, docs/metrics.md "The chain"). Exit 0: verified; 1: a record removed,
// inserted, reordered or edited, a checkpoint that does not verify, or records not signed; 125: a
// file or key that cannot be read (as every sluice command's usage errors).
#include "cli/commands.hpp"
#include "metrics/audit_chain.hpp"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>

namespace sluice::cli {

namespace {

// --key: a file holding a PEM public key or the base64 of the raw key, or that base64 itself (as
// exec's --json-summary gives it in accessLog.publicKey).
std::string key_text(const std::string &key) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(key, ec)) {
    std::ifstream f(key, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    if (!f) throw std::runtime_error("--key '" + key + "': cannot read it");
    return ss.str();
  }
  if (key.size() != 44 || key.back() != '=') {
    throw std::runtime_error("--key '" + key + "': no such file; give a file with the PEM public key "
                             "(openssl pkey -in KEY -pubout) or the base64 raw key exec's summary names");
  }
  return key;
}

} // namespace

void add_audit(CLI::App &app, commands &out) {
  struct options {
    metrics::verify_request req;
    std::string key;
  };
  auto o = std::make_shared<options>();
  auto *audit = app.add_subcommand("audit", "the access log's tamper-evident chain");
  audit->require_subcommand(1);
  auto *verify = audit->add_subcommand(
      "verify", "check access-log files (rotated ones first): every record's link, every checkpoint's signature");
  verify->add_option("FILE", o->req.files, "the access log's files, oldest first (log.2 log.1 log)")->required();
  verify->add_option("--key", o->key,
                     "the writer's Ed25519 public key: a PEM file, or the base64 raw key (exec's summary: "
                     "accessLog.publicKey); without it only the chain is checked");
  verify->add_option("--writer", o->req.writer, "only this writer's chain (default: every writer's)");
  verify->add_flag("--running", o->req.running,
                   "the writer may still be running: records after its last checkpoint are reported, not failed");
  out.push_back({verify, [o] {
    if (!o->key.empty()) {
      try {
        o->req.key_text = key_text(o->key);
        metrics::chain_verifier_key::from_text(o->req.key_text); // a bad key is a usage error
      } catch (const std::exception &e) {
        std::string what = e.what();
        throw std::runtime_error(what.rfind("--key", 0) == 0 ? what : "--key '" + o->key + "': " + what);
      }
    }
    return metrics::verify_chain(o->req, std::cout);
  }});
}

} // namespace sluice::cli
