// The admin listener (server.hpp): the live page, its stats, metrics, health, the CA and the
// approvals API, each request small and bounded. The CLI's side of the approvals API is
// approvals_client.cpp.
#include "gateway/admin/server.hpp"
#include "filters/aws_sigv4.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <charconv>
#include <openssl/crypto.h>

namespace sluice::gateway {

extern const std::string_view admin_page; // page.html, compiled in by CMake (page.cpp.in)

namespace {

constexpr auto use_tuple = net::as_tuple(net::use_awaitable);

// The approvals API: a bearer token (compared in constant time), never a cookie, so another site
// cannot make a browser send it; a POST must say it is JSON (a cross-site form cannot without a
// preflight, which is never answered) and, when it names an Origin, come from this page's own.
void approvals_api(const http::request<http::string_body> &req, std::string_view path, const admin_handlers &h,
                   http::response<http::string_body> &res) {
  res.set(http::field::cache_control, "no-store");
  auto refuse = [&](http::status s, std::string why) {
    res.result(s);
    res.set(http::field::content_type, "text/plain; charset=utf-8");
    res.body() = std::move(why) + "\n";
  };
  if (h.approvals_token.empty() || !h.approvals_pending) {
    return refuse(http::status::not_found, "approvals are not configured ([approvals] in the policy)");
  }
  auto auth = req[http::field::authorization];
  std::string want = "Bearer " + h.approvals_token;
  // A webhook's answer: signed with the webhook secret over the body, which names the request.
  bool signed_by_webhook = false;
  if (auto sig = req["X-Sluice-Signature"]; auth.empty() && !sig.empty() && !h.webhook_secret.empty() &&
                                             req.method() == http::verb::post) {
    std::string expect = "sha256=" + filters::sigv4::hmac_sha256_hex(h.webhook_secret, req.body());
    if (sig.size() != expect.size() || CRYPTO_memcmp(sig.data(), expect.data(), expect.size()) != 0) {
      return refuse(http::status::unauthorized, "the webhook signature is wrong (X-Sluice-Signature: sha256=HMAC of the body)");
    }
    signed_by_webhook = true;
  } else if (auth.size() != want.size() || CRYPTO_memcmp(auth.data(), want.data(), want.size()) != 0) {
    return refuse(http::status::unauthorized, "the approvals token is missing or wrong (Authorization: Bearer TOKEN)");
  }
  if (auto origin = req[http::field::origin]; !origin.empty() && origin != "http://" + std::string(req[http::field::host])) {
    return refuse(http::status::forbidden, "cross-site request refused (Origin " + std::string(origin) + ")");
  }
  if (path == "/api/approvals") {
    if (req.method() != http::verb::get) return refuse(http::status::method_not_allowed, "use GET");
    res.set(http::field::content_type, "application/json");
    res.body() = h.approvals_pending();
    return;
  }
  if (req.method() != http::verb::post) return refuse(http::status::method_not_allowed, "use POST");
  if (req[http::field::content_type].substr(0, 16) != "application/json") {
    return refuse(http::status::unsupported_media_type, "send the decision as application/json");
  }
  std::uint64_t id = 0;
  auto digits = path.substr(std::string_view("/api/approvals/").size());
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), id);
  if (ec != std::errc{} || end != digits.data() + digits.size()) return refuse(http::status::not_found, "no such request");
  boost::system::error_code jec;
  auto v = boost::json::parse(req.body(), jec);
  auto *o = !jec && v.is_object() ? &v.as_object() : nullptr;
  auto text = [&](const char *k) -> std::string {
    auto *x = o ? o->if_contains(k) : nullptr;
    return x && x->is_string() ? std::string(x->as_string()) : std::string();
  };
  std::string decision = text("decision"), by = text("by");
  if (decision != "once" && decision != "run" && decision != "always" && decision != "deny") {
    return refuse(http::status::bad_request, "decision must be \"once\", \"run\", \"always\" or \"deny\"");
  }
  if (signed_by_webhook) {
    // The signed body must name this request: a signed answer cannot be replayed for another.
    auto *named = o ? o->if_contains("id") : nullptr;
    if (!named || !named->is_number() || named->to_number<std::uint64_t>() != id) {
      return refuse(http::status::bad_request, "a webhook's answer names its request: {\"id\": " + std::to_string(id) + ", ...}");
    }
    by = "webhook";
  } else if (by != "page" && by != "cli") {
    by = "api";
  }
  if (auto why = h.approvals_decide(id, decision, by); !why.empty()) return refuse(http::status::conflict, why);
  res.set(http::field::content_type, "application/json");
  res.body() = "{\"id\":" + std::to_string(id) + ",\"decision\":\"" + decision + "\"}";
}

