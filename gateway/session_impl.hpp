#pragma once
// The session's parts, shared by the files that each hold one stage of it (docs/architecture.md):
//   session.cpp          entry (proxy port, HTTPS listener), records: logs, metrics, summary
//   session_reply.cpp    short answers: denials, framing errors, upstream failures, their texts
//   session_judge.cpp    the one judge (exchange/) with this session's approvals
//   http1/requests.cpp   reading and judging request heads (the plain loop and inside tunnels)
//   http1/forward.cpp    dialling the origin and relaying a request and its response
//   tunnel/connect.cpp   CONNECT: judging the authority, terminating or passing through
//   tunnel/socks5.cpp    SOCKS5's negotiation, which ends in a CONNECT
//   tunnel/captured.cpp  a captured connection: TLS, HTTP or SSH by its first bytes
//   websocket/, h2/, ssh/  the other wings
// Member templates are instantiated, in the file that defines them, for the two client streams.
// Private to gateway/: nothing outside includes it.
#include "filters/client_identity.hpp"
#include "gateway/error.hpp"
#include "gateway/exchange/judge.hpp"
#include "gateway/exchange/record.hpp"
#include "gateway/exchange/scan.hpp"
#include "gateway/gateway_state.hpp"
#include "gateway/tls_stream.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::gateway::decider {
struct asker;  // decider/protocol.hpp
struct answer; // decider/protocol.hpp
}

namespace sluice::gateway::detail {

using clock = std::chrono::steady_clock;
inline constexpr auto use_tuple = net::as_tuple(net::use_awaitable);
inline constexpr std::size_t chunk_size = 64 * 1024;
// A request body this long or longer is relayed in pieces of up to large_piece (http1/forward.cpp).
inline constexpr std::uint64_t large_body = 1024 * 1024;
inline constexpr std::size_t large_piece = 512 * 1024;
// How long a terminated tunnel waits for its next request with its coroutine frames (about 5 KiB)
// before it parks without them: long enough that a keep-alive client's next request, which
// usually follows within a millisecond, never pays for parking; short enough that a burst of
// tunnels that then idle does not hold every frame at once.
inline constexpr auto park_after = std::chrono::milliseconds(100);

using exchange::outcome;
using exchange::record;
using exchange::tunnel_target;
using exchange::verdict;

// Relay buffers of chunk_size, kept per thread for reuse: allocating and freeing 64 KiB per request
// makes malloc trim and re-fault its heap each time. At most `kept` wait idle per worker.
class chunk {
public:
  chunk() {
    auto &f = free_list();
    if (f.empty()) {
      data_.reset(new char[chunk_size]);
    } else {
      data_ = std::move(f.back());
      f.pop_back();
    }
  }
  ~chunk() { give_back(); }
  chunk(const chunk &) = delete;
  chunk &operator=(const chunk &) = delete;
  // A filled buffer may change hands (an h2 stream's response queue takes it whole).
  chunk(chunk &&other) noexcept : data_(std::move(other.data_)) {}
  chunk &operator=(chunk &&other) noexcept {
    if (this != &other) {
      give_back();
      data_ = std::move(other.data_);
    }
    return *this;
  }
  char *get() { return data_.get(); }
  // No buffer (a place a chunk may be moved into later).
  static chunk none() { return chunk(nullptr); }

private:
  explicit chunk(std::nullptr_t) {}
  void give_back() {
    auto &f = free_list();
    if (data_ && f.size() < kept) f.push_back(std::move(data_));
  }
  static constexpr std::size_t kept = 16;
  static std::vector<std::unique_ptr<char[]>> &free_list() {
    thread_local std::vector<std::unique_ptr<char[]>> f;
    return f;
  }
  std::unique_ptr<char[]> data_;
};

// The layer that carries deadlines: the beast::tcp_stream of a plain stream, the tls_stream itself.
template <class Stream> auto &lowest(Stream &s) { return beast::get_lowest_layer(s); }

class h2_connection;

// The session proper: one client connection, one worker.
class session final : public exchange::recorder {
public:
  session(tcp::socket socket, worker &w, gateway_state &state, std::string_view agent, bool identify,
          bool tls_listener = false)
      : source_(peer_of(socket)), client_(std::in_place, std::move(socket)), worker_(w), state_(state),
        agent_(agent), identify_(identify), tls_listener_(tls_listener), policy_(state.policy.load()),
        buffer_(cfg().limits.max_header_bytes + chunk_size) {}

