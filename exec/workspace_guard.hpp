#pragma once
#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <sys/types.h>
#include <tuple>
#include <vector>

namespace sluice::exec {

// The credential-shaped names hidden in every workspace: `.env*`, `*.pem`, `*.key`, `id_rsa*`,
// `id_ed25519*`, `id_ecdsa*`, `id_dsa*`, `.netrc`, `.git-credentials`, `.npmrc`, `.pypirc`, `.pgpass`,
// `*.kdbx`, `*.p12`, `*.pfx`, the directories `.aws/`, `.ssh/`, `.gnupg/`, and `.docker/config.json`.
// A pattern is a glob on the name; "NAME/" matches directories only; "DIR/NAME" a name in DIR.
const std::vector<std::string> &default_credential_patterns();

// Names that programs outside the sandbox read and act on, guarded wherever the workspace walk
// finds them: shell start-up files (`.bashrc`, `.bash_profile`, `.zshrc`, `.zprofile`, `.profile`),
// Git's and ripgrep's (`.gitconfig`, `.gitmodules`, `.ripgreprc`), editors' project settings
// (`.vscode/`, `.idea/`: an IDE runs their tasks when the folder opens), the agent hosts' project
// settings (`.claude/`, `.codex/`, `.opencode/`, `.pi/`, `opencode.json`, `opencode.jsonc`,
// `.mcp.json`: hooks and MCP servers run unsandboxed), the repository's `.sluice/`, and the exact
// credential names of default_credential_patterns() (`.env`, `.netrc`, `.git-credentials`,
// `.npmrc`, `.pypirc`, `.pgpass`, `.aws/`, `.ssh/`, `.gnupg/`, `.docker/config.json`).
const std::vector<std::string> &guarded_names();

// What the walk at the start found.
struct workspace_scan {
  std::vector<std::string> masks;   // hidden: credential-shaped files and directories, Unix sockets
  std::vector<std::string> protect; // read-only: guarded names (a symlink's target), Git metadata
  std::size_t entries = 0;          // entries looked at
};

// Holds the writable part of the view against what a command could leave there for a program
// outside the sandbox to run later. At the start a walk finds the guarded names and every
// repository's Git metadata (git_metadata_to_protect, and the directory core.hooksPath names),
// wherever they are, and remembers what exists; the view shows those read-only (a symlink's
// target, when it lies in a walked directory). When the command has ended a second walk finds
// what it created under those names, and moves it aside.
class workspace_guard {
public:
  struct options {
    std::vector<std::string> roots;  // the writable directories: the workspace, then granted ones
    std::vector<std::string> hidden; // credential patterns to hide
    std::vector<std::string> names;  // guarded names, as guarded_names() (plain or DIR/NAME)
    std::string home;                // the caller's home, for a core.hooksPath of ~/...
    std::size_t max_entries = 200'000;
  };
  explicit workspace_guard(options o);

  // The walk at the start. Leaves out node_modules and directories marked as caches (CACHEDIR.TAG)
  // or virtual environments (pyvenv.cfg), and does not enter Git directories. Refuses (exit 125,
  // naming the file) a regular file with a hard link outside the walked directories, or more than
  // max_entries entries (the check could not be complete).
  workspace_scan scan();

  struct moved {
    enum class kind { name, repository, git_metadata };
    std::string path, to; // host paths; `to` empty: it could not be moved and stays
    kind what = kind::name;
  };
  // After the command, once nothing of it runs: every guarded name that did not exist at the start
  // (or is a symlink whose target did not), and every piece of Git metadata that is new and would
  // run a program (harmless_git_metadata), is renamed to NAME.sluice-quarantine-ID beside it, not
  // followed through symlinks and never over anything. So is a .git the command created whose
  // repository is not harmless (harmless_new_repository). The walk looks at most 4 * max_entries
  // entries; complete() says whether it saw everything.
  std::vector<moved> quarantine(const std::string &id);
  bool complete() const { return complete_; }

private:
  struct walk;
  // (device, inode, change time): the time only for what the view cannot pin with a mount
  // (symlinks), whose inode a command could free and have reused.
  using identity = std::tuple<dev_t, ino_t, long, long>;
  options opt_;
  std::set<identity> known_;
  std::map<identity, std::string> link_targets_; // a guarded symlink: where it led ("" nowhere)
  std::set<std::pair<dev_t, ino_t>> git_dirs_; // the repositories' Git directories at the start
  bool complete_ = true;
};

} // namespace sluice::exec
