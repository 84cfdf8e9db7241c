#include "exec/seccomp_filter.hpp"

#include <cerrno>
#include <cstring>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

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

bool apply_seccomp(std::string &error) {
  ctx_guard g{seccomp_init(SCMP_ACT_ALLOW)};
  if (!g.ctx) {
    error = "seccomp_init failed";
    return false;
  }
  auto fail = [&](const char *what, int rc) {
    error = std::string(what) + ": " + std::strerror(-rc);
    return false;
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
  if (int rc = seccomp_load(g.ctx); rc < 0) return fail("seccomp_load", rc);
  return true;
}

} // namespace sluice::exec
