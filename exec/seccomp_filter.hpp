#pragma once
#include <string>

namespace sluice::exec {

// Loads the command's seccomp filter into the calling process (inherited by its children): no
// terminal injection (TIOCSTI, TIOCLINUX), sockets only of the families AF_UNIX, AF_INET, AF_INET6
// and AF_NETLINK (so no AF_VSOCK, AF_PACKET, ...), no io_uring (its sockets would pass the socket
// rule), and none of the calls a contained command never needs: keyrings, bpf, userfaultfd,
// perf_event_open, kexec, modules, mounts, swap, reboot. Refused calls fail with EPERM (sockets:
// EAFNOSUPPORT), nothing is killed. Returns false with `error` set when the filter cannot be loaded.
bool apply_seccomp(std::string &error);

} // namespace sluice::exec
