#include "exec/sandbox.hpp"
#include "exec/seccomp_filter.hpp"
#include "gateway/capture.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <linux/close_range.h>
#include <memory>
#include <string_view>

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <string>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace sluice::exec {
namespace {

// Signals sluice passes on to the command (the list).
const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH};

// The largest message on the control socket: sluice's files for the view (a CA certificate and a
// JVM trust store, a few KiB).
constexpr std::size_t max_message = 256 * 1024;

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

// The most descriptors one message carries: the proxy listener, two DNS sockets and two listeners
// (IPv4, IPv6) per captured port (SCM_MAX_FD is 253).
constexpr std::size_t max_fds = 3 + 2 * max_capture_ports;

// Sends a one-byte code, an optional text and descriptors on the control socket.
bool send_msg(int sock, char code, const std::string &text = {}, const std::vector<int> &fds = {}) {
  std::string payload(1, code);
  payload += text;
  iovec iov{payload.data(), payload.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> ctrl(CMSG_SPACE(sizeof(int) * max_fds));
  if (!fds.empty()) {
    if (fds.size() > max_fds) return false;
    ctrl.resize(CMSG_SPACE(sizeof(int) * fds.size()));
    msg.msg_control = ctrl.data();
    msg.msg_controllen = ctrl.size();
    cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  return ::sendmsg(sock, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(payload.size());
}

// Receives one message and the descriptors passed with it. Waits at most `timeout_ms`.
bool recv_msg(int sock, std::string &out, std::vector<int> &fds, int timeout_ms) {
  fds.clear();
  pollfd p{sock, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) <= 0) return false;
  // Not zeroed: the kernel writes only the pages a message fills (a zeroed 256 KiB buffer cost 64
  // page faults a message, a quarter of exec's start-up faults).
  std::unique_ptr<char[]> buf(new char[max_message]);
  iovec iov{buf.get(), max_message};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> ctrl(CMSG_SPACE(sizeof(int) * max_fds));
  msg.msg_control = ctrl.data();
  msg.msg_controllen = ctrl.size();
  ssize_t n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  if (n <= 0) return false;
  for (cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      const unsigned char *data = CMSG_DATA(c);
      for (std::size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, data + i * sizeof(int), sizeof(int));
        fds.push_back(fd);
      }
    }
  }
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) { // cut short: nothing of it is trusted
    for (int fd : fds) ::close(fd);
    fds.clear();
    return false;
  }
  out.assign(buf.get(), static_cast<std::size_t>(n));
  return true;
}

// No descriptor is expected: any that came anyway is closed.
bool recv_msg(int sock, std::string &out, int timeout_ms) {
  std::vector<int> fds;
  bool ok = recv_msg(sock, out, fds, timeout_ms);
  for (int fd : fds) ::close(fd);
  return ok;
}

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

// Files for the view travel as: u32 name length, name, u32 data length, data; repeated.
std::string encode_files(const std::vector<std::pair<std::string, std::string>> &files) {
  std::string out;
  auto put = [&](const std::string &s) {
    std::uint32_t n = static_cast<std::uint32_t>(s.size());
    out.append(reinterpret_cast<const char *>(&n), sizeof n);
    out += s;
  };
  for (auto &[name, data] : files) {
    put(name);
    put(data);
  }
  return out;
}

bool decode_files(std::string_view in, std::vector<std::pair<std::string, std::string>> &files) {
  auto get = [&](std::string &s) {
    std::uint32_t n;
    if (in.size() < sizeof n) return false;
    std::memcpy(&n, in.data(), sizeof n);
    in.remove_prefix(sizeof n);
    if (in.size() < n) return false;
    s.assign(in.substr(0, n));
    in.remove_prefix(n);
    return true;
  };
  while (!in.empty()) {
    std::string name, data;
    if (!get(name) || !get(data) || name.find('/') != std::string::npos || name.empty()) return false;
    files.emplace_back(std::move(name), std::move(data));
  }
  return true;
}

// Sends one request to the kernel's routing netlink and waits for its acknowledgement.
std::string netlink_request(nlmsghdr *req) {
  int nl = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (nl < 0) return std::string("netlink socket: ") + std::strerror(errno);
  req->nlmsg_flags |= NLM_F_REQUEST | NLM_F_ACK;
  req->nlmsg_seq = 1;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  std::string err;
  if (::sendto(nl, req, req->nlmsg_len, 0, reinterpret_cast<sockaddr *>(&kernel), sizeof kernel) < 0) {
    err = std::string("netlink send: ") + std::strerror(errno);
  } else {
    alignas(nlmsghdr) char answer[512];
    pollfd p{nl, POLLIN, 0};
    ssize_t n = ::poll(&p, 1, 5000) == 1 ? ::recv(nl, answer, sizeof answer, 0) : -1;
    auto *h = reinterpret_cast<nlmsghdr *>(answer);
    if (n < static_cast<ssize_t>(NLMSG_LENGTH(sizeof(nlmsgerr))) || h->nlmsg_type != NLMSG_ERROR) {
      err = "no answer from netlink";
    } else if (int e = reinterpret_cast<nlmsgerr *>(NLMSG_DATA(h))->error; e != 0) {
      err = std::strerror(-e);
    }
  }
  ::close(nl);
  return err;
}

