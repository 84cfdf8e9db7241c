#include "exec/runner.hpp"
#include "certs/java_truststore.hpp"
#include "exec/environment.hpp"
#include "exec/sandbox.hpp"
#include "gateway/gateway.hpp"

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
#include <openssl/rand.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

namespace sluice::exec {
namespace {

// Where the private directory for the CA certificate goes: $TMPDIR, else $XDG_RUNTIME_DIR, else
// /tmp. An explicit TMPDIR that does not work is reported, never silently replaced. The name is
// chosen here; the directory itself is made only once the sandbox's init exists, so that a sluice
// killed at any moment leaves no directory behind (init removes it).
std::string private_dir_path(const std::string &fault) {
  std::string base = "/tmp";
  if (const char *t = std::getenv("TMPDIR"); t && *t) {
    base = t;
  } else if (const char *x = std::getenv("XDG_RUNTIME_DIR"); x && *x && ::access(x, W_OK) == 0) {
    base = x;
  }
  if (fault == "private_dir" || ::access(base.c_str(), W_OK | X_OK) != 0) {
    int e = fault == "private_dir" ? EACCES : errno;
    throw setup_error("private_dir", "cannot create a private directory under " + base + ": " +
                                         std::strerror(e) + "; point TMPDIR at a writable directory");
  }
  unsigned char b[9];
  RAND_bytes(b, sizeof b);
  std::string name = base + "/sluice-";
  for (unsigned char c : b) name += "abcdefghijklmnopqrstuvwxyz0123456789"[c % 36];
  return name;
}

void make_private_dir(const std::string &path) {
  if (::mkdir(path.c_str(), 0700) != 0) {
    throw setup_error("private_dir", "cannot create " + path + ": " + std::strerror(errno) +
                                         "; point TMPDIR at a writable directory");
  }
}

void write_private_file(const std::string &path, const std::string &data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0 || ::write(fd, data.data(), data.size()) != static_cast<ssize_t>(data.size())) {
    if (fd >= 0) ::close(fd);
    throw setup_error("private_dir", "cannot write " + path + ": " + std::strerror(errno));
  }
  ::close(fd);
}

std::string random_id() {
  unsigned char b[6];
  RAND_bytes(b, sizeof b);
  char out[13];
  for (int i = 0; i < 6; ++i) std::snprintf(out + 2 * i, 3, "%02x", b[i]);
  return out;
}

// The escalation that would have let a denied request through, for the line on stderr.
std::string hint(const std::string &host, const std::string &reason) {
  if (reason == "host_not_allowlisted") return "to allow it: --allow-domain " + host;
  if (reason == "method_not_allowed" || reason == "body_on_read_method" ||
      reason == "method_override_refused") {
    return "writes need --sandbox-profile publish --confirm-external-side-effects";
  }
  if (reason == "destination_address_denied") {
    return "the name resolves to a private or special address; list it in upstream.allow_addresses";
  }
  if (reason == "host_denied") return "a deny rule in the policy matches it";
  if (reason == "tls_required") return "only TLS can pass a CONNECT tunnel in this profile";
  return "see the access log (--access-log) for details";
}

} // namespace

