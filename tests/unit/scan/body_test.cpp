// Bodies: gzip (one member or several) and deflate (zlib or raw) decoded in pieces, the bound on
// the decoded size, and what cannot be decoded.
#include "vectors.hpp"
#include "scan/body.hpp"

#include <boost/beast/zlib/deflate_stream.hpp>
#include <boost/crc.hpp>
#include <catch2/catch.hpp>
#include <cctype>
#include <cstdio>
#include <random>

using namespace sluice::scan;
using namespace scan_test;
namespace zlib = boost::beast::zlib;

namespace {

// Raw deflate (RFC 1951) of `in`, by Beast's compressor.
std::string deflate_raw(std::string_view in) {
  zlib::deflate_stream ds;
  std::string out(in.size() + in.size() / 10 + 1024, '\0');
  zlib::z_params zs;
  zs.next_in = in.data();
  zs.avail_in = in.size();
  zs.next_out = out.data();
  zs.avail_out = out.size();
  boost::system::error_code ec;
  ds.write(zs, zlib::Flush::finish, ec);
  REQUIRE((!ec || ec == zlib::error::end_of_stream));
  out.resize(zs.total_out);
  return out;
}

void le32(std::string &s, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

// A gzip member (RFC 1952): header (with a file name when given), deflate data, CRC32, ISIZE.
std::string gzip(std::string_view in, std::string_view file_name = "") {
  std::string out = {'\x1f', '\x8b', '\x08', file_name.empty() ? '\0' : '\x08', 0, 0, 0, 0, 0, '\xff'};
  if (!file_name.empty()) {
    out += file_name;
    out += '\0';
  }
  out += deflate_raw(in);
  boost::crc_32_type crc;
  crc.process_bytes(in.data(), in.size());
  le32(out, crc.checksum());
  le32(out, static_cast<std::uint32_t>(in.size()));
  return out;
}

// zlib (RFC 1950): 78 9C, deflate data, Adler-32 (big-endian).
std::string zlib_wrapped(std::string_view in) {
  std::string out = "\x78\x9c";
  out += deflate_raw(in);
  std::uint32_t a = 1, b = 0;
  for (unsigned char c : in) {
    a = (a + c) % 65521;
    b = (b + a) % 65521;
  }
  std::uint32_t adler = (b << 16) | a;
  for (int i = 3; i >= 0; --i) out += static_cast<char>((adler >> (8 * i)) & 0xff);
  return out;
}

std::string text_with_token(std::size_t size, const std::string &token) {
  std::string s;
  while (s.size() < size / 2) s += "{\"name\": \"left-pad\", \"version\": \"1.3.0\"},\n";
  s += token;
  while (s.size() < size) s += "\n{\"name\": \"right-pad\", \"version\": \"2.0.1\"},";
  return s;
}

// Scans `body` as sent with `encoding`, in pieces of `piece` bytes.
std::pair<body_status, std::vector<finding>> scan_body(const database_ptr &db, std::string_view encoding,
                                                       const std::string &body, std::size_t piece,
                                                       std::uint64_t max = 1 << 20) {
  scanner s(db, scratch::this_thread(), {false, "", host_mode::enforce});
  body_scan b(s, encoding, max);
  for (std::size_t at = 0; at < body.size(); at += piece) b.feed(std::string_view(body).substr(at, piece));
  auto status = b.finish();
  return {status, s.findings()};
}

} // namespace

TEST_CASE("a gzip body is decoded in pieces and the token found at its decoded offset", "[scan][body]") {
  auto db = builtin_database();
  auto token = github_token();
  auto plain = text_with_token(200'000, token);
  auto body = gzip(plain);
  REQUIRE(body.find("ghp_") == std::string::npos);
  for (std::size_t piece : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, body.size()}) {
    INFO("pieces of " << piece);
    auto [status, findings] = scan_body(db, "gzip", body, piece);
    CHECK(status == body_status::ok);
    REQUIRE(findings.size() == 1);
    CHECK(findings[0].location == "body");
    CHECK(findings[0].offset == plain.find(token));
  }
}

TEST_CASE("gzip members after the first, deflate in both spellings, a file name", "[scan][body]") {
  auto db = builtin_database();
  auto token = github_token();
  auto [s1, f1] = scan_body(db, "x-gzip", gzip("nothing here\n") + gzip("second member " + token), 5);
  CHECK(s1 == body_status::ok);
  REQUIRE(f1.size() == 1);
  CHECK(f1[0].offset == std::string("nothing here\nsecond member ").size());

  auto [s2, f2] = scan_body(db, "Deflate", zlib_wrapped("a=" + token), 3);
  CHECK(s2 == body_status::ok);
  CHECK(f2.size() == 1);
  auto [s3, f3] = scan_body(db, "deflate", deflate_raw("a=" + token), 3);
  CHECK(s3 == body_status::ok);
  CHECK(f3.size() == 1);

  auto [s4, f4] = scan_body(db, "gzip", gzip("harmless", token), 4);
  CHECK(s4 == body_status::ok);
  REQUIRE(f4.size() == 1);
  CHECK(f4[0].location == "body:encoded");

  auto [s5, f5] = scan_body(db, "identity", "x " + token + " y", 2);
  CHECK(s5 == body_status::ok);
  REQUIRE(f5.size() == 1);
  CHECK(f5[0].location == "body");
}

TEST_CASE("the decoded size is bounded", "[scan][body]") {
  auto db = builtin_database();
  std::string zeros(10 << 20, '\0');
  auto bomb = gzip(zeros);
  CHECK(bomb.size() < 20'000);
  scanner s(db);
  body_scan b(s, "gzip", 1 << 20);
  CHECK(b.feed(bomb) == body_status::decode_limit);
  CHECK(b.decoded_bytes() == 1 << 20);
  CHECK(b.finish() == body_status::decode_limit);
  CHECK(to_string(body_status::decode_limit) == "body_decode_limit");
  // Within the bound: fine.
  auto [ok, none] = scan_body(db, "gzip", bomb, 4096, 16 << 20);
  CHECK(ok == body_status::ok);
  CHECK(none.empty());
}

TEST_CASE("what cannot be decoded is said, and scanned as sent", "[scan][body]") {
  auto db = builtin_database();
  auto token = github_token();
  auto [s1, f1] = scan_body(db, "br", "opaque " + token, 10);
  CHECK(s1 == body_status::unsupported_encoding);
  REQUIRE(f1.size() == 1);
  CHECK(f1[0].location == "body:encoded");
  CHECK(scan_body(db, "gzip, gzip", gzip(gzip("x")), 10).first == body_status::unsupported_encoding);
  CHECK(scan_body(db, "gzip", "not gzip at all", 10).first == body_status::decode_error);
  auto whole = gzip(text_with_token(10'000, token));
  CHECK(scan_body(db, "gzip", whole.substr(0, whole.size() / 2), 100).first == body_status::decode_error);
  auto corrupt = whole;
  corrupt[10] = static_cast<char>(corrupt[10] | 0x06); // the first block's type: 11, reserved
  CHECK(scan_body(db, "gzip", corrupt, 100).first == body_status::decode_error);
  // Bytes after the last member are not decoded but are scanned as sent.
  auto [s6, f6] = scan_body(db, "gzip", gzip("fine") + "trailing " + token, 100);
  CHECK(s6 == body_status::ok);
  REQUIRE(f6.size() == 1);
  CHECK(f6[0].location == "body:encoded");
}

TEST_CASE("a form body is scanned percent-decoded too, escapes split between pieces", "[scan][body]") {
  auto db = builtin_database();
  // A private key's line breaks and a webhook URL's slashes are escaped in a form body.
  const std::string key = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA" + alnum(64) + "\n" + alnum(64);
  std::string escaped = "note=hello&key=";
  for (char c : key) {
    if (std::isalnum(static_cast<unsigned char>(c))) escaped += c;
    else if (c == ' ') escaped += '+';
    else {
      char b[4];
      std::snprintf(b, sizeof b, "%%%02X", static_cast<unsigned char>(c));
      escaped += b;
    }
  }
  REQUIRE(escaped.find("PRIVATE KEY") == std::string::npos);
  for (std::size_t piece : {std::size_t{1}, std::size_t{2}, std::size_t{5}, escaped.size()}) {
    INFO("pieces of " << piece);
    scanner s(db);
    body_scan b(s, "", 0, "body", true);
    for (std::size_t at = 0; at < escaped.size(); at += piece) b.feed(std::string_view(escaped).substr(at, piece));
    CHECK(b.finish() == body_status::ok);
    REQUIRE(s.findings().size() == 1);
    CHECK(s.findings()[0].rule == "private_key");
    CHECK(s.findings()[0].location == "body:form");
  }
  // Not a form: the escapes are left alone (a JSON body's "%41" is text).
  scanner s(db);
  body_scan b(s, "", 0, "body", false);
  b.feed(escaped);
  b.finish();
  CHECK(s.findings().empty());
}
