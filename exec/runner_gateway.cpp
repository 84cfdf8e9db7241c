#include "exec/runner_impl.hpp"
#include "exec/view_ssh.hpp"
#include "certs/java_truststore.hpp"
#include "gateway/gateway.hpp"
#include "gateway/ssh/host_key.hpp"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fcntl.h>
#include <openssl/x509.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

// Steps 3 and 4, the parent's half: the per-command CA and sluice's files for the view, then the
// gateway on the sandbox's listener, on a thread of their own (gateway_build, runner_impl.hpp).
namespace sluice::exec::detail {

struct gateway_build::state {
  std::mutex m;
  bool started = false, abandoned = false;
  std::unique_ptr<gateway::gateway> gw;
  std::exception_ptr late_error; // after the command started: the sandbox is killed
  std::promise<files_t> files;
  std::promise<std::pair<int, sandbox::capture_sockets>> sockets; // listener -1: the sandbox failed
};

namespace {

// The gateway's options for this command. Git over SSH logs in upstream as the caller: with the
// caller's agent (never inside) and checking the server against the caller's known_hosts.
gateway::gateway_options gateway_options_for(const exec_plan &plan) {
  gateway::gateway_options go;
  go.threads = 1;
  go.command_id = plan.command_id;
  go.skill = plan.resolved.skill;
  go.keep_summary = true;
  go.scan.canaries = plan.canaries.values;
  go.scan.own_secrets = plan.own_secrets;
  go.scan.one_run = true; // its database is compiled for this run alone: no block-mode copy
  go.scan.rules_cache_dir = plan.scan_cache_dir;
  go.log_signing_key_pem = plan.log_key_pem;
  go.log_writer = plan.command_id; // one chain per run
  if (!plan.policy->cfg().ssh.empty()) {
    if (const char *sock = std::getenv("SSH_AUTH_SOCK"); sock && sock[0] == '/') go.ssh_agent_socket = sock;
    if (!plan.caller_home.empty()) go.ssh_known_hosts.push_back(plan.caller_home + "/.ssh/known_hosts");
    go.ssh_known_hosts.push_back("/etc/ssh/ssh_known_hosts");
  }
  return go;
}

// [approvals]: decided on an admin listener on this machine's loopback (the sandbox's network has
// no route to it) with a token made for this run (into `go`), which the CLI finds in a file of the
// caller's (outside the view). Returns that file's path ("" without approvals or a home).
std::string prepare_approvals(const exec_plan &plan, gateway::gateway_options &go) {
  if (plan.policy->cfg().approvals.hosts.empty()) return {};
  unsigned char raw[16];
  if (::getrandom(raw, sizeof raw, 0) != sizeof raw) throw setup_error("approvals", "getrandom failed");
  static constexpr char hex[] = "0123456789abcdef";
  for (unsigned char b : raw) {
    go.approvals_token += hex[b >> 4];
    go.approvals_token += hex[b & 15];
  }
  if (plan.caller_home.empty()) return {};
  std::string dir = plan.caller_home + "/.local/state/sluice/approvals";
  for (std::size_t i = 1; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') ::mkdir(dir.substr(0, i).c_str(), 0700);
  }
  return dir + "/" + plan.command_id;
}

// The CA, and sluice's files for the view: its certificate and hashed name, the JVM trust store,
// and for Git over SSH the view's OpenSSH files. Throws setup_error.
gateway_build::files_t make_view_files(gateway::gateway_options &go, const filters::policy &policy,
                                       bool truststore, const std::string &fault) {
  if (fault == "ca") throw setup_error("ca", "fault injected (SLUICE_FAULT=ca)");
  try {
    go.ca = std::make_shared<certs::certificate_authority>(certs::certificate_authority::generate(
        "sluice ephemeral CA", std::chrono::hours(24 * 30), gateway::gateway::constraints_for(policy)));
  } catch (const certs::crypto_error &e) {
    throw setup_error("ca", e.what());
  }
  gateway_build::files_t files;
  files.emplace_back("ca.pem", go.ca->cert_pem());
  char hash[16];
  std::snprintf(hash, sizeof hash, "%08lx.0", X509_subject_name_hash(go.ca->cert()));
  files.emplace_back("ca.hash", hash);
  if (truststore) files.emplace_back("truststore.p12", certs::make_java_truststore(go.ca->cert(), "sluice"));
  // Git over SSH: a host key made for this command, which the view's ssh_config trusts for
  // the policy's SSH hosts (and for nothing else), and so does the view's ssh_known_hosts, for
  // OpenSSH run without that configuration.
  if (!policy.cfg().ssh.empty()) {
    auto key = gateway::make_ssh_host_key();
    go.ssh_host_key = key.private_base64;
    auto known = gateway::ssh_known_hosts_text(policy.cfg().ssh, key);
    files.emplace_back("known_hosts", known);
    files.emplace_back("ssh_config", view_ssh_config());
    files.emplace_back("ssh_known_hosts", view_ssh_known_hosts(known));
  }
  return files;
}

// The admin listener for [approvals], its address and token in the caller's file; the page's
// address with the token only on a terminal.
void announce_approvals(gateway::gateway &gw, const std::string &token, const std::string &approvals_file) {
  auto ep = gw.listen_admin("127.0.0.1:0");
  std::string admin = "127.0.0.1:" + std::to_string(ep.port());
  if (!approvals_file.empty()) {
    // Written beside the runs' folder and renamed into it: `sluice approvals` (and anyone reading
    // the folder) sees the whole file or none, never one still empty.
    const auto path = std::filesystem::path(approvals_file);
    const auto tmp = path.parent_path().parent_path() / ("." + path.filename().string() + ".tmp");
    int f = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    std::string text = admin + "\n" + token + "\n";
    if (f >= 0) {
      bool whole = ::write(f, text.data(), text.size()) == static_cast<ssize_t>(text.size());
      ::close(f);
      if (!whole || ::rename(tmp.c_str(), approvals_file.c_str()) != 0) ::unlink(tmp.c_str());
    }
  }
  if (::isatty(STDERR_FILENO)) {
    std::fprintf(stderr, "sluice: requests to hosts a person may allow wait for a decision: http://%s/#token=%s "
                         "or `sluice approvals`\n", admin.c_str(), token.c_str());
  } else {
    std::fprintf(stderr, "sluice: requests to hosts a person may allow wait for a decision: `sluice approvals` "
                         "(admin %s)\n", admin.c_str());
  }
}

} // namespace

gateway_build::gateway_build(const exec_plan &plan, pid_t init) : state_(std::make_shared<state>()) {
  if (!plan.network) return;
  files_ = state_->files.get_future();
  gateway::gateway_options go = gateway_options_for(plan);
  std::string approvals_file = prepare_approvals(plan, go);
  approvals_file_ = approvals_file;
  thread_ = std::thread([bs = state_, policy = plan.policy, go, truststore = plan.truststore, init,
                         fault = plan.so.fault, approvals_file]() mutable {
    try {
      bs->files.set_value(make_view_files(go, *policy, truststore, fault));
    } catch (...) {
      bs->files.set_exception(std::current_exception());
      return;
    }
    auto [fd, capture] = bs->sockets.get_future().get();
    if (fd < 0) return; // the sandbox failed: nothing to serve
    try {
      auto gw = std::make_unique<gateway::gateway>(policy, go);
      gw->adopt_listener(fd);
      if (!go.approvals_token.empty()) announce_approvals(*gw, go.approvals_token, approvals_file);
      if (capture.dns_udp >= 0) gw->adopt_capture(capture.listeners, capture.dns_udp, capture.dns_tcp);
      std::lock_guard lock(bs->m);
      if (bs->abandoned) return; // the command is over
      gw->start();
      bs->gw = std::move(gw);
      bs->started = true;
    } catch (...) {
      std::lock_guard lock(bs->m);
      if (bs->abandoned) return; // the command is over (and init may be reaped): nothing to stop
      bs->late_error = std::current_exception();
      ::kill(init, SIGKILL); // no gateway: the command must not go on without one
    }
  });
}

gateway_build::~gateway_build() {
  if (thread_.joinable()) thread_.join();
  if (!approvals_file_.empty()) ::unlink(approvals_file_.c_str());
}

void gateway_build::hand_sockets(int listener, sandbox::capture_sockets capture) {
  if (running()) state_->sockets.set_value({listener, std::move(capture)});
}

gateway::gateway *gateway_build::finish() {
  gateway::gateway *gw = nullptr;
  if (running()) {
    std::lock_guard lock(state_->m);
    if (state_->started) {
      gw = state_->gw.get();
    } else if (!state_->late_error) {
      state_->abandoned = true; // the command ended before the gateway was up: it served nothing
    }
  }
  if (gw || state_->late_error) {
    thread_.join();
  } else if (thread_.joinable()) {
    thread_.detach(); // it holds only its own state; the process exits soon
  }
  if (state_->late_error) std::rethrow_exception(state_->late_error);
  return gw;
}

} // namespace sluice::exec::detail
