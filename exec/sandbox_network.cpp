#include "exec/sandbox_impl.hpp"
#include "gateway/capture.hpp"

#include <cerrno>
#include <cstring>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

// The sandbox's network, made by init inside the network namespace: TCP listeners and, for
// transparent capture, the routes that make every address local and the DNS responder's sockets.
namespace sluice::exec::detail {
namespace {

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

} // namespace

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

} // namespace sluice::exec::detail
