#pragma once
#include "gateway/net.hpp"

#include <boost/asio/compose.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <openssl/ssl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>

namespace sluice::gateway {

// TLS on a non-blocking TCP socket, OpenSSL reading and writing the socket itself (through a BIO
// that calls recv/send with MSG_NOSIGNAL).
//
// Why not Asio's ssl::stream: it keeps two 17 KiB buffers per stream plus a 17 KiB BIO pair in each
// direction, whether the connection is busy or idle, and copies every byte twice on its way between
// OpenSSL and the socket. Here OpenSSL's own record buffers are the only ones; with
// SSL_MODE_RELEASE_BUFFERS an idle stream holds none, and a read takes every record OpenSSL already
// has (read-ahead) in one operation.
//
// Deadlines work as beast::tcp_stream's do: expires_after() applies to every operation until it is
// changed, and an operation that would wait past it ends with beast::error::timeout. One operation
// at a time per stream (the gateway never reads and writes one stream concurrently).
class tls_stream {
public:
  using executor_type = tcp::socket::executor_type;
  using clock = std::chrono::steady_clock;
  enum class role { client, server };

  // Takes the connected socket; `ctx` supplies certificates, verification and options.
  tls_stream(tcp::socket socket, SSL_CTX *ctx);
  // TLS carried inside another TLS stream (a CONNECT through the HTTPS proxy listener: the
  // client's TLS to the origin's name inside its TLS to sluice). Records go through `carrier`'s
  // SSL; waits are on its socket. `carrier` must outlive this stream and do nothing meanwhile.
  tls_stream(tls_stream &carrier, SSL_CTX *ctx);
  ~tls_stream();
  tls_stream(const tls_stream &) = delete;
  tls_stream &operator=(const tls_stream &) = delete;

  executor_type get_executor() { return socket_.get_executor(); }
  SSL *native_handle() { return ssl_.get(); }
  // The socket underneath (the carrier's, for a carried stream).
  tcp::socket &socket() { return carrier_ ? carrier_->socket() : socket_; }
  void expires_after(clock::duration d) { deadline_ = clock::now() + d; }
  void expires_at(clock::time_point t) { deadline_ = t; }
  clock::time_point expiry() const { return deadline_; }
  // Records go through another TLS stream (the second constructor).
  bool carried() const { return carrier_ != nullptr; }
  void expires_never() { deadline_ = clock::time_point::max(); }

  // Handshake as `r`. A server may pass bytes it already read off the socket (the ClientHello,
  // read to tell TLS from plain text); they are all consumed: the completion reports their size.
  template <class Token>
  auto async_handshake(role r, net::const_buffer already_read, Token &&token) {
    if (already_read.size()) preread_.assign(static_cast<const char *>(already_read.data()),
                                             already_read.size());
    preread_used_ = 0;
    std::size_t n = already_read.size();
    if (r == role::server) {
      SSL_set_accept_state(ssl_.get());
    } else {
      SSL_set_connect_state(ssl_.get());
    }
    return start(
        [n](SSL *ssl, std::size_t &done) {
          done = n;
          return SSL_do_handshake(ssl);
        },
        std::forward<Token>(token));
  }

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers &buffers, Token &&token) {
    net::mutable_buffer b;
    for (auto it = net::buffer_sequence_begin(buffers); it != net::buffer_sequence_end(buffers);
         ++it) {
      if (net::mutable_buffer(*it).size()) {
        b = *it;
        break;
      }
    }
    return start([b](SSL *ssl, std::size_t &done) { return read_into(ssl, b, done); },
                 std::forward<Token>(token));
  }

  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers &buffers, Token &&token) {
    return start(
        [buffers](SSL *ssl, std::size_t &done) {
          // Small pieces (a serialized header, chunk framing) go out in one record, not one each.
          auto first = net::buffer_sequence_begin(buffers);
          auto last = net::buffer_sequence_end(buffers);
          while (first != last && net::const_buffer(*first).size() == 0) ++first;
          if (first == last) {
            done = 0;
            return 1;
          }
          net::const_buffer head = *first;
          if (head.size() >= coalesce_limit || std::next(first) == last) {
            return write_from(ssl, head.data(), head.size(), done, false);
          }
          char *scratch = coalesce_buffer();
          std::size_t n = 0;
          for (auto it = first; it != last && n < coalesce_limit; ++it) {
            net::const_buffer piece = *it;
            std::size_t take = std::min(piece.size(), coalesce_limit - n);
            std::memcpy(scratch + n, piece.data(), take);
            n += take;
          }
          return write_from(ssl, scratch, n, done, false);
        },
        std::forward<Token>(token));
  }

  // Writes `pieces` (const_buffers) in order as one operation, each piece's records but the
  // very last sent with MSG_MORE; `before(i)` runs just before piece i's first byte is written (a
  // piece may be written over bytes the one before it held: those are encrypted by then). The
  // pieces must stay as they are until the operation completes.
  template <class Pieces, class Before, class Token>
  auto async_write_pieces(const Pieces &pieces, Before before, Token &&token) {
    return start(
        [p = &pieces, before = std::move(before), i = std::size_t{0}, at = std::size_t{0},
         begun = false](SSL *ssl, std::size_t &done) mutable {
          for (; i < p->size(); ++i, at = 0, begun = false) {
            if (!begun) {
              before(i);
              begun = true;
            }
            const net::const_buffer b = (*p)[i];
            const bool more = i + 1 < p->size();
            while (at < b.size()) { // a record left pending is written again by the next call
              std::size_t n = 0;
              const auto *from = static_cast<const char *>(b.data()) + at;
              if (write_from(ssl, from, b.size() - at, n, more) != 1) return 0;
              at += n;
              done += n;
            }
          }
          return 1;
        },
        std::forward<Token>(token));
  }

  // Completes when a read would find data (decrypted bytes held, or the socket readable), so a
  // connection waiting for its next request needs no read buffer while it waits.
  template <class Token> auto async_wait_readable(Token &&token) {
    return start(
        [waited = false, carrier_ssl = carrier_ ? carrier_->ssl_.get() : nullptr](
            SSL *ssl, std::size_t &done) mutable {
          done = 0;
          if (waited || SSL_has_pending(ssl)) return 1;
          if (carrier_ssl && SSL_has_pending(carrier_ssl)) return 1;
          waited = true;
          return want_read;
        },
        std::forward<Token>(token));
  }

  // Sends close_notify; does not wait for the peer's.
  template <class Token> auto async_shutdown(Token &&token) {
    return start(
        [](SSL *ssl, std::size_t &done) {
          done = 0;
          int r = SSL_shutdown(ssl);
          return r >= 0 ? 1 : r;
        },
        std::forward<Token>(token));
  }

