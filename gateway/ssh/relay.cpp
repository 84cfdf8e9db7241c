// One Git-over-SSH relay (relay.hpp): its steps in order (the sandbox's side, the judgement, the
// origin's side, the bytes), and how it ends: a refusal the client prints, the exit status, the
// teardown. Its parts: relay_impl.hpp.
#include "gateway/ssh/relay_impl.hpp"

#include <unistd.h>

#include <algorithm>

namespace sluice::gateway {
namespace ssh {

std::string refusal_text(const ssh_job &job, const ssh_report &r, std::string_view detail) {
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

void relay::run() {
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

// The command, judged: Git's three programs only, the host's rule, the profile.
bool relay::judge() {
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

// Ends the client's channel: text on its stderr (and as Git's ERR line on its stdout), the exit
// status, EOF and close; then waits (5 s at most) for the client to hang up.
void relay::finish_channel(int status, const std::string &text, bool git_error) {
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

bool relay::fail(std::string_view reason, const std::string &detail) {
  r_.decision = "error";
  r_.reason = reason;
  finish_channel(255, refusal_text(job_, r_, detail), true);
  return false;
}

void relay::teardown() {
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

} // namespace ssh

void run_ssh_relay(ssh_job &job, ssh_report &report) {
  ssh_set_log_level(SSH_LOG_NOLOG); // thread-local in libssh: this thread says nothing on stderr
  ssh::relay r(job, report);
  r.run();
}

} // namespace sluice::gateway
