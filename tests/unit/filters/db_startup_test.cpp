#include "filters/db_startup.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

using namespace sluice::filters;

namespace {

std::string big_endian_32(std::uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}
std::string little_endian(std::uint32_t v, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out += static_cast<char>(v >> (8 * i));
  return out;
}
// A NUL-terminated string.
std::string z(std::string_view s) { return std::string(s) + '\0'; }

// PostgreSQL: a message of the client's start (int32 length including itself, int32 code, body).
std::string pg_message(std::uint32_t code, const std::string &body = {}) {
  return big_endian_32(static_cast<std::uint32_t>(8 + body.size())) + big_endian_32(code) + body;
}
const std::string pg_ssl_request = pg_message(80877103);
const std::string pg_gssenc_request = pg_message(80877104);
std::string pg_startup(const std::vector<std::pair<std::string, std::string>> &pairs) {
  std::string body;
  for (auto &[key, value] : pairs) body += z(key) + z(value);
  return pg_message(196608, body + '\0');
}

// MySQL: a packet with sequence id 1, the client's answer to the server's greeting.
std::string mysql_packet(const std::string &payload) { return little_endian(payload.size(), 3) + '\1' + payload; }
std::string mysql_fixed(std::uint32_t capabilities) {
  return little_endian(capabilities, 4) + little_endian(16 * 1024 * 1024, 4) + '\xff' + std::string(23, '\0');
}
// What a MySQL 8 client sends: CLIENT_LONG_PASSWORD, FOUND_ROWS, LONG_FLAG, LOCAL_FILES, PROTOCOL_41,
// INTERACTIVE, TRANSACTIONS, SECURE_CONNECTION, MULTI_STATEMENTS, MULTI_RESULTS, PS_MULTI_RESULTS,
// PLUGIN_AUTH, CONNECT_ATTRS, PLUGIN_AUTH_LENENC_CLIENT_DATA, DEPRECATE_EOF (+ CONNECT_WITH_DB).
constexpr std::uint32_t mysql8_capabilities = 0x013fa687 & ~0x8u;
constexpr std::uint32_t connect_with_db = 0x8;
// caching_sha2_password's scramble: 32 bytes, here a recognizable stand-in for a secret.
const std::string mysql_scramble = "SCRAMBLE-SECRET-0123456789abcdef";
std::string mysql8_response(bool with_database) {
  std::string attributes = "\x0c_client_name\x08libmysql\x04_pid\x05" "12345";
  std::string payload = mysql_fixed(mysql8_capabilities | (with_database ? connect_with_db : 0)) + z("app") +
                        static_cast<char>(mysql_scramble.size()) + mysql_scramble;
  if (with_database) payload += z("shop");
  payload += z("caching_sha2_password") + static_cast<char>(attributes.size()) + attributes;
  return mysql_packet(payload);
}

struct expected {
  db_protocol protocol;
  std::string user, database;
  bool tls = false;
  bool done = true;
};

void check(const db_startup_sniffer &sniffer, const expected &want, std::string_view secret) {
  CHECK(sniffer.info().protocol == want.protocol);
  CHECK(sniffer.info().user == want.user);
  CHECK(sniffer.info().database == want.database);
  CHECK(sniffer.info().tls == want.tls);
  CHECK(sniffer.done() == want.done);
  if (!secret.empty()) { // a credential never shows, not even in part of a value
    CHECK(sniffer.info().user.find(secret) == std::string::npos);
    CHECK(sniffer.info().database.find(secret) == std::string::npos);
  }
}

// Feeds `bytes` whole, one byte at a time, and cut in two at every place: the same result each way.
void check_all_ways(const std::string &bytes, unsigned port, const expected &want, std::string_view secret = {}) {
  {
    INFO("whole");
    db_startup_sniffer sniffer(port);
    sniffer.feed(bytes);
    check(sniffer, want, secret);
  }
  {
    INFO("one byte at a time");
    db_startup_sniffer sniffer(port);
    for (char c : bytes) sniffer.feed(std::string_view(&c, 1));
    check(sniffer, want, secret);
  }
  for (std::size_t cut = 1; cut < bytes.size(); ++cut) {
    INFO("cut at " << cut);
    db_startup_sniffer sniffer(port);
    sniffer.feed(std::string_view(bytes).substr(0, cut));
    sniffer.feed(std::string_view(bytes).substr(cut));
    check(sniffer, want, secret);
  }
}

// How many bytes, fed one at a time, it takes to be done (0: never, within `bytes`).
std::size_t bytes_until_done(const std::string &bytes, unsigned port) {
  db_startup_sniffer sniffer(port);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    sniffer.feed(std::string_view(bytes).substr(i, 1));
    if (sniffer.done()) return i + 1;
  }
  return 0;
}

} // namespace

