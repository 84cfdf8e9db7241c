// Git over SSH on a captured connection (docs/policy.md, "Git over SSH"): the origin's addresses are
// found and judged here, as for any origin; the SSH itself runs in a relay (relay.hpp) on a thread
// of its own (libssh is blocking at heart and polls its sockets itself), and this coroutine waits
// for it without holding the worker: the relay's end is posted back to the worker as a cancelled
// timer.
#include "gateway/error.hpp"
#include "gateway/session_impl.hpp"
#include "gateway/upstream/dial.hpp"
#include "gateway/ssh/relay.hpp"

#include <mutex>
#include <thread>

namespace sluice::gateway::detail {
namespace {

// What the session and the relay's thread share: nothing of Asio, so that it may end on any thread.
// The thread posts its end to the worker only while the waiting coroutine still exists (`gone` is
// set when its frame goes, under the lock), so it never posts to an io_context that the gateway
// has torn down; the posted handler cancels the coroutine's timer only while that still holds.
struct ssh_call {
  ssh_job job;
  ssh_report report;
  std::mutex m;
  bool gone = false;
  bool finished = false;
  net::steady_timer *timer = nullptr; // the waiting coroutine's, while !gone
  net::any_io_executor ex;            // its worker's
};

struct leaving {
  std::shared_ptr<ssh_call> call;
  ~leaving() {
    std::lock_guard lock(call->m);
    call->gone = true;
    call->timer = nullptr;
  }
};

// A client's words are logged, not trusted: bounded, as a request target is.
std::string bounded(std::string s) {
  if (s.size() > 512) s.resize(512);
  return s;
}

} // namespace

net::awaitable<void> session::serve_ssh(const filters::ssh_rule &rule, outcome &o) {
  o.scheme = "ssh";
  o.protocol = "ssh";
  o.method = "-";
  o.rule = rule.text;
  if (ssh_relays.fetch_add(1) >= max_ssh_relays) {
    --ssh_relays;
    o.decision = "error";
    o.reason = "ssh_relay_limit";
    co_return; // the caller closes the connection
  }
  auto call = std::make_shared<ssh_call>();
  net::steady_timer done(worker_.ioc.get_executor());
  call->timer = &done;
  call->ex = worker_.ioc.get_executor();
  leaving guard{call}; // after the timer: it lets go of it before the timer goes
  auto &job = call->job;
  job.host = o.host;
  job.port = o.port;
  job.rule = rule;
  job.policy = policy_;
  job.host_key_private = state_.ssh_host_key;
  job.agent_socket = state_.ssh_agent_socket;
  job.known_hosts = state_.ssh_known_hosts;
  job.connect = cfg().timeouts.connect;
  job.handshake = cfg().timeouts.header_read; // the client's side: a request head's deadline
  job.upstream_handshake = cfg().timeouts.tls_handshake; // the origin's: a handshake's
  job.idle = cfg().timeouts.tunnel_idle; // no byte either way: a silent server counts objects too
  ++state_.in_flight;
  error_code ec;
  auto addresses = co_await upstream::allowed_addresses(worker_.dns, *job.policy, state_.own_addresses, o.host,
                                                        std::nullopt, ec, &state_.metrics.dns_lookup_duration);
  if (ec) {
    std::string text;
    failed(o, ec, text);
    job.upstream_reason = o.reason;
    job.upstream_decision = o.decision;
    job.upstream_text = std::move(text);
  }
  for (auto &a : addresses) job.addresses.push_back(a.to_string());
  // No relay after all: what was counted for it is given back, and the failure logged.
  auto no_relay = [&] {
    --ssh_relays;
    --state_.in_flight;
    o.decision = "error";
    o.reason = "ssh_relay_failed";
  };
  // The relay owns the client's socket from here: Asio lets go of it first.
  error_code rec;
  job.fd = client_->socket().release(rec);
  if (rec) {
    no_relay();
    co_return;
  }
  done.expires_at(net::steady_timer::time_point::max());
  try {
    std::thread([call] {
      run_ssh_relay(call->job, call->report);
      --ssh_relays;
      std::lock_guard lock(call->m);
      if (call->gone) return;
      net::post(call->ex, [call] {
        std::lock_guard l(call->m);
        if (call->gone || !call->timer) return;
        call->finished = true;
        call->timer->cancel();
      });
    }).detach();
  } catch (const std::system_error &) { // no thread to be had: the connection closes
    ::close(job.fd);
    no_relay();
    co_return;
  }
  for (;;) {
    {
      std::lock_guard lock(call->m);
      if (call->finished) break;
    }
    co_await done.async_wait(use_tuple);
  }
  --state_.in_flight;
  const auto &r = call->report;
  o.method = r.method;
  o.target = r.repository;
  if (!r.rule.empty()) o.rule = r.rule;
  o.decision = r.decision;
  o.reason = r.reason;
  o.bytes_in = r.bytes_in;
  o.bytes_out = r.bytes_out;
  o.ssh_user = bounded(r.user);
  o.ssh_command = bounded(r.command);
  o.exit_status = r.exit_status;
}

} // namespace sluice::gateway::detail
