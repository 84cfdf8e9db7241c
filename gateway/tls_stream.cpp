#include "gateway/tls_stream.hpp"

#include <openssl/err.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <sys/socket.h>

namespace sluice::gateway {
namespace {
// Set by write_from while it writes a record that more records of the same write follow: the
// BIO then sends it with MSG_MORE, so that a write's records leave as few full segments rather
// than one segment each (fewer packets and acknowledgements for both ends). The last record goes
// without it, which sends what the kernel holds, unless more pieces of the same write follow
// (async_write_pieces). One worker thread writes one record at a time.
thread_local bool more_records = false;
} // namespace

// The BIO between OpenSSL and the socket: bytes read before the handshake first, then recv/send on
// the descriptor. MSG_NOSIGNAL because a peer that has gone must be an error, not a SIGPIPE (and
// ignoring SIGPIPE process-wide would leak into the commands `exec` starts).
struct tls_stream::bio {
  static tls_stream &stream(BIO *b) { return *static_cast<tls_stream *>(BIO_get_data(b)); }

  static int read(BIO *b, char *out, int len) {
    BIO_clear_retry_flags(b);
    auto &s = stream(b);
    if (s.preread_used_ < s.preread_.size()) {
      std::size_t n = std::min<std::size_t>(len, s.preread_.size() - s.preread_used_);
      std::memcpy(out, s.preread_.data() + s.preread_used_, n);
      s.preread_used_ += n;
      if (s.preread_used_ == s.preread_.size()) {
        std::string().swap(s.preread_);
        s.preread_used_ = 0;
      }
      return static_cast<int>(n);
    }
    if (s.carrier_) return carried_read(b, s, out, len);
    ssize_t n = ::recv(s.socket_.native_handle(), out, len, 0);
    if (n > 0) return static_cast<int>(n);
    if (n == 0) {
      s.eof_ = true;
      errno = 0;
      return 0;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) BIO_set_retry_read(b);
    return -1;
  }

  static int write(BIO *b, const char *in, int len) {
    BIO_clear_retry_flags(b);
    if (stream(b).carrier_) return carried_write(b, stream(b), in, len);
    ssize_t n = ::send(stream(b).socket_.native_handle(), in, len, MSG_NOSIGNAL | (more_records ? MSG_MORE : 0));
    if (n >= 0) return static_cast<int>(n);
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) BIO_set_retry_write(b);
    return -1;
  }

  // A carried stream's records are the carrier's plaintext. The carrier wanting the socket is the
  // carried stream's retry; its close_notify is the carried stream's end of file; any other failure
  // leaves the carrier's error queued, which the carried stream reports as its own.
  static int carried_read(BIO *b, tls_stream &s, char *out, int len) {
    SSL *c = s.carrier_->ssl_.get();
    std::size_t got = 0;
    if (SSL_read_ex(c, out, static_cast<std::size_t>(len), &got) == 1) return static_cast<int>(got);
    return carried_failure(b, s, SSL_get_error(c, 0));
  }

  static int carried_write(BIO *b, tls_stream &s, const char *in, int len) {
    SSL *c = s.carrier_->ssl_.get();
    std::size_t n = 0;
    if (SSL_write_ex(c, in, static_cast<std::size_t>(len), &n) == 1) return static_cast<int>(n);
    return carried_failure(b, s, SSL_get_error(c, 0));
  }

  static int carried_failure(BIO *b, tls_stream &s, int err) {
    if (err == SSL_ERROR_WANT_READ) {
      BIO_set_retry_read(b);
    } else if (err == SSL_ERROR_WANT_WRITE) {
      BIO_set_retry_write(b);
    } else if (err == SSL_ERROR_ZERO_RETURN || (err == SSL_ERROR_SYSCALL && s.carrier_->eof_)) {
      ERR_clear_error();
      s.eof_ = true;
      errno = 0;
      return 0;
    }
    return -1;
  }

  static long ctrl(BIO *b, int cmd, long, void *) {
    switch (cmd) {
    case BIO_CTRL_FLUSH:
      return 1;
    case BIO_CTRL_EOF:
      return stream(b).eof_ ? 1 : 0;
    default:
      return 0;
    }
  }

  static BIO_METHOD *method() {
    static BIO_METHOD *m = [] {
      BIO_METHOD *meth = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "sluice socket");
      if (!meth || !BIO_meth_set_read(meth, &read) || !BIO_meth_set_write(meth, &write) ||
          !BIO_meth_set_ctrl(meth, &ctrl)) {
        throw std::runtime_error("cannot create the TLS socket BIO method");
      }
      return meth;
    }();
    return m;
  }
};

