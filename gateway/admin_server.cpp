#include "gateway/admin_server.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace sluice::gateway {

extern const std::string_view admin_page; // admin_page.html, compiled in by CMake

namespace {

constexpr auto use_tuple = net::as_tuple(net::use_awaitable);

net::awaitable<void> serve_admin(tcp::socket socket, const admin_handlers &h) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buf(16 * 1024);
  for (int i = 0; i < 1000; ++i) {
    http::request_parser<http::empty_body> parser;
    parser.header_limit(8 * 1024);
    stream.expires_after(std::chrono::seconds(30));
    auto [ec, n] = co_await http::async_read(stream, buf, parser, use_tuple);
    if (ec) co_return; // closed, idle or garbage: nothing to answer
    auto &req = parser.get();
    http::response<http::string_body> res{http::status::ok, req.version()};
    res.set(http::field::server, "sluice");
    std::string_view path = req.target();
    path = path.substr(0, path.find('?'));
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
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
