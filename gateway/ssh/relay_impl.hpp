#pragma once
// The parts of one Git-over-SSH relay (relay.hpp), shared by this folder's files. One relay is one
// object, its steps in a file per side it faces: downstream.cpp (libssh's server toward the
// sandbox), upstream.cpp (libssh's client toward the origin; host_key.cpp checks the origin's key),
// forward.cpp (the bytes between the two, and the idle watchdog), relay.cpp (the steps in order,
// the command's judgement, refusals and teardown). poll.cpp: every wait, each with a deadline.
#include "gateway/ssh/relay.hpp"

#include <libssh/callbacks.h>
#include <libssh/libssh.h>
#include <libssh/server.h>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace sluice::gateway::ssh {

using clock = std::chrono::steady_clock;

// What a client may leave unread in a channel past the window it was given (libssh takes data
// beyond the window and keeps it): past this the relay ends.
constexpr int max_channel_buffer = 4 * 1024 * 1024;
constexpr std::size_t chunk = 32 * 1024;

// poll.cpp
int ms_until(clock::time_point deadline);
// Waits until one of the sessions' sockets is ready as libssh wants it (always readable; writable
// while its output is pending), or the deadline. False when the deadline passed.
bool wait_sessions(std::initializer_list<ssh_session> sessions, clock::time_point deadline);
// Lets libssh read and dispatch what arrived (bounded rounds: each reads at most 4 KiB).
bool pump(ssh_event ev);

// The sandbox's side (downstream.cpp fills it from libssh's server callbacks).
struct downstream {
  ssh_session s = nullptr;
  ssh_channel ch = nullptr;
  ssh_server_callbacks_struct scb{};
  ssh_channel_callbacks_struct ccb{};
  int auth_tries = 0;
  bool requested = false; // exec, shell or subsystem: the one request a channel gets here
  bool authenticated = false;
  bool forwarding = false; // asked for a forwarding (-L, -R, -W, X11, agent): each refused
  bool pty = false;        // asked for a pty (refused; `ssh -t` then hangs up at once)
  std::string kind;       // "exec", "shell", "subsystem"
  std::string command;
  std::string user;
  std::string git_protocol;
};

// The origin's side (upstream.cpp).
struct upstream {
  ssh_session s = nullptr;
  ssh_channel ch = nullptr;
  ssh_channel_callbacks_struct ccb{};
  int exit_status = -1;
};

// The origin's host key (host_key.cpp): which of its keys to ask for and where the known ones are
// listed, set before the key exchange; after it, empty when the key is the one pinned or listed,
// else the reason, with `detail` the sentence that says what differs.
void set_origin_host_key_options(ssh_session s, const ssh_job &job);
std::string_view origin_host_key_problem(ssh_session s, const ssh_job &job, std::string &detail);

// The text a refused client prints: what was refused, why, and what would allow it.
std::string refusal_text(const ssh_job &job, const ssh_report &r, std::string_view detail = {});

class relay {
public:
  relay(ssh_job &job, ssh_report &r) : job_(job), r_(r) {}
  ~relay() { teardown(); }
  relay(const relay &) = delete;
  relay &operator=(const relay &) = delete;

  void run(); // relay.cpp

private:
  bool serve_downstream(); // downstream.cpp
  bool judge();            // relay.cpp
  bool connect_upstream(); // upstream.cpp

  // forward.cpp
  // One direction's bytes in flight: read only when the last piece has gone on.
  struct pipe {
    std::string data;
    std::size_t at = 0;
    bool eof = false; // the source's end was read
    bool done = false; // and passed on
  };
  bool move(ssh_channel src, ssh_session dst_s, ssh_channel dst, int is_stderr, bool to_stderr, pipe &p,
            std::uint64_t &bytes);
  void forward();

  // relay.cpp
  void finish_channel(int status, const std::string &text, bool git_error = false);
  void refuse(bool git) { finish_channel(1, refusal_text(job_, r_), git); }
  bool fail(std::string_view reason, const std::string &detail);
  void teardown();

  ssh_job &job_;
  ssh_report &r_;
  ssh_bind bind_ = nullptr;
  ssh_event ev_ = nullptr;
  downstream d_;
  upstream u_;
  int up_fd_ = -1;
  filters::git_ssh_command cmd_;
  bool failed_ = false;
  int pump_failures_ = 0;
};

} // namespace sluice::gateway::ssh
