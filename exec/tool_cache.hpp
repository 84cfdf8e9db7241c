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

// $XDG_CACHE_HOME/sluice/LEAF, else HOME/.cache/sluice/LEAF; "" without a usable home.
std::string sluice_cache_dir(const std::string &home, const char *leaf);

// mkdir -p of `path` (0700): every component must end up a directory the caller owns (or root's,
// above it), never a symlink, so that no one else can point it elsewhere. Returns what is wrong
// ("" when the directory is there and sound), naming the component.
std::string make_private_dirs(const std::string &path);

} // namespace sluice::exec
