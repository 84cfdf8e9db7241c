// One Git-over-SSH relay (ssh_relay.hpp): libssh's server toward the sandbox, its client toward
// the origin, non-blocking, every wait a poll() with a deadline.
#include "gateway/ssh_relay.hpp"

#include <libssh/callbacks.h>
#include <libssh/libssh.h>
#include <libssh/server.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <stdexcept>

namespace sluice::gateway {
namespace {

using clock = std::chrono::steady_clock;

// What a client may leave unread in a channel past the window it was given (libssh takes data
// beyond the window and keeps it): past this the relay ends.
constexpr int max_channel_buffer = 4 * 1024 * 1024;
constexpr std::size_t chunk = 32 * 1024;

int ms_until(clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, INT_MAX));
}

// Waits until one of the sessions' sockets is ready as libssh wants it (always readable; writable
// while its output is pending), or the deadline. False when the deadline passed.
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

// Lets libssh read and dispatch what arrived (bounded rounds: each reads at most 4 KiB).
bool pump(ssh_event ev) {
  for (int i = 0; i < 256; ++i) {
    int rc = ssh_event_dopoll(ev, 0);
    if (rc == SSH_ERROR) return false;
    if (rc == SSH_AGAIN) break;
  }
  return true;
}

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

downstream &down_of(void *u) { return *static_cast<downstream *>(u); }

int on_auth_none(ssh_session, const char *user, void *u) {
  auto &d = down_of(u);
  // Only the sandbox reaches this server (the capture's socket is its own): being here is the
  // credential. A client that keeps trying is cut off.
  if (++d.auth_tries > 8) return SSH_AUTH_DENIED;
  d.user = user ? user : "";
  d.authenticated = true;
  return SSH_AUTH_SUCCESS;
}

int on_auth_pubkey(ssh_session, const char *user, ssh_key, char state, void *u) {
  auto &d = down_of(u);
  if (++d.auth_tries > 8) return SSH_AUTH_DENIED;
  if (state == SSH_PUBLICKEY_STATE_NONE) return SSH_AUTH_SUCCESS; // "would this key do?": yes
  if (state != SSH_PUBLICKEY_STATE_VALID) return SSH_AUTH_DENIED; // a signature that does not verify
  d.user = user ? user : "";
  d.authenticated = true;
  return SSH_AUTH_SUCCESS;
}

// GSSAPI is refused before libssh would call into Kerberos for an untrusted client.
ssh_string no_gssapi(ssh_session, const char *, int, ssh_string *, void *) { return nullptr; }

ssh_channel on_channel_open(ssh_session s, void *u) {
  auto &d = down_of(u);
  if (d.ch) return nullptr; // one session channel per connection
  d.ch = ssh_channel_new(s);
  if (d.ch) ssh_set_channel_callbacks(d.ch, &d.ccb);
  return d.ch;
}

int on_exec(ssh_session, ssh_channel, const char *command, void *u) {
  auto &d = down_of(u);
  if (d.requested) return 1;
  d.requested = true;
  d.kind = "exec";
  d.command = command ? command : "";
  return 0; // accepted: a refusal is then written on the channel, where the client prints it
}

int on_shell(ssh_session, ssh_channel, void *u) {
  auto &d = down_of(u);
  if (d.requested) return 1;
  d.requested = true;
  d.kind = "shell";
  d.command = "shell";
  return 0;
}

int on_subsystem(ssh_session, ssh_channel, const char *name, void *u) {
  auto &d = down_of(u);
  if (d.requested) return 1;
  d.requested = true;
  d.kind = "subsystem";
  d.command = std::string("subsystem ") + (name ? name : "");
  return 0;
}

int on_pty(ssh_session, ssh_channel, const char *, int, int, int, int, void *u) {
  down_of(u).pty = true;
  return 1;
}

int on_env(ssh_session, ssh_channel, const char *name, const char *value, void *u) {
  auto &d = down_of(u);
  if (name && value && std::string_view(name) == "GIT_PROTOCOL" && filters::is_git_protocol_value(value)) {
    d.git_protocol = value;
    return 0;
  }
  return 1;
}