// Appends an attribute to a netlink request whose buffer has room for it.
void add_attr(nlmsghdr *h, unsigned short type, const void *data, std::size_t len) {
  auto *attr = reinterpret_cast<rtattr *>(reinterpret_cast<char *>(h) + NLMSG_ALIGN(h->nlmsg_len));
  attr->rta_type = type;
  attr->rta_len = static_cast<unsigned short>(RTA_LENGTH(len));
  std::memcpy(RTA_DATA(attr), data, len);
  h->nlmsg_len = NLMSG_ALIGN(h->nlmsg_len) + RTA_ALIGN(attr->rta_len);
}

// Adds `local 0.0.0.0/0 dev lo` (or `::/0`) to the local routing table: every address of that
// family becomes an address of this namespace, so a connection to any of them reaches a listener
// bound to the wildcard address, and the accepted socket's local address is the one dialled.
std::string add_local_route(int family) {
  struct {
    nlmsghdr nh;
    rtmsg rt;
    alignas(NLMSG_ALIGNTO) char attrs[64];
  } req{};
  req.nh.nlmsg_len = NLMSG_LENGTH(sizeof(rtmsg));
  req.nh.nlmsg_type = RTM_NEWROUTE;
  req.nh.nlmsg_flags = NLM_F_CREATE | NLM_F_EXCL;
  req.rt.rtm_family = static_cast<unsigned char>(family);
  req.rt.rtm_table = RT_TABLE_LOCAL;
  req.rt.rtm_protocol = RTPROT_BOOT;
  req.rt.rtm_scope = RT_SCOPE_HOST;
  req.rt.rtm_type = RTN_LOCAL;
  int lo = static_cast<int>(::if_nametoindex("lo"));
  add_attr(&req.nh, RTA_OIF, &lo, sizeof lo);
  return netlink_request(&req.nh);
}

// The address on lo that getaddrinfo's AI_ADDRCONFIG looks for: glibc returns IPv4 answers only
// when some interface has an IPv4 address other than 127.0.0.1, and Node, Java and others ask with
// that flag. The last address of the synthetic pool, which the DNS responder never hands out.
std::string add_config_address() {
  struct {
    nlmsghdr nh;
    ifaddrmsg ifa;
    alignas(NLMSG_ALIGNTO) char attrs[64];
  } req{};
  req.nh.nlmsg_len = NLMSG_LENGTH(sizeof(ifaddrmsg));
  req.nh.nlmsg_type = RTM_NEWADDR;
  req.nh.nlmsg_flags = NLM_F_CREATE | NLM_F_EXCL;
  req.ifa.ifa_family = AF_INET;
  req.ifa.ifa_prefixlen = 32;
  req.ifa.ifa_scope = RT_SCOPE_HOST;
  req.ifa.ifa_index = ::if_nametoindex("lo");
  in_addr a{htonl(gateway::synthetic_names::config_address)};
  add_attr(&req.nh, IFA_LOCAL, &a, sizeof a);
  add_attr(&req.nh, IFA_ADDRESS, &a, sizeof a);
  return netlink_request(&req.nh);
}

// A TCP listener of `family` on `port` of loopback or of the wildcard address, or -1 with `err` set.
int tcp_listener(int family, bool loopback, unsigned port, int backlog, std::string &err) {
  int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd >= 0) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_storage ss{};
  socklen_t len;
  if (family == AF_INET6) {
    auto *a = reinterpret_cast<sockaddr_in6 *>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(static_cast<uint16_t>(port));
    a->sin6_addr = loopback ? in6addr_loopback : in6addr_any;
    len = sizeof *a;
    if (fd >= 0) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  } else {
    auto *a = reinterpret_cast<sockaddr_in *>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(static_cast<uint16_t>(port));
    a->sin_addr.s_addr = htonl(loopback ? INADDR_LOOPBACK : INADDR_ANY);
    len = sizeof *a;
  }
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr *>(&ss), len) != 0 || ::listen(fd, backlog) != 0) {
    err = std::string("cannot listen on ") + (loopback ? "127.0.0.1:" : "port ") + std::to_string(port) +
          ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

// Transparent capture's network: every address local, DNS on 127.0.0.1:53 (UDP and TCP), a listener
// per port and family. IPv6 is best effort: a kernel without it leaves IPv6 unreachable, as before.
std::string make_capture(const std::vector<unsigned> &ports, std::vector<int> &out) {
  if (auto e = add_local_route(AF_INET); !e.empty()) return "cannot make every IPv4 address local: " + e;
  if (auto e = add_config_address(); !e.empty()) return "cannot add an IPv4 address to lo: " + e;
  bool v6 = add_local_route(AF_INET6).empty();
  int udp = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in dns{};
  dns.sin_family = AF_INET;
  dns.sin_port = htons(53);
  dns.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (udp < 0 || ::bind(udp, reinterpret_cast<sockaddr *>(&dns), sizeof dns) != 0) {
    return std::string("cannot bind the DNS responder to 127.0.0.1:53/udp: ") + std::strerror(errno);
  }
  out.push_back(udp);
  std::string err;
  int tcp = tcp_listener(AF_INET, true, 53, 64, err);
  if (tcp < 0) return "the DNS responder (TCP): " + err;
  out.push_back(tcp);
  for (unsigned port : ports) {
    int fd = tcp_listener(AF_INET, false, port, 1024, err);
    if (fd < 0) return err;
    out.push_back(fd);
    if (v6) {
      fd = tcp_listener(AF_INET6, false, port, 1024, err);
      if (fd >= 0) out.push_back(fd);
    }
  }
  return {};
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
