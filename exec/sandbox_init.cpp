#include "exec/sandbox_impl.hpp"
#include "exec/seccomp_filter.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <linux/securebits.h>
#include <memory>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <string_view>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

// The sandbox's init, PID 1 in its namespaces: its stages in order (each reports a failure to
// sluice and ends init), then the command, with signals forwarded and orphans reaped.
namespace sluice::exec::detail {
namespace {

// Signals sluice passes on to the command (the list).
const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH};

// Drops every capability for good: bounding set, ambient set, securebits so that a uid-0 exec
// regains nothing, then the effective/permitted/inheritable sets.
bool drop_capabilities() {
  if (::prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                                     SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED) != 0) {
    return false;
  }
  for (int cap = 0; cap <= 63; ++cap) {
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno == EINVAL) break;
  }
  ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capset, &hdr, data) != 0) return false;
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0;
}

// Closes every descriptor above 2 but those in `keep`: what the caller had open (a socket to some
// host, a terminal, a file) must not reach the command.
void close_except(std::vector<int> keep) {
  keep.push_back(INT_MAX);
  std::sort(keep.begin(), keep.end());
  unsigned from = 3;
  for (int k : keep) {
    if (k < 3) continue;
    if (static_cast<unsigned>(k) > from) ::syscall(SYS_close_range, from, static_cast<unsigned>(k) - 1, 0);
    from = static_cast<unsigned>(k) + 1;
    if (k == INT_MAX) break;
  }
}

// init's failure: the step and the reason to sluice, then its exit (125).
[[noreturn]] void init_fail(int control, const char *step, const std::string &msg) {
  send_msg(control, 'E', std::string(step) + '\0' + msg);
  // Read whatever sluice sends until it closes: a Unix socket closed with unread data resets the
  // peer, and sluice would lose this message to ECONNRESET.
  std::unique_ptr<char[]> sink(new char[max_message]);
  while (::recv(control, sink.get(), max_message, 0) > 0) {
  }
  _exit(125);
}