  net::awaitable<void> run();

  // A terminated tunnel idle between requests (serve_requests waited park_after for the next one)
  // has left every coroutine frame: run() or run_captured() returned with parked() true, and the
  // session, its tunnel's TLS stream and the request count are all that is kept. park() waits for
  // the next request (or the idle deadline) with a callback and resumes the tunnel's request loop
  // in a new coroutine; the connection stays counted (connections, in flight) while parked.
  bool parked() const { return park_; }
  static void park(std::unique_ptr<session> self);
  // The end of a connection the client may still be writing to (linger_): see session.cpp.
  net::awaitable<void> close_client(tcp::socket &s);

  // What a protocol wing that carries the connection's requests (h2_connection, for the streams of
  // an h2 tunnel) uses of its session: the policy and config it holds now, the worker and gateway
  // state, judging, dialling and recording. Nothing else of the session is a wing's.
  filters::policy_ptr current_policy() const { return policy_; }
  worker &owning_worker() { return worker_; }
  gateway_state &state() { return state_; }
  // The config of the policy this session holds now; it follows policy_ across reloads (a reference
  // kept from the first policy would dangle once a reload drops the last owner).
  const filters::config &cfg() const { return policy_->cfg(); }

  // Where every record of this session goes (exchange/record.hpp): the access log, the metrics,
  // the live page and the summary, with the client, its role and the listener it came by.
  void record_outcome(outcome &o) noexcept override;
  // Client identity ([clients] of serve). The policy a request is judged by: the current one, or
  // for an identified client its role's. Returns why the client may not go on: a reload removed it
  // or changed its token ("client_revoked"); else empty.
  std::string_view refresh_policy();
  // The client's requests-per-second budget of its role; false when this request exceeds it.
  bool within_rate();
  // The client's bytes-per-second budget: waits, after `n` bytes were relayed, as long as it says.
  // Called only where throttled(): a request without a byte limit costs no coroutine frame.
  bool throttled() const { return policy_->bytes_per_second() != 0 && !who().empty(); }
  net::awaitable<void> throttle(std::size_t n);
  std::string denial_text(const outcome &o, std::string_view rule);
  // A failure upstream: sets the outcome's decision and reason, writes the answer's text (with the
  // /etc/hosts note for a name DNS does not know) into `body`, and returns the error.
  gateway_error failed(outcome &o, error_code ec, std::string &body);
  // The one judging step (exchange::judge), with what this session knows of a person's approvals:
  // the host approved for this tunnel or connection, the next request, the run's.
  verdict judge(const exchange::request &r, const tunnel_target *tunnel, const filters::policy &pol,
                outcome &o);
  // [decider]: a verdict that names the decider (v.decide) gets its answer folded in: allowed (a
  // miss judged again as approved, fields set or removed), refused (decider_denied, _timeout,
  // _unavailable) or handed to a person (v.ask). Every protocol calls it after judge.
  // An answer "body" sets v.decider_body: the codec reads the body whole and calls consult_body.
  net::awaitable<void> consult(const exchange::request &r, const tunnel_target *tunnel, const filters::policy &pol,
                               outcome &o, verdict &v);
  // The decider asked again, with the body read whole (v.decider_body set by consult), before
  // anything leaves; its answer folded in as consult's is (asking for the body again refuses).
  net::awaitable<void> consult_body(const exchange::request &r, const tunnel_target *tunnel,
                                    const filters::policy &pol, outcome &o, verdict &v, std::string_view body);
  net::awaitable<filters::decision> consult_connect(outcome &o, const filters::policy &pol, std::string_view raw_host,
                                                    unsigned port);
  // [decider] when = "all", for a connection the file allowed (rule o.rule) whose bytes sluice does
  // not read (`protocol` "connect": an allowlist tunnel; "tcp": relayed TCP): put to the decider on
  // its host and port, which may only narrow. "" to go on, else the refusal's reason (rule
  // "decider"); `ask` is refused too: only a miss is held for a person.
  net::awaitable<std::string_view> narrow_connection(outcome &o, const filters::policy &pol, std::string_view protocol);
  decider::asker asker_for(const filters::policy &pol) const;
  // consult's and consult_body's answer, folded into v.
  void fold_answer(const exchange::request &r, const tunnel_target *tunnel, const filters::policy &pol, outcome &o,
                   verdict &v, decider::answer &a);
  // [[limits.budget]] (session_judge.cpp): admits an exchange the judge allowed (o's host, scheme
  // and port) under pol's budgets, with its head and announced body; with [limits.shared], asked
  // of Redis. Refused, v.reason is rate_limited, budget_exhausted or limits_unavailable (rule
  // "budget:NAME") and o says why and when to retry; admitted, o.charged meters it. A verdict that
  // already refuses is left as it is. Callers skip it where pol has no budgets (no coroutine frame).
  net::awaitable<void> admit_budgets(verdict &v, outcome &o, const filters::policy &pol, std::uint64_t head_bytes,
                                     std::uint64_t body_bytes = 0);
  // admit_budgets for a whole connection as one exchange (a tunnel passed through unopened, a
  // relayed TCP connection): false when it is refused, the refusal sent on `s` and logged.
  template <class Stream> net::awaitable<bool> admit_connection(Stream &s, outcome &o);
  // Dials the origin: pinned or resolved addresses, each judged, only passing ones dialed; then TLS
  // with SNI and certificate verification for https. `offer_h2`: ALPN offers h2 and http/1.1 (an h2
  // client's stream), and the connection's `h2` says which the origin chose.
  net::awaitable<std::unique_ptr<upstream_connection>>
  connect_upstream(const std::string &host, const std::optional<net::ip::address> &ip,
                   unsigned port, bool tls, error_code &ec, bool offer_h2 = false);

private:
  static net::awaitable<void> resume(std::unique_ptr<session> self, error_code ec);

