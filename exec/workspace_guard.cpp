#include "exec/workspace_guard.hpp"
#include "exec/git_metadata.hpp"
#include "exec/mount_view.hpp"
#include "exec/profile_resolver.hpp"
#include "exec/workspace.hpp"

#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <linux/openat2.h>
#include <map>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace sluice::exec {

const std::vector<std::string> &default_credential_patterns() {
  static const std::vector<std::string> p = {
      ".env*",    "*.pem",          "*.key",   "id_rsa*", "id_ed25519*", "id_ecdsa*",
      "id_dsa*",  ".netrc",         ".git-credentials", ".npmrc", ".pypirc", ".pgpass",
      "*.kdbx",   "*.p12",          "*.pfx",   ".aws/",   ".ssh/",       ".gnupg/",
      ".docker/config.json"};
  return p;
}

const std::vector<std::string> &guarded_names() {
  static const std::vector<std::string> names = {
      ".bashrc", ".bash_profile", ".zshrc", ".zprofile", ".profile", ".gitconfig", ".gitmodules",
      ".ripgreprc", ".vscode", ".idea", ".claude", ".codex", ".opencode", ".pi", "opencode.json",
      "opencode.jsonc", ".mcp.json", ".sluice", ".env", ".netrc", ".git-credentials", ".npmrc",
      ".pypirc", ".pgpass", ".aws", ".ssh", ".gnupg", ".docker/config.json"};
  return names;
}

namespace {

bool glob(const std::string &pattern, const char *name) {
  return ::fnmatch(pattern.c_str(), name, 0) == 0;
}

// Whether `name` (in a directory called `parent`) matches one of `patterns`: see
// default_credential_patterns().
bool matches(const std::vector<std::string> &patterns, const char *name, const char *parent, bool dir) {
  for (const auto &p : patterns) {
    if (p.empty()) continue;
    if (p.back() == '/') {
      if (dir && glob(p.substr(0, p.size() - 1), name)) return true;
    } else if (auto slash = p.find('/'); slash != std::string::npos) {
      if (glob(p.substr(slash + 1), name) && glob(p.substr(0, slash), parent)) return true;
    } else if (glob(p, name)) {
      return true;
    }
  }
  return false;
}

std::string base_name(const std::string &p) { return p.substr(p.rfind('/') + 1); }

// Where `rel` (a path below `base`) lies: its directory opened without following any symlink and
// without leaving `base` (fd -1 when there is none), and its last name.
struct parent_dir {
  int fd = -1;
  bool owned = false;
  std::string name;
  parent_dir(int base, const std::string &rel) {
    auto slash = rel.rfind('/');
    if (slash == std::string::npos) {
      fd = base;
      name = rel;
      return;
    }
    name = rel.substr(slash + 1);
    open_how how{};
    how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    fd = static_cast<int>(::syscall(SYS_openat2, base, rel.substr(0, slash).c_str(), &how, sizeof how));
    owned = fd >= 0;
  }
  ~parent_dir() {
    if (owned) ::close(fd);
  }
  parent_dir(const parent_dir &) = delete;
  parent_dir &operator=(const parent_dir &) = delete;
};

// Renames `rel` below `base` to NAME.sluice-quarantine-ID beside it, never over anything. Returns
// the new name relative to `base`, or "" when it could not be moved.
std::string move_aside(int base, const std::string &rel, const std::string &id) {
  parent_dir parent(base, rel);
  if (parent.fd < 0) return {};
  std::string to = parent.name + ".sluice-quarantine-" + id;
  if (::renameat2(parent.fd, parent.name.c_str(), parent.fd, to.c_str(), RENAME_NOREPLACE) != 0) return {};
  return rel.substr(0, rel.size() - parent.name.size()) + to;
}

} // namespace

// One walk over the writable directories, at the start (`start`) or after the command.
struct workspace_guard::walk {
  workspace_guard &g;
  bool start;
  std::size_t limit;
  workspace_scan out;
  std::vector<std::pair<std::string, moved::kind>> to_move; // absolute paths, outer ones first
  struct link_info {
    nlink_t links;
    std::size_t seen;
    std::string path;
  };
  std::map<std::pair<dev_t, ino_t>, link_info> linked;

  bool in_roots(const std::string &p) const {
    for (const auto &r : g.opt_.roots) {
      if (is_under(p, r)) return true;
    }
    return false;
  }

  static bool identity_of(const std::string &p, identity &id, struct stat &st) {
    if (::lstat(p.c_str(), &st) != 0) return false;
    bool pinned = S_ISREG(st.st_mode) || S_ISDIR(st.st_mode); // a mount point the command cannot remove
    id = {st.st_dev, st.st_ino, pinned ? 0 : st.st_ctim.tv_sec, pinned ? 0 : st.st_ctim.tv_nsec};
    return true;
  }
  bool known(const std::string &p) const {
    identity id;
    struct stat st {};
    return identity_of(p, id, st) && g.known_.count(id);
  }

