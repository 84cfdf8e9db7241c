#include "metrics/access_log.hpp"
#include "metrics/audit_chain.hpp"
#include "temp_file.hpp"

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace sluice::metrics;
using sluice::metrics::testing::lines_of;
using sluice::metrics::testing::temp_file;

namespace {

void put_lines(const std::string &path, const std::vector<std::string> &lines) {
  std::ofstream out(path, std::ios::trunc);
  for (const auto &l : lines) out << l << "\n";
}

// A log of `n` records signed by `key`, closed: n records and a closing checkpoint, with an
// interval checkpoint after every record when `every` (interval 0).
void write_log(const std::string &path, const chain_signer &key, int n, log_format format = log_format::json,
               const std::string &writer = "w1") {
  chain_options chain;
  chain.writer = writer;
  chain.signing_key_pem = key.private_pem();
  access_log log(path, "cmd-1", "", false, format, chain);
  for (int i = 0; i < n; ++i) {
    access_record r;
    r.method = "GET";
    r.host = "example.com";
    r.status = 200;
    r.decision = "allow";
    std::string target = "/r" + std::to_string(i + 1);
    r.target = target;
    log.write(r);
  }
}

struct result {
  int status;
  std::string text;
};

result verify(const std::vector<std::string> &files, const chain_signer *key, bool running = false) {
  verify_request req;
  req.files = files;
  if (key) req.key_text = key->public_pem();
  req.running = running;
  std::ostringstream out;
  int status = verify_chain(req, out);
  return {status, out.str()};
}

} // namespace

TEST_CASE("the chain: seq and prev_hash on every line, a closing checkpoint that signs it", "[metrics][audit]") {
  temp_file f;
  auto key = chain_signer::generate();
  write_log(f.path, *key, 3);
  auto lines = lines_of(f.path);
  REQUIRE(lines.size() == 4);
  line_hasher h;
  std::string prev(chain_genesis);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    auto o = boost::json::parse(lines[i]).as_object();
    CHECK(o.at("seq").as_int64() == static_cast<std::int64_t>(i + 1));
    CHECK(o.at("prev_hash").as_string() == prev);
    CHECK(o.at("writer").as_string() == "w1");
    prev = h.hex(lines[i]);
  }
  auto c = boost::json::parse(lines.back()).as_object();
  CHECK(c.at("type").as_string() == "checkpoint");
  CHECK(c.at("final").as_bool());
  CHECK(c.at("key_id").as_string() == key->key_id());
  auto r = verify({f.path}, key.get());
  CHECK(r.status == 0);
  CHECK(r.text.find("verified: 3 records of 1 writer") != std::string::npos);
}

TEST_CASE("OCSF events carry the chain in metadata.sequence and unmapped", "[metrics][audit]") {
  temp_file f;
  auto key = chain_signer::generate();
  write_log(f.path, *key, 2, log_format::ocsf);
  auto lines = lines_of(f.path);
  REQUIRE(lines.size() == 3);
  auto o = boost::json::parse(lines[1]).as_object();
  CHECK(o.at("metadata").as_object().at("sequence").as_int64() == 2);
  CHECK(o.at("metadata").as_object().at("version").as_string() == "1.8.0");
  CHECK(o.at("unmapped").as_object().at("seq").as_int64() == 2);
  CHECK(o.at("unmapped").as_object().at("prev_hash").as_string() == line_hasher().hex(lines[0]));
  CHECK(verify({f.path}, key.get()).status == 0);
}

TEST_CASE("keys: PEM, base64 raw, and a signature from another key", "[metrics][audit]") {
  auto key = chain_signer::generate();
  auto from_pem = chain_verifier_key::from_text(key->public_pem());
  auto from_raw = chain_verifier_key::from_text(key->public_base64());
  CHECK(from_pem.key_id() == key->key_id());
  CHECK(from_raw.key_id() == key->key_id());
  auto sig = key->sign("message");
  CHECK(from_raw.verify("message", sig));
  CHECK_FALSE(from_raw.verify("messagE", sig));
  auto other = chain_signer::generate();
  CHECK_FALSE(chain_verifier_key::from_text(other->public_pem()).verify("message", sig));
  auto again = chain_signer::from_text(key->private_pem());
  CHECK(again->key_id() == key->key_id());
  CHECK_THROWS_WITH(chain_verifier_key::from_text("not a key"), Catch::Contains("neither PEM nor"));
  CHECK_THROWS_WITH(chain_signer::from_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"),
                    Catch::Contains("not a private key"));
}

