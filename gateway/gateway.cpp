// The gateway core (gateway.hpp): built once at start-up, its workers' threads, reload and drain.
// Its other concerns: gateway_tls.cpp (the TLS contexts and the CA's constraints),
// gateway_listen.cpp (listeners, accepting, the admin listener), gateway_credentials.cpp (the
// credential refresh loop).
#include "gateway/exchange/limits_report.hpp"
#include "gateway/gateway.hpp"
#include "credentials/load.hpp"
#include "gateway/decider/client.hpp"
#include "gateway/shared_limits/store.hpp"
#include "gateway/local_addresses.hpp"
#include "gateway/session.hpp"

#include <filesystem>
#include <boost/json.hpp>

#include <boost/asio/post.hpp>
#include <chrono>
#include <cstdio>
#include <future>
#include <unistd.h>

namespace sluice::gateway {

// The access log's chain: exec's key made for the run, else serve's [log] signing_key read from
// its source as a credential is (a start-up failure names the source, never the key).
metrics::chain_options gateway::log_chain(const filters::config &cfg) const {
  metrics::chain_options chain;
  chain.on = cfg.log_chain && !cfg.access_log.empty();
  if (!chain.on) return chain;
  chain.checkpoint_interval = cfg.log_checkpoint_interval;
  chain.writer = !options_.log_writer.empty() ? options_.log_writer : cfg.log_writer;
  if (chain.writer.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    chain.writer = std::string(host) + ":" + std::to_string(::getpid());
  }
  chain.signing_key_pem = options_.log_signing_key_pem;
  if (chain.signing_key_pem.empty() && !cfg.log_signing_key.empty()) {
    chain.signing_key_pem = credentials::read_key_source("log.signing_key", cfg.log_signing_key);
  }
  return chain;
}

gateway::gateway(filters::policy_ptr policy, gateway_options options)
    : initial_(policy), options_(std::move(options)) {
  const auto &cfg = policy->cfg();
  ca_ = options_.ca;
  if (!ca_) {
    ca_ = std::make_shared<certs::certificate_authority>(certs::certificate_authority::generate(
        "sluice ephemeral CA", std::chrono::hours(24 * 30), constraints_for(*policy)));
  }
  metrics_ = std::make_unique<metrics::metrics>(options_.skill);
  log_ = std::make_unique<metrics::access_log>(
      cfg.access_log, options_.command_id, options_.skill, cfg.redact_query,
      cfg.access_log_format == "ocsf" ? metrics::log_format::ocsf : metrics::log_format::json, log_chain(cfg));
  leaves_ = std::make_unique<certs::leaf_cache>(*ca_, cfg.leaf_validity);

  setup_server_tls(cfg);
  setup_upstream_tls(cfg);

  state_ = std::unique_ptr<gateway_state>(new gateway_state{
      {policy}, *metrics_, *log_, stats_, *leaves_, server_tls_, upstream_tls_, load_system_trust_, {},
      summary_, options_.keep_summary, local_addresses()});
  refresh_scan(*policy);
  state_->ssh_host_key = options_.ssh_host_key;
  state_->ssh_agent_socket = options_.ssh_agent_socket;
  state_->ssh_known_hosts = options_.ssh_known_hosts;
  // "Allow always" appends to the file the policy came from (none for the built-in policy).
  std::string policy_file;
  if (std::error_code fec; cfg.source != "built-in" && std::filesystem::is_regular_file(cfg.source, fec)) {
    policy_file = std::filesystem::absolute(cfg.source, fec).string();
  }
  state_->held = std::make_unique<approvals>(cfg.approvals.max_pending, policy_file);
  if (!cfg.approvals.webhook.empty()) {
    filters::credential_config secret;
    secret.name = "approvals.webhook_secret";
    secret.source = cfg.approvals.webhook_secret;
    credentials::load_secret(secret); // throws naming the source: the gateway does not start without it
    state_->webhook_secret = std::move(secret.secret);
  }
  if (cfg.decider.configured()) { // a program that cannot start stops the gateway here, naming it
    state_->decider.store(std::make_shared<decider::client>(cfg.decider, cfg, metrics_.get()));
  }
  refresh_shared_limits(cfg);
  state_->credential_refused = [this](const std::string &name) {
    {
      std::lock_guard lock(refresh_m_);
      if (!refused_.insert(name).second) return;
    }
    refresh_cv_.notify_all();
  };

  unsigned n = options_.threads;
  if (n == 0) n = std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  for (unsigned i = 0; i < n; ++i) {
    workers_.push_back(std::make_unique<worker>(cfg));
    guards_.emplace_back(workers_.back()->ioc.get_executor());
  }
}

gateway::~gateway() {
  stop();
  join();
}

std::vector<exchange::budget_row> gateway::budget_rows() const { return state_->budgets.snapshot(); }

std::string gateway::stats_json() const {
  namespace js = boost::json;
  auto out = stats_.snapshot();
  auto pol = state_->policy.load();
  const auto &cfg = pol->cfg();
  js::array allow, deny;
  for (auto &a : cfg.allow) allow.emplace_back(a);
  for (auto &r : cfg.allow_routes) allow.emplace_back(r.text);
  for (auto &d : cfg.deny) deny.emplace_back(d);
  for (auto &r : cfg.deny_routes) deny.emplace_back(r.text);
  js::object policy{{"profile", std::string(filters::to_string(cfg.mode))},
                    {"source", cfg.source},
                    {"allow", std::move(allow)},
                    {"deny", std::move(deny)},
                    {"skill", options_.skill},
                    {"command_id", options_.command_id}};
  out["policy"] = std::move(policy);
  out["now"] = metrics::unix_now();
  out["started"] = std::chrono::duration<double>(started_.time_since_epoch()).count();
  out["connections_active"] = state_->connections.load();
  out["budgets"] = exchange::budgets_json(state_->budgets.snapshot()); // [[limits.budget]]
  return js::serialize(out);
}

void gateway::start() {
  // A credential already due (an OAuth2 token of a short life, obtained before a slow start such
  // as the scanner's compilation) is obtained again before the first request is served.
  {
    bool due = false;
    auto now = std::chrono::steady_clock::now();
    for (const auto &c : state_->policy.load()->cfg().credentials) {
      due |= c.refresh_at != std::chrono::steady_clock::time_point{} && c.refresh_at <= now;
    }
    if (due) refresh_round({});
  }
  for (auto &set : listeners_) {
    for (std::size_t i = 0; i < set->acceptors.size(); ++i) spawn_accept(i, *set->acceptors[i], *set);
  }
  if (dns_) dns_->start();
  if (admin_) start_admin();
  bool ttl = false;
  for (const auto &c : state_->policy.load()->cfg().credentials) {
    ttl |= c.refresh_at != std::chrono::steady_clock::time_point{} || !c.file_stamp.empty();
  }
  if (ttl) refresher_ = std::thread([this] { refresh_credentials(); });
  for (auto &w : workers_) {
    threads_.emplace_back([&ioc = w->ioc] {
      // This worker's access log lines are written together after the handlers it has ready.
      metrics::access_log::defer_flushes_here([&ioc](std::function<void()> f) { net::post(ioc, std::move(f)); });
      for (;;) {
        try {
          ioc.run();
          return;
        } catch (const std::exception &e) {
          std::fprintf(stderr, "sluice: worker error: %s\n", e.what());
        }
      }
    });
  }
}

void gateway::set_unready() { state_->unready.store(true); }

void gateway::reload(filters::policy_ptr policy) {
  state_->policy.store(policy);
  refresh_decider(policy->cfg());
  refresh_shared_limits(policy->cfg());
  try {
    refresh_scan(*policy);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "sluice: [scan] could not be compiled for the reloaded policy, the previous "
                         "scanner stays: %s\n", e.what());
  }
}