  // At the start: remembers `p` (a symlink with where it leads) and marks it read-only in the
  // view (a symlink's target, when that is in a walked directory: elsewhere it is not writable).
  void remember(const std::string &p) {
    identity id;
    struct stat st {};
    if (!identity_of(p, id, st)) return;
    g.known_.insert(id);
    std::string shown = p;
    if (S_ISLNK(st.st_mode)) {
      shown = resolved(p);
      g.link_targets_[id] = shown;
      if (shown.empty() || !in_roots(shown) || !identity_of(shown, id, st)) return;
      g.known_.insert(id);
    }
    if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) out.protect.push_back(shown);
  }
  // After the command: whether `p` (a guarded name that exists) is what existed at the start; a
  // symlink must lead where it led, to what was there.
  bool unchanged(const std::string &p) const {
    identity id;
    struct stat st {};
    if (!identity_of(p, id, st) || !g.known_.count(id)) return false;
    if (!S_ISLNK(st.st_mode)) return true;
    auto was = g.link_targets_.find(id);
    std::string target = resolved(p);
    if (was == g.link_targets_.end() || was->second != target) return false;
    return target.empty() || !in_roots(target) || known(target);
  }

  // A repository's Git directory: what in it runs programs, and its hooks path.
  std::vector<std::string> git_metadata(const std::string &git_dir, const std::string &work_tree) const {
    auto out = git_metadata_to_protect(git_dir);
    if (auto hooks = git_hooks_path(git_dir, work_tree, g.opt_.home); !hooks.empty()) {
      struct stat st {};
      if (::lstat(hooks.c_str(), &st) == 0) out.push_back(hooks);
    }
    return out;
  }

  // harmless_git_metadata for the absolute path `p`.
  static bool harmless_at(const std::string &p, bool hooks_dir) {
    int parent = ::open(p.substr(0, p.rfind('/')).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    bool ok = parent >= 0 && harmless_git_metadata(parent, base_name(p), hooks_dir);
    if (parent >= 0) ::close(parent);
    return ok;
  }

  // A new .git file or symlink (git worktree add, git submodule): harmless when the Git directory
  // it names lies in the walked directories, its metadata runs nothing, and a commondir in it names
  // a repository that existed at the start.
  bool harmless_link(const std::string &dot_git) const {
    std::string git_dir = git_dir_of(dot_git);
    if (git_dir.empty()) return true; // names nothing: Git refuses it
    if (!in_roots(git_dir)) return false;
    for (const auto &p : git_metadata_to_protect(git_dir)) {
      std::string name = base_name(p);
      if (known(p)) continue;
      if (name == "commondir" && p == git_dir + "/commondir") {
        char buf[4096];
        int fd = ::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        ssize_t n = fd >= 0 ? ::read(fd, buf, sizeof buf - 1) : -1;
        if (fd >= 0) ::close(fd);
        if (n <= 0) return false;
        std::string text(buf, static_cast<std::size_t>(n));
        while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
        if (text.empty()) return false;
        std::string dir = resolved(text[0] == '/' ? text : git_dir + "/" + text);
        struct stat st {};
        if (dir.empty() || ::stat(dir.c_str(), &st) != 0 || !g.git_dirs_.count({st.st_dev, st.st_ino})) {
          return false;
        }
        continue;
      }
      if (!harmless_at(p, name == "hooks")) return false;
    }
    return true;
  }

  void repository(int dirfd, const std::string &dir, const std::string &dot_git) {
    std::string git_dir = git_dir_of(dot_git);
    if (start) {
      identity id;
      struct stat st {};
      if (identity_of(dot_git, id, st)) g.known_.insert(id);
      // A .git file names the Git directory: rewritten, it could send Git outside to any other.
      if (S_ISREG(st.st_mode)) out.protect.push_back(dot_git);
      if (git_dir.empty() || !in_roots(git_dir)) return; // elsewhere: read-only (linked worktrees)
      if (::stat(git_dir.c_str(), &st) == 0) g.git_dirs_.insert({st.st_dev, st.st_ino});
      for (const auto &p : git_metadata(git_dir, dir)) remember(p);
      return;
    }
    if (!known(dot_git)) { // a repository the command made
      struct stat st {};
      bool is_dir = ::lstat(dot_git.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
      if (is_dir ? !harmless_new_repository(dirfd) : !harmless_link(dot_git)) {
        to_move.emplace_back(dot_git, moved::kind::repository);
      }
      return;
    }
    if (git_dir.empty() || !in_roots(git_dir)) return;
    for (const auto &p : git_metadata(git_dir, dir)) {
      if (unchanged(p)) continue;
      std::string name = base_name(p);
      struct stat st {};
      bool hooks_dir = ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && name != "config";
      if (S_ISLNK(st.st_mode) || !harmless_at(p, hooks_dir)) to_move.emplace_back(p, moved::kind::git_metadata);
    }
  }

  void entries(int dirfd, const std::string &path, const char *name, int depth) {
    DIR *d = ::fdopendir(dirfd);
    if (!d) {
      ::close(dirfd);
      return;
    }
    // Caches and virtual environments are the tools' own, large, and hold no one's credentials
    // or settings.
    if (depth > 0 && (::faccessat(::dirfd(d), "CACHEDIR.TAG", F_OK, 0) == 0 ||
                      ::faccessat(::dirfd(d), "pyvenv.cfg", F_OK, 0) == 0)) {
      ::closedir(d);
      return;
    }
    while (dirent *de = ::readdir(d)) {
      const char *n = de->d_name;
      if (n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0'))) continue;
      if (++out.entries > limit) {
        ::closedir(d);
        if (!start) {
          g.complete_ = false;
          return;
        }
        throw refusal("the workspace has more than " + std::to_string(limit) +
                      " entries (outside .git, node_modules and caches); sluice checks each for "
                      "credential files, guarded names and hard links and will not run on a "
                      "partial check. Run from a smaller directory or raise [sandbox] "
                      "max_workspace_entries");
      }
      unsigned char type = de->d_type;
      struct stat st {};
      bool need_stat = type == DT_UNKNOWN || (start && type == DT_REG);
      if (need_stat && ::fstatat(::dirfd(d), n, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      if (type == DT_UNKNOWN) {
        type = S_ISDIR(st.st_mode)    ? DT_DIR
               : S_ISREG(st.st_mode)  ? DT_REG
               : S_ISSOCK(st.st_mode) ? DT_SOCK
               : S_ISLNK(st.st_mode)  ? DT_LNK
                                      : DT_FIFO;
      }
      std::string child = path + "/" + n;
      if (type == DT_SOCK && start) { // a host service's socket: hidden (the command's own come later)
        out.masks.push_back(child);
        continue;
      }
      if (std::strcmp(n, ".git") == 0) {
        repository(::dirfd(d), path, child);
        continue;
      }
      bool dir = type == DT_DIR;
      if (matches(g.opt_.names, n, name, dir)) {
        if (start) {
          remember(child);
        } else if (!unchanged(child)) {
          to_move.emplace_back(child, moved::kind::name);
          continue; // moved as a whole
        }
      }
      if (start && (dir || type == DT_REG) && matches(g.opt_.hidden, n, name, dir)) {
        out.masks.push_back(child);
        continue;
      }
      if (start && type == DT_REG && st.st_nlink > 1) {
        auto &li = linked[{st.st_dev, st.st_ino}];
        li.links = st.st_nlink;
        if (li.seen++ == 0) li.path = child;
      }
      if (dir && depth < 64 && std::strcmp(n, "node_modules") != 0) {
        int sub = ::openat(::dirfd(d), n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub >= 0) entries(sub, child, n, depth + 1);
        if (!g.complete_) break;
      }
    }
    ::closedir(d);
  }

  void all() {
    for (const auto &root : g.opt_.roots) {
      int fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd < 0) continue;
      std::string base = base_name(root);
      entries(fd, root, base.c_str(), 0);
      if (!g.complete_) return;
    }
  }
};

workspace_guard::workspace_guard(options o) : opt_(std::move(o)) {}

workspace_scan workspace_guard::scan() {
  walk w{*this, true, opt_.max_entries, {}, {}, {}};
  w.all();
  for (auto &[key, li] : w.linked) {
    if (li.seen < li.links) {
      throw refusal("the workspace file " + li.path + " is a hard link to a file outside the "
                    "workspace (" + std::to_string(li.links) + " links, " +
                    std::to_string(li.seen) + " inside); the sandbox would expose that file. "
                    "Replace it with a copy (cp --remove-destination) or remove it");
    }
  }
  return std::move(w.out);
}

std::vector<workspace_guard::moved> workspace_guard::quarantine(const std::string &id) {
  walk w{*this, false, 4 * opt_.max_entries, {}, {}, {}};
  w.all();
  std::vector<moved> out;
  for (const auto &[path, what] : w.to_move) {
    // Inner paths of something already moved went with it.
    bool gone = false;
    for (const auto &m : out) gone = gone || (!m.to.empty() && is_under(path, m.path) && path != m.path);
    if (gone) continue;
    moved m{path, {}, what};
    for (const auto &root : opt_.roots) {
      if (!is_under(path, root) || path == root) continue;
      int fd = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (fd < 0) break;
      std::string to = move_aside(fd, path.substr(root.size() + 1), id);
      ::close(fd);
      if (!to.empty()) m.to = root + "/" + to;
      break;
    }
    out.push_back(std::move(m));
  }
  return out;
}

} // namespace sluice::exec
