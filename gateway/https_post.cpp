// HTTPS POSTs as sluice reaches any origin (https_post.hpp): on a private io_context, with the
// gateway's own resolver and address rules, and the upstream trust of the policy. Used for
// OAuth2's token request (credentials/oauth2.cpp), the approvals webhook (one POST each) and a
// decider endpoint (an https_session per thread, its connection kept).
#include "gateway/https_post.hpp"
#include "gateway/error.hpp"
#include "gateway/local_addresses.hpp"
#include "gateway/net.hpp"
#include "gateway/resolver.hpp"
#include "gateway/upstream/dial.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/url/parse.hpp>

#include <optional>

namespace sluice::gateway {
namespace {

constexpr auto deadline = std::chrono::seconds(10);
constexpr std::size_t max_response = 64 * 1024;

struct post_call {
  std::string body, content_type;
  const std::vector<std::pair<std::string, std::string>> *headers = nullptr;
  unsigned status = 0;
  std::string response;
  std::string error; // what failed, for the message
};

} // namespace

struct https_session::state {
  std::string host, port, target, what;
  filters::config cfg;
  ssl::context tls{ssl::context::tls_client};
  std::unique_ptr<net::io_context> ioc = std::make_unique<net::io_context>();
  std::unique_ptr<ssl::stream<beast::tcp_stream>> stream; // the kept connection, or none
  beast::flat_buffer buf;

  void drop() {
    stream.reset();
    buf.clear();
  }

  // A new connection, dialled as any origin is: "" once it is up, else what failed.
  net::awaitable<std::string> dial() {
    auto ex = co_await net::this_coro::executor;
    // The one dial every origin gets (upstream/dial.hpp): the literal, the pin or DNS; the same
    // address rules as for any origin (no private or metadata address unless [upstream]
    // allow_addresses names it, never this host's own); each connect within timeouts.connect.
    error_code ec;
    std::optional<net::ip::address> literal;
    if (auto a = net::ip::make_address(host, ec); !ec) literal = a;
    filters::config rules;
    rules.allow_addresses = cfg.allow_addresses;
    rules.pins = cfg.pins;
    filters::policy judge(rules);
    init_cares();
    resolver dns(ex, cfg.dns_servers, cfg.timeouts.dns);
    error_code dec;
    auto addresses = co_await upstream::allowed_addresses(dns, judge, local_addresses(), host, literal, dec);
    if (dec == gateway_error::destination_address_denied) {
      co_return "every address of " + host + " is refused (a private or special address, or this host's own: add "
                "it to [upstream] allow_addresses)";
    }
    if (dec) co_return "the name " + host + " did not resolve";
    auto s = std::make_unique<ssl::stream<beast::tcp_stream>>(ex, tls);
    const unsigned p = static_cast<unsigned>(std::stoul(port));
    if (co_await upstream::connect_first(beast::get_lowest_layer(*s), addresses, p, cfg.timeouts.connect)) {
      co_return "could not connect to " + host + ":" + port;
    }
    beast::get_lowest_layer(*s).expires_never(); // each post is bounded by its 10 s
    SSL_set_tlsext_host_name(s->native_handle(), host.c_str());
    s->set_verify_callback(ssl::host_name_verification(host));
    auto [hec] = co_await s->async_handshake(ssl::stream_base::client, net::as_tuple(net::use_awaitable));
    if (hec) {
      co_return "TLS with " + host + " failed (" + hec.message() + "); the " + what + "'s certificate must be trusted ([tls])";
    }
    stream = std::move(s);
    co_return std::string();
  }

