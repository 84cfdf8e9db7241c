#include "gateway/peer_uid.hpp"

#include <cstring>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace sluice::gateway {
namespace {

void put_address(const net::ip::address &a, __be32 out[4]) {
  std::memset(out, 0, 16);
  if (a.is_v4()) {
    auto b = a.to_v4().to_bytes();
    std::memcpy(out, b.data(), 4);
  } else {
    auto b = a.to_v6().to_bytes();
    std::memcpy(out, b.data(), 16);
  }
}

} // namespace

std::optional<unsigned> loopback_peer_uid(const tcp::socket &accepted) {
  error_code ec;
  auto local = accepted.local_endpoint(ec);
  if (ec) return std::nullopt;
  auto remote = accepted.remote_endpoint(ec);
  if (ec) return std::nullopt; // the kernel knows only this machine's sockets: a remote peer has none
  struct {
    nlmsghdr nh;
    inet_diag_req_v2 req;
  } msg{};
  msg.nh.nlmsg_len = sizeof msg;
  msg.nh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.nh.nlmsg_flags = NLM_F_REQUEST;
  msg.req.sdiag_family = static_cast<__u8>(remote.address().is_v4() ? AF_INET : AF_INET6);
  msg.req.sdiag_protocol = IPPROTO_TCP;
  msg.req.idiag_states = ~0u;
  // The client's socket: its source is our peer, its destination is us.
  msg.req.id.idiag_sport = htons(remote.port());
  msg.req.id.idiag_dport = htons(local.port());
  put_address(remote.address(), msg.req.id.idiag_src);
  put_address(local.address(), msg.req.id.idiag_dst);
  msg.req.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  msg.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;

  int nl = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (nl < 0) return std::nullopt;
  std::optional<unsigned> uid;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(nl, &msg, sizeof msg, 0, reinterpret_cast<sockaddr *>(&kernel), sizeof kernel) ==
      static_cast<ssize_t>(sizeof msg)) {
    alignas(nlmsghdr) char answer[1024];
    pollfd p{nl, POLLIN, 0};
    ssize_t n = ::poll(&p, 1, 1000) == 1 ? ::recv(nl, answer, sizeof answer, 0) : -1;
    auto *h = reinterpret_cast<nlmsghdr *>(answer);
    if (n >= static_cast<ssize_t>(NLMSG_LENGTH(sizeof(inet_diag_msg))) && h->nlmsg_type == SOCK_DIAG_BY_FAMILY) {
      auto *d = reinterpret_cast<inet_diag_msg *>(NLMSG_DATA(h));
      uid = d->idiag_uid;
    }
  }
  ::close(nl);
  return uid;
}

} // namespace sluice::gateway
