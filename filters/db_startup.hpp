#pragma once
// Who a database connection logs in as: the TCP relay to a named service (#52) writes one access-log
// line per connection, and for a database that line is far more useful with the user and the
// database than with an address alone. The cleartext start of PostgreSQL, MySQL and Redis names
// both before any authentication; this reads them from the bytes the client sends, and never keeps
// a credential (a password, an auth response, a cancel key). Pure: no I/O.
#include <cstddef>
#include <string>
#include <string_view>

namespace sluice::filters {

enum class db_protocol { unknown, postgresql, mysql, redis };

struct db_startup_info {
  db_protocol protocol = db_protocol::unknown;
  std::string user;     // printable ASCII, at most max_db_value_bytes; empty when not seen
  std::string database; // idem (Redis: the SELECTed number)
  bool tls = false;     // the client went on in TLS: nothing after that is readable
};

// How many client bytes are looked at in all; also the most buffered at once.
inline constexpr std::size_t max_db_startup_bytes = 8 * 1024;
// The longest user or database kept (longer ones are cut), so that a log line can carry them.
inline constexpr std::size_t max_db_value_bytes = 128;

// Fed what the client sends, in pieces split anywhere. PostgreSQL: SSLRequest / GSSENCRequest
// (then TLS, or the StartupMessage after the server's 'N'), StartupMessage (user, database, which
// defaults to the user), CancelRequest. MySQL (the server speaks first; port 3306, or a packet of
// the right shape): HandshakeResponse41 (user, database with CLIENT_CONNECT_WITH_DB) or the short
// SSLRequest (TLS). Redis (RESP arrays, or inline commands): among the first 4 commands, AUTH
// [user] password (user "default" without one), HELLO n AUTH user password, SELECT n. A first byte
// 0x16 on a port other than 3306: TLS (the protocol named by 5432 or 6379, else unknown). Anything
// else: unknown, done after a few bytes (at most 36, for what starts like a MySQL packet).
//
// info() may be read at any time: a Redis client that sends fewer than 4 commands, or a PostgreSQL
// client that stops half-way, leaves it not done() with what is known so far, so the relay reads it
// when the connection ends. The buffer never holds more than the message being read (never the
// password message after a StartupMessage), and is released when done.
class db_startup_sniffer {
public:
  explicit db_startup_sniffer(unsigned port);
  void feed(std::string_view client_bytes); // a cheap no-op once done()
  bool done() const { return done_; }       // nothing more will be learned: stop feeding
  const db_startup_info &info() const { return info_; }
  static std::string_view name(db_protocol protocol); // "postgresql", "mysql", "redis", ""

private:
  enum class phase { detect, postgresql, mysql, redis };
  // What one look at the buffer found: a message consumed (look again), more bytes needed, or the end.
  enum class step { consumed, need_more, finished };

  void run();
  step parse();
  step detect();
  step parse_postgresql();
  step parse_mysql();
  step parse_redis();
  void finish();

  unsigned port_;
  phase phase_ = phase::detect;
  db_startup_info info_;
  std::string buffer_;        // the message being read, from its first byte
  std::size_t seen_ = 0;      // client bytes looked at so far
  std::size_t need_ = 1;      // the buffer's size at which parsing can move on
  bool need_line_ = false;    // ... or, sooner, when a line ends ('\n'): RESP and inline lines
  unsigned negotiations_ = 0; // PostgreSQL SSL/GSS requests seen
  unsigned commands_ = 0;     // Redis commands seen
  bool done_ = false;
};

} // namespace sluice::filters
