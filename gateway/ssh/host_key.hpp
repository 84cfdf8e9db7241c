#pragma once
// The host key sluice shows the sandbox for Git over SSH (relay.hpp), and the sandbox's known_hosts
// that names it. Apart from the relay: exec makes both before any relay runs.
#include "filters/policy.hpp"

#include <string>
#include <vector>

namespace sluice::gateway {

// The host key sluice shows the sandbox: made once per command (or per `serve`), like its CA.
struct ssh_host_key {
  std::string private_base64; // OpenSSH private key (PEM-like text), for each relay's server side
  std::string public_line;    // "ssh-ed25519 AAAA..." for known_hosts
};
ssh_host_key make_ssh_host_key();

// known_hosts lines for the sandbox: each SSH host of `rules` (with "[host]:port" for another port).
std::string ssh_known_hosts_text(const std::vector<filters::ssh_rule> &rules, const ssh_host_key &key);

} // namespace sluice::gateway
