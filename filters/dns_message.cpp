#include "filters/dns_message.hpp"
#include "filters/host_name.hpp"

namespace sluice::filters {
namespace {

constexpr std::uint16_t type_a = 1;
constexpr std::uint16_t class_in = 1;
enum rcode : std::uint8_t { noerror = 0, formerr = 1, servfail = 2, nxdomain = 3, notimp = 4 };

std::uint16_t get16(std::string_view m, std::size_t at) {
  return static_cast<std::uint16_t>((static_cast<std::uint8_t>(m[at]) << 8) | static_cast<std::uint8_t>(m[at + 1]));
}
void put16(std::string &out, std::uint16_t v) {
  out += static_cast<char>(v >> 8);
  out += static_cast<char>(v & 0xff);
}

// Header of the answer: the query's id, QR and AA set, the query's opcode and RD, RA set.
std::string header(std::string_view q, std::uint8_t code, std::uint16_t qd, std::uint16_t an) {
  std::string out;
  out += q[0];
  out += q[1];
  auto flags1 = static_cast<std::uint8_t>(q[2]);
  out += static_cast<char>(0x80 | (flags1 & 0x78) | 0x04 | (flags1 & 0x01)); // QR, opcode, AA, RD
  out += static_cast<char>(0x80 | code);                                      // RA, RCODE
  put16(out, qd);
  put16(out, an);
  put16(out, 0);
  put16(out, 0);
  return out;
}

} // namespace

std::string answer_dns_query(std::string_view q, const dns_lookup &lookup, std::uint32_t ttl) {
  if (q.size() < 12 || q.size() > max_dns_query_bytes) return {};
  auto flags1 = static_cast<std::uint8_t>(q[2]);
  if (flags1 & 0x80) return {}; // a response: answering it could loop
  if (((flags1 >> 3) & 0x0f) != 0) return header(q, notimp, 0, 0);
  if (get16(q, 4) != 1) return header(q, formerr, 0, 0);

  // The question: labels (no compression in a question), type, class.
  std::size_t at = 12;
  std::string name;
  for (;;) {
    if (at >= q.size()) return header(q, formerr, 0, 0);
    auto len = static_cast<std::uint8_t>(q[at]);
    if (len == 0) {
      ++at;
      break;
    }
    if (len > 63 || at + 1 + len > q.size() || name.size() + len + 1 > 254) {
      return header(q, formerr, 0, 0); // also catches compression pointers (0xc0 and up)
    }
    if (!name.empty()) name += '.';
    name.append(q.substr(at + 1, len));
    at += 1 + len;
  }
  if (at + 4 > q.size()) return header(q, formerr, 0, 0);
  std::uint16_t type = get16(q, at), qclass = get16(q, at + 2);
  std::string_view question = q.substr(12, at + 4 - 12);

  auto with_question = [&](std::uint8_t code, std::uint16_t answers) {
    std::string out = header(q, code, 1, answers);
    out += question;
    return out;
  };
  if (qclass != class_in) return with_question(notimp, 0);
  if (name.empty()) return with_question(nxdomain, 0); // the root
  auto parsed = parse_host(name);
  if (!parsed.host || (parsed.host->ip && !parsed.host->ip->is_v4())) return with_question(nxdomain, 0);
  if (type != type_a) return with_question(noerror, 0);

  std::optional<std::array<std::uint8_t, 4>> addr;
  const std::string &n = parsed.host->name;
  if (parsed.host->ip) {
    addr = parsed.host->ip->to_v4().to_bytes(); // a dotted quad asked for as a name: itself
  } else if (n == "localhost" || (n.size() > 10 && n.ends_with(".localhost"))) {
    addr = std::array<std::uint8_t, 4>{127, 0, 0, 1}; // RFC 6761
  } else {
    addr = lookup(n);
  }
  if (!addr) return with_question(servfail, 0);
  std::string out = with_question(noerror, 1);
  put16(out, 0xc00c); // the name: a pointer to the question's
  put16(out, type_a);
  put16(out, class_in);
  put16(out, static_cast<std::uint16_t>(ttl >> 16));
  put16(out, static_cast<std::uint16_t>(ttl & 0xffff));
  put16(out, 4);
  out.append(reinterpret_cast<const char *>(addr->data()), 4);
  return out;
}

} // namespace sluice::filters