tls_stream::tls_stream(tcp::socket socket, SSL_CTX *ctx)
    : socket_(std::move(socket)), ssl_(SSL_new(ctx), &SSL_free), timer_(socket_.get_executor()),
      deadline_state_(std::make_shared<deadline_state>()) {
  socket_.non_blocking(true);
  init();
}

tls_stream::tls_stream(tls_stream &carrier, SSL_CTX *ctx)
    : socket_(carrier.get_executor()), carrier_(&carrier), ssl_(SSL_new(ctx), &SSL_free),
      timer_(carrier.get_executor()), deadline_state_(std::make_shared<deadline_state>()) {
  init();
}

void tls_stream::init() {
  if (!ssl_) throw std::runtime_error("SSL_new failed");
  BIO *bio = BIO_new(bio::method());
  if (!bio) throw std::runtime_error("BIO_new failed");
  BIO_set_data(bio, this);
  BIO_set_init(bio, 1);
  SSL_set_bio(ssl_.get(), bio, bio);
  // Idle streams give their record buffers back; a read takes what the socket has, not one record;
  // a write may end after any whole record; a retried write may come from another buffer with the
  // same bytes (coalesced pieces are copied afresh).
  SSL_set_mode(ssl_.get(), SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE |
                               SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_set_read_ahead(ssl_.get(), 1);
  deadline_state_->socket = &socket();
}

tls_stream::~tls_stream() { deadline_state_->socket = nullptr; }

char *tls_stream::coalesce_buffer() {
  thread_local std::unique_ptr<char[]> buffer(new char[coalesce_limit]);
  return buffer.get();
}

int tls_stream::read_into(SSL *ssl, net::mutable_buffer b, std::size_t &done) {
  done = 0;
  if (b.size() == 0) return 1;
  auto *p = static_cast<char *>(b.data());
  // One record per SSL_read; take the ones already buffered too, without another system call.
  // A read that only took the rest of a record an earlier, smaller read left tries once more for
  // the next record, so that a reader whose buffers are not a multiple of the peer's records
  // does not get every other read as a few bytes (an h2 stream's frames would follow them).
  while (done < b.size()) {
    std::size_t got = 0;
    const auto rest = static_cast<std::size_t>(SSL_pending(ssl));
    if (SSL_read_ex(ssl, p + done, b.size() - done, &got) != 1) return done ? 1 : 0;
    done += got;
    if (!SSL_has_pending(ssl) && (rest == 0 || got != rest)) break;
  }
  return 1;
}

int tls_stream::write_from(SSL *ssl, const void *data, std::size_t size, std::size_t &done, bool more) {
  // Partial-write mode returns after each record; keep writing records until all is out or the
  // socket is full. A record that could not be sent whole stays pending in OpenSSL and is not
  // counted in `done`, so the caller's next write (the same bytes) completes it.
  done = 0;
  auto *p = static_cast<const char *>(data);
  while (done < size) {
    std::size_t n = 0;
    more_records = more || size - done > max_record;
    int ok = SSL_write_ex(ssl, p + done, size - done, &n);
    more_records = false;
    if (ok != 1) return done ? 1 : 0;
    done += n;
  }
  return 1;
}

error_code tls_stream::begin_wait() {
  auto &st = *deadline_state_;
  st.fired = false;
  if (deadline_ == clock::time_point::max()) {
    if (st.armed) { // a deadline set earlier no longer applies
      ++st.generation;
      st.armed = false;
      timer_.cancel();
    }
  } else {
    if (clock::now() >= deadline_) return beast::error::timeout;
    if (!st.armed || armed_at_ != deadline_) {
      armed_at_ = deadline_;
      st.armed = true;
      timer_.expires_at(deadline_);
      timer_.async_wait([state = deadline_state_, gen = ++st.generation](error_code ec) {
        if (state->generation != gen) return; // re-armed or disarmed since
        state->armed = false;
        if (ec || !state->waiting || !state->socket) return;
        state->fired = true;
        state->socket->cancel();
      });
    }
  }
  st.waiting = true;
  return {};
}

error_code tls_stream::error_of(int ssl_error) {
  if (ssl_error == SSL_ERROR_ZERO_RETURN) return net::error::eof; // close_notify received
  unsigned long e = ERR_peek_error();
  if (ssl_error == SSL_ERROR_SYSCALL && e == 0) {
    int err = errno;
    ERR_clear_error();
    if (err == 0 || eof_) return net::ssl::error::stream_truncated; // EOF without close_notify
    return error_code(err, boost::system::system_category());
  }
  if (ERR_GET_LIB(e) == ERR_LIB_SSL && ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
    ERR_clear_error();
    return net::ssl::error::stream_truncated;
  }
  ERR_clear_error();
  if (e == 0) return net::ssl::error::stream_truncated;
  return error_code(static_cast<int>(e), net::error::get_ssl_category());
}

} // namespace sluice::gateway
