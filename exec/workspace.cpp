#include "exec/workspace.hpp"
#include "exec/mount_view.hpp"
#include "exec/profile_resolver.hpp"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fnmatch.h>
#include <map>
#include <cstdlib>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace sluice::exec {
namespace {

std::string parent_of(const std::string &p) {
  auto s = p.rfind('/');
  return s == 0 ? "/" : p.substr(0, s);
}

std::string read_head(const std::string &path, std::size_t n) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return {};
  std::string out(n, '\0');
  ssize_t got = ::read(fd, out.data(), n);
  ::close(fd);
  out.resize(got > 0 ? static_cast<std::size_t>(got) : 0);
  return out;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// The first executable regular file named `name` on `path` (execvp's search), or "".
std::string search_path(const std::string &name, const std::string &path, const std::string &cwd) {
  if (name.empty()) return {};
  if (name.find('/') != std::string::npos) return name[0] == '/' ? name : cwd + "/" + name;
  std::size_t start = 0;
  for (;;) {
    auto colon = path.find(':', start);
    std::string dir = path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (dir.empty()) dir = cwd;
    if (dir[0] != '/') dir = cwd + "/" + dir;
    std::string candidate = dir + "/" + name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    if (colon == std::string::npos) return {};
    start = colon + 1;
  }
}

} // namespace

std::string resolved(const std::string &path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) ? std::string(buf) : std::string();
}

workspace find_workspace(const std::string &cwd_in, const std::string &home_in) {
  workspace w;
  w.cwd = resolved(cwd_in);
  if (w.cwd.empty()) {
    throw refusal("cannot resolve the working directory " + cwd_in + "; cd to an existing directory");
  }
  w.root = w.cwd;
  for (std::string d = w.cwd;; d = parent_of(d)) {
    struct stat st {};
    std::string git = d + "/.git";
    if (::lstat(git.c_str(), &st) == 0) {
      w.root = d;
      if (S_ISREG(st.st_mode)) { // a linked worktree or a submodule: "gitdir: PATH"
        std::string line = trim(read_head(git, 4096));
        if (line.rfind("gitdir: ", 0) == 0) {
          std::string gitdir = line.substr(8);
          if (!gitdir.empty() && gitdir[0] != '/') gitdir = d + "/" + gitdir;
          gitdir = resolved(gitdir);
          if (!gitdir.empty()) {
            std::string common = trim(read_head(gitdir + "/commondir", 4096));
            if (!common.empty()) {
              common = resolved(common[0] == '/' ? common : gitdir + "/" + common);
            }
            for (auto &m : {gitdir, common}) {
              if (!m.empty() && !is_under(m, w.root)) w.git_meta.push_back(m);
            }
          }
        }
      }
      break;
    }
    if (d == "/") break;
  }
  std::string home = home_in.empty() ? std::string() : resolved(home_in);
  auto refuse = [&](const std::string &why) {
    throw refusal("the workspace would be " + w.root + " (" + why +
                  "); run sluice exec from a project directory (a Git repository or a directory "
                  "of its own)");
  };
  if (w.root == "/") refuse("the whole machine");
  for (auto p : {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/proc", "/sys", "/dev",
                 "/run", "/var", "/boot", "/tmp", "/var/tmp", "/root", "/home"}) {
    if (w.root == p) refuse("a system or shared directory");
  }
  for (auto p : {"/proc", "/sys", "/dev", "/run"}) {
    if (is_under(w.root, p)) refuse("inside " + std::string(p));
  }
  // A home inside the workspace is hidden by the sandbox's empty home; the home itself as the
  // workspace would hand over every dotfile and credential in it.
  if (!home.empty() && w.root == home) refuse("your home directory");
  return w;
}

namespace {

// The package a file belongs to: see command_files.
std::string package_root(const std::string &file, const std::string &home) {
  std::string dir = parent_of(file);
  if (!home.empty() && dir == home + "/.local/bin") return home + "/.local/lib";
  for (int level = 0; level < 6 && dir != "/" && dir != home; ++level, dir = parent_of(dir)) {
    for (auto marker : {"/package.json", "/pyvenv.cfg"}) {
      if (::access((dir + marker).c_str(), F_OK) == 0) return dir;
    }
  }
  return {};
}

bool glob(const std::string &pattern, const char *name) {
  return ::fnmatch(pattern.c_str(), name, 0) == 0;
}

struct walker {
  const std::vector<std::string> &patterns;
  std::size_t max_entries;
  workspace_scan out;
  struct link_info {
    nlink_t links;
    std::size_t seen;
    std::string path;
  };
  std::map<std::pair<dev_t, ino_t>, link_info> linked;