TEST_CASE("db startup: psql's SSLRequest, refused, then its StartupMessage", "[filters][db_startup]") {
  // As psql 15 sent it (sslmode=prefer, the server answered 'N'), captured on loopback.
  const std::string captured("\x00\x00\x00\x08\x04\xd2\x16/\x00\x00\x00" "8\x00\x03\x00\x00user\x00"
                             "alice\x00" "database\x00shop\x00" "application_name\x00psql\x00\x00", 64);
  REQUIRE(captured == pg_ssl_request + pg_startup({{"user", "alice"}, {"database", "shop"},
                                                   {"application_name", "psql"}}));
  // The password message that follows is never read: done before it.
  check_all_ways(captured + "p\x00\x00\x00\x0bsekret\x00", 5432, {db_protocol::postgresql, "alice", "shop"},
                 "sekret");
  check_all_ways(captured, 15432, {db_protocol::postgresql, "alice", "shop"});
}

TEST_CASE("db startup: a StartupMessage without a database is the user's own", "[filters][db_startup]") {
  check_all_ways(pg_startup({{"user", "bob"}, {"client_encoding", "UTF8"}}), 5432,
                 {db_protocol::postgresql, "bob", "bob"});
  check_all_ways(pg_startup({{"database", ""}, {"user", "bob"}}), 5432, {db_protocol::postgresql, "bob", "bob"});
  check_all_ways(pg_startup({{"options", "-c search_path=x"}}), 5432, {db_protocol::postgresql, "", ""});
  // Protocol 3.2 (PostgreSQL 18) has the same StartupMessage.
  auto v32 = pg_startup({{"user", "carol"}, {"database", "hr"}});
  v32[7] = 2;
  check_all_ways(v32, 5432, {db_protocol::postgresql, "carol", "hr"});
}