// init's stage 1: nothing of the caller's open files but what it named, a session of its own,
// sluice's go (the id maps are written), then no ptrace of init, and (unless allowed) no user
// namespace below this one. Whether that limit holds.
bool init_begin(const sandbox_options &o, int control, int exec_pipe_w) {
  std::vector<int> keep = o.pass_fds;
  keep.push_back(control);
  keep.push_back(exec_pipe_w);
  close_except(keep);
  // A session of its own: no controlling terminal, out of the caller's process group.
  ::setsid();
  std::string msg;
  if (!recv_msg(control, msg, 10'000) || msg != "G") _exit(125); // sluice is gone
  // The id maps are written; from now on nothing in the sandbox may ptrace init, which holds
  // every capability of the sandbox's user namespace.
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  // The second lock on nested user namespaces, beside seccomp: the sandbox's own user namespace
  // allows none below it. The limit is per user namespace and init holds CAP_SYS_RESOURCE in this
  // one; where /proc/sys is read-only (some containers) it does not hold, and seccomp alone does.
  bool userns_limit = false;
  if (!o.nested_userns) {
    int fd = ::open("/proc/sys/user/max_user_namespaces", O_WRONLY | O_CLOEXEC);
    userns_limit = fd >= 0 && ::write(fd, "0\n", 2) == 2;
    if (fd >= 0) ::close(fd);
  }
  return userns_limit;
}

// Stage 2: loopback, the only interface; the proxy listener on it and, with capture, the DNS
// responder's sockets and one listener per captured port and family.
void init_network(const sandbox_options &o, int control, int &listener, std::vector<int> &captured) {
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (o.fault == "loopback" || s < 0 || ::ioctl(s, SIOCGIFFLAGS, &ifr) != 0) {
    init_fail(control, "loopback", std::string("cannot read lo flags: ") + std::strerror(errno));
  }
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (::ioctl(s, SIOCSIFFLAGS, &ifr) != 0) {
    init_fail(control, "loopback", std::string("cannot bring lo up: ") + std::strerror(errno));
  }
  ::close(s);
  if (o.network) {
    std::string err;
    listener = tcp_listener(AF_INET, true, o.port, 1024, err);
    if (listener < 0) init_fail(control, "fd_handoff", err + " inside the sandbox");
  }
  if (o.network && !o.capture_ports.empty()) {
    if (o.fault == "capture") init_fail(control, "capture", "fault injected (SLUICE_FAULT=capture)");
    if (auto e = make_capture(o.capture_ports, captured); !e.empty()) init_fail(control, "capture", e);
  }
}

// Stage 3: the filesystem view, built, not inherited (mount_view.cpp), with the marks of sluice's
// walk of the workspace and, for a root caller, the id-mapped /etc sluice made.
void init_view(const sandbox_options &o, int control) {
  if (o.fault == "mounts" || o.fault == "apparmor_userns" || o.fault == "proc_masked" ||
      o.fault == "container_apparmor") {
    init_fail(control, "mounts", "fault injected (SLUICE_FAULT=" + o.fault + ")");
  }
  std::function<view_marks()> masks;
  if (o.await_masks) {
    masks = [&]() -> view_marks {
      std::string m;
      if (!recv_msg(control, m, -1) || m.empty() || m[0] != 'W') _exit(125);
      view_marks out;
      std::size_t start = 1;
      while (start < m.size()) {
        auto end = m.find('\0', start);
        if (end == std::string::npos) end = m.size();
        if (end > start + 1) (m[start] == 'p' ? out.protect : out.hide).push_back(m.substr(start + 1, end - start - 1));
        start = end + 1;
      }
      return out;
    };
  }
  // A root caller's /etc: the id-mapped copy sluice made, or none (then a walk masks what others
  // may not read).
  std::function<int()> system_etc;
  if (o.view.hide_unreadable_etc) {
    system_etc = [&]() -> int {
      std::string m;
      std::vector<int> fds;
      if (!recv_msg(control, m, fds, -1) || m.empty() || m[0] != 'T' || fds.size() > 1) _exit(125);
      return fds.empty() ? -1 : fds[0];
    };
  }
  if (auto e = build_view(o.view, masks, system_etc); !e.empty()) init_fail(control, "mounts", e);
}

// Stage 4: the descriptors to sluice, in one message: the proxy listener, then (with capture) the
// DNS responder's UDP and TCP sockets and the captured ports' listeners; the text says how many.
void init_hand_over(const sandbox_options &o, int control, int listener, const std::vector<int> &captured) {
  if (o.fault == "fd_handoff") init_fail(control, "fd_handoff", "fault injected (SLUICE_FAULT=fd_handoff)");
  std::vector<int> handed;
  if (listener >= 0) handed.push_back(listener);
  handed.insert(handed.end(), captured.begin(), captured.end());
  if (!send_msg(control, 'R', std::to_string(captured.size()), handed)) _exit(125);
  for (int fd : handed) ::close(fd);
}

// Stage 5: sluice's files, then the seal: read-only root, the working directory, Landlock, seccomp;
// sluice hears the Landlock ABI and whether the user-namespace limit holds, and says start.
void init_seal(const sandbox_options &o, int control, bool userns_limit) {
  // While sluice builds the gateway: the Landlock ruleset and the seccomp program, enforced below.
  auto rules = view_landlock_rules(o.view);
  rules.fds = {0, 1, 2};
  rules.fds.insert(rules.fds.end(), o.pass_fds.begin(), o.pass_fds.end());
  std::string lerr, serr, msg;
  landlock_ruleset ruleset = prepare_landlock(rules, lerr);
  // The seccomp program, compiled by sluice while init built the view.
  if (!recv_msg(control, msg, -1) || msg.empty() || msg[0] != 'P') _exit(125);
  std::vector<sock_filter> program((msg.size() - 1) / sizeof(sock_filter));
  if (program.empty() || (msg.size() - 1) % sizeof(sock_filter) != 0) init_fail(control, "seccomp", "bad seccomp program");
  std::memcpy(program.data(), msg.data() + 1, msg.size() - 1);

  if (!recv_msg(control, msg, -1) || msg.empty() || msg[0] != 'F') _exit(125);
  std::vector<std::pair<std::string, std::string>> files;
  if (!decode_files(std::string_view(msg).substr(1), files)) init_fail(control, "private_dir", "bad file list");
  if (o.fault == "private_dir") init_fail(control, "private_dir", "fault injected (SLUICE_FAULT=private_dir)");
  if (auto e = seal_view(files, o.view.replace_trust, o.view.dns_stub); !e.empty()) init_fail(control, "private_dir", e);
  files.clear();
  if (::chdir(o.cwd.c_str()) != 0) {
    init_fail(control, "mounts", "cannot enter the working directory " + o.cwd + " in the view: " + std::strerror(errno));
  }
  if (o.fault == "landlock") {
    ruleset.abi = -1;
    lerr = "fault injected (SLUICE_FAULT=landlock)";
  }
  if (ruleset.abi < 0 || !enforce_landlock(ruleset, lerr)) init_fail(control, "landlock", lerr);
  int abi = ruleset.abi;
  if (abi == 0 && o.require_landlock) {
    init_fail(control, "landlock", "this kernel has no Landlock and the policy sets require_landlock = true; "
                                   "use a kernel with Landlock (5.13+, enabled in the lsm= list) or drop the setting");
  }
  if (o.fault == "seccomp") serr = "fault injected (SLUICE_FAULT=seccomp)";
  if (!serr.empty() || !load_seccomp(program, serr)) init_fail(control, "seccomp", serr);
  if (!send_msg(control, 'K', std::to_string(abi) + (userns_limit ? " 1" : " 0"))) _exit(125);
  if (!recv_msg(control, msg, -1) || msg != "S") {
    _exit(125); // sluice gave up before the start: nothing runs
  }
}

// Stage 6: the command in a session of its own, signals forwarded to it, orphans reaped; then
// whatever it left running killed. The command's status.
int init_run(const sandbox_options &o, int control, int exec_pipe_w) {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : forwarded) sigaddset(&set, sig);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  int sfd = ::signalfd(-1, &set, SFD_CLOEXEC);

  // Everything the command's side needs is prepared before the clone: with CLONE_VM|CLONE_VFORK
  // (posix_spawn's way) init's page tables are not copied, and the child must not allocate.
  std::vector<char *> argv, envp;
  for (auto &a : o.argv) argv.push_back(const_cast<char *>(a.c_str()));
  argv.push_back(nullptr);
  for (auto &e : o.env) envp.push_back(const_cast<char *>(e.c_str()));
  envp.push_back(nullptr);
  struct spawn_args {
    char **argv, **envp;
    int control, exec_pipe_w;
    const int *pass;
    std::size_t npass;
    bool probe, setsid_fault;
  } sa{argv.data(), envp.data(), control, exec_pipe_w, o.pass_fds.data(), o.pass_fds.size(),
       o.probe, o.fault == "setsid"};
  static constexpr std::size_t stack_size = 64 * 1024;
  std::vector<char> stack(stack_size);
  auto child = +[](void *p) -> int {
    auto *a = static_cast<spawn_args *>(p);
    auto refuse = [a](int e) {
      (void)!::write(a->exec_pipe_w, &e, sizeof e);
      _exit(125);
    };
    sigset_t none;
    sigemptyset(&none);
    for (int sig = 1; sig < NSIG; ++sig) {
      struct sigaction old {};
      if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler != SIG_DFL &&
          old.sa_handler != SIG_IGN) {
        ::signal(sig, SIG_DFL);
      }
    }
    ::signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    ::close(a->control);
    // The command leads a session of its own: no controlling terminal (so no TIOCSTI into the
    // caller's), and `kill 0` reaches its own process group only.
    if (a->setsid_fault || ::setsid() < 0) refuse(EPERM);
    // Every descriptor above 2 closes at exec but those passed with --pass-fd.
    ::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
    for (std::size_t i = 0; i < a->npass; ++i) ::fcntl(a->pass[i], F_SETFD, 0);
    if (!drop_capabilities()) refuse(EPERM);
    if (a->probe) _exit(0);
    ::execvpe(a->argv[0], a->argv, a->envp);
    int e = errno;
    (void)!::write(a->exec_pipe_w, &e, sizeof e);
    _exit(e == ENOENT ? 127 : 126);
  };
  pid_t cmd = ::clone(child, stack.data() + stack_size, CLONE_VM | CLONE_VFORK | SIGCHLD, &sa);
  ::close(exec_pipe_w);
  if (cmd < 0) _exit(125);

  int status = 125;
  bool done = false;
  while (!done) {
    pollfd p[2] = {{sfd, POLLIN, 0}, {control, POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) continue;
    if (p[1].revents) {
      char b;
      if (::recv(control, &b, 1, MSG_DONTWAIT) <= 0) {
        // sluice died: take everything in this namespace down.
        ::kill(-1, SIGKILL);
        _exit(137);
      }
    }
    if (!(p[0].revents & POLLIN)) continue;
    signalfd_siginfo si{};
    if (::read(sfd, &si, sizeof si) != sizeof si) continue;
    if (si.ssi_signo != SIGCHLD) {
      // The command has no terminal: a signal reaches it only through sluice, and goes to its
      // whole process group, as a terminal's would.
      if (si.ssi_code == SI_USER || si.ssi_code == SI_QUEUE) {
        if (::kill(-cmd, static_cast<int>(si.ssi_signo)) != 0) ::kill(cmd, static_cast<int>(si.ssi_signo));
      }
      continue;
    }
    for (;;) { // reap every child: the command and any orphan re-parented to init
      int st = 0;
      pid_t r = ::waitpid(-1, &st, WNOHANG);
      if (r <= 0) break;
      if (r == cmd) {
        status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        done = true;
      }
    }
  }
  // What the command left running goes with it, and init reaps until nothing is left: every
  // process in the namespace descends from init, so ECHILD means none remains (a nested PID
  // namespace's init is reaped only once its own namespace is empty). The kill is repeated after
  // each reap, for a process forked while the last one went out. sluice hears the status before
  // init's own exit, whose teardown of the mounts and namespaces then runs beside sluice's last
  // steps.
  for (;;) {
    ::kill(-1, SIGKILL);
    int st = 0;
    if (::waitpid(-1, &st, 0) < 0 && errno == ECHILD) break;
  }
  return status;
}

} // namespace

// PID 1 of the sandbox: its stages in order (each ends init with the reason on failure), then the
// command's status to sluice and as init's own.
[[noreturn]] void init_main(const sandbox_options &o, int control, int exec_pipe_w) {
  bool userns_limit = init_begin(o, control, exec_pipe_w);
  int listener = -1;
  std::vector<int> captured; // DNS UDP, DNS TCP, then one listener per captured port and family
  init_network(o, control, listener, captured);
  init_view(o, control);
  init_hand_over(o, control, listener, captured);
  init_seal(o, control, userns_limit);
  int status = init_run(o, control, exec_pipe_w);
  send_msg(control, 'X', std::to_string(status));
  _exit(status);
}

} // namespace sluice::exec::detail
