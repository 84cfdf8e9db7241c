#include "exec/runner.hpp"
#include "exec/journal.hpp"
#include "certs/java_truststore.hpp"
#include "exec/environment.hpp"
#include "filters/policy_loader.hpp"
#include "exec/sandbox.hpp"
#include "exec/tool_cache.hpp"
#include "exec/workspace.hpp"
#include "exec/workspace_guard.hpp"
#include "gateway/gateway.hpp"
#include "gateway/ssh_relay.hpp"
#include "metrics/live_stats.hpp"
#include "metrics/textfile.hpp"

#include <boost/json.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <openssl/x509.h>
#include <sys/random.h>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

namespace sluice::exec {
namespace {

// The ports transparent capture listens on: 80, 443 and every port an allow entry names, but the
// proxy's own port and DNS's (taken inside the sandbox), at most max_capture_ports.
std::vector<unsigned> capture_ports(const filters::policy &p, unsigned proxy_port) {
  std::vector<unsigned> ports = {80, 443};
  for (const auto &pat : p.allow_matcher().patterns()) {
    if (pat.port != 0) ports.push_back(pat.port);
  }
  for (const auto &r : p.cfg().ssh) ports.push_back(r.port); // Git over SSH
  std::sort(ports.begin(), ports.end());
  ports.erase(std::unique(ports.begin(), ports.end()), ports.end());
  std::erase_if(ports, [&](unsigned port) { return port == proxy_port || port == 53; });
  if (ports.size() > max_capture_ports) ports.resize(max_capture_ports);
  return ports;
}

// The view's /etc/ssh/ssh_config (seal_view binds it over the host's): the host's, after lines that
// make OpenSSH trust exactly the command's host key for the policy's SSH hosts. OpenSSH takes the
// first value it reads, and the view's empty home has no ~/.ssh/config to come before these.
std::string view_ssh_config() {
  std::string text = "# sluice: the SSH hosts of the policy are served by sluice with this command's host key\n"
                     "GlobalKnownHostsFile " + std::string(sandbox_files_dir) + "/known_hosts\n"
                     "UserKnownHostsFile /dev/null\n"
                     "StrictHostKeyChecking yes\n"
                     "ForwardAgent no\n"
                     "ForwardX11 no\n\n";
  std::ifstream in("/etc/ssh/ssh_config", std::ios::binary);
  std::string host((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (host.size() > 1024 * 1024) host.clear();
  return text + host;
}

std::string resolved_or(const std::string &p) {
  auto r = resolved(p);
  return r.empty() ? p : r;
}

// The command's $HOME: the caller's path, shown as an empty private tmpfs; none (HOME=/tmp) when
// the caller's home is unset or a system path.
std::string sandbox_home(const std::string &home) {
  if (home.empty() || home == "/") return {};
  for (auto p : {"/usr", "/bin", "/sbin", "/lib", "/etc", "/proc", "/sys", "/dev"}) {
    std::string d = p;
    if (home == d || home.rfind(d + "/", 0) == 0) return {};
  }
  return home;
}

std::string random_id() {
  // getrandom(2), not RAND_bytes: OpenSSL's first use loads its configuration (about 2.5 ms), which
  // then happens while the gateway is built, in parallel with the sandbox's set-up.
  unsigned char b[6] = {};
  if (::getrandom(b, sizeof b, 0) != sizeof b) {
    throw setup_error("ca", std::string("getrandom: ") + std::strerror(errno));
  }
  char out[13];
  for (int i = 0; i < 6; ++i) std::snprintf(out + 2 * i, 3, "%02x", b[i]);
  return out;
}

// The escalation that would have let a denied request through, for the line on stderr.
std::string hint(const std::string &host, unsigned port, const std::string &reason) {
  if (reason == "host_not_allowlisted") {
    // The pattern without a port covers 443 and 80 only: name any other port.
    bool v6 = host.find(':') != std::string::npos;
    std::string h = v6 ? "[" + host + "]" : host;
    return "to allow it: --allow-domain " + (port && port != 443 && port != 80 ? h + ":" + std::to_string(port) : h);
  }
  if (reason == "method_not_allowed" || reason == "body_on_read_method" ||
      reason == "method_override_refused") {
    return "writes need --sandbox-profile publish --confirm-external-side-effects";
  }
  if (reason == "destination_address_denied") {
    return "the name resolves to a private or special address; list it in upstream.allow_addresses";
  }
  if (reason == "host_denied") return "a deny rule in the policy matches it";
  if (reason == "route_denied") return "a deny route in the policy matches its method and path";
  if (reason == "route_not_allowed") {
    return "the skill allows this host only on the methods and paths of its routes (allow_domains)";
  }
  if (reason == "ambiguous_path") return "routes compare paths one way only: no '//', ';' or dot segments";
  if (reason == "route_needs_termination") return "a route's methods and paths need network-read or publish";
  if (reason == "dns_error") {
    return "DNS has no address for it; sluice does not read /etc/hosts: pin the name with "
           "[upstream.resolve] in the policy";
  }
  if (reason == "git_push_refused") {
    return "pushing writes to the remote: it needs --sandbox-profile publish --confirm-external-side-effects";
  }
  if (reason == "git_request_refused") {
    return "only fetch negotiation may go to git-upload-pack in network-read";
  }
  if (reason == "credential_host_mismatch") {
    return "a credential's placeholder went to a host the credential does not belong to";
  }
  if (reason == "tls_required") return "only TLS can pass a CONNECT tunnel in this profile";
  return "see the access log (--access-log) for details";
}

// Adds one command's metrics to the textfile collector's file. A failure is reported, never turned
// into the command's exit status.
void write_textfile(const exec_options &opt, metrics::metrics &m, std::string_view profile,
                    std::string_view result, double seconds) {
  if (opt.metrics_textfile.empty()) return;
  try {
    m.exec_finished(profile, result, seconds, metrics::unix_now());
    metrics::merge_into_textfile(opt.metrics_textfile, m.serialize());
  } catch (const std::exception &e) {
    std::fprintf(stderr, "sluice: --metrics-textfile: %s (the command's exit status is kept)\n",
                 e.what());
  }
}

// What run_command learnt before it failed, for the textfile of a refused command.
struct exec_progress {
  std::string skill, profile = "unknown";
  bool written = false; // run_command wrote the textfile itself
};

// Everything decided before anything runs (start-up step 1): the policy, the workspace, the
// sandbox's options and the command's environment.
struct exec_plan {
  resolved_exec resolved;
  filters::profile mode = filters::profile::offline;
  bool network = false;
  std::string command_id;
  workspace ws;
  std::string caller_home;
  workspace_guard::options guard;
  sandbox_options so;
  bool truststore = false; // the JVM trust store goes into the view
  std::vector<std::string> dropped;
  std::shared_ptr<const filters::policy> policy;
  std::string agent;                        // `sluice agent`: the host, named in /.sluice/agent
  std::vector<std::string> absent_settings; // an agent host's settings that did not exist at the start
  bool userns_limit = false; // user.max_user_namespaces = 0 held inside (sandbox::userns_limit)
  journal::run journal;      // --journal / [sandbox] journal: the run's layer and the workspace's lock
  bool staged = false;       // --stage / --stage-run: the layer is kept for `sluice apply`
};

// `sluice agent`: the model endpoint joins the allowlist with its API's POST paths, and its key is
// one more credential the gateway adds (the host holds the placeholder). Only a terminating profile
// can add it.
void add_host_boundary(const host_boundary &b, resolved_exec &resolved) {
  if (!b.credentials.empty() && !filters::terminates_tls(resolved.gateway.mode)) {
    throw refusal("sluice agent adds the model's API key to its requests, which the " +
                  std::string(filters::to_string(resolved.gateway.mode)) +
                  " profile cannot do; use network-read (the default) or publish");
  }
  resolved.gateway.allow.insert(resolved.gateway.allow.end(), b.allow.begin(), b.allow.end());
  resolved.gateway.allow_routes.insert(resolved.gateway.allow_routes.end(), b.routes.begin(), b.routes.end());
  for (auto c : b.credentials) {
    try {
      filters::load_secret(c);
    } catch (const filters::config_error &e) {
      throw refusal(e.what());
    }
    if (!c.env.empty()) resolved.placeholders.push_back(c.env + "=" + filters::credential_placeholder(c.name));
    resolved.gateway.credentials.push_back(std::move(c));
  }
  for (const auto &name : b.keep_env) {
    if (is_credential_name(name)) continue; // a key stays outside, whatever the host calls it
    resolved.keep.push_back(name);
  }
}

// What an agent host's settings gained while it ran: a settings file or hooks directory that did not
// exist at the start is moved aside, as the workspace guard does (it would take effect the next time
// the host runs outside sluice).
boost::json::array quarantine_settings(const exec_plan &plan) {
  boost::json::array out;
  for (const auto &p : plan.absent_settings) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) continue;
    std::string to = p + ".sluice-quarantine-" + plan.command_id;
    bool moved = ::rename(p.c_str(), to.c_str()) == 0;
    std::fprintf(stderr, "sluice: the agent created %s, settings the host would read outside the sandbox; %s\n",
                 p.c_str(), moved ? ("moved it to " + to + ": review it, and move it back if you want it").c_str()
                                  : "it could not be moved aside: check it before the host runs again");
    out.push_back({{"path", p}, {"movedTo", moved ? to : std::string()}});
  }
  return out;
}

// Step 1: resolves the policy and the workspace and decides what the view shows. Throws refusal.
exec_plan plan_command(const exec_options &opt, exec_progress &progress) {
  if (opt.argv.empty()) {
    throw refusal("no command given; write `sluice exec [options] -- CMD [ARGS...]`");
  }
  exec_plan plan;
  std::string fault;
  if (const char *f = std::getenv("SLUICE_FAULT")) fault = f;
  if (fault == "policy") throw refusal("policy: fault injected (SLUICE_FAULT=policy)");
  for (int fd : opt.pass_fds) {
    if (fd < 3 || ::fcntl(fd, F_GETFD) < 0) {
      throw refusal("--pass-fd " + std::to_string(fd) + ": " +
                    (fd < 3 ? "0, 1 and 2 are always passed" : "no such open descriptor") +
                    "; name a descriptor above 2 that this shell has open");
    }
  }
  plan.resolved = resolve_exec(opt.request);
  auto &resolved = plan.resolved;
  if (!opt.agent.host.empty()) add_host_boundary(opt.agent, resolved);
  resolved.gateway.access_log = opt.access_log;
  if (!opt.access_log_format.empty()) resolved.gateway.access_log_format = opt.access_log_format;
  plan.mode = resolved.gateway.mode;
  progress.skill = resolved.skill;
  progress.profile = std::string(filters::to_string(plan.mode));
  plan.network = plan.mode != filters::profile::offline;
  plan.command_id = random_id();

  const char *home_env = std::getenv("HOME");
  plan.caller_home = home_env && home_env[0] == '/' ? resolved_or(home_env) : std::string();
  plan.ws = find_workspace(opt.request.working_dir, plan.caller_home);
  const workspace &ws = plan.ws;
  // A trusted policy directory must never be writable from inside, even where no file exists yet:
  // a command that created one there would set the policy of every later run.
  std::string view_home = sandbox_home(plan.caller_home);
  for (const auto &dir : trusted_policy_dirs()) {
    std::string d = resolved_or(dir);
    bool hidden_by_home = !view_home.empty() && is_under(d, view_home);
    if ((is_under(d, ws.root) && !hidden_by_home) || is_under(ws.root, d)) {
      throw refusal("the workspace " + ws.root + " holds the trusted policy directory " + d +
                    " (or lies in it); a command there could rewrite the policy of later runs. "
                    "Run sluice exec from a project directory, or move the policy (--policy FILE)");
    }
  }
  std::string policy_file = resolved.policy_source == "built-in" ? std::string() : resolved_or(resolved.policy_source);
  auto writable = check_writable(resolved.writable, ws, plan.caller_home, trusted_policy_dirs(), policy_file);
  const char *path_env = std::getenv("PATH");

  sandbox_options &so = plan.so;
  so.view.workspace = ws.root;
  so.view.workspace_writable = !resolved.read_only_workspace;
  so.view.writable = writable;
  so.view.home = view_home;
  so.view.binds = cache_binds(resolved.caches, cache_root(plan.caller_home), view_home);
  plan.agent = opt.agent.host;
  if (!opt.agent.host.empty()) {
    if (view_home.empty() || view_home != plan.caller_home) {
      throw refusal("sluice agent needs a home directory of the caller's own (HOME=" + plan.caller_home +
                    "); set HOME");
    }
    for (const auto &d : opt.agent.state) {
      for (const auto &dir : trusted_policy_dirs()) {
        std::string t = resolved_or(dir);
        if (is_under(t, d) || is_under(d, t)) {
          throw refusal("the host's state directory " + d + " holds the trusted policy directory " + t +
                        " (or lies in it); the agent could rewrite the policy of later runs. Point the "
                        "host's state elsewhere, or move the policy (--policy FILE)");
        }
      }
      so.view.binds.emplace_back(d, d);
    }
    so.view.protect.insert(so.view.protect.end(), opt.agent.protect.begin(), opt.agent.protect.end());
    so.view.hide = opt.agent.hide;
    so.view.home_files = opt.agent.home_files;
    for (const auto &p : opt.agent.protect) {
      struct stat st {};
      if (::lstat(p.c_str(), &st) != 0) plan.absent_settings.push_back(p);
    }
  }
  so.view.hide_unreadable_etc = ::geteuid() == 0;
  so.view.bind_sys = ::geteuid() != 0;
  so.view.replace_trust = filters::terminates_tls(plan.mode);
  so.view.extra = command_files(opt.argv[0], path_env ? path_env : "/usr/bin:/bin", ws.cwd, plan.caller_home);
  so.view.extra.insert(so.view.extra.end(), ws.git_meta.begin(), ws.git_meta.end());
  // Inside `sluice agent`, an adapter's hook or plugin runs this sluice by its path (and lets the
  // command through, inside the boundary): it is shown, read-only, wherever it is installed.
  if (!opt.agent.host.empty()) {
    char self[PATH_MAX];
    ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) so.view.extra.emplace_back(self, static_cast<std::size_t>(n));
  }
  // The policy in use must not change, wherever it shows. The rest of what must not change for
  // whoever runs next (agent settings, shell and editor configuration, Git's config and hooks, the
  // repository's .sluice/) is found by the guard's walk, wherever it is in the writable places.
  if (!policy_file.empty()) so.view.protect.push_back(policy_file);
  plan.guard.roots = {ws.root};
  plan.guard.roots.insert(plan.guard.roots.end(), writable.begin(), writable.end());
  plan.guard.hidden = default_credential_patterns();
  plan.guard.hidden.insert(plan.guard.hidden.end(), resolved.credential_files.begin(),
                           resolved.credential_files.end());
  plan.guard.names = guarded_names();
  plan.guard.names.insert(plan.guard.names.end(), resolved.guarded_names.begin(), resolved.guarded_names.end());
  // The policy's exact credential names are guarded as the built-in ones are.
  for (auto n : resolved.credential_files) {
    while (!n.empty() && n.back() == '/') n.pop_back();
    if (!n.empty() && n.find_first_of("*?[") == std::string::npos && n[0] != '/' &&
        n.find("..") == std::string::npos) {
      plan.guard.names.push_back(n);
    }
  }
  plan.guard.home = plan.caller_home;
  plan.guard.max_entries = resolved.max_workspace_entries;
  // The journal: the workspace under an overlay whose layer is this run's, applied afterwards.
  plan.staged = opt.stage || !opt.stage_run.empty();
  if (plan.staged && !so.view.workspace_writable) {
    throw refusal("--stage: the workspace is read-only for this run (--filesystem read-only), so nothing could be "
                  "staged; leave out one or the other");
  }
  if ((plan.staged || opt.journal || resolved.journal) && so.view.workspace_writable) {
    journal::limits lim;
    lim.max_age_seconds = std::chrono::duration_cast<std::chrono::seconds>(resolved.gateway.journal_max_age).count();
    lim.max_bytes = resolved.gateway.journal_max_bytes;
    try {
      plan.journal = plan.staged ? journal::prepare_stage(plan.caller_home, plan.command_id, opt.stage_run, ws.root,
                                                          opt.argv, lim)
                                 : journal::prepare(plan.caller_home, plan.command_id, ws.root, opt.argv, lim);
    } catch (const std::runtime_error &e) {
      throw refusal(std::string(plan.staged ? "stage: " : "journal: ") + e.what());
    }
    so.view.journal_upper = plan.journal.upper;
    so.view.journal_work = plan.journal.work;
  }
  so.await_masks = true;
  so.cwd = ws.cwd;
  so.pass_fds = opt.pass_fds;
  so.require_landlock = resolved.require_landlock;
  so.nested_userns = resolved.nested_userns;

