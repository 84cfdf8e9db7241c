#include "exec/runner_impl.hpp"
#include "exec/environment.hpp"
#include "exec/tool_cache.hpp"
#include "credentials/load.hpp"
#include "filters/policy_loader.hpp"
#include "metrics/audit_chain.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

// Step 1 of a run: the policy resolved, the workspace found, and from them the sandbox's options
// (its view, the guard's walk, the journal) and the command's environment. Nothing runs yet.
namespace sluice::exec::detail {
namespace {

// The ports transparent capture listens on: 80, 443 and every port an allow entry, a tcp entry or
// a host service names, but the proxy's own port and DNS's (taken inside the sandbox), at most
// max_capture_ports.
std::vector<unsigned> capture_ports(const filters::policy &p, unsigned proxy_port) {
  std::vector<unsigned> ports = {80, 443};
  for (const auto &pat : p.allow_matcher().patterns()) {
    if (pat.port != 0) ports.push_back(pat.port);
  }
  for (const auto &r : p.cfg().ssh) ports.push_back(r.port); // Git over SSH
  for (const auto &r : p.cfg().tcp) ports.push_back(r.port);
  for (const auto &s : p.cfg().host_services) ports.push_back(s.port);
  std::sort(ports.begin(), ports.end());
  ports.erase(std::unique(ports.begin(), ports.end()), ports.end());
  std::erase_if(ports, [&](unsigned port) { return port == proxy_port || port == 53; });
  if (ports.size() > max_capture_ports) ports.resize(max_capture_ports);
  return ports;
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
      credentials::load_secret(c);
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

// The descriptors --pass-fd names: open ones above 2.
void check_pass_fds(const std::vector<int> &fds) {
  for (int fd : fds) {
    if (fd < 3 || ::fcntl(fd, F_GETFD) < 0) {
      throw refusal("--pass-fd " + std::to_string(fd) + ": " +
                    (fd < 3 ? "0, 1 and 2 are always passed" : "no such open descriptor") +
                    "; name a descriptor above 2 that this shell has open");
    }
  }
}

// The policy for this command, with `sluice agent`'s boundary and the access log's settings; the
// profile, the network and the command's id follow from it.
void resolve_policy(const exec_options &opt, exec_plan &plan, exec_progress &progress) {
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
  // The access log's checkpoints are signed with a key made for this run; its public half goes in
  // the summary (accessLog), its private half nowhere but this process.
  if (plan.network && !opt.access_log.empty() && resolved.gateway.log_chain) {
    auto key = metrics::chain_signer::generate();
    plan.log_key_pem = key->private_pem();
    plan.log_public_key = key->public_base64();
    plan.log_key_id = key->key_id();
  }
}

// A trusted policy directory must never be writable from inside, even where no file exists yet:
// a command that created one there would set the policy of every later run.
void refuse_policy_dirs_in(const workspace &ws, const std::string &view_home) {
  for (const auto &dir : trusted_policy_dirs()) {
    std::string d = resolved_or(dir);
    bool hidden_by_home = !view_home.empty() && is_under(d, view_home);
    if ((is_under(d, ws.root) && !hidden_by_home) || is_under(ws.root, d)) {
      throw refusal("the workspace " + ws.root + " holds the trusted policy directory " + d +
                    " (or lies in it); a command there could rewrite the policy of later runs. "
                    "Run sluice exec from a project directory, or move the policy (--policy FILE)");
    }
  }
}

// `sluice agent`: the host's state directories read-write at their paths (never one that holds the
// trusted policy), its settings read-only, its stored credentials hidden, its files in the home.
void show_agent_host(const host_boundary &agent, exec_plan &plan, const std::string &view_home) {
  sandbox_options &so = plan.so;
  if (view_home.empty() || view_home != plan.caller_home) {
    throw refusal("sluice agent needs a home directory of the caller's own (HOME=" + plan.caller_home +
                  "); set HOME");
  }
  for (const auto &d : agent.state) {
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
  so.view.protect.insert(so.view.protect.end(), agent.protect.begin(), agent.protect.end());
  so.view.hide = agent.hide;
  so.view.home_files = agent.home_files;
  for (const auto &p : agent.protect) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) plan.absent_settings.push_back(p);
  }
}

// What the view shows: the workspace, the private home, the granted writable directories, the
// tool caches, the command's own files, an agent host's files; the policy file read-only.
void plan_view(const exec_options &opt, exec_plan &plan, const std::vector<std::string> &writable,
               const std::string &view_home, const std::string &policy_file) {
  const workspace &ws = plan.ws;
  const auto &resolved = plan.resolved;
  const char *path_env = std::getenv("PATH");
  sandbox_options &so = plan.so;
  so.view.workspace = ws.root;
  so.view.workspace_writable = !resolved.read_only_workspace;
  so.view.writable = writable;
  so.view.home = view_home;
  so.view.binds = cache_binds(resolved.caches, cache_root(plan.caller_home), view_home);
  plan.agent = opt.agent.host;
  if (!opt.agent.host.empty()) show_agent_host(opt.agent, plan, view_home);
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
  // Each granted Unix socket at the path it was granted by and at its real path (/var/run/docker.sock
  // and /run/docker.sock), whichever a client names.
  for (const auto &g : resolved.unix_sockets) {
    view_spec::socket_bind b{g.resolved, {g.resolved}, g.dev, g.ino};
    if (g.path != g.resolved) b.at.push_back(g.path);
    so.view.sockets.push_back(std::move(b));
  }
}

// The guard's walk of the writable places: credential files to hide, guarded names to protect.
void plan_guard(exec_plan &plan, const std::vector<std::string> &writable) {
  const workspace &ws = plan.ws;
  const auto &resolved = plan.resolved;
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
}

// The journal: the workspace under an overlay whose layer is this run's, applied afterwards (or
// staged for `sluice apply`).
void plan_journal(const exec_options &opt, exec_plan &plan) {
  const workspace &ws = plan.ws;
  const auto &resolved = plan.resolved;
  sandbox_options &so = plan.so;
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
}

// How the command starts: its working directory and descriptors, its environment, the sandbox's
// network (the proxy's port, capture's ports) and sluice's files the environment names.
void plan_process(const exec_options &opt, exec_plan &plan) {
  const auto &resolved = plan.resolved;
  sandbox_options &so = plan.so;
  so.await_masks = true;
  so.cwd = plan.ws.cwd;
  so.pass_fds = opt.pass_fds;
  so.require_landlock = resolved.require_landlock;
  so.nested_userns = resolved.nested_userns;

  environment_spec spec;
  spec.mode = plan.mode;
  spec.grants = resolved.grants;
  spec.keep = resolved.keep;
  spec.placeholders = resolved.placeholders;
  spec.home = so.view.home.empty() ? "/tmp" : so.view.home;
  spec.cwd = plan.ws.cwd;
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
    so.view.ssh_known_hosts = !plan.policy->cfg().ssh.empty();
  }
  plan_scan(plan, spec.grants);
  so.argv = opt.argv;
  so.env = child_environment(environ, spec, &plan.dropped);
  for (const auto &v : opt.agent.set_env) {
    auto name = v.substr(0, v.find('=') + 1);
    std::erase_if(so.env, [&](const std::string &e) { return e.rfind(name, 0) == 0; });
    so.env.push_back(v);
  }
}

} // namespace