  // A request on the proxy listener: who sent it, from its Proxy-Authorization. Returns the reason
  // for a 407 (proxy_auth_required, proxy_auth_invalid) or empty when it may go on.
  std::string_view identify_request(std::string_view proxy_authorization);
  // From now on the connection's requests are `c`'s, judged by its role's policy in `top`; by its
  // certificate or by its token.
  void take_client(const filters::policy &top, const filters::client_config &c, bool by_certificate);
  // The HTTPS proxy listener: the client's TLS to sluice, with its certificate if it shows one,
  // then the same request loop and CONNECT handling as the plain listener, inside that TLS.
  net::awaitable<void> run_tls();
  // The CONNECT serve_requests() read last (connect_, which must be set), on the client stream `s`.
  template <class Stream> net::awaitable<void> connect_after_requests(Stream &s);
  // After the handshake: the client certificate's names if it verified, else why it did not.
  void read_peer_certificate(SSL *ssl, int verify_error);
  // 407 with Proxy-Authenticate, 429 with Retry-After, or 403 for a revoked client; logged.
  template <class Stream>
  net::awaitable<void> refuse_client(Stream &s, outcome &o, std::string_view reason, bool keep_alive,
                                     unsigned version);

  // Writes a complete short reply: denials (403 + Proxy-Status), framing errors (400), upstream
  // failures (502/504).
  template <class Stream>
  net::awaitable<void> reply(Stream &s, outcome &o, unsigned status, std::string_view ps_error,
                             std::string body, bool keep_alive, unsigned version = 11);

  // For a name DNS does not know: whether this machine's /etc/hosts does, and what to do about it
  // (sluice resolves with DNS only: a hosts entry could point any name at loopback).
  static std::string hosts_file_note(const std::string &host);


  template <class Stream>
  net::awaitable<void> deny(Stream &s, outcome &o, std::string_view reason, std::string rule,
                            bool keep_alive, unsigned version = 11);


  template <class Stream>
  net::awaitable<void> fail(Stream &s, outcome &o, error_code ec, bool keep_alive,
                            unsigned version = 11);

  // Reads request heads and answers them until the connection should close. `tunnel` is set inside a
  // terminated CONNECT; the stream is then TLS.
  template <class Stream>
  net::awaitable<void> serve_requests(Stream &s, beast::flat_buffer &buf,
                                      const tunnel_target *tunnel);

  // Reads one request head: bytes up to the blank line (bounded by the buffer's limit), a raw
  // check for what a lenient parser would repair silently, then Beast's parser on exactly those
  // bytes. The body, if any, stays in `buf` for the relay.
  template <class Stream>
  net::awaitable<error_code> read_head(Stream &s, beast::flat_buffer &buf,
                                       http::request_parser<http::buffer_body> &parser,
                                       std::string_view &raw_reason);

