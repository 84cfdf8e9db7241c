#pragma once
#include <string>
#include <vector>

namespace sluice::adapters {

// `sluice adapter install|remove|status`: writes an agent host's own configuration so that its shell
// tools run through `sluice exec` (docs/adapters.md).
struct adapter_options {
  std::string host;         // claude | codex
  std::string scope = "user"; // user | project | managed (claude only: /etc/claude-code)
  std::string dir;          // project scope: the project directory (default: the working directory)
  std::string skill;        // the skill every rewritten command runs under
  std::string policy_file;  // passed on to the hook (--policy)
  std::string sluice_path;  // absolute path of this binary
  // claude only: "hook" (every Bash call through sluice exec) or "proxy" (Claude's own sandbox with
  // `sluice serve` as its HTTP and SOCKS proxy).
  std::string mode = "hook";
  std::string serve_config; // proxy mode: the serve config (its proxy port, CA key)
  std::string ca_bundle;    // proxy mode: system roots plus sluice's CA (serve --ca-bundle-out)
  std::string agent;        // proxy mode: the serve config's [listen.agents.NAME] to use (else [listen] proxy)
};

// Throws std::runtime_error with a message naming the file and the fix; writes nothing then.
void adapter_install(const adapter_options &options);
void adapter_remove(const adapter_options &options);

struct adapter_state {
  std::string host;
  std::string settings;     // the file the adapter writes at this scope
  bool installed = false;
  std::string host_binary;  // found on PATH, or empty
  std::string version;      // the host's version, or empty when not found
  std::string minimum;      // the lowest version whose rewrite holds
  bool at_least_minimum = false;
  std::string mode = "hook"; // claude: "proxy" when Claude's sandbox uses sluice serve
  bool hook_verified = false; // hook: the installed hook command ran and rewrote a sample call;
                              // proxy: sluice answers on the port and the CA bundle is current
  std::vector<std::string> warnings; // guarantees that are missing, each with its fix
};

std::vector<adapter_state> adapter_status(const adapter_options &options);
// Prints the states (text or JSON); returns 0 when every installed adapter is verified and current.
int report_status(const std::vector<adapter_state> &states, bool json);

// "2.1.332 (Claude Code)" -> {2,1,332}; compares dotted numeric versions.
bool version_at_least(const std::string &version, const std::string &minimum);

} // namespace sluice::adapters
