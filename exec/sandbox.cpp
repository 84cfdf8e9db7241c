#include "exec/sandbox_impl.hpp"
#include "exec/seccomp_filter.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <sched.h>
#include <string>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

// sluice's side of the sandbox: the namespaces and their id maps, the id-mapped /etc of a root
// caller, and the conversation with init (sandbox_init.cpp) up to the command's start and end.
namespace sluice::exec {
using namespace detail;
namespace {

bool write_file(const std::string &path, const std::string &data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
  ::close(fd);
  return ok;
}

// For a root caller, whose uid owns /etc's secrets: a detached copy of the host's /etc (with the
// mounts below it), read-only, through an id mapping under which no file belongs to any id the
// caller holds: uid and gid 0 map to nothing (the files show as 65534). The command then opens
// what any other user could open and nothing more, whatever appears in /etc while it runs, and no
// walk of /etc is needed at its start. Runs in sluice, before the view is built: an id-mapped mount
// needs CAP_SYS_ADMIN over the file system, which only the real root has. Returns the mount's
// descriptor, or -1 and the reason (a kernel before 5.12, a file system without id-mapped mounts,
// no CAP_SYS_ADMIN as in most containers).
int idmapped_etc(std::string &why) {
  // The one id the mapping names: the largest valid one, which no user or group holds (checked).
  constexpr unsigned long unused = 4294967294UL;
  gid_t groups[256];
  int n = ::getgroups(256, groups);
  if (n < 0) {
    why = std::string("getgroups: ") + std::strerror(errno);
    return -1;
  }
  if (::geteuid() == unused || ::getegid() == unused ||
      std::find(groups, groups + n, static_cast<gid_t>(unused)) != groups + n) {
    why = "the caller holds id 4294967294";
    return -1;
  }
  // The mapping lives in a user namespace of its own, held by a child that only waits: it shares
  // this process's memory (no page tables to copy) and runs nothing but its wait on that stack.
  constexpr std::size_t stack_size = 16384;
  auto stack = std::make_unique<char[]>(stack_size);
  pid_t holder = ::clone([](void *) -> int {
                           for (;;) ::syscall(SYS_pause);
                         },
                         stack.get() + stack_size, CLONE_VM | CLONE_NEWUSER, nullptr);
  if (holder < 0) {
    why = std::string("cannot make a user namespace for the id mapping: ") + std::strerror(errno);
    return -1;
  }
  const std::string map = std::to_string(unused) + " " + std::to_string(unused) + " 1\n";
  const std::string proc = "/proc/" + std::to_string(holder);
  int userns = -1;
  if (write_file(proc + "/uid_map", map) && write_file(proc + "/gid_map", map)) {
    userns = ::open((proc + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC);
  }
  int e = errno;
  ::kill(holder, SIGKILL);
  while (::waitpid(holder, nullptr, __WALL) < 0 && errno == EINTR) {
  }
  if (userns < 0) {
    why = std::string("cannot write the id mapping: ") + std::strerror(e);
    return -1;
  }
  int tree = static_cast<int>(::open_tree(AT_FDCWD, "/etc", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE));
  if (tree < 0) {
    why = std::string("open_tree /etc: ") + std::strerror(errno);
    ::close(userns);
    return -1;
  }
  mount_attr a{};
  a.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  a.userns_fd = static_cast<std::uint64_t>(userns);
  bool ok = ::mount_setattr(tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &a, sizeof a) == 0;
  e = errno;
  ::close(userns);
  if (!ok) {
    ::close(tree);
    why = std::string("cannot id-map /etc: ") + std::strerror(e);
    return -1;
  }
  return tree;
}

} // namespace

sandbox::sandbox(const sandbox_options &o) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    throw setup_error("fd_handoff", std::string("socketpair: ") + std::strerror(errno));
  }
  int ep[2];
  if (::pipe2(ep, O_CLOEXEC) != 0) {
    ::close(sv[0]);
    ::close(sv[1]);
    throw setup_error("fd_handoff", std::string("pipe: ") + std::strerror(errno));
  }
  control_ = sv[0];
  exec_pipe_ = ep[0];
  uid_t uid = ::geteuid();
  gid_t gid = ::getegid();
  long pid = -1;
  if (o.fault != "namespaces" && o.fault != "userns_sysctl" && o.fault != "container_seccomp") {
    pid = ::syscall(SYS_clone, CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWNS |
                                   CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP | SIGCHLD,
                    nullptr, nullptr, nullptr, nullptr);
  } else {
    errno = EPERM;
  }
  if (pid == 0) {
    ::close(sv[0]);
    ::close(ep[0]);
    init_main(o, sv[1], ep[1]);
  }
  ::close(sv[1]);
  ::close(ep[1]);
  if (pid < 0) {
    int e = errno;
    ::close(control_);
    ::close(exec_pipe_);
    control_ = exec_pipe_ = -1;
    throw setup_error("namespaces", std::string("cannot create user, network, PID, mount, IPC, UTS and "
                                                "cgroup namespaces: ") +
                                        std::strerror(e) +
                                        "; enable unprivileged user namespaces "
                                        "(sysctl kernel.unprivileged_userns_clone=1 and "
                                        "user.max_user_namespaces > 0)");
  }
  init_ = static_cast<pid_t>(pid);
  std::string proc = "/proc/" + std::to_string(init_);
  if (!write_file(proc + "/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1\n") ||
      !write_file(proc + "/setgroups", "deny") ||
      !write_file(proc + "/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1\n")) {
    int e = errno;
    throw setup_error("namespaces", std::string("cannot write the user namespace id maps: ") +
                                        std::strerror(e));
  }
  if (!send_msg(control_, 'G')) throw setup_error("namespaces", "the sandbox init died early");
  network_ = o.network;
  etc_pending_ = o.view.hide_unreadable_etc;
  fault_ = o.fault;
  nested_userns_ = o.nested_userns;
}