private:
  static constexpr std::size_t coalesce_limit = 16 * 1024;
  static constexpr std::size_t max_record = 16 * 1024; // TLS's largest record of plaintext
  static constexpr int want_read = -1000; // a step's own request to wait for the socket
  static char *coalesce_buffer();
  static int read_into(SSL *ssl, net::mutable_buffer b, std::size_t &done);
  // Writes records of `data` until all is out or the socket is full; `more`: more follows the
  // last of them too (MSG_MORE on every record).
  static int write_from(SSL *ssl, const void *data, std::size_t size, std::size_t &done, bool more);

  // Shared with the deadline timer's handler, which may run after the stream is gone.
  struct deadline_state {
    tcp::socket *socket = nullptr; // null once the stream is destroyed
    unsigned generation = 0;       // which arming of the timer is current
    bool waiting = false;          // an operation waits on the socket
    bool fired = false;            // the deadline passed while it waited
    bool armed = false;
  };

  error_code begin_wait();
  void end_wait() { deadline_state_->waiting = false; }
  error_code error_of(int ssl_error);
  template <class Step, class Token> auto start(Step step, Token &&token);

  template <class Step> struct io_op {
    tls_stream &s;
    Step step;
    enum { running, waiting, finishing } state = running;
    error_code result{};
    std::size_t done = 0;

    template <class Self> void operator()(Self &self, error_code ec = {}) {
      if (state == finishing) return self.complete(result, done);
      if (state == waiting) {
        bool timed_out = s.deadline_state_->fired;
        s.end_wait();
        if (ec) return self.complete(timed_out ? error_code(beast::error::timeout) : ec, 0);
      }
      bool first = state == running;
      // SSL_get_error needs an empty error queue; error_of() empties it after every failure, so
      // it is nearly always empty here (ERR_clear_error walks all of its slots: 1% of a request).
      if (ERR_peek_error() != 0) ERR_clear_error();
      int r = step(s.ssl_.get(), done);
      if (r > 0) return finish(self, first, {});
      int err = r == want_read ? SSL_ERROR_WANT_READ : SSL_get_error(s.ssl_.get(), r);
      if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        if (error_code wec = s.begin_wait()) return finish(self, first, wec);
        state = waiting;
        s.socket().async_wait(err == SSL_ERROR_WANT_READ ? tcp::socket::wait_read
                                                        : tcp::socket::wait_write,
                             std::move(self));
        return;
      }
      done = 0;
      finish(self, first, s.error_of(err));
    }

    // A result known inside the initiating call is delivered through the executor, as Asio's own
    // operations do: a handler never runs inside the call that started it.
    template <class Self> void finish(Self &self, bool inside_initiation, error_code ec) {
      if (!inside_initiation) return self.complete(ec, done);
      result = ec;
      state = finishing;
      net::post(s.get_executor(), std::move(self));
    }
  };

  void init();

  tcp::socket socket_; // unopened in a carried stream
  tls_stream *carrier_ = nullptr;
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl_;
  net::steady_timer timer_;
  std::shared_ptr<deadline_state> deadline_state_;
  clock::time_point deadline_ = clock::time_point::max();
  clock::time_point armed_at_ = clock::time_point::max();
  std::string preread_; // bytes read before the handshake began, served to OpenSSL first
  std::size_t preread_used_ = 0;
  bool eof_ = false; // the peer closed its side of the socket

  // The BIO between OpenSSL and the socket (tls_stream.cpp): a member, so it reaches the above.
  struct bio;
};

template <class Step, class Token> auto tls_stream::start(Step step, Token &&token) {
  return net::async_compose<Token, void(error_code, std::size_t)>(io_op<Step>{*this, step},
                                                                   token, socket());
}

} // namespace sluice::gateway