TEST_CASE("each tampering is named with its line and seq", "[metrics][audit]") {
  temp_file f;
  auto key = chain_signer::generate();
  write_log(f.path, *key, 10);
  const auto lines = lines_of(f.path); // seq 1..10 on lines 1..10, the closing checkpoint on 11
  REQUIRE(lines.size() == 11);
  REQUIRE(verify({f.path}, key.get()).status == 0);
  const std::string at = f.path + ":";

  SECTION("removed") {
    auto l = lines;
    l.erase(l.begin() + 4); // seq 5
    put_lines(f.path, l);
    auto r = verify({f.path}, key.get());
    CHECK(r.status == 1);
    CHECK(r.text.find(at + "5: writer w1: seq 6 follows seq 4 (" + at + "4): record 5 removed") != std::string::npos);
  }
  SECTION("inserted") {
    auto l = lines;
    l.insert(l.begin() + 6, lines[2]); // a copy of seq 3 after seq 6
    put_lines(f.path, l);
    auto r = verify({f.path}, key.get());
    CHECK(r.status == 1);
    CHECK(r.text.find(at + "7: writer w1: seq 3 inserted") != std::string::npos);
  }
  SECTION("one byte edited") {
    auto l = lines;
    auto pos = l[6].find("/r7");
    l[6][pos + 2] = '8'; // seq 7
    put_lines(f.path, l);
    auto r = verify({f.path}, key.get());
    CHECK(r.status == 1);
    CHECK(r.text.find(at + "7: writer w1: seq 7 edited") != std::string::npos);
  }
  SECTION("reordered") {
    auto l = lines;
    std::swap(l[3], l[4]); // seq 4 and 5
    put_lines(f.path, l);
    auto r = verify({f.path}, key.get());
    CHECK(r.status == 1);
    CHECK(r.text.find(at + "4: writer w1: seq 5 comes before seq 4 (" + at + "5): records reordered") !=
          std::string::npos);
  }
  SECTION("truncated") {
    auto l = lines;
    l.resize(8); // the closing checkpoint and seq 9, 10 gone
    put_lines(f.path, l);
    auto r = verify({f.path}, key.get());
    CHECK(r.status == 1);
    CHECK(r.text.find(at + "8: writer w1: the chain ends at seq 8 without its closing checkpoint; records 1..8") !=
          std::string::npos);
    CHECK(verify({f.path}, key.get(), true).status == 0); // --running
  }
  SECTION("cut in the middle of a line") {
    std::ofstream out(f.path, std::ios::trunc);
    for (int i = 0; i < 5; ++i) out << lines[i] << "\n";
    out << lines[5].substr(0, 20);
    out.close();
    auto r = verify({f.path}, key.get());
    CHECK(r.status == 1);
    CHECK(r.text.find(at + "6: the last line is cut short") != std::string::npos);
  }
  SECTION("a checkpoint from another run") {
    temp_file g;
    auto other = chain_signer::generate();
    write_log(g.path, *other, 10);
    auto l = lines;
    l.back() = lines_of(g.path).back();
    put_lines(f.path, l);
    auto r = verify({f.path}, key.get());
    CHECK(r.status == 1);
    CHECK(r.text.find(at + "11: writer w1: checkpoint seq 11 was signed by another key") != std::string::npos);
  }
  SECTION("a checkpoint from another run with the same key") {
    temp_file g;
    write_log(g.path, *key, 10);
    auto l = lines;
    l.back() = lines_of(g.path).back();
    put_lines(f.path, l);
    auto r = verify({f.path}, key.get());
    CHECK(r.status == 1);
    CHECK(r.text.find(at + "11: writer w1: checkpoint seq 11 does not link to seq 10") != std::string::npos);
  }
  SECTION("the wrong key") {
    auto other = chain_signer::generate();
    auto r = verify({f.path}, other.get());
    CHECK(r.status == 1);
    CHECK(r.text.find("signed by another key") != std::string::npos);
  }
}