  environment_spec spec;
  spec.mode = plan.mode;
  spec.grants = resolved.grants;
  spec.keep = resolved.keep;
  spec.placeholders = resolved.placeholders;
  spec.home = so.view.home.empty() ? "/tmp" : so.view.home;
  spec.cwd = ws.cwd;
  if (plan.network) {
    spec.proxy_port = 3128;
    spec.ca_file = std::string(sandbox_files_dir) + "/ca.pem";
    if (filters::terminates_tls(plan.mode)) spec.java_truststore = std::string(sandbox_files_dir) + "/truststore.p12";
  }
  plan.truststore = !spec.java_truststore.empty();
  so.network = plan.network;
  so.port = spec.proxy_port ? spec.proxy_port : 3128;
  plan.policy = std::make_shared<const filters::policy>(resolved.gateway);
  if (plan.network) {
    so.capture_ports = capture_ports(*plan.policy, so.port);
    so.view.dns_stub = true;
  }
  so.argv = opt.argv;
  so.env = child_environment(environ, spec, &plan.dropped);
  for (const auto &v : opt.agent.set_env) {
    auto name = v.substr(0, v.find('=') + 1);
    std::erase_if(so.env, [&](const std::string &e) { return e.rfind(name, 0) == 0; });
    so.env.push_back(v);
  }
  so.fault = fault;
  return plan;
}

// Steps 3 and 4, the parent's half: the CA, then the gateway, built on a thread of their own. Only
// the CA is on the way to the command's start (its certificate goes into the view); the rest of
// the gateway (TLS contexts, workers) is built while the command already runs: its first
// connections wait in the listener's backlog. A waiting main thread also leaves its core to init
// (the scheduler tends to start a child on its parent's core). The thread's state lives on the
// heap: when the command ends before the gateway is up (`-- true`), sluice leaves without waiting.
class gateway_build {
public:
  using files_t = std::vector<std::pair<std::string, std::string>>;