  // [approvals]: holds the request `o` describes until a person decides or its time runs out
  // (session.cpp). `pending` when no more may wait (refused at once: approval_queue_full).
  // `client`: its socket, watched meanwhile: a client that hangs up is forgotten (`gone`).
  net::awaitable<approval> ask(outcome &o, std::string_view kind, const filters::policy &pol, tcp::socket &client);
  // Where a person allowed a host: the tunnel (or plain connection) it was allowed for "once",
  // and the next request judged (a request held on its own).
  std::string approved_host_;
  unsigned approved_port_ = 0;
  bool approved_next_ = false;
  // The decision that opened this tunnel, carried in the log lines of the requests inside it.
  std::string_view tunnel_approval_;
  std::string tunnel_decided_by_;

  template <class Stream>
  net::awaitable<bool> handle(Stream &s, beast::flat_buffer &buf,
                              http::request_parser<http::buffer_body> &parser,
                              const tunnel_target *tunnel, record &o);

  // Reads a whole request body into `out`, at most `cap` bytes (body_limit beyond), within the
  // request's deadline (a body trickling a byte per I/O timeout is cut all the same).
  template <class Stream>
  net::awaitable<error_code> read_whole_body(Stream &s, beast::flat_buffer &buf,
                                             http::request_parser<http::buffer_body> &parser,
                                             std::string &out, std::size_t cap,
                                             clock::time_point deadline);


  // Streams one message body from `in` to `out` through a fixed buffer, re-framing as the outgoing
  // header says (Beast's relay pattern). `in_failed` tells which side broke.
  template <bool isRequest, class In, class Out>
  net::awaitable<error_code> relay(In &in, beast::flat_buffer &in_buf,
                                   http::parser<isRequest, http::buffer_body> &p, Out &out,
                                   http::message<isRequest, http::buffer_body> &msg,
                                   std::uint64_t &bytes, bool &in_failed,
                                   clock::time_point deadline, std::uint64_t max_bytes = 0,
                                   exchange::scan_step *scan = nullptr);

  // Relays one message whose body length is known (Content-Length, or none): `head` is the
  // serialized head; the body is the bytes already in `in_buf`, then reads from `in` straight into
  // a relay buffer, without Beast's parser or serializer (one copy less per byte). `complete` tells
  // whether all `length` bytes went out (a pooled connection must be at a message boundary).
  // `scan` ([scan], a request's body): each piece is scanned before it leaves; a finding that
  // refuses stops the relay (in_failed, scan->refused() says why).
  template <bool isRequest, class In, class Out>
  net::awaitable<error_code> relay_sized(In &in, beast::flat_buffer &in_buf, Out &out,
                                         const std::string &head, std::uint64_t length,
                                         std::uint64_t &bytes, bool &in_failed, bool &complete,
                                         clock::time_point deadline, std::uint64_t max_bytes = 0,
                                         exchange::scan_step *scan = nullptr);

  // The origin's response head, interim 1xx responses passed on (http1/forward.cpp).
  template <class Stream>
  net::awaitable<error_code> read_response_head(Stream &s, upstream_connection &conn,
                                                std::optional<http::response_parser<http::buffer_body>> &rp,
                                                bool head_method, bool websocket, unsigned version);
  // The response after its head: relayed, recorded, the connection pooled (http1/forward.cpp).
  template <class Stream>
  net::awaitable<bool> relay_response(Stream &s, beast::flat_buffer &buf, std::unique_ptr<upstream_connection> conn,
                                      http::response_parser<http::buffer_body> &rp, outcome &o, bool keep_alive,
                                      bool head_method, bool websocket, unsigned version,
                                      exchange::scan_step *scan = nullptr);

  template <class Stream>
  net::awaitable<bool> forward(Stream &s, beast::flat_buffer &buf,
                               http::request_parser<http::buffer_body> &parser, outcome &o,
                               const std::optional<net::ip::address> &ip, unsigned version,
                               const std::string *preread = nullptr, exchange::scan_step *scan = nullptr);

  // After the origin's 101 to a WebSocket upgrade: relays frames both ways until either side ends
  // (websocket_relay.cpp), reading frame headers only. `client_buf` holds what the client sent
  // after its request head, conn.buffer what the origin sent after its 101; `deflate`: the
  // origin accepted permessage-deflate.
  // The origin answered a WebSocket upgrade with 101: checks it names websocket (else 502), passes
  // it on and relays the frames (relay_websocket) until the connection ends. Returns false: the
  // client connection closes with it.
  template <class Stream>
  net::awaitable<bool> switch_to_websocket(Stream &s, beast::flat_buffer &buf, upstream_connection &conn,
                                           outcome &o, const http::response<http::buffer_body> &res,
                                           exchange::scan_step *scan = nullptr);

