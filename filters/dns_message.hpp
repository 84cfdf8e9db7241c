#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::filters {

// The DNS responder inside an exec sandbox (transparent capture, docs/policy.md): every name gets
// an address from a synthetic pool, so that the gateway can tell from the address a captured
// connection was made to which name the command asked for. Nothing is ever forwarded to a real DNS
// server. Pure message handling: no sockets.

// The largest query accepted over UDP or TCP (a query is one question: well under 512 bytes).
inline constexpr std::size_t max_dns_query_bytes = 4096;

// Address for a name (lower-case, no trailing dot, already a valid host name), or nullopt when
// none can be given (the pool is full): the responder answers SERVFAIL then.
using dns_lookup = std::function<std::optional<std::array<std::uint8_t, 4>>(const std::string &name)>;

// Answers one query message. A query of one question of class IN gets: type A -> the lookup's
// address (`localhost` and names under it: 127.0.0.1); any other type (AAAA, HTTPS, MX...) -> no
// records (NODATA), so clients use the IPv4 answer. A name that is not a valid host name ->
// NXDOMAIN; opcodes other than QUERY -> NOTIMP; several questions or a malformed question ->
// FORMERR. Returns an empty string for what deserves no answer at all (a response, a message shorter
// than the header, more than max_dns_query_bytes). `ttl` is the answer's time to live in seconds.
std::string answer_dns_query(std::string_view query, const dns_lookup &lookup, std::uint32_t ttl = 60);

} // namespace sluice::filters
