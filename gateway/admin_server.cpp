#include "gateway/admin_server.hpp"
#include "filters/aws_sigv4.hpp"
#include "gateway/serve.hpp"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <charconv>
#include <openssl/crypto.h>

namespace sluice::gateway {

extern const std::string_view admin_page; // admin_page.html, compiled in by CMake

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

std::pair<unsigned, std::string> admin_call(const std::string &address, http::verb method, const std::string &target,
                                            const std::string &token, const std::string &json_body) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    throw std::runtime_error("--admin " + address + ": give the admin listener as HOST:PORT ([listen] admin)");
  }
  std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  net::io_context ioc;
  std::pair<unsigned, std::string> out{0, {}};
  std::string error;
  net::co_spawn(ioc, [&]() -> net::awaitable<void> {
    tcp::resolver resolver(ioc);
    auto [rec, results] = co_await resolver.async_resolve(host, port, use_tuple);
    if (rec) {
      error = rec.message();
      co_return;
    }
    beast::tcp_stream stream(ioc);
    auto [cec, ep] = co_await stream.async_connect(results, use_tuple);
    if (cec) {
      error = cec.message();
      co_return;
    }
    http::request<http::string_body> req{method, target, 11};
    req.set(http::field::host, address);
    req.set(http::field::user_agent, "sluice");
    if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
    if (method == http::verb::post) {
      req.set(http::field::content_type, "application/json");
      req.body() = json_body;
    }
    req.prepare_payload();
    auto [wec, wn] = co_await http::async_write(stream, req, use_tuple);
    if (wec) {
      error = wec.message();
      co_return;
    }
    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(1024 * 1024);
    auto [hec, hn] = co_await http::async_read(stream, buf, parser, use_tuple);
    if (hec) {
      error = hec.message();
      co_return;
    }
    out = {parser.get().result_int(), parser.get().body()};
  }, net::detached);
  ioc.run_for(std::chrono::seconds(10));
  if (!error.empty()) throw std::runtime_error("the admin listener " + address + " cannot be reached: " + error);
  if (out.first == 0) throw std::runtime_error("the admin listener " + address + " did not answer within 10 s");
  return out;
}

