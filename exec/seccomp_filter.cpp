#include "exec/seccomp_filter.hpp"

#include <cerrno>
#include <cstring>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

std::vector<sock_filter> build_seccomp(bool nested_userns, std::string &error) {
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
  // No set-user-ID or set-group-ID bit, on any file the command makes or changes: the owner needs
  // no capability to set them, so a root caller's command could leave a setuid-root copy of a shell
  // in the workspace for anyone to run after it ends (inside, the view's mounts are nosuid). The
  // chmod family and the calls that create a file with a mode. seccomp sees the mode, not the file
  // type, so a directory cannot be made setgid either; one that inherits the bit from its parent
  // (the kernel's doing, no call sets it) keeps it, which is harmless: it sets the group of new
  // files and grants nothing.
  struct mode_call {
    const char *name;
    long fallback; // the number where libseccomp is older than the call (fchmodat2, Linux 6.6)
    unsigned arg;
  };
  const mode_call mode_calls[] = {{"chmod", -1, 1},  {"fchmod", -1, 1}, {"fchmodat", -1, 2},
                                  {"fchmodat2", 452, 2}, {"creat", -1, 1}, {"open", -1, 2},
                                  {"openat", -1, 3}, {"mknod", -1, 1}, {"mknodat", -1, 2}};
  for (const auto &c : mode_calls) {
    int nr = seccomp_syscall_resolve_name(c.name);
    if (nr == __NR_SCMP_ERROR || nr < 0) {
      if (c.fallback < 0) continue; // not on this architecture
      nr = static_cast<int>(c.fallback);
    }
    for (scmp_datum_t bit : {scmp_datum_t{S_ISUID}, scmp_datum_t{S_ISGID}}) {
      scmp_arg_cmp cmp{c.arg, SCMP_CMP_MASKED_EQ, bit, bit};
      if (int rc = seccomp_rule_add_array(g.ctx, SCMP_ACT_ERRNO(EPERM), nr, 1, &cmp); rc < 0) {
        return fail(c.name, rc);
      }
    }
  }
  // openat2 carries its mode in a structure seccomp cannot read: callers fall back to openat
  // when the kernel says it has no such call (as on kernels before 5.6).
  if (int nr = seccomp_syscall_resolve_name("openat2"); nr != __NR_SCMP_ERROR && nr >= 0) {
    if (int rc = seccomp_rule_add(g.ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0); rc < 0) return fail("openat2", rc);
  } else if (int rc = seccomp_rule_add(g.ctx, SCMP_ACT_ERRNO(ENOSYS), 437, 0); rc < 0) {
    return fail("openat2", rc);
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
  if (!nested_userns) {
    // No new namespaces from inside, user namespaces above all: a process that makes one holds
    // every capability in it, and from there a network namespace with CAP_NET_ADMIN over it
    // (nf_tables, traffic control: where most recent kernel privilege escalations go through).
    // Without a new user namespace the other flags need capabilities the command lacks; they are
    // refused here too, so a later change to the capabilities cannot reopen them. One rule a bit:
    // seccomp compares masked equality only. clone's low byte is the exit signal, where
    // CLONE_NEWTIME's bit (0x80) sits, so clone leaves that bit out; unshare takes it.
    const scmp_datum_t ns_flags[] = {CLONE_NEWUSER, CLONE_NEWNS,  CLONE_NEWNET,    CLONE_NEWPID,
                                     CLONE_NEWIPC,  CLONE_NEWUTS, CLONE_NEWCGROUP, CLONE_NEWTIME};
    for (scmp_datum_t bit : ns_flags) {
      scmp_arg_cmp cmp{0, SCMP_CMP_MASKED_EQ, bit, bit};
      if (int rc = seccomp_rule_add_array(g.ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(unshare), 1, &cmp); rc < 0) {
        return fail("unshare rule", rc);
      }
      if (bit == CLONE_NEWTIME) continue;
      if (int rc = seccomp_rule_add_array(g.ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1, &cmp); rc < 0) {
        return fail("clone rule", rc);
      }
    }
    // clone3 passes its flags in a structure seccomp cannot read: ENOSYS makes libc fall back to
    // clone, whose flags the rules above see (Docker's default profile does the same).
    int nr = seccomp_syscall_resolve_name("clone3");
    if (nr == __NR_SCMP_ERROR || nr < 0) nr = 435;
    if (int rc = seccomp_rule_add(g.ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0); rc < 0) return fail("clone3", rc);
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