  template <class Stream>
  net::awaitable<void> relay_websocket(Stream &s, beast::flat_buffer &client_buf, upstream_connection &conn,
                                       outcome &o, bool deflate, exchange::scan_step *scan = nullptr);

  // Copies bytes one way until EOF or error, for `allowlist` tunnels (the client's side may be TLS:
  // the HTTPS proxy listener).
  template <class From, class To>
  // `budget`: the tunnel's share of [[limits.budget]] (null: none), `sending` its direction.
  net::awaitable<void> pipe(From &from, To &to, std::uint64_t &bytes, exchange::meter *budget, bool sending);

  // A TCP connection to o.host and o.port that `pol` grants (tcp_granted: a tcp entry's name and
  // port, or a host service), captured or asked for by CONNECT or SOCKS5 (tunnel/tcp.cpp): judged
  // (decide_tcp: the deny list, the profile; refused with its reason), then relayed as bytes,
  // dialled through the one dial (the host's loopback for a host service), `buf`'s bytes sent
  // first, logged once with who closed it and a database's user and name. Its pump is its own:
  // one watchdog for both deadlines instead of a timer per read and write.
  template <class Stream>
  net::awaitable<void> relay_tcp(Stream &s, beast::flat_buffer &buf, outcome &o, const filters::policy &pol,
                                 const std::optional<net::ip::address> &ip);

  // "200 Connection established", or the SOCKS5 success reply for a SOCKS CONNECT.
  template <class Stream> net::awaitable<bool> send_established(Stream &s);

  // VER REP RSV ATYP BND.ADDR BND.PORT, with an unspecified IPv4 bound address (RFC 1928).
  template <class Stream> net::awaitable<bool> socks_reply(Stream &s, unsigned char code);

  // Reads until `buf` holds `n` bytes (SOCKS negotiation is small and bounded), under the deadline
  // the caller set for the whole step: a client dribbling bytes does not extend it.
  net::awaitable<bool> read_at_least(beast::tcp_stream &s, beast::flat_buffer &buf, std::size_t n);

  // SOCKS5 (RFC 1928) on the proxy port: no authentication, CONNECT only. The requested host and
  // port become a CONNECT target and take exactly the CONNECT path: same policy, same termination,
  // same logs. Returns true when a CONNECT was read (connect_ is set for run()).
  net::awaitable<bool> read_socks5(beast::tcp_stream &s, beast::flat_buffer &buf);

  // CONNECT (HTTP or SOCKS5): judged on host and port before anything else happens; then passed
  // through (allowlist) or terminated with a leaf for the CONNECT host (network-read, publish).
  // `s` is the client's connection: plain, or TLS on the HTTPS proxy listener (the tunnel's TLS is
  // then carried inside it).
  // handle_connect's steps: the policy's decision (a person asked, where [approvals] lets one),
  // and an allowlist tunnel's bytes passed through.
  template <class Stream>
  net::awaitable<filters::decision> decide_connect(Stream &s, outcome &o, const filters::policy &pol,
                                                   std::string_view raw_host, unsigned port);
  template <class Stream>
  net::awaitable<void> pass_through(Stream &s, beast::flat_buffer &buf, outcome &o,
                                    const std::optional<net::ip::address> &ip);
  // The origin dialled for a tunnel sluice does not open, and the client told it is established
  // (null: the client got the failure, or left).
  template <class Stream>
  net::awaitable<std::unique_ptr<upstream_connection>> open_tunnel(Stream &s, outcome &o,
                                                                   const std::optional<net::ip::address> &ip);

  template <class Stream>
  net::awaitable<void> handle_connect(Stream &s, beast::flat_buffer &buf, record &o);

public:
  // A captured connection (exec's transparent capture): the address the client dialled names the
  // host (the DNS responder's table, else the literal) and the port; its first byte says whether it
  // speaks TLS (judged as a CONNECT to that authority, without the "200"), HTTP (origin-form
  // requests that must name that host) or something else (refused, logged).
  net::awaitable<void> run_captured();