int run_approvals(const approvals_options &o) {
  std::string admin = o.admin;
  if (admin.empty()) {
    const char *e = std::getenv("SLUICE_ADMIN");
    admin = e ? e : "";
  }
  std::string token;
  if (admin.empty()) {
    // A running `sluice exec` or `sluice agent` of this user: the newest run's admin and token.
    const char *home = std::getenv("HOME");
    std::string dir = std::string(home ? home : "") + "/.local/state/sluice/approvals";
    std::error_code ec;
    std::filesystem::file_time_type newest{};
    std::string chosen;
    for (const auto &f : std::filesystem::directory_iterator(dir, ec)) {
      auto t = f.last_write_time(ec);
      if (!ec && (chosen.empty() || t > newest)) {
        newest = t;
        chosen = f.path().string();
      }
    }
    if (!chosen.empty()) {
      std::ifstream f(chosen);
      std::getline(f, admin);
      std::getline(f, token);
    }
  }
  if (admin.empty()) {
    throw std::runtime_error("no run waits for decisions here; say where to decide: --admin HOST:PORT (the "
                             "[listen] admin of sluice serve) or SLUICE_ADMIN");
  }
  if (!o.token_file.empty()) {
    std::ifstream f(o.token_file);
    std::getline(f, token);
    if (!f && token.empty()) throw std::runtime_error("cannot read the approvals token from --token-file " + o.token_file);
  } else if (const char *e = std::getenv("SLUICE_APPROVALS_TOKEN")) {
    token = e;
  }
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  if (token.empty()) throw std::runtime_error("give the approvals token: --token-file FILE or SLUICE_APPROVALS_TOKEN");
  // The held requests, as GET /api/approvals lists them.
  auto pending = [&] {
    auto [status, body] = admin_call(admin, http::verb::get, "/api/approvals", token, "");
    if (status != 200) throw std::runtime_error("the admin listener answered " + std::to_string(status) + ": " + body);
    boost::system::error_code jec;
    auto v = boost::json::parse(body, jec);
    auto *list = !jec && v.is_object() ? v.as_object().if_contains("pending") : nullptr;
    if (!list || !list->is_array()) throw std::runtime_error("the admin listener's answer is not the approvals list");
    return std::move(list->as_array());
  };
  if (o.action == "list") {
    auto held = pending();
    if (held.empty()) {
      std::printf("nothing is waiting for a decision\n");
      return 0;
    }
    std::printf("%-6s %-8s %-40s %-10s %-8s %s\n", "ID", "METHOD", "HOST", "PROFILE", "WAITED", "CLIENT");
    for (const auto &x : held) {
      const auto &r = x.as_object();
      auto str = [&](const char *k) { return r.if_contains(k) && r.at(k).is_string() ? std::string(r.at(k).as_string()) : std::string(); };
      std::string host = str("host") + ":" + std::to_string(r.at("port").to_number<unsigned>()) + str("path");
      std::printf("%-6llu %-8s %-40s %-10s %-8.0f %s\n", static_cast<unsigned long long>(r.at("id").to_number<std::uint64_t>()),
                  str("method").c_str(), host.c_str(), str("profile").c_str(), r.at("waited_seconds").to_number<double>(),
                  str("client").empty() ? "-" : str("client").c_str());
    }
    return 0;
  }
  if (o.action == "always") {
    // What would be written, shown first; written only on a yes.
    auto list = pending();
    const boost::json::object *held = nullptr;
    for (const auto &x : list) {
      auto *id = x.is_object() ? x.as_object().if_contains("id") : nullptr;
      if (id && id->is_number() && id->to_number<std::uint64_t>() == o.id) held = &x.as_object();
    }
    if (!held) {
      std::fprintf(stderr, "sluice: request %llu is not waiting (sluice approvals lists what is)\n",
                   static_cast<unsigned long long>(o.id));
      return 1;
    }
    auto str = [&](const char *k) {
      return held->if_contains(k) && held->at(k).is_string() ? std::string(held->at(k).as_string()) : std::string();
    };
    if (str("always_text").empty()) {
      std::fprintf(stderr, "sluice: request %llu: the run's policy is not a file sluice can add to; use --run, "
                   "or add the host to the policy yourself\n", static_cast<unsigned long long>(o.id));
      return 1;
    }
    std::printf("These lines go at the end of %s:\n\n%s\n", str("always_file").c_str(), str("always_text").c_str());
    if (!o.yes) {
      if (!::isatty(STDIN_FILENO)) {
        std::fprintf(stderr, "sluice: not written: add --yes to write without being asked (stdin is not a terminal)\n");
        return 1;
      }
      std::printf("Write them? [y/N] ");
      std::fflush(stdout);
      std::string answer;
      std::getline(std::cin, answer);
      if (answer != "y" && answer != "Y" && answer != "yes") {
        std::printf("not written; request %llu still waits\n", static_cast<unsigned long long>(o.id));
        return 1;
      }
    }
  }
  std::string body = "{\"decision\":\"" + o.action + "\",\"by\":\"cli\"}";
  auto [status, answer] = admin_call(admin, http::verb::post, "/api/approvals/" + std::to_string(o.id), token, body);
  if (status != 200) {
    std::fprintf(stderr, "sluice: request %llu: %s", static_cast<unsigned long long>(o.id), answer.c_str());
    return 1;
  }
  std::printf("request %llu: %s\n", static_cast<unsigned long long>(o.id),
              o.action == "deny"     ? "denied"
              : o.action == "run"    ? "allowed for the run"
              : o.action == "always" ? "allowed always (written to the policy file)"
                                     : "allowed once");
  return 0;
}

} // namespace sluice::gateway