// What no callback above took: forwarding in either direction, X11 and agent channels, other
// global requests. All get libssh's default answer, a refusal; forwarding is remembered so that a
// connection that asked for nothing else is logged for what it tried.
int on_message(ssh_session, ssh_message msg, void *u) {
  auto &d = down_of(u);
  int type = ssh_message_type(msg), sub = ssh_message_subtype(msg);
  if ((type == SSH_REQUEST_CHANNEL_OPEN && sub != SSH_CHANNEL_SESSION) ||
      (type == SSH_REQUEST_GLOBAL && (sub == SSH_GLOBAL_REQUEST_TCPIP_FORWARD)) ||
      (type == SSH_REQUEST_CHANNEL && sub == SSH_CHANNEL_REQUEST_X11)) {
    d.forwarding = true;
  }
  return 1; // not handled here: refused
}

struct upstream {
  ssh_session s = nullptr;
  ssh_channel ch = nullptr;
  ssh_channel_callbacks_struct ccb{};
  int exit_status = -1;
};

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

// The text a refused client prints: what was refused, why, and what would allow it.
std::string refusal_text(const ssh_job &job, const ssh_report &r, std::string_view detail = {}) {
  std::string what = r.command.empty() ? std::string("the connection") : "'" + r.command + "'";
  std::string text = "sluice: refused " + what + " on " + job.host + " over SSH: " + std::string(r.reason);
  if (!r.rule.empty()) text += " (rule " + r.rule + ")";
  text += "\n";
  if (!detail.empty()) text += std::string(detail) + "\n";
  if (r.reason == "ssh_command_refused") {
    text += "sluice carries Git over SSH only (fetch, clone, ls-remote, archive, and push under publish): "
            "no shell, other command, sftp or scp.\n";
  } else if (r.reason == "git_push_refused") {
    text += "The network-read profile fetches only. Pushing needs the publish profile with "
            "--confirm-external-side-effects.\n";
  } else if (r.reason == "ssh_repository_not_allowed") {
    text += "Add the repository to the paths of the skill's ssh entry for " + job.host + " in the trusted policy.\n";
  } else if (r.reason == "ssh_host_key_unknown" || r.reason == "ssh_host_key_changed") {
    text += "Check the server's key and add it to your known_hosts (outside the sandbox), or pin it with "
            "host_key in the skill's ssh entry.\n";
  } else if (r.reason == "ssh_login_failed") {
    text += "sluice logs in as " + job.rule.user + " with " +
            (job.rule.identity == "ssh-agent" ? std::string("the ssh-agent of the caller (SSH_AUTH_SOCK)")
                                              : "the key " + job.rule.identity.substr(5)) +
            "; check that it holds a key the server accepts.\n";
  }
  return text;
}

class relay {
public:
  relay(ssh_job &job, ssh_report &r) : job_(job), r_(r) {}
  ~relay() { teardown(); }