  // A captured connection to an SSH host of the policy (session_ssh.cpp): the client's socket goes
  // to an SSH relay (ssh_relay.hpp) on a thread of its own; this waits for it, then logs.
  net::awaitable<void> serve_ssh(const filters::ssh_rule &rule, outcome &o);

  // Set on the SSL object during a terminating handshake, read by the SNI callback.
  struct sni_check {
    std::string host;
    bool is_ip;
    bool mismatch;
  };

private:
  // The client's address and port as the listener saw them, for the access log.
  struct peer {
    std::string ip;
    unsigned port = 0;
  };
  static peer peer_of(const tcp::socket &socket) {
    error_code ec;
    auto ep = socket.remote_endpoint(ec);
    if (ec) return {};
    return {ep.address().to_string(), ep.port()};
  }
  peer source_;
  // The client's connection; gone once a parked tunnel has taken the socket (park()), with the
  // stream's timers (about 0.5 KiB).
  std::optional<beast::tcp_stream> client_;
  worker &worker_;
  gateway_state &state_;
  std::string_view agent_; // serve's agent listener this connection came to, else empty
  bool identify_ = false;   // serve's proxy listener: clients identify themselves once [clients] names any
  // Client identity, only on serve's identifying listeners (null elsewhere: an exec tunnel or an
  // unidentified connection does not carry its strings while it idles).
  struct client_id {
    std::string who;      // the identified client's [clients] name, else empty
    std::string who_hash; // the token hash (or certificate identity) it identified with: a reload
                          // that changes it ends its access
    bool by_certificate = false;
    // The last identification on this connection: the policy it was made under (held, so that a
    // new policy cannot take its address) and the header it came from (empty for a certificate).
    filters::policy_ptr identified_by;
    std::string identified_header;
    // The HTTPS proxy listener: the names of a client certificate that verified; or, for one that
    // did not, why (the first verification error).
    std::optional<filters::certificate_names> peer_names;
    std::string peer_certificate_error;
  };
  std::unique_ptr<client_id> id_;
  client_id &id() {
    if (!id_) id_ = std::make_unique<client_id>();
    return *id_;
  }
  const std::string &who() const {
    static const std::string none;
    return id_ ? id_->who : none;
  }
  bool tls_listener_ = false; // serve's HTTPS proxy listener
  filters::policy_ptr policy_;
  // An HTTP/1.1 head's fields as views, for the judging step; reused request after request.
  std::vector<std::pair<std::string_view, std::string_view>> field_views_;
  beast::flat_buffer buffer_;
  std::unique_ptr<record> connect_; // a CONNECT read by serve_requests, for run() to handle
  bool socks_pending_ = false;     // connect_ came by SOCKS5: its answer is a SOCKS reply
  bool captured_ = false;          // a captured connection (run_captured)
  bool silent_ = false;            // captured TLS before the handshake: denials close, write nothing
  bool linger_ = false;            // sluice closes after an answer: the client may still be sending
  // Parking (park()): the terminated tunnel's TLS stream, which read_head may park unless it is
  // carried (its carrier lives in run_tls's frame), its authority and read buffer (empty while
  // parked); where the request loop resumes: its count and the deadline of the request it waits
  // for.
  std::unique_ptr<tls_stream> tunnel_tls_;
  tunnel_target tunnel_target_;
  beast::flat_buffer tunnel_buf_;
  bool park_ = false;
  parking_lot::ticket ticket_; // in the worker's parking lot while parked
  std::size_t resume_served_ = 0;
  clock::time_point resume_deadline_ = clock::time_point::max();
};

// Whether a response's Content-Type is a stream of server-sent events (parameters and spaces
// aside): such a response is not held to timeouts.request.
inline bool is_event_stream(beast::string_view content_type) {
  auto media = content_type.substr(0, content_type.find(';'));
  while (!media.empty() && media.back() == ' ') media.remove_suffix(1);
  return beast::iequals(media, "text/event-stream");
}

// A Proxy-Status value (RFC 9209): sluice's error type, the reason as details, and the matched
// rule when one is given (a refusal's).
std::string proxy_status(std::string_view ps_error, std::string_view reason, std::string_view rule);

// Half-closes `s` after the other side's end of file: a TLS stream sends close_notify first.
net::awaitable<void> close_send(beast::tcp_stream &s);
net::awaitable<void> close_send(tls_stream &s);

// A connection's accounting: the connection count and the active-connections gauge.
void connection_opened(gateway_state &state);
void connection_closed(gateway_state &state);

} // namespace sluice::gateway::detail