TEST_CASE("rotation: the chain goes on in the reopened file; writers are told apart", "[metrics][audit]") {
  temp_file f, rotated;
  auto key = chain_signer::generate();
  {
    chain_options chain;
    chain.writer = "gw-1";
    chain.signing_key_pem = key->private_pem();
    access_log log(f.path, "serve", "", false, log_format::json, chain);
    access_record r;
    log.write(r);
    log.write(r);
    REQUIRE(std::rename(f.path.c_str(), rotated.path.c_str()) == 0);
    CHECK(log.reopen().empty());
    log.write(r);
  }
  auto old_lines = lines_of(rotated.path), new_lines = lines_of(f.path);
  REQUIRE(old_lines.size() == 3); // two records and the checkpoint the rotation wrote
  REQUIRE(new_lines.size() == 2);
  CHECK(boost::json::parse(new_lines[0]).as_object().at("prev_hash").as_string() == line_hasher().hex(old_lines[2]));
  CHECK(verify({rotated.path, f.path}, key.get()).status == 0);
  // Only the newer file: it begins mid-chain, which is said, not failed.
  auto r = verify({f.path}, key.get());
  CHECK(r.status == 0);
  CHECK(r.text.find("begins at seq 4") != std::string::npos);

  // A second writer's lines in the same file: its own chain.
  temp_file other;
  write_log(other.path, *key, 2, log_format::json, "gw-2");
  auto a = lines_of(f.path), b = lines_of(other.path);
  put_lines(f.path, {a[0], b[0], b[1], a[1], b[2]});
  r = verify({rotated.path, f.path}, key.get());
  CHECK(r.status == 0);
  CHECK(r.text.find("of 2 writers") != std::string::npos);
}

TEST_CASE("an interval checkpoint, and a log without a key", "[metrics][audit]") {
  temp_file f;
  {
    chain_options chain;
    chain.writer = "w";
    chain.checkpoint_interval = std::chrono::milliseconds(0);
    access_log log(f.path, "serve", "", false, log_format::json, chain);
    log.write({});
    log.write({});
  }
  auto lines = lines_of(f.path);
  REQUIRE(lines.size() == 5); // a record, its checkpoint, a record, its checkpoint, the closing one
  CHECK(lines[1].find("\"type\":\"checkpoint\"") != std::string::npos);
  CHECK(lines[1].find("\"sig\"") == std::string::npos);
  auto r = verify({f.path}, nullptr);
  CHECK(r.status == 0);
  CHECK(r.text.find("signatures not checked") != std::string::npos);
  auto key = chain_signer::generate();
  r = verify({f.path}, key.get());
  CHECK(r.status == 1);
  CHECK(r.text.find(f.path + ":2: writer w: checkpoint seq 2 is not signed") != std::string::npos);
}

TEST_CASE("a writer started again under the same name begins a new chain", "[metrics][audit]") {
  temp_file f;
  auto key = chain_signer::generate();
  write_log(f.path, *key, 2); // closed: 2 records, the closing checkpoint
  write_log(f.path, *key, 3); // the same writer's next run, appended: seq 1 again
  auto r = verify({f.path}, key.get());
  CHECK(r.status == 0);
  CHECK(r.text.find("verified: 5 records of 1 writer") != std::string::npos);
  // A run that did not close its log before the next began: its tail is named.
  auto lines = lines_of(f.path);
  lines.erase(lines.begin() + 2); // the first run's closing checkpoint
  put_lines(f.path, lines);
  r = verify({f.path}, key.get());
  CHECK(r.status == 1);
  CHECK(r.text.find(f.path + ":2: writer w1: the chain ends at seq 2 without its closing checkpoint") != std::string::npos);
  verify_request only;
  only.files = {f.path};
  only.writer = "nobody";
  std::ostringstream out;
  CHECK(verify_chain(only, out) == 1);
  CHECK(out.str().find("no line of writer nobody") != std::string::npos);
}
