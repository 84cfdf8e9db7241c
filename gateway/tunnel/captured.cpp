// A captured connection (exec's transparent capture): the address the client dialled names the
// host and the port; its first bytes say what it speaks: TLS (the CONNECT path without the "200"),
// HTTP (origin-form requests for that host), SSH to a host of the policy (the SSH relay), or
// something sluice cannot judge (refused, logged).
#include "gateway/capture.hpp"
#include "gateway/session_impl.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace sluice::gateway::detail {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
net::awaitable<void> session::run_captured() {
  captured_ = true;
  error_code ec;
  auto local = client_->socket().local_endpoint(ec);
  if (ec) co_return;
  auto addr = local.address();
  if (addr.is_v6() && addr.to_v6().is_v4_mapped()) {
    addr = net::ip::make_address_v4(net::ip::v4_mapped, addr.to_v6());
  }
  std::string host;
  if (state_.names) {
    if (auto name = state_.names->name_for(addr)) host = *name;
  }
  if (host.empty()) host = addr.to_string(); // never handed out: judged as the literal it is
  unsigned port = local.port();
  std::string authority = (addr.is_v6() && host.find(':') != std::string::npos ? "[" + host + "]" : host) +
                          ":" + std::to_string(port);
  record o(*this);
  o.host = host;
  o.port = port;
  o.scheme = "https";
  // TCP to a named service, or a host service that passes TCP: relayed as bytes, whatever it
  // speaks (a database's server may speak first), judged on the name and port alone.
  if (policy_->tcp_granted(host, port)) {
    o.method = "-";
    silent_ = true; // no HTTP answer into another protocol's stream
    co_await relay_tcp(*client_, buffer_, o, *policy_, std::nullopt);
    co_return;
  }
  if (host == filters::host_service_name && !policy_->host_service_on(port)) {
    o.method = "-";
    silent_ = true;
    co_await deny(*client_, o, "host_service_not_granted", {}, false);
    co_return;
  }
  // An SSH host of the policy: the server speaks first (its banner), so nothing is read here.
  if (!state_.ssh_host_key.empty()) {
    if (const auto *rule = policy_->ssh_host(host, port)) {
      co_await serve_ssh(*rule, o);
      co_return;
    }
  }
  // HTTP and TLS clients speak first; waiting for them is bounded like a request head.
  client_->expires_after(cfg().timeouts.header_read);
  auto [rec, rn] = co_await client_->async_read_some(buffer_.prepare(16 * 1024), use_tuple);
  if (rec && rec != beast::error::timeout) co_return; // closed without a word
  buffer_.commit(rn);
  unsigned char first = rn ? static_cast<const unsigned char *>(buffer_.data().data())[0] : 0;
  // HTTP: a method token and a space. (A token alone is not enough: an SSH client's banner
  // "SSH-2.0-..." starts with letters too.) Methods are short; more bytes are read if needed.
  bool http = false;
  while (!rec && first != 0x16) {
    std::string_view have(static_cast<const char *>(buffer_.data().data()), buffer_.size());
    auto end = std::find_if_not(have.begin(), have.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || (c != '\0' && std::strchr("!#$%&'*+-.^_`|~", c));
    });
    if (end != have.end() || have.size() >= 32) {
      http = end != have.begin() && end != have.end() && *end == ' ' && end - have.begin() <= 31;
      break;
    }
    auto [mec, mn] = co_await client_->async_read_some(buffer_.prepare(16 * 1024), use_tuple);
    if (mec && mec != beast::error::timeout) co_return;
    rec = mec;
    buffer_.commit(mn);
  }
  if (first == 0x16) {
    o.method = "CONNECT";
    o.target = authority;
    silent_ = true;
    ++state_.in_flight;
    co_await handle_connect(*client_, buffer_, o);
    if (park_) co_return; // still in flight, parked
    tunnel_tls_.reset();
    --state_.in_flight;
  } else if (http) {
    tunnel_target t{host, port, "http"};
    co_await serve_requests(*client_, buffer_, &t);
  } else {
    // Not HTTP, not TLS (SSH, SMTP, a database, or a client waiting for a server greeting) to a
    // name no tcp entry grants: sluice cannot judge it. A host service without tcp = true says so.
    o.method = "-";
    o.scheme = "tcp";
    o.protocol = "tcp";
    if (host == filters::host_service_name) {
      o.decision = "deny";
      o.reason = "tcp_not_allowed";
      o.rule = policy_->host_service_on(port)->text;
    } else {
      o.decision = "error";
      o.reason = "non_http_protocol";
    }
    o.settle();
  }
  co_await close_client(client_->socket());
}
#pragma GCC diagnostic pop

} // namespace sluice::gateway::detail