TEST_CASE("db startup: SSLRequest accepted, then TLS", "[filters][db_startup]") {
  const std::string client_hello("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11);
  check_all_ways(pg_ssl_request + client_hello, 5432, {db_protocol::postgresql, "", "", true});
  // GSSENCRequest refused, then SSLRequest (libpq's order with gssencmode=prefer).
  check_all_ways(pg_gssenc_request + pg_ssl_request + client_hello, 5432, {db_protocol::postgresql, "", "", true});
  check_all_ways(pg_gssenc_request + pg_ssl_request + pg_startup({{"user", "u"}, {"database", "d"}}), 5432,
                 {db_protocol::postgresql, "u", "d"});
  // Direct TLS (PostgreSQL 17's sslnegotiation=direct): the port says which protocol it is.
  check_all_ways(client_hello, 5432, {db_protocol::postgresql, "", "", true});
  check_all_ways(client_hello, 443, {db_protocol::unknown, "", "", true});
}

TEST_CASE("db startup: CancelRequest is PostgreSQL, and its key is not kept", "[filters][db_startup]") {
  check_all_ways(pg_message(80877102, big_endian_32(4242) + "KEY!"), 5432, {db_protocol::postgresql, "", ""}, "KEY!");
}

TEST_CASE("db startup: a PostgreSQL length too large is not waited for", "[filters][db_startup]") {
  // 60000 bytes declared: more than is ever looked at, so done after the 8 bytes that say so.
  auto huge = big_endian_32(60000) + big_endian_32(196608) + z("user") + z("alice");
  CHECK(bytes_until_done(huge, 5432) == 8);
  // 2 GiB declared: not a PostgreSQL start at all.
  CHECK(bytes_until_done(big_endian_32(0x7fffffff) + big_endian_32(196608), 5432) == 3);
  // Malformed: too short a StartupMessage, an unknown request code.
  check_all_ways(big_endian_32(8) + big_endian_32(196608), 5432, {db_protocol::unknown, "", ""});
  check_all_ways(pg_message(80877199), 5432, {db_protocol::unknown, "", ""});
  // A StartupMessage whose last pair is cut keeps what came before.
  auto cut = pg_message(196608, z("user") + z("dave") + z("database") + "no-nul");
  check_all_ways(cut, 5432, {db_protocol::postgresql, "dave", "dave"});
}

TEST_CASE("db startup: MySQL 8's HandshakeResponse41", "[filters][db_startup]") {
  check_all_ways(mysql8_response(true), 3306, {db_protocol::mysql, "app", "shop"}, "SECRET");
  check_all_ways(mysql8_response(false), 3306, {db_protocol::mysql, "app", ""}, "SECRET");
  // On another port, told by its shape.
  check_all_ways(mysql8_response(true), 13306, {db_protocol::mysql, "app", "shop"}, "SECRET");
  // The scramble can hold NULs and the bytes of a name: it is skipped by its length.
  std::string scramble = std::string("\0shop\0app\0", 10) + std::string(22, 'x');
  auto payload = mysql_fixed(mysql8_capabilities | connect_with_db) + z("root") + '\x20' + scramble + z("sales") +
                 z("caching_sha2_password");
  check_all_ways(mysql_packet(payload), 3306, {db_protocol::mysql, "root", "sales"});
}

TEST_CASE("db startup: MySQL auth responses framed the older ways", "[filters][db_startup]") {
  constexpr std::uint32_t protocol_41 = 0x200, secure_connection = 0x8000;
  // CLIENT_SECURE_CONNECTION: a 1-byte length (mysql_native_password's 20 bytes).
  auto native = mysql_fixed(protocol_41 | secure_connection | connect_with_db) + z("web") + '\x14' +
                std::string("NATIVE-SECRET-20byte", 20) + z("blog") + z("mysql_native_password");
  check_all_ways(mysql_packet(native), 3306, {db_protocol::mysql, "web", "blog"}, "SECRET");
  // Neither: a NUL-terminated response; a database without its NUL ends with the packet.
  auto old = mysql_fixed(protocol_41 | connect_with_db) + z("web") + z("OLD-SECRET") + "blog";
  check_all_ways(mysql_packet(old), 3306, {db_protocol::mysql, "web", "blog"}, "SECRET");
  // A lenenc length of 2 bytes (0xfc).
  auto long_auth = mysql_fixed(protocol_41 | 0x00200000 | connect_with_db) + z("big") + "\xfc\x2c\x01" +
                   std::string(300, 'S') + z("db");
  check_all_ways(mysql_packet(long_auth), 3306, {db_protocol::mysql, "big", "db"}, "SSSS");
  // An auth response longer than the packet: the user is known, nothing after it.
  auto overrun = mysql_fixed(protocol_41 | secure_connection | connect_with_db) + z("web") + "\x40" + "short";
  check_all_ways(mysql_packet(overrun), 3306, {db_protocol::mysql, "web", ""});
}

TEST_CASE("db startup: MySQL's SSLRequest means TLS follows", "[filters][db_startup]") {
  auto ssl_request = mysql_packet(mysql_fixed(mysql8_capabilities | 0x800));
  REQUIRE(ssl_request.size() == 36);
  const std::string client_hello("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11);
  check_all_ways(ssl_request + client_hello, 3306, {db_protocol::mysql, "", "", true});
  check_all_ways(ssl_request, 3307, {db_protocol::mysql, "", "", true});
  CHECK(bytes_until_done(ssl_request + client_hello, 3306) == 36);
}

TEST_CASE("db startup: what is not MySQL on its port", "[filters][db_startup]") {
  // Wrong sequence id, no CLIENT_PROTOCOL_41, a filler byte set: decided as soon as it shows.
  auto response = mysql8_response(true);
  auto wrong_sequence = response;
  wrong_sequence[3] = 0;
  CHECK(bytes_until_done(wrong_sequence, 3306) == 4);
  auto no_41 = response;
  no_41[5] = 0;
  CHECK(bytes_until_done(no_41, 3306) == 6);
  auto filler = response;
  filler[20] = 1;
  CHECK(bytes_until_done(filler, 3306) == 21);
  check_all_ways(filler, 3306, {db_protocol::unknown, "", ""});
  check_all_ways("GET / HTTP/1.1\r\n", 3306, {db_protocol::unknown, "", ""});
}

TEST_CASE("db startup: redis-cli's AUTH user password, SELECT", "[filters][db_startup]") {
  // As redis-cli 7.0 sent them (--user bob --pass s3cret -n 3 PING), captured on loopback.
  const std::string captured = "*3\r\n$4\r\nAUTH\r\n$3\r\nbob\r\n$6\r\ns3cret\r\n"
                               "*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n*1\r\n$4\r\nPING\r\n";
  // Three commands: the fourth may still say something.
  check_all_ways(captured, 6379, {db_protocol::redis, "bob", "3", false, false}, "s3cret");
  check_all_ways(captured + "*1\r\n$4\r\nPING\r\n", 6379, {db_protocol::redis, "bob", "3"}, "s3cret");
  // The fifth command is not looked at.
  check_all_ways(captured + "*1\r\n$4\r\nPING\r\n*2\r\n$6\r\nSELECT\r\n$1\r\n9\r\n", 6379,
                 {db_protocol::redis, "bob", "3"}, "s3cret");
}

TEST_CASE("db startup: redis AUTH password alone, HELLO with AUTH", "[filters][db_startup]") {
  // redis-cli -a onlypw PING; then four commands in all.
  const std::string auth = "*2\r\n$4\r\nAUTH\r\n$6\r\nonlypw\r\n*1\r\n$4\r\nPING\r\n";
  check_all_ways(auth + auth, 16379, {db_protocol::redis, "default", ""}, "onlypw");
  // redis-cli -3 sends AUTH, then HELLO 3 alone; clients such as redis-py put AUTH in HELLO.
  const std::string hello = "*7\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$4\r\nAUTH\r\n$5\r\ncarol\r\n$10\r\nhello-pass\r\n"
                            "$7\r\nSETNAME\r\n$4\r\nAUTH\r\n";
  check_all_ways(hello, 6379, {db_protocol::redis, "carol", "", false, false}, "hello-pass");
  check_all_ways("*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n*2\r\n$6\r\nselect\r\n$2\r\n15\r\n", 6379,
                 {db_protocol::redis, "", "15", false, false});
  // A bulk argument may hold CR and LF: it is read by its length.
  check_all_ways("*3\r\n$4\r\nAUTH\r\n$4\r\nerin\r\n$6\r\npw\r\nxx\r\n", 6379,
                 {db_protocol::redis, "erin", "", false, false}, "pw\r\n");
}

TEST_CASE("db startup: redis inline commands", "[filters][db_startup]") {
  check_all_ways("AUTH inline-secret\r\nSELECT 2\r\n", 6379, {db_protocol::redis, "default", "2", false, false},
                 "inline-secret");
  check_all_ways("auth frank  pw-secret\n\r\nPING\r\n*2\r\n$6\r\nSELECT\r\n$1\r\n4\r\nPING\r\n", 6379,
                 {db_protocol::redis, "frank", "4"}, "pw-secret");
}

TEST_CASE("db startup: redis in TLS, and malformed RESP", "[filters][db_startup]") {
  const std::string client_hello("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11);
  check_all_ways(client_hello, 6379, {db_protocol::redis, "", "", true});
  CHECK(bytes_until_done(client_hello, 6379) == 3);
  check_all_ways("*2\r\n$4\r\nAUTH\r\n:1\r\n", 6379, {db_protocol::unknown, "", ""});
  check_all_ways("*2\r\n$4\r\nAUTHxx", 6379, {db_protocol::unknown, "", ""});
  check_all_ways("*1\r\n$4\r\nPING\r\n*x\r\n", 6379, {db_protocol::redis, "", ""});
  // A header line that never ends is not waited for.
  CHECK(bytes_until_done("*1" + std::string(100, '1'), 6379) <= 40);
}

TEST_CASE("db startup: other protocols are unknown, quickly", "[filters][db_startup]") {
  check_all_ways("GET / HTTP/1.1\r\nHost: x\r\n\r\n", 80, {db_protocol::unknown, "", ""});
  check_all_ways("SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n", 22, {db_protocol::unknown, "", ""});
  CHECK(bytes_until_done("SSH-2.0-OpenSSH_9.2p1\r\n", 22) == 3);
  CHECK(bytes_until_done("PRI * HTTP/2.0\r\n", 443) == 3);
  CHECK(bytes_until_done(std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8), 9000) <= 4);
  CHECK(bytes_until_done(std::string(16, '\0'), 9000) == 8);
  check_all_ways(std::string("\x00\x00\x00\x00\x00\x00\x00\x00", 8), 9000, {db_protocol::unknown, "", ""});
  db_startup_sniffer nothing(5432);
  nothing.feed("");
  check(nothing, {db_protocol::unknown, "", "", false, false}, {});
}

TEST_CASE("db startup: no more than 8 KiB is looked at", "[filters][db_startup]") {
  // An inline command whose line never ends: 1 MiB of it.
  std::string endless = "AUTH " + std::string(1024 * 1024, 'a');
  CHECK(bytes_until_done(endless, 6379) == max_db_startup_bytes);
  db_startup_sniffer whole(6379);
  whole.feed(endless);
  CHECK(whole.done());
  CHECK(whole.info().user.empty());
  // Many small commands that say nothing: still bounded.
  std::string empty_lines(1024 * 1024, '\n');
  CHECK(bytes_until_done("PING\r\n" + empty_lines, 6379) == max_db_startup_bytes);
  // A bulk argument of 1 MiB: done at its header, without buffering it.
  std::string set = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1048576\r\n" + std::string(1024 * 1024, 'v') + "\r\n";
  CHECK(bytes_until_done(set, 6379) == 30);
  // A MySQL packet larger than 8 KiB: not read, not even taken for MySQL (no real client sends one).
  auto large = mysql_fixed(mysql8_capabilities) + z("app") + std::string(9000, 'x');
  CHECK(bytes_until_done(mysql_packet(large), 3306) == 3);
}

TEST_CASE("db startup: values are kept only printable and short", "[filters][db_startup]") {
  std::string long_user(200, 'u');
  check_all_ways(pg_startup({{"user", long_user}, {"database", "d\x01" "b"}}), 5432,
                 {db_protocol::postgresql, std::string(max_db_value_bytes, 'u'), ""});
  check_all_ways(pg_startup({{"user", "j\xc3\xbcrgen"}, {"database", "caf\xc3\xa9 db"}}), 5432,
                 {db_protocol::postgresql, "", ""});
  check_all_ways(pg_startup({{"user", "a b"}, {"database", "x\"y"}}), 5432, {db_protocol::postgresql, "a b", "x\"y"});
}

TEST_CASE("db startup: feeding after done changes nothing", "[filters][db_startup]") {
  db_startup_sniffer sniffer(5432);
  sniffer.feed(pg_startup({{"user", "alice"}}));
  REQUIRE(sniffer.done());
  sniffer.feed(pg_startup({{"user", "mallory"}}));
  CHECK(sniffer.info().user == "alice");
  CHECK(db_startup_sniffer::name(db_protocol::postgresql) == "postgresql");
  CHECK(db_startup_sniffer::name(db_protocol::mysql) == "mysql");
  CHECK(db_startup_sniffer::name(db_protocol::redis) == "redis");
  CHECK(db_startup_sniffer::name(db_protocol::unknown).empty());
}
