#pragma once
#include <linux/filter.h>
#include <string>
#include <vector>

namespace sluice::exec {

// Loads the command's seccomp filter into the calling process (inherited by its children): no
// terminal injection (TIOCSTI, TIOCLINUX), sockets only of the families AF_UNIX, AF_INET, AF_INET6
// and AF_NETLINK (so no AF_VSOCK, AF_PACKET, ...), no io_uring (its sockets would pass the socket
// rule), and none of the calls a contained command never needs: keyrings, bpf, userfaultfd,
// perf_event_open, kexec, modules, mounts, swap, reboot. Refused calls fail with EPERM (sockets:
// EAFNOSUPPORT), nothing is killed. Unless `nested_userns` (the trusted policy's opt-out for
// commands that nest a sandbox of their own), no new namespaces: unshare and clone with a
// CLONE_NEW* flag fail with EPERM, and clone3 with ENOSYS (libc then falls back to clone).
// Returns the BPF program; empty with `error` set on failure.
std::vector<sock_filter> build_seccomp(bool nested_userns, std::string &error);

// Loads a program from build_seccomp into the calling process (which holds CAP_SYS_ADMIN in its user
// namespace or has no_new_privs set); inherited by its children. False with `error` set on failure.
bool load_seccomp(const std::vector<sock_filter> &program, std::string &error);

} // namespace sluice::exec
