#include "exec/git_metadata.hpp"

#include <cctype>
#include <climits>
#include <cstdlib>
#include <cerrno>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sluice::exec {
namespace {

// The keys `git init`, `git clone` and ordinary use write: nothing in them runs a program.
bool harmless_git_key(const std::string &section, const std::string &key) {
  static const char *const plain[] = {
      "core.repositoryformatversion", "core.filemode", "core.bare", "core.logallrefupdates",
      "core.ignorecase", "core.precomposeunicode", "core.symlinks", "core.autocrlf", "core.eol",
      "core.safecrlf", "core.worktree", "extensions.objectformat", "init.defaultbranch", "user.name", "user.email",
      "pull.rebase", "pull.ff", "fetch.prune", "advice.detachedhead"};
  std::string full = section + "." + key;
  for (auto k : plain) {
    if (full == k) return true;
  }
  if (section == "remote") return key == "url" || key == "fetch" || key == "pushurl" || key == "tagopt";
  if (section == "branch") return key == "remote" || key == "merge" || key == "rebase";
  return false;
}

// Reads at most 1 MiB of a regular file opened from `fd`/`name` without following a symlink;
// false when it is not one or cannot be read whole.
bool read_regular(int fd, const char *name, std::string &text) {
  int f = ::openat(fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (f < 0) return false;
  struct stat st {};
  bool ok = ::fstat(f, &st) == 0 && S_ISREG(st.st_mode);
  char chunk[4096];
  ssize_t n = 0;
  while (ok && (n = ::read(f, chunk, sizeof chunk)) > 0) {
    text.append(chunk, static_cast<std::size_t>(n));
    if (text.size() > (1u << 20)) ok = false;
  }
  ::close(f);
  return ok && n == 0;
}

// A hooks directory holding nothing but Git's samples (git init copies them, inert until renamed).
bool only_samples(int fd, const char *name) {
  int hooks = ::openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (hooks < 0) return false;
  DIR *d = ::fdopendir(hooks);
  if (!d) {
    ::close(hooks);
    return false;
  }
  bool ok = true;
  while (dirent *de = ::readdir(d)) {
    std::string n = de->d_name;
    if (n == "." || n == "..") continue;
    if (n.size() < 7 || n.compare(n.size() - 7, 7, ".sample") != 0) ok = false;
  }
  ::closedir(d);
  return ok;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  std::size_t a = s.find_first_not_of(" \t");
  return a == std::string::npos ? std::string() : s.substr(a);
}

std::string lower(std::string s) {
  for (auto &c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// core.hooksPath's value in a config text (the last one wins, as in Git), quotes and a trailing
// comment removed; "" when unset.
std::string hooks_path_in(const std::string &text) {
  std::string section, value;
  std::size_t i = 0;
  while (i < text.size()) {
    auto end = text.find('\n', i);
    if (end == std::string::npos) end = text.size();
    std::string line = trim(text.substr(i, end - i));
    i = end + 1;
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line[0] == '[') {
      auto close = line.find(']');
      std::string head = line.substr(1, close == std::string::npos ? std::string::npos : close - 1);
      section = lower(head.substr(0, head.find_first_of(" \t.")));
      continue;
    }
    auto eq = line.find('=');
    if (section != "core" || lower(trim(line.substr(0, eq))) != "hookspath" || eq == std::string::npos) continue;
    std::string v = trim(line.substr(eq + 1)), out;
    bool quoted = false;
    for (std::size_t k = 0; k < v.size(); ++k) {
      char c = v[k];
      if (c == '"') {
        quoted = !quoted;
      } else if (!quoted && (c == '#' || c == ';')) {
        break;
      } else if (c == '\\' && k + 1 < v.size()) {
        out += v[++k];
      } else {
        out += c;
      }
    }
    value = trim(out);
  }
  return value;
}

std::string resolved_path(const std::string &p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : std::string();
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
      for (auto f : {"/config", "/hooks", "/config.worktree", "/commondir"}) {
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
  for (auto f : {"/config", "/config.worktree", "/commondir", "/hooks"}) {
    if (::lstat((git_dir + f).c_str(), &st) == 0) out.push_back(git_dir + f);
  }
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

std::string git_dir_of(const std::string &dot_git) {
  struct stat st {};
  if (::lstat(dot_git.c_str(), &st) != 0) return {};
  if (S_ISREG(st.st_mode)) {
    std::string text;
    if (!read_regular(AT_FDCWD, dot_git.c_str(), text)) return {};
    std::string line = trim(text.substr(0, text.find('\n')));
    if (line.rfind("gitdir:", 0) != 0) return {};
    std::string dir = trim(line.substr(7));
    if (dir.empty()) return {};
    if (dir[0] != '/') dir = dot_git.substr(0, dot_git.rfind('/')) + "/" + dir;
    return resolved_path(dir);
  }
  return resolved_path(dot_git);
}

std::string git_hooks_path(const std::string &git_dir, const std::string &work_tree,
                           const std::string &home) {
  std::string value;
  for (auto f : {"/config", "/config.worktree"}) {
    std::string text;
    if (!read_regular(AT_FDCWD, (git_dir + f).c_str(), text)) continue;
    if (auto v = hooks_path_in(text); !v.empty()) value = v;
  }
  if (value.empty()) return {};
  if (value.rfind("~/", 0) == 0) return home.empty() ? std::string() : home + value.substr(1);
  if (value[0] != '/') value = work_tree + "/" + value;
  return value;
}

bool harmless_git_metadata(int fd, const std::string &name, bool hooks_dir) {
  if (hooks_dir) return only_samples(fd, name.c_str());
  if (name != "config" && name != "config.worktree") return false; // commondir: another Git directory
  std::string text;
  return read_regular(fd, name.c_str(), text) && harmless_git_config(text);
}

bool harmless_new_repository(int base) {
  int git = ::openat(base, ".git", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (git < 0) return false; // a .git file or link names a Git directory elsewhere
  struct stat st {};
  bool ok = true;
  if (::fstatat(git, "config", &st, AT_SYMLINK_NOFOLLOW) == 0) {
    ok = harmless_git_metadata(git, "config", false);
  } else if (errno != ENOENT) {
    ok = false;
  }
  for (auto extra : {"config.worktree", "commondir", "modules", "worktrees"}) {
    if (::fstatat(git, extra, &st, AT_SYMLINK_NOFOLLOW) == 0) ok = false; // not what git init makes
  }
  if (::fstatat(git, "hooks", &st, AT_SYMLINK_NOFOLLOW) == 0) {
    ok = ok && harmless_git_metadata(git, "hooks", true);
  } else if (errno != ENOENT) {
    ok = false;
  }
  ::close(git);
  return ok;
}

} // namespace sluice::exec
