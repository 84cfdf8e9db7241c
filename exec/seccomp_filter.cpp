#include "exec/seccomp_filter.hpp"

#include <cerrno>
#include <cstring>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

namespace sluice::exec {
namespace {

// Calls that a command in the sandbox never needs and that widen the kernel's attack surface or
// leave the sandbox's own namespace set-up (mounts).
const char *const refused_calls[] = {
    "keyctl",        "add_key",         "request_key",     "bpf",
    "userfaultfd",   "perf_event_open", "kexec_load",      "kexec_file_load",
    "init_module",   "finit_module",    "delete_module",   "mount",
    "umount2",       "pivot_root",      "move_mount",      "open_tree",
    "fsopen",        "fsmount",         "fsconfig",        "fspick",
    "mount_setattr", "swapon",          "swapoff",         "reboot",
    "acct",          "quotactl",        "syslog",          "io_uring_setup",
    "io_uring_enter", "io_uring_register", "lookup_dcookie", "iopl",
    "ioperm",        "vhangup",         "open_by_handle_at", "uselib",
    "nfsservctl",    "fanotify_init",   "setdomainname",   "sethostname",
};

struct ctx_guard {
  scmp_filter_ctx ctx;
  ~ctx_guard() { seccomp_release(ctx); }
};

} // namespace

std::vector<sock_filter> build_seccomp(std::string &error) {
  ctx_guard g{seccomp_init(SCMP_ACT_ALLOW)};
  if (!g.ctx) {
    error = "seccomp_init failed";
    return {};
  }
  auto fail = [&](const char *what, int rc) {
    error = std::string(what) + ": " + std::strerror(-rc);
    return std::vector<sock_filter>{};
  };
  for (auto name : refused_calls) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue; // not on this architecture
    if (int rc = seccomp_rule_add(g.ctx, SCMP_ACT_ERRNO(EPERM), nr, 0); rc < 0) {
      return fail(name, rc);
    }
  }
  // The ioctl request is an int: compare the low 32 bits only, so that high bits set by the caller
  // cannot slip past the rule.
  for (unsigned long req : {static_cast<unsigned long>(TIOCSTI), static_cast<unsigned long>(TIOCLINUX)}) {
    if (int rc = seccomp_rule_add(g.ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                                  SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffUL, req));
        rc < 0) {
      return fail("ioctl rule", rc);
    }
  }
  // Socket families: AF_UNIX (1), AF_INET (2), AF_INET6 (10), AF_NETLINK (16) pass; every other
  // value, including any with high bits set, is refused.
  // (libseccomp takes one comparison per argument and rule: one rule per refused value below 17.)
  for (scmp_datum_t family = 0; family < 17; ++family) {
    if (family == AF_UNIX || family == AF_INET || family == AF_INET6 || family == AF_NETLINK) continue;
    if (int rc = seccomp_rule_add(g.ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
                                  SCMP_A0(SCMP_CMP_EQ, family));
        rc < 0) {
      return fail("socket rule", rc);
    }
  }
  if (int rc = seccomp_rule_add(g.ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
                                SCMP_A0(SCMP_CMP_GE, 17));
      rc < 0) {
    return fail("socket rule", rc);
  }
  // libseccomp 2.5 exports to a descriptor only: a memfd, read back whole.
  int fd = ::memfd_create("sluice-seccomp", MFD_CLOEXEC);
  if (fd < 0) return fail("memfd_create", -errno);
  if (int rc = seccomp_export_bpf(g.ctx, fd); rc < 0) {
    ::close(fd);
    return fail("seccomp_export_bpf", rc);
  }
  off_t size = ::lseek(fd, 0, SEEK_END);
  std::vector<sock_filter> prog(static_cast<std::size_t>(size) / sizeof(sock_filter));
  bool ok = size > 0 && ::pread(fd, prog.data(), static_cast<std::size_t>(size), 0) == size;
  ::close(fd);
  if (!ok) return fail("reading the exported filter", -EIO);
  return prog;
}

bool load_seccomp(const std::vector<sock_filter> &program, std::string &error) {
  sock_fprog prog{static_cast<unsigned short>(program.size()), const_cast<sock_filter *>(program.data())};
  if (program.empty() || ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) {
    error = std::string("PR_SET_SECCOMP: ") + std::strerror(program.empty() ? EINVAL : errno);
    return false;
  }
  return true;
}

} // namespace sluice::exec
