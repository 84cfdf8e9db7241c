// OAuth2 access tokens (oauth2.hpp): one POST to the token endpoint on a private io_context, with
// the gateway's own resolver and address rules, and the upstream trust of the policy.
#include "gateway/oauth2.hpp"
#include "filters/policy_loader.hpp"
#include "gateway/error.hpp"
#include "gateway/local_addresses.hpp"
#include "gateway/resolver.hpp"
#include "gateway/upstream/dial.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>

#include <optional>

namespace sluice::gateway {
namespace {

constexpr auto deadline = std::chrono::seconds(10);
constexpr std::size_t max_response = 64 * 1024;

// application/x-www-form-urlencoded (RFC 6749 appendix B).
std::string form_encode(std::string_view s) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char ch : s) {
    if (std::isalnum(ch) || ch == '-' || ch == '.' || ch == '_' || ch == '~') {
      out += static_cast<char>(ch);
    } else if (ch == ' ') {
      out += '+';
    } else {
      out += '%';
      out += hex[ch >> 4];
      out += hex[ch & 15];
    }
  }
  return out;
}


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

std::string read_source(const filters::credential_config &c, const std::string &what, const std::string &source) {
  filters::credential_config part;
  part.name = c.name + "." + what;
  part.source = source;
  filters::load_secret(part);
  return part.secret;
}

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

void load_oauth2(filters::credential_config &c, const filters::config &cfg) {
  auto &o = *c.oauth2;
  auto fail = [&](const std::string &why) {
    return filters::config_error("credential '" + c.name + "': the OAuth2 token from " + o.token_url + " " + why);
  };
  std::string secret = read_source(c, "client_secret", o.client_secret_source);
  std::string authorization = "Basic " + filters::base64_encode(form_encode(o.client_id) + ":" + form_encode(secret));
  if (o.refresh_token.empty() && !o.refresh_token_source.empty()) {
    o.refresh_token = read_source(c, "refresh_token", o.refresh_token_source);
  }
  std::string body = o.refresh_token.empty() ? "grant_type=client_credentials"
                                             : "grant_type=refresh_token&refresh_token=" + form_encode(o.refresh_token);
  if (!o.scopes.empty()) {
    std::string scope;
    for (const auto &sc : o.scopes) scope += (scope.empty() ? "" : " ") + sc;
    body += "&scope=" + form_encode(scope);
  }
  post_result x;
  try {
    x = https_post(o.token_url, std::move(body), "application/x-www-form-urlencoded",
                   {{"Authorization", authorization}}, cfg, "token endpoint");
  } catch (const std::exception &e) {
    throw fail(std::string(e.what()).rfind("did not come", 0) == 0 ? std::string(e.what()) : "cannot be had: " + std::string(e.what()));
  }
  boost::system::error_code jec;
  auto v = boost::json::parse(x.body, jec);
  const boost::json::object *obj = !jec && v.is_object() ? &v.as_object() : nullptr;
  if (x.status == 200 && !obj) {
    throw fail("answered HTTP 200 with what is not a JSON token response; check token_url (it must be the "
               "token endpoint)");
  }
  if (x.status != 200 || !obj) {
    std::string why = "was refused: HTTP " + std::to_string(x.status);
    if (obj) {
      if (auto *e = obj->if_contains("error"); e && e->is_string()) why += " " + std::string(e->as_string());
    }
    throw fail(why + "; check client_id, client_secret and the refresh token");
  }
  auto *token = obj->if_contains("access_token");
  if (!token || !token->is_string() || token->as_string().empty()) throw fail("came without an access_token");
  std::string value(token->as_string());
  if (value.find_first_of("\r\n") != std::string::npos) throw fail("holds a line break");
  std::chrono::seconds life{3600};
  if (auto *e = obj->if_contains("expires_in")) {
    if (e->is_int64() && e->as_int64() > 0) life = std::chrono::seconds(e->as_int64());
    if (e->is_uint64() && e->as_uint64() > 0) life = std::chrono::seconds(static_cast<long long>(e->as_uint64()));
  }
  if (auto *r = obj->if_contains("refresh_token"); r && r->is_string() && !r->as_string().empty()) {
    o.refresh_token = std::string(r->as_string()); // rotated
  }
  c.secret = std::move(value);
  // Asked again 80% into its life (at least 1 s on): never sent expired.
  auto before = std::max<std::chrono::milliseconds>(std::chrono::milliseconds(1000), life * 8 / 10);
  c.refresh_at = std::chrono::steady_clock::now() + before;
}

std::optional<std::chrono::system_clock::time_point> jwt_expiry(std::string_view token) {
  // header.payload.signature, each base64url without padding; the payload's "exp" in seconds.
  auto first = token.find('.');
  auto second = first == std::string_view::npos ? first : token.find('.', first + 1);
  if (second == std::string_view::npos || token.find('.', second + 1) != std::string_view::npos) return std::nullopt;
  std::string part(token.substr(first + 1, second - first - 1));
  for (auto &ch : part) {
    if (ch == '-') ch = '+';
    if (ch == '_') ch = '/';
  }
  while (part.size() % 4) part += '=';
  auto payload = filters::base64_decode(part);
  if (!payload) return std::nullopt;
  boost::system::error_code jec;
  auto v = boost::json::parse(*payload, jec);
  auto *exp = !jec && v.is_object() ? v.as_object().if_contains("exp") : nullptr;
  if (!exp || !(exp->is_int64() || exp->is_uint64() || exp->is_double())) return std::nullopt;
  auto seconds = exp->is_double() ? static_cast<std::int64_t>(exp->as_double())
                                  : exp->is_int64() ? exp->as_int64() : static_cast<std::int64_t>(exp->as_uint64());
  return std::chrono::system_clock::time_point(std::chrono::seconds(seconds));
}

void load_credential(filters::credential_config &c, const filters::config &cfg) {
  if (c.oauth2) {
    load_oauth2(c, cfg);
  } else if (c.aws) {
    load_aws(c);
  } else {
    if (c.ttl.count() == 0) c.refresh_at = {}; // set again below when the token says it expires
    filters::load_secret(c);
    // A token that says when it expires (a JWT's "exp") is read again 80% of the way there, or
    // after its ttl if that comes first.
    if (c.source.rfind("env:", 0) != 0) {
      if (auto exp = jwt_expiry(c.secret)) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*exp - std::chrono::system_clock::now());
        if (left.count() <= 0) {
          throw filters::config_error("credential '" + c.name + "': the token from " + c.source.substr(0, c.source.find(':')) +
                                      " expired already (its exp is in the past); renew it where it comes from");
        }
        auto at = std::chrono::steady_clock::now() + std::max<std::chrono::milliseconds>(std::chrono::milliseconds(1000), left * 8 / 10);
        if (c.refresh_at == std::chrono::steady_clock::time_point{} || at < c.refresh_at) c.refresh_at = at;
      }
    }
  }
}

} // namespace sluice::gateway
