#pragma once
#include "certs/leaf_cache.hpp"
#include "gateway/admin/approvals.hpp"
#include "gateway/client_meters.hpp"
#include "gateway/exchange/limits.hpp"
#include "filters/policy.hpp"
#include "gateway/net.hpp"
#include "gateway/parking_lot.hpp"
#include "gateway/request_summary.hpp"
#include "gateway/resolver.hpp"
#include "gateway/upstream/pool.hpp"
#include "metrics/access_log.hpp"
#include "metrics/live_stats.hpp"
#include "metrics/metrics.hpp"
#include "scan/database.hpp"

#include <atomic>
#include <functional>
#include <mutex>
#include <unordered_set>
#include <memory>

namespace sluice::gateway {

class synthetic_names;
struct worker;
namespace decider {
class client; // decider/client.hpp
}
namespace shared_limits {
class store; // shared_limits/store.hpp
}
namespace detail {
class h2_upstream;
class h2_connection;
// The gateway drains: every h2 client connection of `w` gets GOAWAY (no new streams; it closes
// once its open streams end). Runs on w's thread (h2/connection.cpp).
void goaway_all(worker &w);
} // namespace detail

// What every session of every worker shares: the current policy (swapped atomically on reload), the
// instruments, the certificate machinery and the drain state.
struct gateway_state {
  std::atomic<std::shared_ptr<const filters::policy>> policy;
  metrics::metrics &metrics;
  metrics::access_log &log;
  metrics::live_stats &stats;
  certs::leaf_cache &leaves;
  ssl::context &server_tls;
  ssl::context &upstream_tls;
  // Loads the system trust store into upstream_tls once, before the first upstream handshake.
  std::function<void()> &load_system_trust;
  std::once_flag system_trust_once;
  request_summary &summary;
  bool keep_summary = false; // exec reports per-host decisions at exit; serve does not need them
  std::vector<net::ip::address> own_addresses;
  // exec with transparent capture: the names the sandbox's DNS responder handed out (else null).
  synthetic_names *names = nullptr;
  // serve's HTTPS proxy listener: its certificate, and the client CAs it verifies (else null).
  ssl::context *proxy_tls = nullptr;
  std::atomic<int> in_flight{0};
  std::atomic<std::size_t> connections{0};
  std::atomic<bool> draining{false};
  // SIGTERM with [timeouts] drain_delay: /readyz fails and responses close their connections, while
  // the listeners still serve, so that a load balancer moves clients away before the drain.
  std::atomic<bool> unready{false};
  client_meters meters{}; // [roles] limits, per client
  // Git over SSH (ssh/relay.hpp): the host key the sandbox's known_hosts names (its private half;
  // empty: SSH hosts are not served), the caller's ssh-agent socket and known_hosts files.
  std::string ssh_host_key{};
  std::string ssh_agent_socket{};
  std::vector<std::string> ssh_known_hosts{};
  // Requests held for a person's decision ([approvals]).
  std::unique_ptr<approvals> held{};
  std::string approvals_admin{};  // the admin listener's HOST:PORT, for the webhook's callback URL
  std::string webhook_secret{};   // [approvals] webhook_secret, read at start
  // An origin answered 401 to a request the credential NAME was added to (OAuth2: obtained again).
  std::function<void(const std::string &)> credential_refused{};
  // Sessions origins issued, for resumption (a few KiB each with the origin's chain: 2 MiB at most).
  upstream_sessions origin_sessions{512};
  // [scan]: the database compiled for the policy in force (null: nothing is scanned).
  std::atomic<std::shared_ptr<const scan::database>> scan{};
  // Relayed TCP connections open now ([limits] max_tcp_connections).
  std::atomic<std::size_t> tcp_open{0};
  // [decider]: the external decider's client for the policy in force (null: none configured).
  std::atomic<std::shared_ptr<decider::client>> decider{};
  // [[limits.budget]]: every budget's counters, kept across reloads (a reload does not refill one).
  exchange::ledger budgets{};
  // [limits.shared]: the budgets' counters in Redis, shared by the replicas (null: this process's own).
  std::atomic<std::shared_ptr<shared_limits::store>> shared_limits{};
};

// One thread's share of the gateway: its io_context, resolver and upstream pool. Sessions run on the
// worker that accepted them and never touch another worker's state.
//
// The io_context locks its scheduler (other threads post to it: drain, stop) but not each socket's
// reactor state: every socket and timer of a worker is used from that worker's thread only, after
// start() (listeners are adopted before). Those locks were about 1% of a request's instructions.
struct worker {
  worker(const filters::config &cfg)
      : ioc(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO), dns(ioc.get_executor(), cfg.dns_servers, cfg.timeouts.dns),
        pool(cfg.limits.pool_idle_per_host, cfg.limits.pool_idle_total,
             cfg.limits.pool_idle_timeout) {}
  net::io_context ioc;
  resolver dns;
  upstream_pool pool;
  parking_lot parking{ioc}; // this worker's idle terminated tunnels (session::park)
  // Origins that speak h2, one multiplexed connection each, keyed as the pool is; h2 clients'
  // streams share them (h2/upstream.hpp). An entry leaves when its connection ends.
  std::unordered_map<std::string, std::shared_ptr<detail::h2_upstream>> h2_origins;
  // The h2 client connections it serves (each registers itself), told GOAWAY on drain.
  std::unordered_set<detail::h2_connection *> h2_clients;
};

} // namespace sluice::gateway
