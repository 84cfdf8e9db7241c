// The gateway's listeners (gateway.hpp): the proxy's, agents', exec's captured ones and the admin
// listener; one acceptor per worker on each, and the accept loop that hands connections to
// sessions.
#include "gateway/exchange/limits_report.hpp"
#include "gateway/gateway.hpp"
#include "gateway/shared_limits/store.hpp"
#include "gateway/admin/server.hpp"
#include "gateway/peer_uid.hpp"
#include "gateway/session.hpp"
#include "filters/host_name.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <cstdio>
#include <sys/socket.h>
#include <unistd.h>

namespace sluice::gateway {
namespace {

// Listen addresses from the config were checked by the loader; this is the same check, for callers
// that did not come through it.
tcp::endpoint parse_endpoint(const std::string &text) {
  auto a = filters::parse_listen_address(text);
  if (!a) {
    throw std::runtime_error("listen address '" + text + "' is not IP:PORT, e.g. 127.0.0.1:3128");
  }
  return {a->ip, a->port};
}

} // namespace

bool gateway::peer_allowed(const tcp::socket &socket, const listener_set &set) {
  if (set.uids.empty()) return true;
  auto uid = loopback_peer_uid(socket);
  if (uid && std::find(set.uids.begin(), set.uids.end(), *uid) != set.uids.end()) return true;
  metrics_->agent_refused(set.agent);
  metrics::access_record r;
  auto pol = state_->policy.load();
  r.profile = filters::to_string(pol->cfg().mode);
  r.method = "-";
  r.decision = "deny";
  r.reason = "agent_peer_refused";
  r.agent = set.agent;
  boost::system::error_code ec;
  auto peer = socket.remote_endpoint(ec);
  std::string ip = ec ? std::string() : peer.address().to_string();
  r.source_ip = ip;
  r.source_port = ec ? 0 : peer.port();
  log_->write(r);
  auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  auto last = last_refusal_note_.load();
  if (now - last >= std::chrono::steady_clock::duration(std::chrono::seconds(10)).count() &&
      last_refusal_note_.compare_exchange_strong(last, now)) {
    std::string who = uid ? "uid " + std::to_string(*uid) : std::string("a socket the kernel does not know");
    std::fprintf(stderr, "sluice: agent listener %s refused a connection from %s: only the users in "
                         "listen.agents.%s.uids may use it (further refusals: the access log and "
                         "sluice_agent_connections_refused_total)\n",
                 set.agent.c_str(), who.c_str(), set.agent.c_str());
  }
  return false;
}

void gateway::spawn_accept(std::size_t index, tcp::acceptor &acceptor, const listener_set &set) {
  auto &w = *workers_[index];
  net::co_spawn(
      w.ioc,
      [this, &acceptor, &w, &set]() -> net::awaitable<void> {
        net::steady_timer pause(w.ioc);
        auto last_log = std::chrono::steady_clock::time_point{};
        for (;;) {
          auto [ec, socket] = co_await acceptor.async_accept(net::as_tuple(net::use_awaitable));
          if (ec == net::error::operation_aborted || !acceptor.is_open()) co_return;
          if (ec == net::error::no_descriptors || ec.value() == ENFILE) {
            // Out of descriptors: the pending connection stays queued and accept would fail again
            // at once. Pause instead of spinning; sessions that end free descriptors meanwhile.
            metrics_->accept_paused.Increment();
            auto now = std::chrono::steady_clock::now();
            if (now - last_log >= std::chrono::seconds(10)) {
              last_log = now;
              std::fprintf(stderr, "sluice: out of file descriptors (%s); accepting paused for "
                                   "100 ms at a time; raise the limit (ulimit -n, LimitNOFILE=) "
                                   "or lower [limits] max_connections\n",
                           ec.message().c_str());
            }
            pause.expires_after(std::chrono::milliseconds(100));
            auto [tec] = co_await pause.async_wait(net::as_tuple(net::use_awaitable));
            if (tec == net::error::operation_aborted || !acceptor.is_open()) co_return;
            continue;
          }
          if (ec) continue; // ECONNABORTED and the like: this client is lost, the listener is not
          if (state_->connections.load() >= initial_->cfg().limits.max_connections) {
            continue; // over the connection limit: the socket closes as it goes out of scope
          }
          if (!peer_allowed(socket, set)) continue; // the socket closes as it goes out of scope
          net::co_spawn(w.ioc,
                        set.captured ? run_captured_session(std::move(socket), w, *state_)
                        : set.tls    ? run_tls_session(std::move(socket), w, *state_)
                                     : run_session(std::move(socket), w, *state_, set.agent, set.identify),
                        log_session_error);
        }
      },
      net::detached);
}

tcp::endpoint gateway::listen(const std::string &address, bool identify) {
  auto ep = parse_endpoint(address);
  tcp::acceptor first(workers_[0]->ioc);
  first.open(ep.protocol());
  first.set_option(tcp::acceptor::reuse_address(true));
  boost::system::error_code ec;
  first.bind(ep, ec);
  if (ec) {
    throw std::runtime_error("cannot listen on " + address + ": " + ec.message() +
                             "; pick a free port or another address");
  }
  // The kernel's limit (net.core.somaxconn, 4096 on current kernels): a fleet's clients reconnect
  // in bursts (a replica restarts, a load balancer shifts), and a full accept queue drops SYNs,
  // which costs a client a 1 s retransmission, then 3 s.
  first.listen(tcp::acceptor::max_listen_connections);
  auto bound = first.local_endpoint();
  adopt_listener(first.release());
  listeners_.back()->identify = identify;
  return bound;
}

void gateway::adopt_listener(int fd) { add_listener(fd, false); }

void gateway::adopt_capture(const std::vector<int> &listeners, int dns_udp, int dns_tcp) {
  names_ = std::make_unique<synthetic_names>();
  state_->names = names_.get();
  for (int fd : listeners) add_listener(fd, true);
  dns_ = std::make_unique<dns_responder>(workers_[0]->ioc, dns_udp, dns_tcp, *names_,
                                         initial_->cfg().timeouts.io);
}

tcp::endpoint gateway::listen_agent(const filters::agent_listener &agent) {
  auto ep = listen(agent.address);
  auto &set = *listeners_.back();
  set.agent = agent.name;
  set.uids = agent.uids;
  return ep;
}

gateway::listener_set &gateway::add_listener(int fd, bool captured) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr *>(&ss), &len) != 0) {
    throw std::runtime_error("listener descriptor is not a socket");
  }
  auto proto = ss.ss_family == AF_INET6 ? tcp::v6() : tcp::v4();
  auto set = std::make_unique<listener_set>();
  set->captured = captured;
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    int d = i == 0 ? fd : ::dup(fd);
    auto a = std::make_unique<tcp::acceptor>(workers_[i]->ioc);
    a->assign(proto, d);
    set->acceptors.push_back(std::move(a));
  }
  listeners_.push_back(std::move(set));
  return *listeners_.back();
}

