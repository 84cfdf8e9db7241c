// The host keys of Git over SSH: the one sluice shows the sandbox (host_key.hpp), and the check of
// the origin's, against the policy's pin or the caller's known_hosts, before anything is sent in
// the user's name (relay_impl.hpp).
#include "gateway/ssh/host_key.hpp"
#include "gateway/ssh/relay_impl.hpp"

#include <stdexcept>

namespace sluice::gateway {

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

namespace ssh {

void set_origin_host_key_options(ssh_session s, const ssh_job &job) {
  const bool pinned = !job.rule.host_key.empty();
  auto files = job.known_hosts;
  ssh_options_set(s, SSH_OPTIONS_KNOWNHOSTS, pinned || files.empty() ? "/dev/null" : files[0].c_str());
  ssh_options_set(s, SSH_OPTIONS_GLOBAL_KNOWNHOSTS, pinned || files.size() < 2 ? "/dev/null" : files[1].c_str());
  if (pinned) {
    // Only the pinned key's algorithms are offered, so the server shows that key. An RSA key
    // signs with SHA-2 (servers refuse ssh-rsa's SHA-1 signatures).
    auto type = job.rule.host_key.substr(0, job.rule.host_key.find(' '));
    if (type == "ssh-rsa") type = "rsa-sha2-512,rsa-sha2-256";
    ssh_options_set(s, SSH_OPTIONS_HOSTKEYS, type.c_str());
  }
}

std::string_view origin_host_key_problem(ssh_session s, const ssh_job &job, std::string &detail) {
  const bool pinned = !job.rule.host_key.empty();
  if (pinned) {
    auto b64 = job.rule.host_key.substr(job.rule.host_key.find(' ') + 1);
    b64 = b64.substr(0, b64.find(' '));
    auto type = ssh_key_type_from_name(job.rule.host_key.substr(0, job.rule.host_key.find(' ')).c_str());
    ssh_key want = nullptr, got = nullptr;
    bool same = ssh_pki_import_pubkey_base64(b64.c_str(), type, &want) == SSH_OK &&
                ssh_get_server_publickey(s, &got) == SSH_OK && ssh_key_cmp(want, got, SSH_KEY_CMP_PUBLIC) == 0;
    ssh_key_free(want);
    ssh_key_free(got);
    if (!same) {
      detail = "the server's host key is not the one host_key pins";
      return "ssh_host_key_changed";
    }
  } else {
    auto known = ssh_session_is_known_server(s);
    if (known == SSH_KNOWN_HOSTS_CHANGED || known == SSH_KNOWN_HOSTS_OTHER) {
      detail = "the server's host key differs from the one in your known_hosts";
      return "ssh_host_key_changed";
    }
    if (known != SSH_KNOWN_HOSTS_OK) {
      detail = "your known_hosts does not list " + job.host + "'s host key";
      return "ssh_host_key_unknown";
    }
  }
  return {};
}

} // namespace ssh
} // namespace sluice::gateway
