#pragma once
// The view's OpenSSH files for Git over SSH (docs/policy.md, "Git over SSH"): the SSH hosts of the
// policy are served by the gateway with a host key made for the command, and these files make
// OpenSSH inside trust that key for those hosts, with or without the view's ssh_config.
#include <string>
#include <string_view>
#include <vector>

namespace sluice::exec {

// The view's /etc/ssh/ssh_config (seal_view binds it over the host's): the host's, after lines that
// make OpenSSH trust exactly the command's host key for the policy's SSH hosts.
std::string view_ssh_config();

// A known_hosts text with every entry for a host `gateway_lines` names taken out (a plain name, in
// any case, or a hashed one), after `gateway_lines`. A line that names other hosts too keeps those;
// comments, markers and wildcard patterns stay as they are (OpenSSH accepts a server whose key any
// matching line lists, so a wildcard line beside the gateway's does not refuse it).
std::string merge_known_hosts(std::string_view host_text, std::string_view gateway_lines);

// The view's /etc/ssh/ssh_known_hosts, OpenSSH's default global known-hosts file, read with no
// configuration at all (`ssh -F FILE`, GIT_SSH_COMMAND with -F): the host's own file (when any
// user may read it) merged with `gateway_lines` (the gateway's host key for the policy's SSH hosts)
// by merge_known_hosts.
std::string view_ssh_known_hosts(std::string_view gateway_lines);

} // namespace sluice::exec
