#include "exec/runner_impl.hpp"

#include <fstream>
#include <iterator>

// The view's OpenSSH files for Git over SSH: the SSH hosts of the policy are served by the gateway
// with a host key made for the command, which these make OpenSSH trust for those hosts only.
namespace sluice::exec::detail {

// The view's /etc/ssh/ssh_config (seal_view binds it over the host's): the host's, after lines that
// make OpenSSH trust exactly the command's host key for the policy's SSH hosts. OpenSSH takes the
// first value it reads, and the view's empty home has no ~/.ssh/config to come before these.
std::string view_ssh_config() {
  std::string text = "# sluice: the SSH hosts of the policy are served by sluice with this command's host key\n"
                     "GlobalKnownHostsFile " + std::string(sandbox_files_dir) + "/known_hosts\n"
                     "UserKnownHostsFile /dev/null\n"
                     "StrictHostKeyChecking yes\n"
                     "ForwardAgent no\n"
                     "ForwardX11 no\n\n";
  std::ifstream in("/etc/ssh/ssh_config", std::ios::binary);
  std::string host((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (host.size() > 1024 * 1024) host.clear();
  return text + host;
}

} // namespace sluice::exec::detail