net::awaitable<void> serve_admin(tcp::socket socket, const admin_handlers &h) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buf(16 * 1024);
  for (int i = 0; i < 1000; ++i) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(8 * 1024);
    parser.body_limit(4 * 1024);
    stream.expires_after(std::chrono::seconds(30));
    auto [ec, n] = co_await http::async_read(stream, buf, parser, use_tuple);
    if (ec) co_return; // closed, idle or garbage: nothing to answer
    auto &req = parser.get();
    http::response<http::string_body> res{http::status::ok, req.version()};
    res.set(http::field::server, "sluice");
    std::string_view path = req.target();
    path = path.substr(0, path.find('?'));
    if (path == "/api/approvals" || path.starts_with("/api/approvals/")) {
      approvals_api(req, path, h, res);
    } else if (req.method() != http::verb::get && req.method() != http::verb::head) {
      res.result(http::status::method_not_allowed);
      res.body() = "use GET\n";
    } else if (path == "/" || path == "/index.html") {
      res.set(http::field::content_type, "text/html; charset=utf-8");
      // The page loads nothing from anywhere else; say so to the browser as well.
      res.set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; "
                                         "style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'");
      res.set(http::field::cache_control, "no-store");
      res.body() = std::string(admin_page);
    } else if (path == "/api/stats" && h.stats) {
      res.set(http::field::content_type, "application/json");
      res.set(http::field::cache_control, "no-store");
      res.body() = h.stats();
    } else if (path == "/metrics") {
      res.set(http::field::content_type, "text/plain; version=0.0.4");
      res.body() = h.metrics();
    } else if (path == "/healthz") {
      res.body() = "ok\n";
    } else if (path == "/readyz") {
      bool ready = h.ready();
      res.result(ready ? http::status::ok : http::status::service_unavailable);
      res.body() = ready ? "ready\n" : "draining\n";
    } else if (path == "/ca.pem" && h.ca_pem) {
      res.set(http::field::content_type, "application/x-pem-file");
      res.body() = h.ca_pem();
    } else {
      res.result(http::status::not_found);
      res.body() = "not found; try /, /api/stats, /metrics, /healthz, /readyz, /ca.pem\n";
    }
    if (!res.has_content_length()) res.prepare_payload();
    res.keep_alive(req.keep_alive());
    stream.expires_after(std::chrono::seconds(30));
    auto [wec, wn] = co_await http::async_write(stream, res, use_tuple);
    if (wec || !req.keep_alive()) co_return;
  }
}

} // namespace

net::awaitable<void> run_admin(tcp::acceptor &acceptor, admin_handlers handlers) {
  auto shared = std::make_shared<admin_handlers>(std::move(handlers));
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(use_tuple);
    if (ec == net::error::operation_aborted) co_return; // closed on shutdown
    if (ec) continue;
    net::co_spawn(acceptor.get_executor(),
                  [s = std::move(socket), shared]() mutable -> net::awaitable<void> {
                    co_await serve_admin(std::move(s), *shared);
                  },
                  net::detached);
  }
}

} // namespace sluice::gateway
