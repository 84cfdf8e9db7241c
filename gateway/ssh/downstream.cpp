// The sandbox's side of a relay (relay_impl.hpp): libssh's server on the client's socket. Its
// callbacks note what the client asked for; only one exec, shell or subsystem request is taken,
// and everything else is refused by libssh's default answer.
#include "gateway/ssh/relay_impl.hpp"

#include <unistd.h>

namespace sluice::gateway::ssh {
namespace {

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

} // namespace

// Key exchange, login and the channel's one request, within the handshake deadline.
bool relay::serve_downstream() {
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

} // namespace sluice::gateway::ssh
