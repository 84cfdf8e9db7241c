#include "exec/sandbox_impl.hpp"

#include <cstdint>
#include <cstring>
#include <memory>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

// The control socket between sluice and the sandbox's init (SOCK_SEQPACKET): one message a code
// byte and a text, with descriptors by SCM_RIGHTS.
namespace sluice::exec::detail {

// Sends a one-byte code, an optional text and descriptors on the control socket.
bool send_msg(int sock, char code, const std::string &text, const std::vector<int> &fds) {
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

} // namespace sluice::exec::detail