tcp::endpoint gateway::listen_admin(const std::string &address) {
  // "127.0.0.1:0": a port the system picks (exec's admin listener for approvals).
  auto ep = address == "127.0.0.1:0" ? tcp::endpoint(net::ip::address_v4::loopback(), 0) : parse_endpoint(address);
  admin_ = std::make_unique<tcp::acceptor>(workers_[0]->ioc);
  admin_->open(ep.protocol());
  admin_->set_option(tcp::acceptor::reuse_address(true));
  boost::system::error_code ec;
  admin_->bind(ep, ec);
  if (ec) {
    throw std::runtime_error("cannot listen on admin address " + address + ": " + ec.message());
  }
  admin_->listen(128);
  auto bound = admin_->local_endpoint();
  state_->approvals_admin = (bound.address().is_v6() ? "[" + bound.address().to_string() + "]" : bound.address().to_string()) +
                            ":" + std::to_string(bound.port());
  return bound;
}

void gateway::start_admin() {
  admin_handlers h{[this] {
                     auto shared = state_->shared_limits.load();
                     return metrics_->serialize() + exchange::budgets_prometheus(state_->budgets.snapshot()) +
                            (shared ? shared->prometheus() : std::string());
                   },
                   [this] { return !state_->draining.load() && !state_->unready.load(); },
                   [this] { return ca_->cert_pem(); },
                   [this] { return stats_json(); }};
  h.approvals_token = options_.approvals_token;
  h.webhook_secret = state_->webhook_secret;
  h.approvals_pending = [this] { return state_->held->pending_json(); };
  h.approvals_decide = [this](std::uint64_t id, std::string_view decision, std::string_view by) -> std::string {
    if (decision == "always") return state_->held->allow_always(id, std::string(by));
    auto a = decision == "once" ? approval::once : decision == "run" ? approval::run : approval::deny;
    if (state_->held->decide(id, a, std::string(by))) return {};
    return "request " + std::to_string(id) + " is no longer waiting (decided, timed out or gone)";
  };
  net::co_spawn(workers_[0]->ioc, run_admin(*admin_, std::move(h)), net::detached);
}

} // namespace sluice::gateway
