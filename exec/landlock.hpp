#pragma once
#include <string>
#include <vector>

namespace sluice::exec {

// The Landlock ABI version this kernel offers (0: none). SLUICE_FAULT=landlock_missing reports 0.
int landlock_abi();

// Landlock rules mirroring the mount view: paths the command may read (and execute), paths it may
// also change, and descriptors (the command's stdin/stdout/stderr and --pass-fd ones) whose files
// it may reopen through /proc/self/fd. Paths are inside the view.
struct landlock_rules {
  std::vector<std::string> read;
  std::vector<std::string> write;
  std::vector<std::string> devices; // read, write and ioctl (ttys, /dev/null)
  std::vector<int> fds;
};

// A ruleset built and not yet enforced: `fd` -1 when the kernel has no Landlock (abi 0).
struct landlock_ruleset {
  int fd = -1;
  int abi = 0;
};

// Builds the ruleset: filesystem rules as given and, from ABI 6, no abstract Unix socket and no
// signal outside the domain. abi -1 with `error` set when a call failed.
landlock_ruleset prepare_landlock(const landlock_rules &rules, std::string &error);

// Restricts the calling process and its future children to a prepared ruleset and closes it.
// Returns false with `error` set when the kernel refused.
bool enforce_landlock(landlock_ruleset &ruleset, std::string &error);

} // namespace sluice::exec
