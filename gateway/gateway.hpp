#pragma once
#include "certs/certificate_authority.hpp"
#include "certs/leaf_cache.hpp"
#include "filters/policy.hpp"
#include "gateway/capture.hpp"
#include "gateway/exchange/scan.hpp"
#include "gateway/gateway_state.hpp"
#include "gateway/net.hpp"
#include "gateway/exchange/limits.hpp"
#include "gateway/request_summary.hpp"
#include "metrics/access_log.hpp"
#include "metrics/metrics.hpp"

#include <atomic>
#include <functional>
#include <memory>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <map>
#include <set>
#include <vector>

namespace sluice::gateway {

struct gateway_options {
  unsigned threads = 0;        // 0: one per core, at most 8
  // [approvals]: the token the admin listener's approvals API asks for (empty: not served).
  std::string approvals_token;
  std::string command_id;      // carried in every access-log line
  std::string skill;           // exec: the skill whose policy is enforced; a metric label and log field
  // CA for TLS termination. Null: an ephemeral CA is generated, name-constrained to the allowlist
  // when it has no regex entries.
  std::shared_ptr<const certs::certificate_authority> ca;
  bool keep_summary = false; // record per-host decisions for request_summary (exec)
  // Git over SSH (exec, the policy's ssh hosts): the private half of the host key the sandbox's
  // known_hosts names (empty: no SSH served), the caller's SSH_AUTH_SOCK and known_hosts files.
  std::string ssh_host_key;
  std::string ssh_agent_socket;
  std::vector<std::string> ssh_known_hosts;
  // [scan]: what the run adds to the policy's scanner (the caller's own secrets, the canaries).
  exchange::scan_inputs scan;
  // The access log's chain (docs/metrics.md): exec's key made for the run (PEM; empty: serve's
  // [log] signing_key, read from its source) and the chain's writer (empty: [log] writer, else
  // HOST:PID).
  std::string log_signing_key_pem;
  std::string log_writer;
};

// The gateway core shared by `serve` and `exec`: workers, listeners, TLS contexts, instruments.
// Built once at start-up (exceptions there become exit 125); the data path reports by error_code.
class gateway {
public:
  gateway(filters::policy_ptr policy, gateway_options options);
  ~gateway();

  // Binds the proxy listener to "ADDRESS:PORT" (port 0 picks one); returns the bound endpoint.
  // `identify`: serve's proxy listener, where clients identify themselves once the policy names
  // any ([clients]).
  tcp::endpoint listen(const std::string &address, bool identify = false);
  // serve's HTTPS proxy listener ([listen] proxy_tls): clients speak TLS to sluice first, with the
  // certificate [tls] proxy_cert/proxy_key, and may show a client certificate ([tls] client_ca);
  // then all is as on the proxy listener, inside that TLS. Returns the bound endpoint.
  tcp::endpoint listen_tls(const std::string &address);
  // Serves on a listening socket made elsewhere (exec: inside the sandbox's network namespace).
  void adopt_listener(int fd);
  // serve: one agent host's listener ([listen.agents.NAME]): its requests carry the agent's name in
  // the access log and metrics, and connections whose socket belongs to another user are refused.
  tcp::endpoint listen_agent(const filters::agent_listener &agent);
  // exec's transparent capture: listeners on every port the policy can allow, bound to any address
  // of the sandbox's namespace (whose every address is local), and its DNS responder's sockets.
  // Connections there are judged by the name the responder handed their address out for.
  void adopt_capture(const std::vector<int> &listeners, int dns_udp, int dns_tcp);
  tcp::endpoint listen_admin(const std::string &address);

  void start();              // starts the worker threads
  void reload(filters::policy_ptr policy);
  // SIGTERM's first step: /readyz fails and every response closes its connection, while the
  // listeners go on serving (a load balancer moves clients to other replicas meanwhile).
  void set_unready();
  // Stops accepting, lets in-flight requests finish within the drain deadline (or `max_wait`), stops
  // the workers.
  void drain(std::chrono::milliseconds max_wait = std::chrono::milliseconds(0));
  void stop();               // stops at once
  void join();
  // The access log's rotation (serve's SIGHUP; returns what failed, empty when fine) and its
  // interval checkpoint (serve's once-a-second tick). Its closing checkpoint is written when the
  // gateway goes: after the workers, whose last connections may still log as they are torn down.
  std::string reopen_log() { return log_->reopen(); }
  void log_tick() { log_->checkpoint_if_due(); }