exec_plan plan_command(const exec_options &opt, exec_progress &progress) {
  if (opt.argv.empty()) {
    throw refusal("no command given; write `sluice exec [options] -- CMD [ARGS...]`");
  }
  exec_plan plan;
  std::string fault;
  if (const char *f = std::getenv("SLUICE_FAULT")) fault = f;
  if (fault == "policy") throw refusal("policy: fault injected (SLUICE_FAULT=policy)");
  check_pass_fds(opt.pass_fds);
  resolve_policy(opt, plan, progress);
  const auto &resolved = plan.resolved;
  const char *home_env = std::getenv("HOME");
  plan.caller_home = home_env && home_env[0] == '/' ? resolved_or(home_env) : std::string();
  plan.ws = find_workspace(opt.request.working_dir, plan.caller_home);
  const workspace &ws = plan.ws;
  std::string view_home = sandbox_home(plan.caller_home);
  refuse_policy_dirs_in(ws, view_home);
  std::string policy_file = resolved.policy_source == "built-in" ? std::string() : resolved_or(resolved.policy_source);
  auto writable = check_writable(resolved.writable, ws, plan.caller_home, trusted_policy_dirs(), policy_file);
  plan_view(opt, plan, writable, view_home, policy_file);
  plan_guard(plan, writable);
  plan_journal(opt, plan);
  plan_process(opt, plan);
  plan.so.fault = fault;
  return plan;
}

} // namespace sluice::exec::detail