int run_exec(const exec_options &opt) {
  auto t0 = std::chrono::steady_clock::now();
  if (opt.argv.empty()) {
    throw refusal("no command given; write `sluice exec [options] -- CMD [ARGS...]`");
  }
  std::string fault;
  if (const char *f = std::getenv("SLUICE_FAULT")) fault = f;
  if (fault == "policy") throw refusal("policy: fault injected (SLUICE_FAULT=policy)");
  auto resolved = resolve_exec(opt.request);
  resolved.gateway.access_log = opt.access_log;
  const auto mode = resolved.gateway.mode;
  const bool network = mode != filters::profile::offline;
  const std::string command_id = random_id();

  std::unique_ptr<gateway::gateway> gw;
  std::string dir;
  struct dir_guard {
    std::string &d;
    ~dir_guard() { remove_private_dir(d); }
  } guard{dir};

  environment_spec spec;
  spec.mode = mode;
  spec.grants = resolved.grants;
  if (network) {
    dir = private_dir_path(fault);
    spec.proxy_port = 3128;
    spec.ca_file = dir + "/ca.pem";
    if (filters::terminates_tls(mode)) spec.java_truststore = dir + "/truststore.p12";
  }
  sandbox_options so;
  so.network = network;
  so.port = spec.proxy_port ? spec.proxy_port : 3128;
  so.argv = opt.argv;
  so.env = child_environment(environ, spec);
  so.private_dir = dir;
  so.fault = fault;

  // Signals to forward are taken by this thread only; the gateway's threads inherit the mask.
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCHLD}) {
    sigaddset(&set, sig);
  }
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  int sfd = ::signalfd(-1, &set, SFD_CLOEXEC);

  // The sandbox is made before any key exists, so its init never holds key material. From here
  // on this process is not dumpable: no core dumps, no ptrace, no /proc/PID/mem for others.
  sandbox sb(so);
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  // The CA and the gateway are built while init brings up its network (sb.ready() below).
  if (network) {
    make_private_dir(dir);
    if (fault == "ca") throw setup_error("ca", "fault injected (SLUICE_FAULT=ca)");
    auto policy = std::make_shared<const filters::policy>(resolved.gateway);
    gateway::gateway_options go;
    go.threads = 1;
    go.command_id = command_id;
    go.keep_summary = true;
    try {
      gw = std::make_unique<gateway::gateway>(policy, go);
    } catch (const certs::crypto_error &e) {
      throw setup_error("ca", e.what());
    }
    sb.ready(); // init's own failure (loopback, listener, mounts) is the one to report
    write_private_file(spec.ca_file, gw->ca().cert_pem());
    if (!spec.java_truststore.empty()) {
      write_private_file(spec.java_truststore,
                         certs::make_java_truststore(gw->ca().cert(), "sluice"));
    }
    gw->adopt_listener(sb.listener());
    gw->start();
  } else {
    sb.ready();
  }
  int exec_errno = 0;
  int status;
  if (!sb.start(exec_errno)) {
    status = exec_errno == ENOENT ? 127 : exec_errno == EPERM ? 125 : 126;
    std::fprintf(stderr, "sluice: %s: %s\n", opt.argv[0].c_str(),
                 exec_errno == ENOENT ? "command not found; check the name and PATH"
                                      : (std::string("cannot execute: ") + std::strerror(exec_errno)).c_str());
    sb.wait();
  } else {
    for (;;) {
      signalfd_siginfo si{};
      if (::read(sfd, &si, sizeof si) != sizeof si) continue;
      if (si.ssi_signo == SIGCHLD) {
        int st = 0;
        if (::waitpid(sb.init_pid(), &st, WNOHANG) == sb.init_pid()) {
          status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
          break;
        }
        continue;
      }
      sb.signal(static_cast<int>(si.ssi_signo));
    }
    sb.release_reaped();
  }
  ::close(sfd);
  if (gw) {
    gw->stop();
    gw->join();
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // One line per distinct denial, so that an agent sees why and what would allow it.
  std::map<gateway::request_summary::key, std::size_t> summary;
  if (gw) summary = gw->summary().snapshot();
  std::size_t allowed = 0, denied = 0;
  boost::json::array entries;
  for (auto &[k, n] : summary) {
    (k.decision == "allow" ? allowed : denied) += n;
    entries.push_back({{"host", k.host}, {"method", k.method}, {"decision", k.decision},
                       {"reason", k.reason}, {"count", n}});
    if (k.decision != "allow") {
      std::fprintf(stderr, "sluice: %s %s %s %s (%zu request%s); %s\n",
                   k.decision == "deny" ? "denied" : "failed", k.method.c_str(), k.host.c_str(),
                   k.reason.c_str(), n, n == 1 ? "" : "s", hint(k.host, k.reason).c_str());
    }
  }
  if (!opt.json_summary.empty()) {
    boost::json::object o{{"commandId", command_id},
                          {"exitStatus", status},
                          {"durationSeconds", seconds},
                          {"profile", std::string(filters::to_string(mode))},
                          {"skill", resolved.skill},
                          {"policy", resolved.policy_source},
                          {"requestsAllowed", allowed},
                          {"requestsDenied", denied},
                          {"requests", entries}};
    std::ofstream f(opt.json_summary, std::ios::trunc);
    f << boost::json::serialize(o) << "\n";
    if (!f) std::fprintf(stderr, "sluice: cannot write --json-summary %s\n", opt.json_summary.c_str());
  }
  return status;
}

} // namespace sluice::exec
