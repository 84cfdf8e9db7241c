// The origin's side of a relay (relay_impl.hpp): a TCP connection to one of the judged addresses,
// libssh's client on it, the origin's host key checked (host_key.cpp), the login as the user and
// the judged command started there.
#include "gateway/ssh/relay_impl.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace sluice::gateway::ssh {
namespace {

void on_exit_status(ssh_session, ssh_channel, int status, void *u) {
  static_cast<upstream *>(u)->exit_status = status;
}

// A connected, non-blocking TCP socket to the first address that answers; -1 if none did.
int dial(const std::vector<std::string> &addresses, unsigned port, clock::time_point deadline) {
  for (const auto &a : addresses) {
    sockaddr_storage ss{};
    socklen_t len = 0;
    auto *v4 = reinterpret_cast<sockaddr_in *>(&ss);
    auto *v6 = reinterpret_cast<sockaddr_in6 *>(&ss);
    if (inet_pton(AF_INET, a.c_str(), &v4->sin_addr) == 1) {
      v4->sin_family = AF_INET;
      v4->sin_port = htons(static_cast<std::uint16_t>(port));
      len = sizeof *v4;
    } else if (inet_pton(AF_INET6, a.c_str(), &v6->sin6_addr) == 1) {
      v6->sin6_family = AF_INET6;
      v6->sin6_port = htons(static_cast<std::uint16_t>(port));
      len = sizeof *v6;
    } else {
      continue;
    }
    int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (::connect(fd, reinterpret_cast<sockaddr *>(&ss), len) != 0 && errno != EINPROGRESS) {
      ::close(fd);
      continue;
    }
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t el = sizeof err;
    if (::poll(&p, 1, ms_until(deadline)) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
    ::close(fd);
  }
  return -1;
}

} // namespace

// Dials the origin (the addresses were judged before), checks its host key, logs in as the
// user and starts the same command there.
bool relay::connect_upstream() {
  r_.decision = "error";
  const auto deadline = clock::now() + job_.connect + job_.upstream_handshake;
  up_fd_ = dial(job_.addresses, job_.port, clock::now() + job_.connect);
  if (up_fd_ < 0) return fail("ssh_connect_failed", "sluice could not reach " + job_.host);
  u_.s = ssh_new();
  bool no = false;
  int strict = 1;
  int port = static_cast<int>(job_.port);
  socket_t fd = up_fd_;
  ssh_options_set(u_.s, SSH_OPTIONS_PROCESS_CONFIG, &no); // no ~/.ssh/config, no ProxyCommand
  ssh_options_set(u_.s, SSH_OPTIONS_HOST, job_.host.c_str());
  ssh_options_set(u_.s, SSH_OPTIONS_PORT, &port);
  ssh_options_set(u_.s, SSH_OPTIONS_USER, job_.rule.user.c_str());
  ssh_options_set(u_.s, SSH_OPTIONS_SSH_DIR, "/nonexistent");
  ssh_options_set(u_.s, SSH_OPTIONS_STRICTHOSTKEYCHECK, &strict);
  set_origin_host_key_options(u_.s, job_);
  if (job_.rule.identity == "ssh-agent" && !job_.agent_socket.empty()) {
    ssh_options_set(u_.s, SSH_OPTIONS_IDENTITY_AGENT, job_.agent_socket.c_str());
  }
  ssh_options_set(u_.s, SSH_OPTIONS_FD, &fd);
  ssh_set_blocking(u_.s, 0);
  int rc = ssh_connect(u_.s);
  ::fcntl(up_fd_, F_SETFL, ::fcntl(up_fd_, F_GETFL) | O_NONBLOCK); // libssh cleared it
  while (rc == SSH_AGAIN) {
    if (!wait_sessions({u_.s}, deadline)) return fail("ssh_upstream_timeout", "the SSH server did not answer in time");
    rc = ssh_connect(u_.s);
  }
  if (rc != SSH_OK) return fail("ssh_upstream_failed", std::string("SSH with the server failed: ") + ssh_get_error(u_.s));
  // The server's key, before anything is sent in the user's name.
  std::string detail;
  if (auto why = origin_host_key_problem(u_.s, job_, detail); !why.empty()) return fail(why, detail);
  // Login as the user.
  if (job_.rule.identity == "ssh-agent") {
    if (job_.agent_socket.empty()) {
      return fail("ssh_login_failed", "SSH_AUTH_SOCK was not set when sluice started: no agent to log in with");
    }
    while ((rc = ssh_userauth_agent(u_.s, nullptr)) == SSH_AUTH_AGAIN) {
      if (!wait_sessions({u_.s}, deadline)) return fail("ssh_upstream_timeout", "login timed out");
    }
  } else {
    ssh_key key = nullptr;
    auto path = job_.rule.identity.substr(5);
    if (ssh_pki_import_privkey_file(path.c_str(), nullptr, nullptr, nullptr, &key) != SSH_OK) {
      return fail("ssh_login_failed", "cannot read the private key " + path +
                                          " (a key with a passphrase needs identity = \"ssh-agent\")");
    }
    while ((rc = ssh_userauth_publickey(u_.s, nullptr, key)) == SSH_AUTH_AGAIN) {
      if (!wait_sessions({u_.s}, deadline)) break;
    }
    ssh_key_free(key);
  }
  if (rc != SSH_AUTH_SUCCESS) return fail("ssh_login_failed", "the server refused the login");
  u_.ch = ssh_channel_new(u_.s);
  u_.ccb.userdata = &u_;
  u_.ccb.channel_exit_status_function = on_exit_status;
  ssh_callbacks_init(&u_.ccb);
  ssh_set_channel_callbacks(u_.ch, &u_.ccb);
  while ((rc = ssh_channel_open_session(u_.ch)) == SSH_AGAIN) {
    if (!wait_sessions({u_.s}, deadline)) return fail("ssh_upstream_timeout", "opening a channel timed out");
  }
  if (rc != SSH_OK) return fail("ssh_upstream_failed", "the server refused a session channel");
  if (!d_.git_protocol.empty()) {
    while ((rc = ssh_channel_request_env(u_.ch, "GIT_PROTOCOL", d_.git_protocol.c_str())) == SSH_AGAIN) {
      if (!wait_sessions({u_.s}, deadline)) break;
    }
    // A server that refuses it speaks protocol v0: not an error.
  }
  // The command as parsed, quoted again: what reaches the server is what was judged.
  std::string command = cmd_.program + " '";
  for (char c : cmd_.path) {
    if (c == '\'') {
      command += "'\\''";
    } else {
      command += c;
    }
  }
  command += "'";
  while ((rc = ssh_channel_request_exec(u_.ch, command.c_str())) == SSH_AGAIN) {
    if (!wait_sessions({u_.s}, deadline)) return fail("ssh_upstream_timeout", "the command request timed out");
  }
  if (rc != SSH_OK) return fail("ssh_upstream_failed", "the server refused the command");
  ssh_event_add_session(ev_, u_.s);
  return true;
}

} // namespace sluice::gateway::ssh
