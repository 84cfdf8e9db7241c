#include "exec/tool_cache.hpp"
#include "exec/profile_resolver.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sluice::exec {

const std::vector<tool_cache> &tool_caches() {
  static const std::vector<tool_cache> caches = {
      {"npm", {".npm"}},
      {"pip", {".cache/pip"}},
      {"uv", {".cache/uv"}},
      {"yarn", {".cache/yarn"}},
      {"pnpm", {".local/share/pnpm/store", ".cache/pnpm"}},
      {"cargo", {".cargo/registry", ".cargo/git"}},
      {"go", {"go/pkg/mod", ".cache/go-build"}},
      {"maven", {".m2/repository"}},
      {"gradle", {".gradle/caches"}},
  };
  return caches;
}

const tool_cache *find_tool_cache(const std::string &name) {
  for (const auto &c : tool_caches()) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

std::string sluice_cache_dir(const std::string &home, const char *leaf) {
  const char *xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/') return std::string(xdg) + "/sluice/" + leaf;
  if (home.empty() || home[0] != '/') return {};
  return home + "/.cache/sluice/" + leaf;
}

std::string cache_root(const std::string &home) { return sluice_cache_dir(home, "caches"); }

std::string make_private_dirs(const std::string &path) {
  std::size_t i = 1;
  while (i <= path.size()) {
    std::size_t next = path.find('/', i);
    if (next == std::string::npos) next = path.size();
    std::string part = path.substr(0, next);
    if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
      return "cannot make " + part + ": " + std::strerror(errno);
    }
    struct stat st {};
    if (::lstat(part.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
        (st.st_uid != ::geteuid() && st.st_uid != 0) || (st.st_uid == 0 && ::geteuid() != 0 && (st.st_mode & 022) && !(st.st_mode & S_ISVTX))) {
      return part + " is not a directory of yours (or is a symlink)";
    }
    i = next + 1;
  }
  return {};
}

std::vector<std::pair<std::string, std::string>> cache_binds(const std::vector<std::string> &names,
                                                             const std::string &root,
                                                             const std::string &home) {
  std::vector<std::pair<std::string, std::string>> out;
  if (names.empty()) return out;
  if (root.empty() || home.empty()) {
    throw refusal("--cache: the command has no home of its own to show caches in (HOME is unset or a "
                  "system path); set HOME to your home directory");
  }
  std::vector<std::string> seen;
  for (const auto &n : names) {
    const tool_cache *c = find_tool_cache(n);
    if (!c) {
      std::string known;
      for (const auto &k : tool_caches()) known += (known.empty() ? "" : ", ") + std::string(k.name);
      throw refusal("--cache " + n + ": no such cache; sluice knows " + known);
    }
    if (std::find(seen.begin(), seen.end(), n) != seen.end()) continue;
    seen.push_back(n);
    for (const char *rel : c->home_paths) {
      std::string dir = root + "/" + n + "/" + rel;
      if (auto wrong = make_private_dirs(dir); !wrong.empty()) {
        throw refusal("--cache: " + wrong + "; sluice keeps caches only in directories no one else controls. "
                      "Remove it or set XDG_CACHE_HOME to a directory of yours");
      }
      out.emplace_back(dir, home + "/" + rel);
    }
  }
  return out;
}

} // namespace sluice::exec
