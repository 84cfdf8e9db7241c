#include "filters/db_startup.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <optional>
#include <vector>

namespace sluice::filters {
namespace {

constexpr unsigned char tls_handshake = 0x16; // the first byte of a TLS record carrying a ClientHello

// PostgreSQL request codes (the int32 after the length of a client's first message).
constexpr std::uint32_t pg_cancel_request = 80877102;
constexpr std::uint32_t pg_ssl_request = 80877103;
constexpr std::uint32_t pg_gssenc_request = 80877104;
constexpr std::uint32_t pg_major_3 = 3;   // protocol 3.x: 196608 (3.0), 196610 (3.2)
constexpr unsigned pg_max_negotiations = 2; // libpq: GSSENCRequest, then SSLRequest, then StartupMessage

// MySQL capability flags, and where HandshakeResponse41's fields sit in its packet.
constexpr std::uint32_t mysql_connect_with_db = 0x00000008;
constexpr std::uint32_t mysql_protocol_41 = 0x00000200;
constexpr std::uint32_t mysql_ssl = 0x00000800;
constexpr std::uint32_t mysql_secure_connection = 0x00008000;
constexpr std::uint32_t mysql_plugin_auth_lenenc = 0x00200000;
constexpr std::size_t mysql_header_bytes = 4;   // 3-byte payload length, sequence id
constexpr std::size_t mysql_fixed_bytes = 32;   // capabilities, max packet, charset, 23 filler bytes
constexpr std::size_t mysql_filler_start = 13;  // in the packet, header included
constexpr unsigned mysql_port = 3306;

// Redis: a RESP array's header lines ("*N", "$len") are short; a longer one is not RESP.
constexpr std::size_t resp_header_line_bytes = 32;
constexpr std::size_t resp_max_arguments = 1024;
constexpr unsigned redis_commands_looked_at = 4;

unsigned char byte_at(std::string_view data, std::size_t at) { return static_cast<unsigned char>(data[at]); }

std::uint32_t big_endian_32(std::string_view data, std::size_t at) {
  return (std::uint32_t{byte_at(data, at)} << 24) | (std::uint32_t{byte_at(data, at + 1)} << 16) |
         (std::uint32_t{byte_at(data, at + 2)} << 8) | byte_at(data, at + 3);
}

std::uint32_t little_endian(std::string_view data, std::size_t at, std::size_t count) {
  std::uint32_t value = 0;
  for (std::size_t i = count; i-- > 0;) value = (value << 8) | byte_at(data, at + i);
  return value;
}

// A value a log line can carry: printable ASCII, cut to max_db_value_bytes; anything else is dropped
// rather than escaped, since a name with control bytes is not worth a log line's trouble.
std::string loggable(std::string_view value) {
  value = value.substr(0, max_db_value_bytes);
  for (char c : value) {
    if (c < 0x20 || c > 0x7e) return {};
  }
  return std::string(value);
}

char upper_case(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c; }

bool equals_ignoring_case(std::string_view left, std::string_view right) {
  return left.size() == right.size() && std::equal(left.begin(), left.end(), right.begin(), [](char l, char r) {
           return upper_case(l) == upper_case(r);
         });
}

bool is_letter(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

// The protocol a port names by convention: only used when the client's first bytes are TLS, which
// say nothing of what runs inside.
db_protocol protocol_of_port(unsigned port) {
  if (port == 5432) return db_protocol::postgresql;
  if (port == 6379) return db_protocol::redis;
  return db_protocol::unknown;
}

// Whether the bytes so far can start a PostgreSQL client's first message: a length under 64 KiB (a
// real one is a few hundred bytes), then one of the request codes with the length it implies.
bool postgresql_prefix(std::string_view data) {
  if (data.size() >= 2 && (data[0] != 0 || data[1] != 0)) return false;
  if (data.size() < 8) return true;
  auto length = big_endian_32(data, 0), code = big_endian_32(data, 4);
  if (code == pg_ssl_request || code == pg_gssenc_request) return length == 8;
  if (code == pg_cancel_request) return length >= 12;
  return code >> 16 == pg_major_3 && length > 8;
}

// Whether the bytes so far can start a HandshakeResponse41 or its short SSLRequest: sequence id 1
// (the server's greeting was 0), a payload that holds the fixed fields and fits the buffer,
// CLIENT_PROTOCOL_41, 23 zero bytes of filler.
bool mysql_prefix(std::string_view data) {
  if (data.size() >= 3) {
    auto length = little_endian(data, 0, 3);
    if (length < mysql_fixed_bytes || length > max_db_startup_bytes - mysql_header_bytes) return false;
  }
  if (data.size() >= 4 && data[3] != 1) return false;
  if (data.size() >= 6 && !(byte_at(data, 5) & (mysql_protocol_41 >> 8))) return false;
  for (auto i = mysql_filler_start; i < std::min(data.size(), mysql_header_bytes + mysql_fixed_bytes); ++i) {
    if (data[i] != 0) return false;
  }
  return true;
}

// Skips a MySQL auth response at `at`, as the capabilities say it is framed; false when it runs past
// the payload. Nothing of it is copied.
bool skip_mysql_auth_response(std::string_view payload, std::uint32_t capabilities, std::size_t &at) {
  if (capabilities & mysql_plugin_auth_lenenc) {
    if (at >= payload.size()) return false;
    auto first = byte_at(payload, at++);
    std::uint64_t length = first;
    std::size_t extra = first == 0xfc ? 2 : first == 0xfd ? 3 : first == 0xfe ? 8 : 0;
    if (first == 0xfb || first == 0xff) return false; // NULL and an error mark: not lengths
    if (extra) {
      if (at + extra > payload.size()) return false;
      length = 0;
      for (std::size_t i = extra; i-- > 0;) length = (length << 8) | byte_at(payload, at + i);
      at += extra;
    }
    if (length > payload.size() - at) return false;
    at += static_cast<std::size_t>(length);
  } else if (capabilities & mysql_secure_connection) {
    if (at >= payload.size()) return false;
    std::size_t length = byte_at(payload, at++);
    if (length > payload.size() - at) return false;
    at += length;
  } else {
    auto nul = payload.find('\0', at);
    if (nul == std::string_view::npos) return false;
    at = nul + 1;
  }
  return true;
}

// A header line of a RESP array ("*N\r\n", "$len\r\n") starting at `at`: its number, and where
// the line ends.
enum class resp_line { incomplete, malformed, complete };
struct resp_header_line {
  resp_line state = resp_line::malformed;
  std::size_t value = 0;
  std::size_t end = 0;
};

resp_header_line resp_header(std::string_view data, std::size_t at, char mark) {
  auto newline = data.find('\n', at);
  if (newline == std::string_view::npos) {
    // A line longer than any header is not one.
    return {data.size() < at + resp_header_line_bytes ? resp_line::incomplete : resp_line::malformed};
  }
  auto digits = data.substr(at + 1, newline - at - 1);
  if (data[at] != mark || digits.size() < 2 || digits.back() != '\r') return {};
  digits.remove_suffix(1);
  resp_header_line line{resp_line::complete, 0, newline + 1};
  for (char c : digits) {
    // A number past what is ever looked at is as good as malformed, and cannot overflow.
    if (!is_digit(c) || line.value > max_db_startup_bytes) return {};
    line.value = line.value * 10 + static_cast<std::size_t>(c - '0');
  }
  return line;
}

// Splits an inline Redis command on blanks (quotes, which redis-server also honours, are not
// needed for the names looked for).
std::vector<std::string_view> inline_arguments(std::string_view line) {
  std::vector<std::string_view> arguments;
  std::size_t at = 0;
  while (at < line.size()) {
    while (at < line.size() && (line[at] == ' ' || line[at] == '\t')) ++at;
    auto end = at;
    while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
    if (end > at) arguments.push_back(line.substr(at, end - at));
    at = end;
  }
  return arguments;
}

// What a Redis command tells: AUTH and HELLO's AUTH name the user, SELECT the database. The
// password is the argument after the user (or AUTH's only one) and is never read.
void learn_from_redis_command(const std::vector<std::string_view> &arguments, db_startup_info &info) {
  if (arguments.empty()) return;
  auto command = arguments[0];
  if (equals_ignoring_case(command, "AUTH")) {
    if (arguments.size() == 2) info.user = "default"; // the password alone: Redis's default user
    if (arguments.size() == 3) info.user = loggable(arguments[1]);
  } else if (equals_ignoring_case(command, "HELLO")) {
    // HELLO [protover [AUTH username password] [SETNAME clientname]]
    for (std::size_t i = 2; i < arguments.size(); ++i) {
      if (equals_ignoring_case(arguments[i], "AUTH") && i + 2 < arguments.size()) {
        info.user = loggable(arguments[i + 1]);
        i += 2;
      } else if (equals_ignoring_case(arguments[i], "SETNAME")) {
        ++i;
      }
    }
  } else if (equals_ignoring_case(command, "SELECT") && arguments.size() == 2) {
    info.database = loggable(arguments[1]);
  }
}

constexpr std::string_view redis_inline_commands[] = {"AUTH", "HELLO", "SELECT", "PING"};

bool is_redis_inline_command(std::string_view word) {
  return std::any_of(std::begin(redis_inline_commands), std::end(redis_inline_commands),
                     [&](std::string_view known) { return equals_ignoring_case(word, known); });
}

// Whether `word`, not yet ended, may still become one of them.
bool starts_redis_inline_command(std::string_view word) {
  return std::any_of(std::begin(redis_inline_commands), std::end(redis_inline_commands), [&](std::string_view known) {
    return word.size() < known.size() && equals_ignoring_case(word, known.substr(0, word.size()));
  });
}

} // namespace

db_startup_sniffer::db_startup_sniffer(unsigned port) : port_(port) {}

std::string_view db_startup_sniffer::name(db_protocol protocol) {
  switch (protocol) {
  case db_protocol::postgresql: return "postgresql";
  case db_protocol::mysql: return "mysql";
  case db_protocol::redis: return "redis";
  case db_protocol::unknown: break;
  }
  return "";
}

void db_startup_sniffer::feed(std::string_view bytes) {
  while (!done_ && !bytes.empty()) {
    // Only what the message being read needs is taken: the buffer never holds the bytes after it
    // (the password message that follows a StartupMessage, say).
    auto room = max_db_startup_bytes - seen_;
    auto piece = bytes.substr(0, std::min({need_ - buffer_.size(), bytes.size(), room}));
    if (need_line_) {
      if (auto newline = piece.find('\n'); newline != std::string_view::npos) piece = piece.substr(0, newline + 1);
    }
    if (piece.empty()) return finish(); // cannot happen (run() always wants a byte more); never spin
    buffer_.append(piece);
    bytes.remove_prefix(piece.size());
    seen_ += piece.size();
    if (buffer_.size() >= need_ || (need_line_ && buffer_.back() == '\n')) run();
    if (!done_ && seen_ >= max_db_startup_bytes) finish();
  }
}

void db_startup_sniffer::run() {
  for (;;) {
    need_line_ = false;
    auto result = buffer_.empty() ? (need_ = 1, step::need_more) : parse();
    if (result == step::finished) return finish();
    if (result == step::need_more) {
      // A message that cannot fit what is left to look at is not waited for.
      if (!need_line_ && need_ - buffer_.size() > max_db_startup_bytes - seen_) return finish();
      need_ = std::min(need_, buffer_.size() + (max_db_startup_bytes - seen_));
      return;
    }
  }
}

void db_startup_sniffer::finish() {
  done_ = true;
  std::string().swap(buffer_); // nothing read stays behind
}

db_startup_sniffer::step db_startup_sniffer::parse() {
  switch (phase_) {
  case phase::detect: return detect();
  case phase::postgresql: return parse_postgresql();
  case phase::mysql: return parse_mysql();
  case phase::redis: return parse_redis();
  }
  return step::finished;
}

db_startup_sniffer::step db_startup_sniffer::detect() {
  std::string_view data = buffer_;
  auto first = byte_at(data, 0);
  if (port_ == mysql_port) { // the server spoke first: what the client sends answers its greeting
    phase_ = phase::mysql;
    return step::consumed;
  }
  if (first == '*' && (data.size() < 2 || is_digit(byte_at(data, 1)))) {
    if (data.size() < 2) return need_ = 2, step::need_more;
    phase_ = phase::redis;
    return step::consumed;
  }
  if (is_letter(first)) { // an inline Redis command, or a text protocol (HTTP, an SSH banner)
    auto end = data.find_first_of(" \t\r\n");
    auto word = data.substr(0, end);
    if (end == std::string_view::npos && starts_redis_inline_command(word)) {
      return need_ = data.size() + 1, step::need_more;
    }
    if (is_redis_inline_command(word)) {
      phase_ = phase::redis;
      return step::consumed;
    }
    // Not Redis: a MySQL packet whose length byte is a letter is still told apart below.
  }
  bool postgresql = postgresql_prefix(data), mysql = mysql_prefix(data);
  if (postgresql && data.size() >= 8) {
    info_.protocol = db_protocol::postgresql;
    phase_ = phase::postgresql;
    return step::consumed;
  }
  if (mysql && data.size() >= mysql_header_bytes + mysql_fixed_bytes) {
    phase_ = phase::mysql;
    return step::consumed;
  }
  if (postgresql || mysql) return need_ = data.size() + 1, step::need_more;
  if (first == tls_handshake) {
    info_.tls = true;
    info_.protocol = protocol_of_port(port_);
  }
  return step::finished;
}

db_startup_sniffer::step db_startup_sniffer::parse_postgresql() {
  std::string_view data = buffer_;
  if (negotiations_ > 0 && byte_at(data, 0) == tls_handshake) { // the server answered 'S' to SSLRequest
    info_.tls = true;
    return step::finished;
  }
  if (data.size() < 8) return need_ = 8, step::need_more;
  if (!postgresql_prefix(data)) return step::finished; // a GSSAPI-encrypted stream, or garbage
  auto length = big_endian_32(data, 0), code = big_endian_32(data, 4);
  if (code == pg_ssl_request || code == pg_gssenc_request) {
    if (++negotiations_ > pg_max_negotiations) return step::finished;
    buffer_.erase(0, 8);
    return step::consumed;
  }
  if (code == pg_cancel_request) return step::finished; // its key is a secret: not read
  if (data.size() < length) return need_ = length, step::need_more;

  // StartupMessage: key NUL value NUL ..., a final NUL.
  std::string_view pairs = data.substr(8, length - 8);
  std::optional<std::string_view> user, database;
  while (!pairs.empty() && pairs[0] != '\0') {
    auto key_end = pairs.find('\0');
    if (key_end == std::string_view::npos) break;
    auto value_end = pairs.find('\0', key_end + 1);
    if (value_end == std::string_view::npos) break;
    auto key = pairs.substr(0, key_end), value = pairs.substr(key_end + 1, value_end - key_end - 1);
    if (key == "user") user = value;
    if (key == "database") database = value;
    pairs.remove_prefix(value_end + 1);
  }
  if (user) info_.user = loggable(*user);
  // As the server does: no database, or an empty one, is the user's own.
  info_.database = loggable(database && !database->empty() ? *database : user.value_or(""));
  return step::finished;
}

db_startup_sniffer::step db_startup_sniffer::parse_mysql() {
  std::string_view data = buffer_;
  if (!mysql_prefix(data)) return step::finished;
  constexpr auto fixed_end = mysql_header_bytes + mysql_fixed_bytes;
  if (data.size() < fixed_end) return need_ = data.size() + 1, step::need_more;
  info_.protocol = db_protocol::mysql;
  auto length = little_endian(data, 0, 3);
  auto capabilities = little_endian(data, 4, 4);
  if (length == mysql_fixed_bytes) { // SSLRequest: the HandshakeResponse comes inside TLS
    info_.tls = (capabilities & mysql_ssl) != 0;
    return step::finished;
  }
  if (data.size() < mysql_header_bytes + length) return need_ = mysql_header_bytes + length, step::need_more;

  auto payload = data.substr(mysql_header_bytes, length);
  std::size_t at = mysql_fixed_bytes;
  auto user_end = payload.find('\0', at);
  if (user_end == std::string_view::npos) return step::finished;
  info_.user = loggable(payload.substr(at, user_end - at));
  at = user_end + 1;
  if (!skip_mysql_auth_response(payload, capabilities, at)) return step::finished;
  if (capabilities & mysql_connect_with_db) {
    auto database_end = std::min(payload.find('\0', at), payload.size());
    info_.database = loggable(payload.substr(at, database_end - at));
  }
  return step::finished;
}

db_startup_sniffer::step db_startup_sniffer::parse_redis() {
  std::string_view data = buffer_;
  std::vector<std::string_view> arguments;
  std::size_t end = 0; // the command's end in the buffer
  // Asks for the rest of a header line starting at `at`: at most resp_header_line_bytes.
  auto need_header = [&](std::size_t at) {
    need_ = at + resp_header_line_bytes;
    need_line_ = true;
    return step::need_more;
  };
  if (data[0] == '*') {
    auto count = resp_header(data, 0, '*');
    if (count.state == resp_line::incomplete) return need_header(0);
    if (count.state == resp_line::malformed || count.value == 0 || count.value > resp_max_arguments) {
      return step::finished;
    }
    end = count.end;
    for (std::size_t i = 0; i < count.value; ++i) {
      auto length = resp_header(data, end, '$');
      if (length.state == resp_line::incomplete) return need_header(end);
      if (length.state == resp_line::malformed) return step::finished;
      auto argument_end = length.end + length.value;
      if (data.size() < argument_end + 2) return need_ = argument_end + 2, step::need_more;
      if (data.substr(argument_end, 2) != "\r\n") return step::finished;
      arguments.push_back(data.substr(length.end, length.value));
      end = argument_end + 2;
    }
  } else {
    auto newline = data.find('\n');
    if (newline == std::string_view::npos) {
      need_ = max_db_startup_bytes;
      need_line_ = true;
      return step::need_more;
    }
    auto line = data.substr(0, newline);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    arguments = inline_arguments(line);
    end = newline + 1;
    if (arguments.empty()) { // redis-server skips an empty line; so does this, without counting it
      buffer_.erase(0, end);
      return step::consumed;
    }
  }
  info_.protocol = db_protocol::redis;
  learn_from_redis_command(arguments, info_);
  if (++commands_ >= redis_commands_looked_at) return step::finished;
  buffer_.erase(0, end);
  return step::consumed;
}

} // namespace sluice::filters