void sandbox::share_system_etc() {
  if (!etc_pending_) return;
  etc_pending_ = false;
  std::string why = "fault injected (SLUICE_FAULT=idmap_etc)";
  int etc = fault_ == "idmap_etc" ? -1 : idmapped_etc(why);
  bool sent = send_msg(control_, 'T', why, etc >= 0 ? std::vector<int>{etc} : std::vector<int>{});
  if (etc >= 0) ::close(etc);
  if (!sent) throw setup_error("mounts", "the sandbox init died early");
}

namespace {
// A reply from init: 'E' (step, message) becomes a setup_error.
void check_reply(const std::string &msg, char want) {
  if (msg.empty()) throw setup_error("fd_handoff", "no answer from the sandbox init");
  if (msg[0] == 'E') {
    auto zero = msg.find('\0');
    throw setup_error(msg.substr(1, zero - 1), msg.substr(zero + 1));
  }
  if (msg[0] != want) throw setup_error("fd_handoff", "unexpected answer from the sandbox init");
}
} // namespace

void sandbox::ready() {
  share_system_etc();
  std::string msg;
  std::vector<int> fds;
  if (!recv_msg(control_, msg, fds, 10'000)) throw setup_error("fd_handoff", "no answer from the sandbox init");
  auto close_all = [&] {
    for (int fd : fds) ::close(fd);
  };
  try {
    check_reply(msg, 'R');
  } catch (...) {
    close_all();
    throw;
  }
  std::size_t captured = std::strtoul(msg.c_str() + 1, nullptr, 10);
  if (network_ && fds.size() != 1 + captured) {
    close_all();
    throw setup_error("fd_handoff", "the listener was not handed over");
  }
  if (!network_) {
    close_all();
    return;
  }
  listener_ = fds[0];
  if (captured >= 2) {
    capture_.dns_udp = fds[1];
    capture_.dns_tcp = fds[2];
    capture_.listeners.assign(fds.begin() + 3, fds.end());
  }
}

sandbox::capture_sockets sandbox::take_capture() {
  capture_sockets out = std::move(capture_);
  capture_ = {};
  return out;
}

void sandbox::send_seccomp() {
  if (!seccomp_pending_) return;
  seccomp_pending_ = false;
  std::string err;
  auto program = build_seccomp(nested_userns_, err);
  if (program.empty()) throw setup_error("seccomp", err.empty() ? "empty seccomp program" : err);
  std::string payload(reinterpret_cast<const char *>(program.data()), program.size() * sizeof(sock_filter));
  if (payload.size() + 1 > max_message || !send_msg(control_, 'P', payload)) {
    throw setup_error("seccomp", "cannot hand the seccomp program to the sandbox init");
  }
}

void sandbox::send_files(const std::vector<std::pair<std::string, std::string>> &files) {
  send_seccomp(); // init reads it first
  std::string payload = encode_files(files);
  if (payload.size() + 1 > max_message || !send_msg(control_, 'F', payload)) {
    throw setup_error("private_dir", "cannot hand sluice's files to the sandbox init");
  }
}

void sandbox::send_marks(const view_marks &marks) {
  share_system_etc(); // init reads it first
  std::string payload;
  for (auto &p : marks.hide) payload += 'h' + p + '\0';
  for (auto &p : marks.protect) payload += 'p' + p + '\0';
  if (payload.size() + 1 > max_message || !send_msg(control_, 'W', payload)) {
    throw setup_error("mounts", "cannot hand the workspace's credential files to the sandbox init");
  }
}

int sandbox::sealed() {
  std::string msg;
  if (!recv_msg(control_, msg, 10'000)) throw setup_error("seccomp", "no answer from the sandbox init");
  check_reply(msg, 'K');
  auto space = msg.find(' ');
  userns_limit_ = space != std::string::npos && msg.compare(space + 1, 1, "1") == 0;
  return std::atoi(msg.c_str() + 1);
}

int sandbox::provision(const std::vector<std::pair<std::string, std::string>> &files) {
  send_files(files);
  return sealed();
}

bool sandbox::exit_report(int &status) {
  std::string msg;
  if (!recv_msg(control_, msg, 0) || msg.size() < 2 || msg[0] != 'X') return false;
  status = std::atoi(msg.c_str() + 1);
  exited_ = true;
  return true;
}

sandbox::~sandbox() {
  if (init_ > 0 && !reaped_ && exited_) {
    // Nothing of the sandbox runs any more; its teardown may still: reaped here if it is over,
    // else by whoever inherits it once sluice has exited.
    int st;
    ::waitpid(init_, &st, WNOHANG);
  } else if (init_ > 0 && !reaped_) {
    ::kill(init_, SIGKILL);
    int st;
    ::waitpid(init_, &st, 0);
  }
  if (control_ >= 0) ::close(control_);
  if (exec_pipe_ >= 0) ::close(exec_pipe_);
  for (int fd : capture_.listeners) ::close(fd);
  if (capture_.dns_udp >= 0) ::close(capture_.dns_udp);
  if (capture_.dns_tcp >= 0) ::close(capture_.dns_tcp);
}

bool sandbox::start(int &errno_out) {
  errno_out = 0;
  if (!send_msg(control_, 'S')) {
    errno_out = EPIPE;
    return false;
  }
  int e = 0;
  ssize_t n;
  do {
    n = ::read(exec_pipe_, &e, sizeof e);
  } while (n < 0 && errno == EINTR);
  if (n == sizeof e) {
    errno_out = e;
    return false;
  }
  return true; // EOF: the exec succeeded and closed the pipe (O_CLOEXEC)
}

void sandbox::signal(int sig) {
  if (init_ > 0 && !reaped_) ::kill(init_, sig);
}

int sandbox::wait() {
  int st = 0;
  while (::waitpid(init_, &st, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  return 128 + WTERMSIG(st);
}

} // namespace sluice::exec
