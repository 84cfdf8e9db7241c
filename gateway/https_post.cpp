// One HTTPS POST as sluice reaches any origin (https_post.hpp): on a private io_context, with
// the gateway's own resolver and address rules, and the upstream trust of the policy. Used for
// OAuth2's token request (credentials/oauth2.cpp) and the approvals webhook.
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
  std::string host, port, target, body, content_type, what;
  std::vector<std::pair<std::string, std::string>> headers;
  unsigned status = 0;
  std::string response;
  std::string error; // what failed, for the message
};

net::awaitable<void> post(post_call &x, const filters::config &cfg, ssl::context &tls) {
  auto ex = co_await net::this_coro::executor;
  // The one dial every origin gets (upstream/dial.hpp): the literal, the pin or DNS; the same
  // address rules as for any origin (no private or metadata address unless [upstream]
  // allow_addresses names it, never this host's own); each connect within timeouts.connect.
  error_code ec;
  std::optional<net::ip::address> literal;
  if (auto a = net::ip::make_address(x.host, ec); !ec) literal = a;
  filters::config rules;
  rules.allow_addresses = cfg.allow_addresses;
  rules.pins = cfg.pins;
  filters::policy judge(rules);
  init_cares();
  resolver dns(ex, cfg.dns_servers, cfg.timeouts.dns);
  error_code dec;
  auto addresses = co_await upstream::allowed_addresses(dns, judge, local_addresses(), x.host, literal, dec);
  if (dec == gateway_error::destination_address_denied) {
    x.error = "every address of " + x.host + " is refused (a private or special address, or this host's own: add "
              "it to [upstream] allow_addresses)";
    co_return;
  }
  if (dec) {
    x.error = "the name " + x.host + " did not resolve";
    co_return;
  }
  unsigned port = static_cast<unsigned>(std::stoul(x.port));
  ssl::stream<beast::tcp_stream> s(ex, tls);
  error_code cec = co_await upstream::connect_first(beast::get_lowest_layer(s), addresses, port, cfg.timeouts.connect);
  if (cec) {
    x.error = "could not connect to " + x.host + ":" + x.port;
    co_return;
  }
  beast::get_lowest_layer(s).expires_never(); // the whole request is bounded by its 10 s
  SSL_set_tlsext_host_name(s.native_handle(), x.host.c_str());
  s.set_verify_callback(ssl::host_name_verification(x.host));
  auto [hec] = co_await s.async_handshake(ssl::stream_base::client, net::as_tuple(net::use_awaitable));
  if (hec) {
    x.error = "TLS with " + x.host + " failed (" + hec.message() + "); the " + x.what + "'s certificate must be trusted ([tls])";
    co_return;
  }
  http::request<http::string_body> req{http::verb::post, x.target, 11};
  req.set(http::field::host, x.port == "443" ? x.host : x.host + ":" + x.port);
  req.set(http::field::content_type, x.content_type);
  req.set(http::field::accept, "application/json");
  for (const auto &[n, v] : x.headers) req.set(n, v);
  req.set(http::field::user_agent, "sluice/" SLUICE_VERSION);
  req.body() = x.body;
  req.prepare_payload();
  auto [wec, wn] = co_await http::async_write(s, req, net::as_tuple(net::use_awaitable));
  if (wec) {
    x.error = "sending to the " + x.what + " failed";
    co_return;
  }
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(max_response);
  auto [rec, rn] = co_await http::async_read(s, buf, parser, net::as_tuple(net::use_awaitable));
  if (rec) {
    x.error = "the " + x.what + "'s answer could not be read (" + rec.message() + ")";
    co_return;
  }
  x.status = parser.get().result_int();
  x.response = std::move(parser.get().body());
  co_return;
}

} // namespace

post_result https_post(const std::string &url, std::string body, const std::string &content_type,
                       std::vector<std::pair<std::string, std::string>> headers, const filters::config &cfg,
                       const std::string &what) {
  auto u = boost::urls::parse_absolute_uri(url);
  if (!u || u->scheme() != "https" || u->encoded_host().empty()) throw std::runtime_error(url + " is not an https:// URL");
  post_call x;
  x.what = what;
  x.host = std::string(u->encoded_host());
  if (!x.host.empty() && x.host.front() == '[') x.host = x.host.substr(1, x.host.size() - 2);
  x.port = u->has_port() ? std::string(u->port()) : "443";
  x.target = std::string(u->encoded_path());
  if (x.target.empty()) x.target = "/";
  if (u->has_query()) x.target += "?" + std::string(u->encoded_query());
  x.body = std::move(body);
  x.content_type = content_type;
  x.headers = std::move(headers);
  ssl::context tls(ssl::context::tls_client);
  tls.set_verify_mode(ssl::verify_peer);
  if (cfg.upstream_system_trust) {
    error_code ignored;
    tls.set_default_verify_paths(ignored);
  }
  if (!cfg.upstream_ca_bundle.empty()) {
    error_code ec;
    tls.load_verify_file(cfg.upstream_ca_bundle, ec);
    if (ec) throw std::runtime_error("tls.upstream_ca_bundle " + cfg.upstream_ca_bundle + " does not load");
  }
  net::io_context ioc;
  std::exception_ptr thrown;
  bool done = false;
  net::co_spawn(ioc, post(x, cfg, tls), [&](std::exception_ptr e) {
    thrown = e;
    done = true;
  });
  ioc.run_for(deadline);
  if (!done) throw std::runtime_error("did not come within 10 s");
  if (thrown) std::rethrow_exception(thrown);
  if (!x.error.empty()) throw std::runtime_error(x.error);
  return {x.status, std::move(x.response)};
}

} // namespace sluice::gateway