  const certs::certificate_authority &ca() const { return *ca_; }
  metrics::metrics &instruments() { return *metrics_; }
  request_summary &summary() { return summary_; }
  // [[limits.budget]]: every budget's counters now (exec's summary, the live page, /metrics).
  std::vector<exchange::budget_row> budget_rows() const;
  filters::policy_ptr policy() const { return state_->policy.load(); }

  // Builds the CA constraints that match an allowlist (none when it has regex entries).
  static certs::name_constraint_set constraints_for(const filters::policy &p);

  // GET /api/stats: the live page's data (docs/metrics.md).
  std::string stats_json() const;

private:
  struct listener_set {
    // One acceptor per worker, all on the same listening socket (dup'ed descriptors): the kernel
    // hands each connection to one of them.
    std::vector<std::unique_ptr<tcp::acceptor>> acceptors;
    bool captured = false;
    std::string agent;           // an agent listener's name
    std::vector<unsigned> uids;  // an agent listener's users
    bool identify = false;       // clients identify themselves ([clients])
    bool tls = false;            // the HTTPS proxy listener
  };
  // The constructor's TLS contexts (gateway_tls.cpp): clients' terminated leg, origins' leg.
  void refresh_decider(const filters::config &cfg);
  void refresh_shared_limits(const filters::config &cfg);
  void setup_server_tls(const filters::config &cfg);
  void setup_upstream_tls(const filters::config &cfg);
  metrics::chain_options log_chain(const filters::config &cfg) const;
  // start()'s admin listener (gateway_listen.cpp): what it serves, as functions of this gateway.
  void start_admin();
  void spawn_accept(std::size_t worker_index, tcp::acceptor &acceptor, const listener_set &set);
  listener_set &add_listener(int fd, bool captured);
  // Refuses (logs, counts, closes) a connection to an agent listener from another user's socket.
  bool peer_allowed(const tcp::socket &socket, const listener_set &set);

  filters::policy_ptr initial_;
  gateway_options options_;
  std::shared_ptr<const certs::certificate_authority> ca_;
  std::unique_ptr<metrics::metrics> metrics_;
  std::unique_ptr<metrics::access_log> log_;
  metrics::live_stats stats_;
  std::chrono::system_clock::time_point started_ = std::chrono::system_clock::now();
  std::unique_ptr<certs::leaf_cache> leaves_;
  ssl::context server_tls_{ssl::context::tls_server};
  bool offer_h2_ = true; // [tls] h2: offered in ALPN on the terminated leg (read by select_alpn)
  ssl::context upstream_tls_{ssl::context::tls_client};
  std::unique_ptr<ssl::context> proxy_tls_; // listen_tls()
  std::function<void()> load_system_trust_;
  request_summary summary_;
  std::unique_ptr<gateway_state> state_;
  // [scan]: compiles the database for `p` unless what it depends on is unchanged, and puts it in
  // force. On reload and when credentials are read again, after the policy is swapped in (so a
  // 0.1-0.2 s compile never holds back a new token); a failure keeps the previous database.
  void refresh_scan(const filters::policy &p);
  std::mutex scan_mutex_;
  std::size_t scan_hash_ = 0;
  std::vector<std::unique_ptr<worker>> workers_;
  std::vector<std::unique_ptr<listener_set>> listeners_; // stable addresses: sessions keep the agent name
  std::atomic<std::int64_t> last_refusal_note_{0}; // steady-clock ticks of the last stderr note
  std::unique_ptr<synthetic_names> names_;
  std::unique_ptr<dns_responder> dns_;
  std::unique_ptr<tcp::acceptor> admin_;
  std::vector<std::thread> threads_;
  // Credentials with a ttl (file: and command: sources) are read again on a thread of their own,
  // and a policy with the new values swapped in (refresh_credentials, gateway_credentials.cpp).
  void refresh_credentials();
  void refresh_round(const std::set<std::string> &refused);
  std::thread refresher_;
  std::mutex refresh_m_;
  std::condition_variable refresh_cv_;
  bool refresh_stop_ = false;
  // OAuth2 credentials an API answered 401 while they were added (gateway_state::credential_refused):
  // obtained again at once, once per token and at most every 10 s.
  std::set<std::string> refused_;
  std::map<std::string, std::pair<std::string, std::chrono::steady_clock::time_point>> refused_last_;
  std::vector<net::executor_work_guard<net::io_context::executor_type>> guards_;
};

} // namespace sluice::gateway
