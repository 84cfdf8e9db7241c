// The bytes of an allowed command (relay_impl.hpp): the client's to the origin, the origin's
// stdout and stderr back, each as fast as the other side's window takes them, until the command
// ends, a side goes, or nothing moves for the idle deadline.
#include "gateway/ssh/relay_impl.hpp"

#include <algorithm>

namespace sluice::gateway::ssh {

// Moves what can move from `src` (stream `is_stderr`) to `dst`, honouring dst's window and
// output; true when something moved.
bool relay::move(ssh_channel src, ssh_session dst_s, ssh_channel dst, int is_stderr, bool to_stderr, pipe &p,
          std::uint64_t &bytes) {
  bool moved = false;
  for (int round = 0; round < 64; ++round) {
    if (p.at == p.data.size() && !p.eof) {
      p.data.resize(chunk);
      p.at = 0;
      int n = ssh_channel_read_nonblocking(src, p.data.data(), chunk, is_stderr);
      if (n == SSH_EOF) {
        p.data.clear();
        p.eof = true;
      } else if (n == SSH_ERROR) {
        p.data.clear();
        p.eof = true;
        failed_ = true;
      } else {
        p.data.resize(static_cast<std::size_t>(std::max(n, 0)));
        if (n == 0) break;
      }
    }
    if (p.at < p.data.size()) {
      if (ssh_get_status(dst_s) & SSH_WRITE_PENDING) break;
      auto window = ssh_channel_window_size(dst);
      if (window == 0) break;
      auto len = static_cast<std::uint32_t>(std::min<std::size_t>(p.data.size() - p.at, window));
      int w = to_stderr ? ssh_channel_write_stderr(dst, p.data.data() + p.at, len)
                        : ssh_channel_write(dst, p.data.data() + p.at, len);
      if (w == SSH_ERROR) {
        failed_ = true;
        break;
      }
      if (w == 0) break;
      p.at += static_cast<std::size_t>(w);
      bytes += static_cast<std::uint64_t>(w);
      moved = true;
      continue;
    }
    break;
  }
  return moved;
}

// The longest a relay sleeps before it looks at both sessions again, whatever their sockets say.
constexpr auto recheck = std::chrono::milliseconds(250);

// Relays the command's bytes until the origin's channel ends, the client goes, or nothing moves
// for the idle deadline; then passes on the exit status.
void relay::forward() {
  r_.decision = "allow";
  r_.reason = "allowed";
  pipe to_origin, out, err;
  std::uint64_t stderr_bytes = 0;
  auto quiet_since = clock::now();
  for (;;) {
    bool moved = move(d_.ch, u_.s, u_.ch, 0, false, to_origin, r_.bytes_in);
    if (to_origin.eof && !to_origin.done && to_origin.at == to_origin.data.size()) {
      ssh_channel_send_eof(u_.ch); // the client finished sending (a push's pack, say)
      to_origin.done = true;
    }
    moved |= move(u_.ch, d_.s, d_.ch, 0, false, out, r_.bytes_out);
    moved |= move(u_.ch, d_.s, d_.ch, 1, true, err, stderr_bytes);
    if (moved) quiet_since = clock::now();
    if (failed_) {
      r_.decision = "error";
      r_.reason = "ssh_relay_failed";
      break;
    }
    if (ssh_channel_poll(d_.ch, 0) > max_channel_buffer) { // a client that ignores its window
      r_.decision = "error";
      r_.reason = "ssh_window_exceeded";
      break;
    }
    bool origin_done = out.eof && err.eof && out.at == out.data.size() && err.at == err.data.size();
    if (origin_done && (u_.exit_status >= 0 || ssh_channel_is_closed(u_.ch))) break;
    if (origin_done && clock::now() - quiet_since > std::chrono::seconds(2)) break; // no exit status came
    if (ssh_channel_is_closed(d_.ch) || (ssh_get_status(d_.s) & (SSH_CLOSED | SSH_CLOSED_ERROR))) {
      r_.decision = "error";
      r_.reason = "client_aborted";
      break;
    }
    if (ssh_get_status(u_.s) & (SSH_CLOSED | SSH_CLOSED_ERROR) && !origin_done) {
      r_.decision = "error";
      r_.reason = "ssh_upstream_closed";
      break;
    }
    auto deadline = quiet_since + job_.idle;
    if (origin_done) deadline = std::min(deadline, quiet_since + std::chrono::seconds(2));
    // Sleep only when nothing moved: bytes may wait in libssh's channel buffers with nothing
    // new on either socket (a peer blocked on a window that only their moving opens). And never
    // longer than recheck: libssh keeps state of its own (packets read but not yet handled, a
    // window to announce) that no socket event may follow; a relay found with both peers waiting
    // and both sockets quiet (a CI run's `git ls-remote`, 90 s) is looked at again each recheck.
    if (!moved) {
      if (!wait_sessions({d_.s, u_.s}, std::min(deadline, clock::now() + recheck)) && clock::now() >= deadline) {
        if (!origin_done) {
          r_.decision = "error";
          r_.reason = "ssh_idle_timeout";
        }
        break;
      }
    }
    if (!pump(ev_) && !origin_done) {
      // One side's socket ended: what is buffered still moves on the next rounds; a second
      // failure ends the relay.
      if (++pump_failures_ > 3) {
        r_.decision = "error";
        r_.reason = "ssh_relay_failed";
        break;
      }
    }
  }
  r_.exit_status = u_.exit_status;
  finish_channel(r_.decision == "allow" ? std::max(u_.exit_status, 0) : 255, {});
}

} // namespace sluice::gateway::ssh