  // Starts the thread (nothing for an offline command).
  gateway_build(const exec_plan &plan, pid_t init) {
    if (!plan.network) return;
    files_ = state_->files.get_future();
    gateway::gateway_options go;
    go.threads = 1;
    go.command_id = plan.command_id;
    go.skill = plan.resolved.skill;
    go.keep_summary = true;
    if (!plan.policy->cfg().ssh.empty()) {
      // Git over SSH logs in upstream as the caller: with the caller's agent (never inside) and
      // checking the server against the caller's known_hosts.
      if (const char *sock = std::getenv("SSH_AUTH_SOCK"); sock && sock[0] == '/') go.ssh_agent_socket = sock;
      if (!plan.caller_home.empty()) go.ssh_known_hosts.push_back(plan.caller_home + "/.ssh/known_hosts");
      go.ssh_known_hosts.push_back("/etc/ssh/ssh_known_hosts");
    }
    // [approvals]: decided on an admin listener on this machine's loopback (the sandbox's network
    // has no route to it) with a token made for this run, which the CLI finds in a file of the
    // caller's (outside the view); the page's address with the token only on a terminal.
    std::string approvals_file;
    if (!plan.policy->cfg().approvals.hosts.empty()) {
      unsigned char raw[16];
      if (::getrandom(raw, sizeof raw, 0) != sizeof raw) throw setup_error("approvals", "getrandom failed");
      static constexpr char hex[] = "0123456789abcdef";
      for (unsigned char b : raw) {
        go.approvals_token += hex[b >> 4];
        go.approvals_token += hex[b & 15];
      }
      if (!plan.caller_home.empty()) {
        std::string dir = plan.caller_home + "/.local/state/sluice/approvals";
        for (std::size_t i = 1; i <= dir.size(); ++i) {
          if (i == dir.size() || dir[i] == '/') ::mkdir(dir.substr(0, i).c_str(), 0700);
        }
        approvals_file = dir + "/" + plan.command_id;
        approvals_file_ = approvals_file;
      }
    }
    thread_ = std::thread([bs = state_, policy = plan.policy, go, truststore = plan.truststore, init,
                           fault = plan.so.fault, approvals_file]() mutable {
      try {
        if (fault == "ca") throw setup_error("ca", "fault injected (SLUICE_FAULT=ca)");
        try {
          go.ca = std::make_shared<certs::certificate_authority>(certs::certificate_authority::generate(
              "sluice ephemeral CA", std::chrono::hours(24 * 30), gateway::gateway::constraints_for(*policy)));
        } catch (const certs::crypto_error &e) {
          throw setup_error("ca", e.what());
        }
        files_t files;
        files.emplace_back("ca.pem", go.ca->cert_pem());
        char hash[16];
        std::snprintf(hash, sizeof hash, "%08lx.0", X509_subject_name_hash(go.ca->cert()));
        files.emplace_back("ca.hash", hash);
        if (truststore) files.emplace_back("truststore.p12", certs::make_java_truststore(go.ca->cert(), "sluice"));
        // Git over SSH: a host key made for this command, which the view's ssh_config trusts for
        // the policy's SSH hosts (and for nothing else).
        if (!policy->cfg().ssh.empty()) {
          auto key = gateway::make_ssh_host_key();
          go.ssh_host_key = key.private_base64;
          files.emplace_back("known_hosts", gateway::ssh_known_hosts_text(policy->cfg().ssh, key));
          files.emplace_back("ssh_config", view_ssh_config());
        }
        bs->files.set_value(std::move(files));
      } catch (...) {
        bs->files.set_exception(std::current_exception());
        return;
      }
      auto [fd, capture] = bs->sockets.get_future().get();
      if (fd < 0) return; // the sandbox failed: nothing to serve
      try {
        auto gw = std::make_unique<gateway::gateway>(policy, go);
        gw->adopt_listener(fd);
        if (!go.approvals_token.empty()) {
          auto ep = gw->listen_admin("127.0.0.1:0");
          std::string admin = "127.0.0.1:" + std::to_string(ep.port());
          if (!approvals_file.empty()) {
            int f = ::open(approvals_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
            std::string text = admin + "\n" + go.approvals_token + "\n";
            if (f >= 0) {
              if (::write(f, text.data(), text.size()) != static_cast<ssize_t>(text.size())) approvals_file.clear();
              ::close(f);
            }
          }
          if (::isatty(STDERR_FILENO)) {
            std::fprintf(stderr, "sluice: requests to hosts a person may allow wait for a decision: http://%s/#token=%s "
                                 "or `sluice approvals`\n", admin.c_str(), go.approvals_token.c_str());
          } else {
            std::fprintf(stderr, "sluice: requests to hosts a person may allow wait for a decision: `sluice approvals` "
                                 "(admin %s)\n", admin.c_str());
          }
        }
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
  ~gateway_build() {
    if (thread_.joinable()) thread_.join();
    if (!approvals_file_.empty()) ::unlink(approvals_file_.c_str());
  }
  gateway_build(const gateway_build &) = delete;
  gateway_build &operator=(const gateway_build &) = delete;

  bool running() const { return thread_.joinable(); }
  // The listener and capture's sockets, or -1 when the sandbox failed.
  void hand_sockets(int listener, sandbox::capture_sockets capture) {
    if (running()) state_->sockets.set_value({listener, std::move(capture)});
  }
  // sluice's files for the view; a CA failure is thrown here.
  files_t files() { return files_.get(); }

  // After the command: the gateway that served it, or nullptr (offline, or the command ended
  // before it was up). Throws what stopped the gateway from starting.
  gateway::gateway *finish() {
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

private:
  struct state {
    std::mutex m;
    bool started = false, abandoned = false;
    std::unique_ptr<gateway::gateway> gw;
    std::exception_ptr late_error; // after the command started: the sandbox is killed
    std::promise<files_t> files;
    std::promise<std::pair<int, sandbox::capture_sockets>> sockets; // listener -1: the sandbox failed
  };
  std::shared_ptr<state> state_ = std::make_shared<state>();
  std::future<files_t> files_;
  std::thread thread_;
  std::string approvals_file_; // where `sluice approvals` finds this run's admin listener and token
};

// Steps 3 and 4 on the main thread, while init builds the view: the guard's walk (init waits for
// its result before it lets go of the host's root), the hand-over of the listeners and sluice's
// files, and the seal. Returns the Landlock ABI applied and what the walk found.
int set_up(const exec_plan &plan, sandbox &sb, workspace_guard &guard, gateway_build &build,
           workspace_scan &scan) {
  std::exception_ptr ready_error;
  try {
    sb.share_system_etc(); // once the CA is under way: it is on the way to the start too
    scan = guard.scan();
    sb.send_marks({scan.masks, scan.protect});
    sb.send_seccomp(); // while init builds the view
    if (!plan.network) sb.send_files({}); // nothing to wait for: init seals its view once it is built
    sb.ready(); // init's own failure (loopback, listener, mounts) is the one to report
  } catch (...) {
    ready_error = std::current_exception();
  }
  if (plan.network) {
    if (ready_error) {
      build.hand_sockets(-1, {});
    } else {
      build.hand_sockets(sb.listener(), sb.take_capture());
    }
  }
  if (ready_error) std::rethrow_exception(ready_error);
  if (plan.network) {
    auto files = build.files();
    if (!plan.agent.empty()) files.emplace_back("agent", plan.agent + "\n");
    sb.send_files(files);
  }
  return sb.sealed();
}

// Steps 5 and 6: starts the command and forwards signals until init has exited. Returns the exit
// status; `result` is the textfile's exit_zero, exit_nonzero or refused.
int run_to_end(const exec_options &opt, sandbox &sb, int sfd, std::string_view &result) {
  int exec_errno = 0;
  if (!sb.start(exec_errno)) {
    int status = exec_errno == ENOENT ? 127 : exec_errno == EPERM ? 125 : 126;
    result = exec_errno == EPERM ? "refused" : "exit_nonzero";
    if (exec_errno == EPERM) {
      std::fprintf(stderr, "sluice: sandbox set-up failed at setsid: the command could not be given "
                           "a session of its own or could not drop its capabilities; nothing was run "
                           "(see `sluice doctor`)\n");
    } else {
      std::fprintf(stderr, "sluice: %s: %s\n", opt.argv[0].c_str(),
                   exec_errno == ENOENT
                       ? "command not found in the sandbox; check the name and PATH (the sandbox "
                         "shows the system paths, the workspace and the command's own files)"
                       : (std::string("cannot execute: ") + std::strerror(exec_errno)).c_str());
    }
    sb.wait();
    return status;
  }
  int status = 125;
  bool report = true; // init's exit report is still to come on the control socket
  for (;;) {
    pollfd p[2] = {{sfd, POLLIN, 0}, {report ? sb.control_fd() : -1, POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) continue;
    if (p[1].revents != 0) {
      if (sb.exit_report(status)) {
        result = status == 0 ? "exit_zero" : "exit_nonzero"; // 128+N: died of signal N
        return status;
      }
      report = false; // init died without it: its exit says how
    }
    if (!(p[0].revents & POLLIN)) continue;
    signalfd_siginfo si{};
    if (::read(sfd, &si, sizeof si) != sizeof si) continue;
    if (si.ssi_signo == SIGCHLD) {
      int st = 0;
      if (::waitpid(sb.init_pid(), &st, WNOHANG) == sb.init_pid()) {
        status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        result = status == 0 ? "exit_zero" : "exit_nonzero"; // 128+N: died of signal N
        break;
      }
      continue;
    }
    sb.signal(static_cast<int>(si.ssi_signo));
  }
  sb.release_reaped();
  return status;
}

// After the command, once it and all it started are gone (the PID namespace ended with init):
// what it left under a guarded name is moved aside, before a tool outside can read it, and said
// on stderr. Returns the summary's `quarantined` entries.
boost::json::array quarantine(workspace_guard &guard, const std::string &command_id) {
  boost::json::array out;
  for (auto &m : guard.quarantine(command_id)) {
    std::string fate = m.to.empty() ? "it could not be moved aside: check it before any tool reads it"
                                    : "moved it to " + m.to + ": review it, and move it back if you want it";
    const char *why = nullptr;
    switch (m.what) {
    case workspace_guard::moved::kind::repository:
      why = "a Git repository whose configuration or hooks would run programs when Git runs there "
            "outside the sandbox (only the keys git init and git clone write, and sample hooks, are kept)";
      break;
    case workspace_guard::moved::kind::git_metadata:
      why = "Git metadata (configuration, hooks, commondir) that would run programs when Git runs "
            "outside the sandbox";
      break;
    case workspace_guard::moved::kind::name:
      why = "which sandboxed commands may not create (shell, editor, Git and agent settings and "
            "credential files are read by tools outside the sandbox)";
      break;
    }
    std::fprintf(stderr, "sluice: the command created %s, %s; %s\n", m.path.c_str(), why, fate.c_str());
    out.push_back({{"path", m.path}, {"movedTo", m.to}});
  }
  if (!guard.complete()) {
    std::fprintf(stderr, "sluice: the workspace grew past what sluice walks after a command (4 x "
                         "[sandbox] max_workspace_entries); guarded names beyond that were not "
                         "checked: review new shell, editor, Git and agent settings before opening it\n");
  }
  return out;
}

// After the command: one line on stderr per distinct denial, so that an agent sees why and what
// would allow it, and the --json-summary file.
void report(const exec_options &opt, const exec_plan &plan, gateway::gateway *gw, int status,
            double seconds, int landlock, const workspace_scan &scan, const boost::json::array &quarantined,
            const boost::json::value &journaled) {
  const auto &resolved = plan.resolved;
  // One line per distinct denial, so that an agent sees why and what would allow it.
  std::map<gateway::request_summary::key, std::size_t> summary;
  if (gw) summary = gw->summary().snapshot();
  std::size_t allowed = 0, denied = 0;
  boost::json::array entries;
  for (auto &[k, n] : summary) {
    (k.decision == "allow" ? allowed : denied) += n;
    entries.push_back({{"host", k.host}, {"port", k.port}, {"method", k.method},
                       {"decision", k.decision}, {"reason", k.reason}, {"count", n}});
    if (k.decision != "allow") {
      std::fprintf(stderr, "sluice: %s %s %s %s (%zu request%s); %s\n",
                   k.decision == "deny" ? "denied" : "failed", k.method.c_str(), k.host.c_str(),
                   k.reason.c_str(), n, n == 1 ? "" : "s", hint(k.host, k.port, k.reason).c_str());
    }
  }
  if (!opt.json_summary.empty()) {
    boost::json::array caches;
    for (const auto &c : resolved.caches) caches.push_back(boost::json::string(c));
    boost::json::object o{{"commandId", plan.command_id},
                          {"exitStatus", status},
                          {"durationSeconds", seconds},
                          {"profile", std::string(filters::to_string(plan.mode))},
                          {"skill", resolved.skill},
                          {"approvedInHostPrompt", opt.needs_approval},
                          {"policy", resolved.policy_source},
                          {"requestsAllowed", allowed},
                          {"requestsDenied", denied},
                          {"requests", entries},
                          {"workspace", plan.ws.root},
                          {"writable", boost::json::value_from(plan.so.view.writable)},
                          {"caches", caches},
                          {"filesystem", resolved.read_only_workspace ? "read-only" : "workspace-write"},
                          {"landlockAbi", landlock},
                          {"nestedUserNamespaces", plan.so.nested_userns ? "allowed" : "refused"},
                          {"userNamespaceLimit", plan.userns_limit},
                          {"workspaceHidden", boost::json::value_from(scan.masks)},
                          {"workspaceProtected", boost::json::value_from(scan.protect)},
                          {"quarantined", quarantined},
                          {"journal", journaled},
                          {"environmentDropped", boost::json::value_from(plan.dropped)}};
    std::ofstream f(opt.json_summary, std::ios::trunc);
    f << boost::json::serialize(o) << "\n";
    if (!f) std::fprintf(stderr, "sluice: cannot write --json-summary %s\n", opt.json_summary.c_str());
  }
}

int run_command(const exec_options &opt, std::chrono::steady_clock::time_point t0,
                exec_progress &progress) {
  exec_plan plan = plan_command(opt, progress);
  const auto &resolved = plan.resolved;

  // Signals to forward are taken by this thread only; the gateway's threads inherit the mask.
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCHLD}) {
    sigaddset(&set, sig);
  }
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  int sfd = ::signalfd(-1, &set, SFD_CLOEXEC);

  // Step 2. The sandbox is made before any key exists, so its init never holds key material. From
  // here on this process is not dumpable: no core dumps, no ptrace, no /proc/PID/mem for others.
  sandbox sb(plan.so);
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  gateway_build build(plan, sb.init_pid());
  workspace_guard guard(plan.guard);
  workspace_scan scan;
  int landlock = set_up(plan, sb, guard, build, scan);
  plan.userns_limit = sb.userns_limit();
  std::string_view result;
  int status = run_to_end(opt, sb, sfd, result);
  ::close(sfd);
  // The journal: the command and its mounts are gone; what it changed goes into the workspace now,
  // before the guard looks at what it left there.
  boost::json::value journaled;
  // init reports the status before its own exit; the layer is read once the mount namespace that
  // held the overlay is gone with it.
  if (plan.journal.lock_fd >= 0) sb.wait();
  if (plan.journal.lock_fd >= 0 && plan.staged) {
    try {
      auto c = journal::stage_end(plan.journal, status);
      journaled = boost::json::object{{"run", plan.journal.id}, {"staged", true}, {"created", c.created},
                                      {"modified", c.modified}, {"deleted", c.deleted}};
      std::fprintf(stderr, "sluice: run %s is staged (%zu created, %zu modified, %zu deleted; %s has none of it): "
                           "`sluice diff %s`, then `sluice apply %s [PATH...]` or `sluice discard %s`; "
                           "`--stage-run %s` goes on with it\n", plan.journal.id.c_str(), c.created, c.modified,
                   c.deleted, plan.ws.root.c_str(), plan.journal.id.c_str(), plan.journal.id.c_str(),
                   plan.journal.id.c_str(), plan.journal.id.c_str());
    } catch (const std::exception &e) {
      std::fprintf(stderr, "sluice: staged run %s could not be recorded: %s\n", plan.journal.id.c_str(), e.what());
      status = 125;
      result = "refused";
    }
  } else if (plan.journal.lock_fd >= 0) {
    try {
      auto c = journal::apply(plan.journal, status);
      journaled = boost::json::object{{"run", plan.journal.id}, {"created", c.created}, {"modified", c.modified},
                                      {"deleted", c.deleted}};
      if (c.created + c.modified + c.deleted > 0) {
        std::fprintf(stderr, "sluice: run %s: %zu created, %zu modified, %zu deleted in %s; `sluice undo %s` puts "
                             "them back\n", plan.journal.id.c_str(), c.created, c.modified, c.deleted,
                     plan.ws.root.c_str(), plan.journal.id.c_str());
      }
    } catch (const std::exception &e) {
      std::fprintf(stderr, "sluice: run %s's changes could not all be applied to %s: %s; `sluice undo --recover` "
                           "finishes them, `sluice runs --files` shows them\n", plan.journal.id.c_str(),
                   plan.ws.root.c_str(), e.what());
      status = 125;
      result = "refused";
    }
  }
  boost::json::array quarantined = quarantine(guard, plan.command_id);
  for (auto &q : quarantine_settings(plan)) quarantined.push_back(std::move(q));

  gateway::gateway *gw = nullptr;
  try {
    gw = build.finish();
  } catch (const std::exception &e) {
    std::fprintf(stderr, "sluice: the gateway could not start: %s; the command was stopped\n", e.what());
    status = 125;
    result = "refused";
  }
  if (gw) {
    // The command is gone, but a request it saw answered may not be counted yet (the response is
    // written before the request is logged): let those finish, briefly, so the summary, the log
    // and the metrics hold every request.
    gw->drain(std::chrono::seconds(2));
    gw->join();
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!opt.metrics_textfile.empty()) {
    progress.written = true;
    if (gw) {
      write_textfile(opt, gw->instruments(), progress.profile, result, seconds);
    } else {
      metrics::metrics m(resolved.skill); // offline, or the command ended before the gateway was up
      write_textfile(opt, m, progress.profile, result, seconds);
    }
  }

  report(opt, plan, gw, status, seconds, landlock, scan, quarantined, journaled);
  return status;
}

} // namespace

int run_exec(const exec_options &opt) {
  auto t0 = std::chrono::steady_clock::now();
  if (!opt.metrics_textfile.empty()) {
    try {
      metrics::check_textfile_dir(opt.metrics_textfile);
    } catch (const std::runtime_error &e) {
      throw refusal(e.what());
    }
  }
  exec_progress progress;
  try {
    return run_command(opt, t0, progress);
  } catch (...) {
    if (!opt.metrics_textfile.empty() && !progress.written) {
      metrics::metrics m(progress.skill);
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      write_textfile(opt, m, progress.profile, "refused", seconds);
    }
    throw;
  }
}

} // namespace sluice::exec