  bool matches(const char *name, const char *parent, bool dir) const {
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

  void walk(int dirfd, const std::string &path, const char *name, int depth) {
    DIR *d = ::fdopendir(dirfd);
    if (!d) {
      ::close(dirfd);
      return;
    }
    // Caches and virtual environments are the tools' own, large, and hold no one's credentials.
    if (depth > 0 && (::faccessat(::dirfd(d), "CACHEDIR.TAG", F_OK, 0) == 0 ||
                      ::faccessat(::dirfd(d), "pyvenv.cfg", F_OK, 0) == 0)) {
      ::closedir(d);
      return;
    }
    while (dirent *de = ::readdir(d)) {
      const char *n = de->d_name;
      if (n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0'))) continue;
      if (++out.entries > max_entries) {
        ::closedir(d);
        throw refusal("the workspace has more than " + std::to_string(max_entries) +
                      " entries (outside .git, node_modules and caches); sluice checks each for "
                      "credential files and hard links and will not run on a partial check. Run "
                      "from a smaller directory or raise [sandbox] max_workspace_entries");
      }
      unsigned char type = de->d_type;
      struct stat st {};
      bool need_stat = type == DT_UNKNOWN || type == DT_REG;
      if (need_stat && ::fstatat(::dirfd(d), n, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      if (type == DT_UNKNOWN) {
        type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_LNK;
      }
      std::string child = path + "/" + n;
      bool dir = type == DT_DIR;
      if ((dir || type == DT_REG) && matches(n, name, dir)) {
        out.masks.push_back(child);
        continue;
      }
      if (type == DT_REG && st.st_nlink > 1) {
        auto &li = linked[{st.st_dev, st.st_ino}];
        li.links = st.st_nlink;
        if (li.seen++ == 0) li.path = child;
      }
      if (dir && depth < 64 && std::strcmp(n, ".git") != 0 && std::strcmp(n, "node_modules") != 0) {
        int sub = ::openat(::dirfd(d), n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub >= 0) walk(sub, child, n, depth + 1);
      }
    }
    ::closedir(d);
  }
};

} // namespace

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
      ".claude", ".codex", ".opencode", ".pi", "opencode.json", "opencode.jsonc", ".mcp.json",
      ".sluice", ".env", ".netrc", ".git-credentials", ".npmrc", ".pypirc", ".pgpass", ".aws",
      ".ssh", ".gnupg", ".docker/config.json"};
  return names;
}

namespace {

// Where `rel` (a name, or DIR/NAME) lies below `base`: `base` itself for a plain name, else its
// directory opened without following any symlink and without leaving `base` (fd -1 when there is
// none: then nothing is there to read later).
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
  bool has_name() const {
    struct stat st {};
    return fd >= 0 && ::fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
  }
};

bool exists_in(int base, const std::string &rel) { return parent_dir(base, rel).has_name(); }

// Renames `rel` below `base` to NAME.sluice-quarantine-ID beside it, never over anything. Returns
// the new name relative to `base`, or "" when it could not be moved.
std::string move_aside(int base, const std::string &rel, const std::string &id) {
  parent_dir parent(base, rel);
  std::string to = parent.name + ".sluice-quarantine-" + id;
  if (::renameat2(parent.fd, parent.name.c_str(), parent.fd, to.c_str(), RENAME_NOREPLACE) != 0) return {};
  return rel.substr(0, rel.size() - parent.name.size()) + to;
}

// The keys `git init`, `git clone` and ordinary use write: nothing in them runs a program.
bool harmless_git_key(const std::string &section, const std::string &key) {
  static const char *const plain[] = {
      "core.repositoryformatversion", "core.filemode", "core.bare", "core.logallrefupdates",
      "core.ignorecase", "core.precomposeunicode", "core.symlinks", "core.autocrlf", "core.eol",
      "core.safecrlf", "extensions.objectformat", "init.defaultbranch", "user.name", "user.email",
      "pull.rebase", "pull.ff", "fetch.prune", "advice.detachedhead"};
  std::string full = section + "." + key;
  for (auto k : plain) {
    if (full == k) return true;
  }
  if (section == "remote") return key == "url" || key == "fetch" || key == "pushurl" || key == "tagopt";
  if (section == "branch") return key == "remote" || key == "merge" || key == "rebase";
  return false;
}

} // namespace

bool harmless_git_config(const std::string &text) {
  std::string section;
  std::size_t i = 0;
  while (i < text.size()) {
    auto end = text.find('\n', i);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(i, end - i);
    i = end + 1;
    auto last = line.find_last_not_of(" \t\r");
    if (last != std::string::npos && line[last] == '\\') return false;
    std::size_t a = line.find_first_not_of(" \t\r");
    if (a == std::string::npos || line[a] == '#' || line[a] == ';') continue;
    if (line[a] == '[') {
      auto close = line.find(']', a);
      if (close == std::string::npos) return false;
      std::string head = line.substr(a + 1, close - a - 1);
      auto space = head.find_first_of(" \t.");
      section = head.substr(0, space);
      for (auto &c : section) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string rest = line.substr(close + 1);
      if (rest.find_first_not_of(" \t\r") != std::string::npos &&
          rest[rest.find_first_not_of(" \t\r")] != '#' && rest[rest.find_first_not_of(" \t\r")] != ';') {
        return false; // a key on the section's line
      }
      continue;
    }
    std::size_t b = a;
    while (b < line.size() && (std::isalnum(static_cast<unsigned char>(line[b])) || line[b] == '-')) ++b;
    std::string key = line.substr(a, b - a);
    for (auto &c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (key.empty() || section.empty() || !harmless_git_key(section, key)) return false;
  }
  return true;
}

namespace {

// A .git the command created: its config holds only harmless keys, and its hooks only Git's
// samples (git init copies them, inert until renamed).
bool harmless_new_repository(int base) {
  parent_dir dot_git(base, ".git/config");
  if (dot_git.fd < 0) return false; // a .git file or link names a Git directory elsewhere
  const int git = dot_git.fd;
  struct stat st {};
  bool ok = true;
  int fd = ::openat(git, "config", O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd >= 0 && (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
    ok = false;
  } else if (fd >= 0) {
    std::string text;
    char chunk[4096];
    ssize_t n;
    while ((n = ::read(fd, chunk, sizeof chunk)) > 0 && text.size() < (1u << 20)) text.append(chunk, n);
    ok = n == 0 && harmless_git_config(text);
  } else if (errno != ENOENT) {
    ok = false;
  }
  if (fd >= 0) ::close(fd);
  for (auto extra : {"config.worktree", "commondir", "modules", "worktrees"}) {
    if (::fstatat(git, extra, &st, AT_SYMLINK_NOFOLLOW) == 0) ok = false; // not what git init makes
  }
  int hooks = ::openat(git, "hooks", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (hooks >= 0) {
    if (DIR *d = ::fdopendir(hooks)) {
      while (dirent *de = ::readdir(d)) {
        std::string n = de->d_name;
        if (n == "." || n == "..") continue;
        if (n.size() < 7 || n.compare(n.size() - 7, 7, ".sample") != 0) ok = false;
      }
      ::closedir(d);
    } else {
      ::close(hooks);
      ok = false;
    }
  } else if (errno != ENOENT) {
    ok = false;
  }
  return ok;
}

} // namespace

absent_guard::absent_guard(const workspace &ws, const std::vector<std::string> &extra) {
  std::vector<std::string> names = guarded_names();
  for (auto n : extra) {
    while (!n.empty() && n.back() == '/') n.pop_back();
    if (n.empty() || n.find_first_of("*?[") != std::string::npos || n[0] == '/' ||
        n.find("..") != std::string::npos) {
      continue;
    }
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  for (const auto &path : {ws.root, ws.cwd}) {
    if (path.empty() || (!dirs_.empty() && dirs_[0].path == path)) continue;
    int fd = ::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) continue;
    dir d{fd, path, {}, !exists_in(fd, ".git")};
    for (const auto &n : names) {
      if (!exists_in(fd, n)) d.absent.push_back(n);
    }
    dirs_.push_back(std::move(d));
  }
}

absent_guard::~absent_guard() {
  for (auto &d : dirs_) ::close(d.fd);
}

std::vector<absent_guard::moved> absent_guard::quarantine(const std::string &id) {
  std::vector<moved> out;
  for (auto &d : dirs_) {
    auto aside = [&](const std::string &rel, bool repository) {
      std::string to = move_aside(d.fd, rel, id);
      out.push_back({d.path + "/" + rel, to.empty() ? to : d.path + "/" + to, repository});
    };
    for (const auto &rel : d.absent) {
      if (exists_in(d.fd, rel)) aside(rel, false);
    }
    // A repository the command made (git init, git clone into .): kept, unless its configuration
    // or hooks would run something when Git runs there outside the sandbox.
    if (d.git_absent && exists_in(d.fd, ".git") && !harmless_new_repository(d.fd)) aside(".git", true);
  }
  return out;
}

namespace {

void collect_modules(const std::string &dir, int depth, std::vector<std::string> &out) {
  if (depth > 8 || out.size() >= 256) return;
  DIR *d = ::opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> subdirs;
  while (dirent *de = ::readdir(d)) {
    std::string n = de->d_name;
    if (n == "." || n == ".." || de->d_type != DT_DIR) continue;
    subdirs.push_back(dir + "/" + n);
  }
  ::closedir(d);
  for (auto &sub : subdirs) {
    struct stat st {};
    if (::lstat((sub + "/HEAD").c_str(), &st) == 0) { // a submodule's Git directory
      for (auto f : {"/config", "/hooks", "/config.worktree"}) {
        if (out.size() < 256 && ::lstat((sub + f).c_str(), &st) == 0) out.push_back(sub + f);
      }
      collect_modules(sub + "/modules", depth + 1, out);
    } else { // a submodule whose name has slashes: its directory is further down
      collect_modules(sub, depth + 1, out);
    }
  }
}

} // namespace

std::vector<std::string> git_metadata_to_protect(const std::string &git_dir) {
  std::vector<std::string> out;
  struct stat st {};
  if (::lstat((git_dir + "/config.worktree").c_str(), &st) == 0) out.push_back(git_dir + "/config.worktree");
  collect_modules(git_dir + "/modules", 0, out);
  if (DIR *d = ::opendir((git_dir + "/worktrees").c_str())) {
    while (dirent *de = ::readdir(d)) {
      std::string n = de->d_name;
      if (n == "." || n == ".." || out.size() >= 256) continue;
      std::string f = git_dir + "/worktrees/" + n + "/config.worktree";
      if (::lstat(f.c_str(), &st) == 0) out.push_back(f);
    }
    ::closedir(d);
  }
  return out;
}

workspace_scan scan_workspace(const std::string &root, const std::vector<std::string> &patterns,
                              std::size_t max_entries) {
  walker w{patterns, max_entries, {}, {}};
  int fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return {};
  auto slash = root.rfind('/');
  std::string base = root.substr(slash + 1);
  w.walk(fd, root, base.c_str(), 0);
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

std::vector<std::string> command_files(const std::string &argv0, const std::string &path,
                                       const std::string &cwd, const std::string &home) {
  std::vector<std::string> out;
  std::string found = search_path(argv0, path, cwd);
  if (found.empty()) return out;
  std::string real = resolved(found);
  if (real.empty()) return out;
  out.push_back(found);
  if (real != found) out.push_back(real);
  if (auto pkg = package_root(real, home); !pkg.empty()) out.push_back(pkg);
  // A script: its interpreter, and for `#!/usr/bin/env [-S] NAME` the NAME env would run.
  std::string head = read_head(real, 256);
  if (head.rfind("#!", 0) != 0) return out;
  std::string line = head.substr(2, head.find('\n') == std::string::npos ? std::string::npos : head.find('\n') - 2);
  std::vector<std::string> words;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    std::size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
    if (j > i) words.push_back(line.substr(i, j - i));
    i = j;
  }
  if (words.empty()) return out;
  std::string interp = resolved(words[0]);
  if (!interp.empty()) out.push_back(interp);
  if (auto pkg = interp.empty() ? std::string() : package_root(interp, home); !pkg.empty()) {
    out.push_back(pkg);
  }
  if (words[0].size() >= 4 && words[0].compare(words[0].size() - 4, 4, "/env") == 0) {
    for (std::size_t k = 1; k < words.size(); ++k) {
      if (words[k] == "-S" || (words[k][0] == '-' && words[k].find('=') == std::string::npos)) continue;
      if (words[k].find('=') != std::string::npos) continue; // VAR=value
      std::string target = search_path(words[k], path, cwd);
      if (!target.empty()) {
        out.push_back(target);
        if (auto r = resolved(target); !r.empty() && r != target) out.push_back(r);
      }
      break;
    }
  }
  return out;
}

} // namespace sluice::exec
