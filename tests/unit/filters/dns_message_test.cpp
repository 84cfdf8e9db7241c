#include "filters/dns_message.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

using namespace sluice::filters;

namespace {
// A query as a stub resolver sends it: id 0x1234, RD set, one question.
std::string query(const std::vector<std::string> &labels, std::uint16_t type, std::uint16_t qclass = 1,
                  std::uint8_t flags1 = 0x01) {
  std::string q = {'\x12', '\x34', static_cast<char>(flags1), '\0', '\0', '\1', '\0', '\0', '\0', '\0',
                   '\0', '\0'};
  for (auto &l : labels) {
    q += static_cast<char>(l.size());
    q += l;
  }
  q += '\0';
  q += static_cast<char>(type >> 8);
  q += static_cast<char>(type & 0xff);
  q += static_cast<char>(qclass >> 8);
  q += static_cast<char>(qclass & 0xff);
  return q;
}
unsigned rcode(const std::string &r) { return static_cast<std::uint8_t>(r[3]) & 0x0f; }
unsigned count(const std::string &r, std::size_t at) {
  return (static_cast<std::uint8_t>(r[at]) << 8) | static_cast<std::uint8_t>(r[at + 1]);
}
std::vector<std::string> asked;
const dns_lookup pool = [](const std::string &name) -> std::optional<std::array<std::uint8_t, 4>> {
  asked.push_back(name);
  if (name == "full.test") return std::nullopt;
  return std::array<std::uint8_t, 4>{198, 19, 0, 7};
};
} // namespace

TEST_CASE("DNS: an A query gets the pool's address, as an authoritative answer", "[filters][dns]") {
  asked.clear();
  auto r = answer_dns_query(query({"Origin", "TEST"}, 1), pool, 60);
  REQUIRE(r.size() == 12 + 17 + 16); // header, question, one A record
  CHECK(r.substr(0, 2) == "\x12\x34");
  CHECK((static_cast<std::uint8_t>(r[2]) & 0x85) == 0x85); // QR, AA, RD kept
  CHECK(rcode(r) == 0);
  CHECK(count(r, 4) == 1);
  CHECK(count(r, 6) == 1);
  CHECK(r.substr(12, 13) == std::string("\6Origin\4TEST\0", 13)); // the question as asked (0x20 case)
  CHECK(asked == std::vector<std::string>{"origin.test"});         // looked up lower-case
  CHECK(r.substr(r.size() - 4) == std::string("\xc6\x13\x00\x07", 4));
  CHECK(count(r, r.size() - 6) == 4);
}

TEST_CASE("DNS: other types get no records, so clients use the A answer", "[filters][dns]") {
  asked.clear();
  for (std::uint16_t type : {28, 65, 15, 16, 255}) {
    auto r = answer_dns_query(query({"origin", "test"}, type), pool);
    CHECK(rcode(r) == 0);
    CHECK(count(r, 6) == 0);
  }
  CHECK(asked.empty());
}

TEST_CASE("DNS: localhost, dotted quads, full pools and bad names", "[filters][dns]") {
  auto r = answer_dns_query(query({"localhost"}, 1), pool);
  CHECK(r.substr(r.size() - 4) == std::string("\x7f\0\0\1", 4));
  r = answer_dns_query(query({"api", "localhost"}, 1), pool);
  CHECK(r.substr(r.size() - 4) == std::string("\x7f\0\0\1", 4));
  r = answer_dns_query(query({"10", "1", "2", "3"}, 1), pool);
  CHECK(r.substr(r.size() - 4) == std::string("\x0a\x01\x02\x03", 4));
  r = answer_dns_query(query({"full", "test"}, 1), pool);
  CHECK(rcode(r) == 2);
  CHECK(count(r, 6) == 0);
  r = answer_dns_query(query({"bad name", "test"}, 1), pool);
  CHECK(rcode(r) == 3);
  r = answer_dns_query(query({}, 1), pool);
  CHECK(rcode(r) == 3);
  r = answer_dns_query(query({"origin", "test"}, 1, 3), pool); // class CH
  CHECK(rcode(r) == 4);
}

TEST_CASE("DNS: malformed queries", "[filters][dns]") {
  CHECK(answer_dns_query("", pool).empty());
  CHECK(answer_dns_query(std::string(11, '\0'), pool).empty());
  CHECK(answer_dns_query(query({"a"}, 1, 1, 0x81), pool).empty()); // a response
  CHECK(answer_dns_query(std::string(max_dns_query_bytes + 1, '\0'), pool).empty());
  auto q = query({"origin", "test"}, 1);
  CHECK(rcode(answer_dns_query(q.substr(0, q.size() - 2), pool)) == 1); // truncated question
  auto two = q;
  two[5] = 2;
  CHECK(rcode(answer_dns_query(two, pool)) == 1);
  auto pointer = q.substr(0, 12) + "\xc0\x0c" + q.substr(q.size() - 4);
  CHECK(rcode(answer_dns_query(pointer, pool)) == 1);
  auto update = q;
  update[2] = static_cast<char>(5 << 3); // UPDATE
  CHECK(rcode(answer_dns_query(update, pool)) == 4);
  std::vector<std::string> long_name(5, std::string(63, 'a'));
  CHECK(rcode(answer_dns_query(query(long_name, 1), pool)) == 1); // over 253 characters
}
