// Every wait of a relay (relay_impl.hpp): a poll() on the sessions' sockets with a deadline, so no
// peer, however slow or silent, holds a relay's thread past its timeouts.
#include "gateway/ssh/relay_impl.hpp"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <climits>

namespace sluice::gateway::ssh {

int ms_until(clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, INT_MAX));
}

bool wait_sessions(std::initializer_list<ssh_session> sessions, clock::time_point deadline) {
  pollfd fds[2];
  nfds_t n = 0;
  for (auto s : sessions) {
    if (!s || n == 2) continue;
    int fd = ssh_get_fd(s);
    if (fd < 0) continue;
    short events = POLLIN;
    if (ssh_get_poll_flags(s) & SSH_WRITE_PENDING) events |= POLLOUT;
    fds[n++] = {fd, events, 0};
  }
  if (n == 0) return false;
  for (;;) {
    // Checked before the poll too: a socket that stays readable (a peer's EOF that libssh has not
    // acted on) would otherwise keep a caller's loop going past its deadline.
    if (clock::now() >= deadline) return false;
    int left = ms_until(deadline);
    int rc = ::poll(fds, n, left);
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return false;
  }
}

bool pump(ssh_event ev) {
  for (int i = 0; i < 256; ++i) {
    int rc = ssh_event_dopoll(ev, 0);
    if (rc == SSH_ERROR) return false;
    if (rc == SSH_AGAIN) break;
  }
  return true;
}

} // namespace sluice::gateway::ssh
