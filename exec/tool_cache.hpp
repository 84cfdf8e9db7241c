#pragma once
#include <string>
#include <utility>
#include <vector>

namespace sluice::exec {

// A tool's download cache that `--cache NAME` (or [sandbox] caches) keeps between sandboxed runs:
// where the tool looks for it in a home directory. The cache is sluice's own directory, never the
// user's: a sandboxed run can fill it, and only later sandboxed runs read it.
struct tool_cache {
  const char *name;
  std::vector<const char *> home_paths; // relative to the home: ".npm", ".cache/pip", ...
};

// npm, pip, uv, yarn, pnpm, cargo, go, maven, gradle.
const std::vector<tool_cache> &tool_caches();

// The cache called `name`, or nullptr.
const tool_cache *find_tool_cache(const std::string &name);

// The binds for `names` (validated): (sluice's directory for it, the path in the sandbox's home
// `home`). The directories live in `cache_root` (made 0700 on first use, each component a
// directory of the caller's own, never a symlink). Throws refusal.
std::vector<std::pair<std::string, std::string>> cache_binds(const std::vector<std::string> &names,
                                                             const std::string &cache_root,
                                                             const std::string &home);

// Where the caches of this caller live: $XDG_CACHE_HOME/sluice/caches, else
// HOME/.cache/sluice/caches; "" without a usable home.
std::string cache_root(const std::string &home);

} // namespace sluice::exec