// [decider] changed by a reload: the new one is started before the old one stops (what waits on
// the old one is refused, decider_unavailable); a new program that cannot start leaves the old.
void gateway::refresh_decider(const filters::config &cfg) {
  auto now = state_->decider.load();
  if (now ? now->config() == cfg.decider : !cfg.decider.configured()) return;
  std::shared_ptr<decider::client> next;
  if (cfg.decider.configured()) {
    try {
      next = std::make_shared<decider::client>(cfg.decider, cfg, metrics_.get());
    } catch (const std::exception &e) {
      std::fprintf(stderr, "sluice: the reloaded [decider] did not start, the previous one stays: %s\n", e.what());
      return;
    }
  }
  auto old = state_->decider.exchange(next);
  if (old) old->stop(); // here, not on a worker: stopping joins the decider's threads
}

// [limits.shared] (serve): a store for the Redis server the policy names (this process's name among the
// replicas: HOST:PID), replaced when a reload changes the table. The old one stops here, off the
// workers: stopping joins its link's thread.
void gateway::refresh_shared_limits(const filters::config &cfg) {
  if (options_.keep_summary) return; // exec and agent: a run is one process, its budgets its own
  auto now = state_->shared_limits.load();
  if (now ? now->config() == cfg.limits.shared : cfg.limits.shared.redis.empty()) return;
  std::shared_ptr<shared_limits::store> next;
  if (!cfg.limits.shared.redis.empty()) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    next = std::make_shared<shared_limits::store>(cfg.limits.shared, std::string(host) + ":" + std::to_string(getpid()));
  }
  auto old = state_->shared_limits.exchange(next);
  if (old) old->stop();
}

