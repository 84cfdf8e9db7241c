#include "filters/git_upload_pack.hpp"

#include <catch2/catch.hpp>
#include <string>

using namespace sluice::filters;

namespace {
std::string pkt(const std::string &line) {
  char len[5];
  std::snprintf(len, sizeof len, "%04x", static_cast<unsigned>(line.size() + 4));
  return len + line;
}
const std::string oid(40, 'b');
} // namespace

TEST_CASE("git-upload-pack bodies: fetch negotiation only", "[filters][git]") {
  struct row {
    std::string body;
    bool ok;
  };
  const row rows[] = {
      {pkt("want " + oid + " multi_ack_detailed side-band-64k ofs-delta\n") + "0000" + pkt("done\n"), true},
      {pkt("want " + oid + "\n") + pkt("shallow " + oid + "\n") + pkt("deepen 1\n") + "0000" +
           pkt("have " + oid + "\n") + "0000" + pkt("done\n"), true},
      {pkt("want " + oid + "\n") + pkt("filter blob:none\n") + "0000" + pkt("done\n"), true},
      {pkt("command=ls-refs\n") + pkt("agent=git/2.39\n") + pkt("object-format=sha1\n") + "0001" +
           pkt("peel\n") + pkt("symrefs\n") + pkt("ref-prefix refs/heads/\n") + "0000", true},
      {pkt("command=fetch\n") + pkt("agent=git/2.39\n") + "0001" + pkt("thin-pack\n") + pkt("ofs-delta\n") +
           pkt("want " + oid + "\n") + pkt("done\n") + "0000", true},
      // Hostile.
      {"", false},
      {"0000", false},
      {pkt("command=push\n") + "0000", false},
      {pkt("command=fetch\n") + "0001" + pkt("want " + oid + "\n") + "0000" + pkt("want " + oid + "\n"), false},
      {pkt("command=ls-refs\n") + "0001" + pkt("want " + oid + "\n") + "0000", false},
      {pkt("command=fetch\n") + pkt("evil=1\n") + "0000", false},
      {pkt("want nothex\n") + "0000", false},
      {pkt("have " + oid + " extra\n") + "0000", false},
      {pkt("want " + oid + "\n") + pkt("rm -rf /\n") + "0000", false},
      {pkt("want " + oid + "\n") + "00", false},
      {pkt("want " + oid + "\n") + "0003", false},
      {"zzzzwant", false},
      {"0100" + std::string("want ") + oid, false}, // length past the end
      {pkt("want " + oid + "\x01\n") + "0000", false},
  };
  for (const auto &r : rows) {
    INFO(r.body);
    CHECK(check_git_upload_pack(r.body, false).empty() == r.ok);
  }
}

TEST_CASE("git request recognition", "[filters][git]") {
  CHECK(is_git_upload_pack("POST", "/org/repo.git/git-upload-pack", "application/x-git-upload-pack-request"));
  CHECK_FALSE(is_git_upload_pack("POST", "/org/repo.git/git-upload-pack", "text/plain"));
  CHECK_FALSE(is_git_upload_pack("POST", "/org/repo.git/git-upload-pack/x", "application/x-git-upload-pack-request"));
  CHECK_FALSE(is_git_upload_pack("PUT", "/r/git-upload-pack", "application/x-git-upload-pack-request"));
  CHECK(is_git_receive_pack("/r.git/git-receive-pack"));
  CHECK(is_git_receive_pack("/r.git/info/refs?service=git-receive-pack"));
  CHECK_FALSE(is_git_receive_pack("/r.git/info/refs?service=git-upload-pack"));
  CHECK_FALSE(gunzip("not gzip at all, long enough", 100).has_value());
}