  // One POST; on a kept connection that turns out closed before any answer, once more on a new one.
  net::awaitable<void> exchange(post_call &x) {
    http::request<http::string_body> req{http::verb::post, target, 11};
    req.set(http::field::host, port == "443" ? host : host + ":" + port);
    req.set(http::field::content_type, x.content_type);
    req.set(http::field::accept, "application/json");
    for (const auto &[n, v] : *x.headers) req.set(n, v);
    req.set(http::field::user_agent, "sluice/" SLUICE_VERSION);
    req.body() = x.body;
    req.prepare_payload();
    for (int attempt = 0; attempt < 2; ++attempt) {
      const bool reused = stream != nullptr;
      if (!reused) {
        if (auto why = co_await dial(); !why.empty()) {
          x.error = std::move(why);
          co_return;
        }
      }
      auto [wec, wn] = co_await http::async_write(*stream, req, net::as_tuple(net::use_awaitable));
      if (wec) {
        drop();
        if (reused) continue; // the server had closed it meanwhile
        x.error = "sending to the " + what + " failed";
        co_return;
      }
      http::response_parser<http::string_body> parser;
      parser.body_limit(max_response);
      auto [rec, rn] = co_await http::async_read(*stream, buf, parser, net::as_tuple(net::use_awaitable));
      if (rec) {
        const bool nothing = !parser.got_some();
        drop();
        if (reused && nothing) continue; // closed before answering: asked again on a new connection
        x.error = "the " + what + "'s answer could not be read (" + rec.message() + ")";
        co_return;
      }
      x.status = parser.get().result_int();
      x.response = std::move(parser.get().body());
      if (!parser.keep_alive()) drop();
      co_return;
    }
    x.error = "the " + what + " closed the connection twice before answering";
  }
};

https_session::https_session(const std::string &url, const filters::config &cfg, std::string what)
    : s_(std::make_unique<state>()) {
  auto u = boost::urls::parse_absolute_uri(url);
  if (!u || u->scheme() != "https" || u->encoded_host().empty()) throw std::runtime_error(url + " is not an https:// URL");
  auto &st = *s_;
  st.what = std::move(what);
  st.cfg = cfg;
  st.host = std::string(u->encoded_host());
  if (!st.host.empty() && st.host.front() == '[') st.host = st.host.substr(1, st.host.size() - 2);
  st.port = u->has_port() ? std::string(u->port()) : "443";
  st.target = std::string(u->encoded_path());
  if (st.target.empty()) st.target = "/";
  if (u->has_query()) st.target += "?" + std::string(u->encoded_query());
  st.tls.set_verify_mode(ssl::verify_peer);
  if (cfg.upstream_system_trust) {
    error_code ignored;
    st.tls.set_default_verify_paths(ignored);
  }
  if (!cfg.upstream_ca_bundle.empty()) {
    error_code ec;
    st.tls.load_verify_file(cfg.upstream_ca_bundle, ec);
    if (ec) throw std::runtime_error("tls.upstream_ca_bundle " + cfg.upstream_ca_bundle + " does not load");
  }
}

https_session::~https_session() {
  if (s_) s_->drop(); // the connection before its io_context
}

post_result https_session::post(std::string body, const std::string &content_type,
                                const std::vector<std::pair<std::string, std::string>> &headers) {
  auto &st = *s_;
  post_call x;
  x.body = std::move(body);
  x.content_type = content_type;
  x.headers = &headers;
  std::exception_ptr thrown;
  bool done = false;
  st.ioc->restart();
  net::co_spawn(*st.ioc, st.exchange(x), [&](std::exception_ptr e) {
    thrown = e;
    done = true;
  });
  st.ioc->run_for(deadline);
  if (!done) {
    // Cut short: the connection is in no known state, and the call's frame still waits in the
    // io_context. Both go (the socket first), and the next post dials anew.
    st.drop();
    st.ioc = std::make_unique<net::io_context>();
    throw std::runtime_error("did not come within 10 s");
  }
  if (thrown) {
    st.drop();
    std::rethrow_exception(thrown);
  }
  if (!x.error.empty()) throw std::runtime_error(x.error);
  return {x.status, std::move(x.response)};
}

post_result https_post(const std::string &url, std::string body, const std::string &content_type,
                       std::vector<std::pair<std::string, std::string>> headers, const filters::config &cfg,
                       const std::string &what) {
  https_session one(url, cfg, what);
  return one.post(std::move(body), content_type, headers);
}

} // namespace sluice::gateway