  void run() {
    if (!serve_downstream()) return;
    if (!judge()) return;
    if (!job_.upstream_reason.empty()) {
      fail(job_.upstream_reason, job_.upstream_text);
      r_.decision = job_.upstream_decision;
      return;
    }
    if (!connect_upstream()) return;
    forward();
  }

private:
  // Key exchange, login and the channel's one request, within the handshake deadline.
  bool serve_downstream() {
    ssh_key key = nullptr;
    if (ssh_pki_import_privkey_base64(job_.host_key_private.c_str(), nullptr, nullptr, nullptr, &key) != SSH_OK) {
      ::close(job_.fd);
      r_.reason = "ssh_host_key_missing";
      return false;
    }
    bind_ = ssh_bind_new();
    bool no = false;
    ssh_bind_options_set(bind_, SSH_BIND_OPTIONS_PROCESS_CONFIG, &no);
    ssh_bind_options_set(bind_, SSH_BIND_OPTIONS_IMPORT_KEY, key); // the bind owns it now
    ssh_bind_options_set(bind_, SSH_BIND_OPTIONS_KEY_EXCHANGE, "curve25519-sha256,curve25519-sha256@libssh.org");
    ssh_bind_options_set(bind_, SSH_BIND_OPTIONS_HOSTKEY_ALGORITHMS, "ssh-ed25519");
    d_.s = ssh_new();
    if (ssh_bind_accept_fd(bind_, d_.s, job_.fd) != SSH_OK) {
      ::close(job_.fd);
      return false;
    }
    ssh_set_blocking(d_.s, 0);
    d_.scb.userdata = &d_;
    d_.scb.auth_none_function = on_auth_none;
    d_.scb.auth_pubkey_function = on_auth_pubkey;
    d_.scb.gssapi_select_oid_function = no_gssapi;
    d_.scb.channel_open_request_session_function = on_channel_open;
    ssh_callbacks_init(&d_.scb);
    ssh_set_server_callbacks(d_.s, &d_.scb);
    ssh_set_message_callback(d_.s, on_message, &d_);
    d_.ccb.userdata = &d_;
    d_.ccb.channel_exec_request_function = on_exec;
    d_.ccb.channel_shell_request_function = on_shell;
    d_.ccb.channel_subsystem_request_function = on_subsystem;
    d_.ccb.channel_pty_request_function = on_pty;
    d_.ccb.channel_env_request_function = on_env;
    ssh_callbacks_init(&d_.ccb);
    ssh_set_auth_methods(d_.s, SSH_AUTH_METHOD_NONE | SSH_AUTH_METHOD_PUBLICKEY);
    const auto deadline = clock::now() + job_.handshake;
    int rc;
    while ((rc = ssh_handle_key_exchange(d_.s)) == SSH_AGAIN) {
      if (!wait_sessions({d_.s}, deadline)) {
        r_.reason = "ssh_handshake_timeout";
        return false;
      }
    }
    if (rc != SSH_OK) return false;
    ev_ = ssh_event_new();
    ssh_event_add_session(ev_, d_.s);
    while (!d_.requested) {
      if (!wait_sessions({d_.s}, deadline)) {
        r_.reason = d_.forwarding ? "ssh_forwarding_refused" : "ssh_handshake_timeout";
        if (d_.forwarding) {
          r_.decision = "deny";
          r_.method = "forward";
        }
        return false;
      }
      if (!pump(ev_) || (ssh_get_status(d_.s) & (SSH_CLOSED | SSH_CLOSED_ERROR))) {
        r_.reason = d_.forwarding ? "ssh_forwarding_refused" : d_.authenticated ? "ssh_no_command" : "ssh_handshake_failed";
        if (d_.forwarding) {
          r_.decision = "deny";
          r_.method = "forward";
        } else if (d_.pty) {
          // OpenSSH takes a refused pty it was told to get (-t) as fatal, and may hang up before
          // its shell or command request left: the pty was what was refused.
          r_.decision = "deny";
          r_.reason = "ssh_command_refused";
          r_.method = "pty";
          r_.command = "pty";
        }
        return false;
      }
    }
    r_.user = d_.user;
    r_.command = d_.command;
    r_.method = d_.kind;
    // The rest of the request's packets (a GIT_PROTOCOL env request comes before the exec).
    pump(ev_);
    return true;
  }

  // The command, judged: Git's three programs only, the host's rule, the profile.
  bool judge() {
    r_.decision = "deny";
    if (d_.kind != "exec") {
      r_.reason = "ssh_command_refused";
      refuse(false);
      return false;
    }
    auto why = filters::parse_git_ssh_command(d_.command, cmd_);
    if (!why.empty()) {
      r_.reason = why;
      refuse(false);
      return false;
    }
    r_.repository = cmd_.repository;
    r_.method = cmd_.program;
    auto dec = job_.policy->decide_ssh(job_.host, job_.port, cmd_.service, cmd_.repository);
    r_.rule = dec.rule;
    if (!dec.allowed) {
      r_.reason = dec.reason;
      refuse(true);
      return false;
    }
    return true;
  }

