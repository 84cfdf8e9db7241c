#pragma once
// Git over SSH (docs/policy.md, "Git over SSH"): sluice is the SSH server the sandbox reaches (a
// host key made for this command, known to the sandbox's known_hosts) and an SSH client of the
// real server, logged in as the user (the caller's ssh-agent or a key file of the trusted policy)
// after the server's key is checked. Between the two only a Git command the policy allows
// passes: its bytes are relayed, its stderr and exit status passed back. Everything else an SSH
// session can ask for (a shell, a pty, other commands, subsystems, forwarding, agent or X11
// forwarding, environment but GIT_PROTOCOL) is refused, with the reason on the client's stderr.
//
// The protocol is libssh's (server and client sides). One relay runs on a thread of its own with
// libssh's non-blocking calls and poll(), every wait bounded: no Asio worker ever blocks on an SSH
// peer or an agent. No Asio in the relay: it is plain C++ and POSIX (session_ssh.cpp, the session
// that hands it the socket and waits, is the Asio side). The host key the sandbox is shown is made
// in host_key.hpp; the relay's parts are in relay_impl.hpp.
#include "filters/policy.hpp"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace sluice::gateway {

struct ssh_job {
  int fd = -1;                       // the client's connection; the relay owns and closes it
  std::string host;
  unsigned port = 22;
  filters::ssh_rule rule;
  std::shared_ptr<const filters::policy> policy; // judges the command (pure; read from this thread)
  std::vector<std::string> addresses;            // the origin's addresses, each already judged
  // Set when the origin's addresses could not be had (DNS, or every address refused): an allowed
  // command is then refused with this reason and text instead of dialled.
  std::string_view upstream_reason;
  std::string_view upstream_decision = "error";
  std::string upstream_text;
  std::string host_key_private;                  // ssh_host_key::private_base64 (host_key.hpp)
  std::string agent_socket;                      // the caller's SSH_AUTH_SOCK (identity "ssh-agent")
  std::vector<std::string> known_hosts;          // the caller's known_hosts files (no pin)
  std::chrono::milliseconds handshake{10'000};   // the client's key exchange, login and command request
  std::chrono::milliseconds upstream_handshake{10'000}; // the origin's key exchange and login
  std::chrono::milliseconds connect{10'000};
  std::chrono::milliseconds idle{300'000};       // no byte either way
};

// What a relay did, for the access log and metrics.
struct ssh_report {
  std::string user;       // the user the client named
  std::string command;    // the exec request as sent, or "shell", "subsystem sftp", "-"
  std::string method = "-"; // the Git program ("git-upload-pack"...), else "exec", "shell", "subsystem"
  std::string repository;
  std::string rule;
  std::string_view decision = "error";
  std::string_view reason = "ssh_handshake_failed";
  std::uint64_t bytes_in = 0, bytes_out = 0; // client to origin, origin to client (channel data)
  int exit_status = -1;
};

// Runs one relay to its end (blocking: call it on a thread of its own).
void run_ssh_relay(ssh_job &job, ssh_report &report);

// SSH relays running now (bounded: a connection past max_ssh_relays is closed at once).
inline std::atomic<int> ssh_relays{0};
inline constexpr int max_ssh_relays = 64;

} // namespace sluice::gateway