void gateway::refresh_scan(const filters::policy &p) {
  std::lock_guard lock(scan_mutex_);
  auto h = exchange::scan_inputs_hash(p, options_.scan);
  if (state_->scan.load() && h == scan_hash_) return;
  state_->scan.store(exchange::compile_scan(p, options_.scan));
  scan_hash_ = h;
}

namespace {
// Runs `f` on the worker thread of `ioc` and waits for it: what a worker owns is touched from its
// own thread only.
template <class F> void run_on(net::io_context &ioc, F f) {
  std::promise<void> done;
  net::post(ioc, [&] {
    f();
    done.set_value();
  });
  done.get_future().wait();
}
} // namespace

void gateway::drain(std::chrono::milliseconds max_wait) {
  state_->draining.store(true);
  // Close every acceptor on its own worker thread: acceptors are not thread-safe.
  for (auto &set : listeners_) {
    for (std::size_t i = 0; i < set->acceptors.size(); ++i) {
      run_on(workers_[i]->ioc, [&] {
        boost::system::error_code ignored;
        set->acceptors[i]->close(ignored);
      });
    }
  }
  // Idle parked tunnels have no response to finish: they close now instead of holding the drain
  // until their idle deadline. A tunnel busy with a request finishes it (draining is checked
  // before the next).
  for (auto &w : workers_) {
    run_on(w->ioc, [&] {
      w->parking.expire_all();
      detail::goaway_all(*w); // h2 clients: no new streams, and close once theirs end
    });
  }
  if (dns_) run_on(workers_[0]->ioc, [&] { dns_->close(); }); // on its worker, as the acceptors
  auto wait = max_wait.count() > 0
                  ? max_wait
                  : std::chrono::duration_cast<std::chrono::milliseconds>(initial_->cfg().timeouts.drain);
  auto deadline = std::chrono::steady_clock::now() + wait;
  while (state_->in_flight.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  stop();
}

void gateway::stop() {
  {
    std::lock_guard lock(refresh_m_);
    refresh_stop_ = true;
  }
  refresh_cv_.notify_all();
  guards_.clear();
  for (auto &w : workers_) w->ioc.stop();
  // After the workers stop: the decider posts answers to them, and posts nothing once stopped.
  if (auto d = state_->decider.load()) d->stop();
  if (auto l = state_->shared_limits.load()) l->stop();
}

void gateway::join() {
  for (auto &t : threads_) {
    if (t.joinable()) t.join();
  }
  if (refresher_.joinable()) refresher_.join();
  threads_.clear();
  log_->flush(); // what a stopped worker's deferred flush did not write
}

} // namespace sluice::gateway