  // Dials the origin (the addresses were judged before), checks its host key, logs in as the
  // user and starts the same command there.
  bool connect_upstream() {
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
    const bool pinned = !job_.rule.host_key.empty();
    auto files = job_.known_hosts;
    ssh_options_set(u_.s, SSH_OPTIONS_KNOWNHOSTS, pinned || files.empty() ? "/dev/null" : files[0].c_str());
    ssh_options_set(u_.s, SSH_OPTIONS_GLOBAL_KNOWNHOSTS, pinned || files.size() < 2 ? "/dev/null" : files[1].c_str());
    if (pinned) {
      // Only the pinned key's algorithms are offered, so the server shows that key. An RSA key
      // signs with SHA-2 (servers refuse ssh-rsa's SHA-1 signatures).
      auto type = job_.rule.host_key.substr(0, job_.rule.host_key.find(' '));
      if (type == "ssh-rsa") type = "rsa-sha2-512,rsa-sha2-256";
      ssh_options_set(u_.s, SSH_OPTIONS_HOSTKEYS, type.c_str());
    }
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
    if (pinned) {
      auto b64 = job_.rule.host_key.substr(job_.rule.host_key.find(' ') + 1);
      b64 = b64.substr(0, b64.find(' '));
      auto type = ssh_key_type_from_name(job_.rule.host_key.substr(0, job_.rule.host_key.find(' ')).c_str());
      ssh_key want = nullptr, got = nullptr;
      bool same = ssh_pki_import_pubkey_base64(b64.c_str(), type, &want) == SSH_OK &&
                  ssh_get_server_publickey(u_.s, &got) == SSH_OK && ssh_key_cmp(want, got, SSH_KEY_CMP_PUBLIC) == 0;
      ssh_key_free(want);
      ssh_key_free(got);
      if (!same) return fail("ssh_host_key_changed", "the server's host key is not the one host_key pins");
    } else {
      auto known = ssh_session_is_known_server(u_.s);
      if (known == SSH_KNOWN_HOSTS_CHANGED || known == SSH_KNOWN_HOSTS_OTHER) {
        return fail("ssh_host_key_changed", "the server's host key differs from the one in your known_hosts");
      }
      if (known != SSH_KNOWN_HOSTS_OK) {
        return fail("ssh_host_key_unknown", "your known_hosts does not list " + job_.host + "'s host key");
      }
    }
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

  // One direction's bytes in flight: read only when the last piece has gone on.
  struct pipe {
    std::string data;
    std::size_t at = 0;
    bool eof = false; // the source's end was read
    bool done = false; // and passed on
  };

  // Moves what can move from `src` (stream `is_stderr`) to `dst`, honouring dst's window and
  // output; true when something moved.
  bool move(ssh_channel src, ssh_session dst_s, ssh_channel dst, int is_stderr, bool to_stderr, pipe &p,
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

  // Relays the command's bytes until the origin's channel ends, the client goes, or nothing moves
  // for the idle deadline; then passes on the exit status.
  void forward() {
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
      // new on either socket (a peer blocked on a window that only their moving opens).
      if (!moved) {
        if (!wait_sessions({d_.s, u_.s}, deadline) && clock::now() >= deadline) {
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

  // Ends the client's channel: text on its stderr (and as Git's ERR line on its stdout), the exit
  // status, EOF and close; then waits (5 s at most) for the client to hang up.
  void finish_channel(int status, const std::string &text, bool git_error = false) {
    if (!d_.ch || ssh_channel_is_closed(d_.ch)) return;
    // The explanation on stderr first: git exits as soon as it reads the ERR line, and its ssh
    // may go with it before it has printed what came after.
    if (!text.empty()) ssh_channel_write_stderr(d_.ch, text.data(), static_cast<std::uint32_t>(text.size()));
    if (git_error) {
      // The whole explanation, on one line: git prints it as "fatal: remote error: ...", and the
      // command may end (and the sandbox with it) before its ssh has printed what came on stderr.
      std::string one = text.substr(0, 2000);
      std::replace(one.begin(), one.end(), '\n', ' ');
      while (!one.empty() && one.back() == ' ') one.pop_back();
      auto line = filters::git_error_pkt_line(one);
      ssh_channel_write(d_.ch, line.data(), static_cast<std::uint32_t>(line.size()));
    }
    ssh_channel_request_send_exit_status(d_.ch, status);
    ssh_channel_send_eof(d_.ch);
    ssh_channel_close(d_.ch);
    // Flushed, then read until the client hangs up (it does once it has the close): closing with
    // its last packets unread would reset the connection, and a reset throws away what its kernel
    // still holds for it, the end of a clone.
    const auto deadline = clock::now() + std::chrono::seconds(5);
    while (ev_ && !(ssh_get_status(d_.s) & (SSH_CLOSED | SSH_CLOSED_ERROR))) {
      if (!wait_sessions({d_.s}, deadline) || !pump(ev_)) break;
    }
  }

  void refuse(bool git) { finish_channel(1, refusal_text(job_, r_), git); }

  bool fail(std::string_view reason, const std::string &detail) {
    r_.decision = "error";
    r_.reason = reason;
    finish_channel(255, refusal_text(job_, r_, detail), true);
    return false;
  }

  void teardown() {
    if (u_.ch) ssh_remove_channel_callbacks(u_.ch, &u_.ccb);
    if (d_.ch) ssh_remove_channel_callbacks(d_.ch, &d_.ccb);
    if (ev_) {
      if (u_.s && u_.ch) ssh_event_remove_session(ev_, u_.s);
      if (d_.s) ssh_event_remove_session(ev_, d_.s);
    }
    if (u_.s) {
      ssh_disconnect(u_.s);
      ssh_free(u_.s);
    }
    if (up_fd_ >= 0) ::close(up_fd_); // SSH_OPTIONS_FD: ssh_disconnect leaves it open
    if (d_.s) {
      ssh_disconnect(d_.s);
      ssh_free(d_.s); // closes the client's socket
    }
    if (ev_) ssh_event_free(ev_);
    if (bind_) ssh_bind_free(bind_);
  }

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

} // namespace

ssh_host_key make_ssh_host_key() {
  ssh_key key = nullptr;
  if (ssh_pki_generate(SSH_KEYTYPE_ED25519, 0, &key) != SSH_OK) throw std::runtime_error("cannot make an SSH host key");
  ssh_host_key out;
  char *priv = nullptr;
  char *pub = nullptr;
  ssh_key pubkey = nullptr;
  bool ok = ssh_pki_export_privkey_base64(key, nullptr, nullptr, nullptr, &priv) == SSH_OK &&
            ssh_pki_export_privkey_to_pubkey(key, &pubkey) == SSH_OK &&
            ssh_pki_export_pubkey_base64(pubkey, &pub) == SSH_OK;
  if (ok) {
    out.private_base64 = priv;
    out.public_line = std::string(ssh_key_type_to_char(ssh_key_type(pubkey))) + " " + pub;
  }
  if (priv) ssh_string_free_char(priv);
  if (pub) ssh_string_free_char(pub);
  ssh_key_free(pubkey);
  ssh_key_free(key);
  if (!ok) throw std::runtime_error("cannot export the SSH host key");
  return out;
}

std::string ssh_known_hosts_text(const std::vector<filters::ssh_rule> &rules, const ssh_host_key &key) {
  std::string out;
  for (const auto &r : rules) {
    out += (r.port == 22 ? r.host : "[" + r.host + "]:" + std::to_string(r.port)) + " " + key.public_line + "\n";
  }
  return out;
}

void run_ssh_relay(ssh_job &job, ssh_report &report) {
  ssh_set_log_level(SSH_LOG_NOLOG); // thread-local in libssh: this thread says nothing on stderr
  relay r(job, report);
  r.run();
}

} // namespace sluice::gateway
