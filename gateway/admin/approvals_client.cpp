// The CLI's side of the approvals API (approvals_client.hpp): one request at a time to an admin
// listener (server.hpp), and what the person deciding is shown.
#include "gateway/admin/approvals_client.hpp"
#include "gateway/net.hpp"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

namespace sluice::gateway {
namespace {

constexpr auto use_tuple = net::as_tuple(net::use_awaitable);

// One request to an admin listener at `address` ("HOST:PORT"), for `sluice approvals`, `approve`
// and `deny`: the status and body. Throws std::runtime_error naming the address when it cannot
// be reached within 10 s.
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

} // namespace

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
