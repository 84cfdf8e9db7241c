// No false alarm on ordinary traffic: source code, a package manifest and lock file, random
// bytes, base64 of random bytes, a Git pack's framing.
#include "vectors.hpp"
#include "scan/body.hpp"
#include "scan/canary.hpp"
#include "scan/literals.hpp"

#include <catch2/catch.hpp>
#include <fstream>
#include <random>
#include <sstream>

using namespace sluice::scan;
using namespace scan_test;

namespace {

std::string source_file(const std::string &path) {
  std::ifstream f(std::string(SLUICE_SOURCE_DIR) + "/" + path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const char *manifest = R"({
  "name": "@acme/widget",
  "version": "4.2.1",
  "description": "A widget: tokens, keys and secrets are words here, not values",
  "main": "dist/index.js",
  "scripts": {"build": "tsc -p .", "test": "jest --ci", "prepublishOnly": "npm run build"},
  "repository": {"type": "git", "url": "git+https://github.com/acme/widget.git"},
  "publishConfig": {"registry": "https://registry.npmjs.org/"},
  "dependencies": {"left-pad": "^1.3.0", "jsonwebtoken": "^9.0.2", "aws-sdk": "^2.1500.0"},
  "devDependencies": {"typescript": "^5.4.0", "jest": "^29.7.0"}
}
{
  "lockfileVersion": 3,
  "packages": {
    "node_modules/left-pad": {
      "version": "1.3.0",
      "resolved": "https://registry.npmjs.org/left-pad/-/left-pad-1.3.0.tgz",
      "integrity": "sha512-XI5MPzVNApjAyhQzphX8BkmKsKUxD4LdyK24iZeQEEKZ3mGGZcFbFITafrqVPZBcJ1mfXyJl4ZKNz3KGtW3qA==",
      "license": "WTFPL"
    },
    "node_modules/jsonwebtoken": {
      "version": "9.0.2",
      "integrity": "sha512-PRp66vJ865SSqOlgqS8hujT5U4AOgMfhrwYIuIhfKaoSCZcirrmASQr8CX7cUg+RMih+hgznrjp99o+W4pJLHQ=="
    }
  }
}
AWS_REGION=us-east-1 GITHUB_TOKEN=${{ secrets.GITHUB_TOKEN }} OPENAI_API_KEY=sk-... NPM_TOKEN=npm_xxx
-----BEGIN PRIVATE KEY----- is where a PEM key would start; see RFC 7468.
)";

std::string random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto &c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

} // namespace

TEST_CASE("no finding in ordinary traffic", "[scan][corpus]") {
  auto canaries = make_canaries();
  database_spec spec;
  spec.rules = builtin_rules();
  spec.canaries = canaries.values;
  spec.own_secrets = {{"GITHUB_TOKEN", "ghp_" + alnum(36, 11), {"api.github.com"}},
                      {"DB_PASSWORD", "correct horse battery staple", {}}};
  auto db = database::compile(std::move(spec));

  std::vector<std::pair<std::string, std::string>> corpus = {
      {"scanner.cpp", source_file("scan/scanner.cpp")},
      {"policy.cpp", source_file("filters/policy.cpp")},
      {"session.cpp", source_file("gateway/session.cpp")},
      {"manifest", manifest},
      {"random", random_bytes(4 << 20, 1)},
      {"base64", base64_encode(random_bytes(1 << 20, 2))},
      {"hex", hex_encode(random_bytes(1 << 19, 3), false)},
      {"git pack", "0032want " + hex(40) + "\n0000" + "PACK" + random_bytes(1 << 20, 4)},
  };
  for (const auto &[name, text] : corpus) {
    INFO(name);
    REQUIRE(text.size() > 1000);
    scanner s(db);
    for (std::size_t at = 0; at < text.size(); at += 8192) s.feed("body", std::string_view(text).substr(at, 8192));
    s.end("body");
    s.scan_target("/registry/" + name + "?q=" + percent_encode(text.substr(0, 200)));
    for (const auto &f : s.findings()) UNSCOPED_INFO(f.rule << " at " << f.offset);
    CHECK(s.findings().empty());
  }
}
