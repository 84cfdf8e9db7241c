#include "exec/journal_impl.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <stdexcept>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

// The steps of a run's record and the file operations they are made of: what the upper layer
// holds, planned as steps; each step taken (apply) or taken back (undo), skipping what is done.
namespace sluice::exec::journal::detail {

namespace fs = std::filesystem;

std::string join(const std::string &a, const std::string &rel) { return rel.empty() ? a : a + "/" + rel; }

// Where step `o` keeps what it replaced.
std::string before_of(const std::string &dir, const op &o) {
  return join(o.batch == 0 ? dir + "/before" : dir + "/before." + std::to_string(o.batch), o.path);
}

// rm -rf that also takes directories whose mode shuts their owner out (the overlay makes its
// work/work with mode 0): each is given back to its owner first.
void remove_tree(const std::string &p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    ::chmod(p.c_str(), 0700);
    if (DIR *d = ::opendir(p.c_str())) {
      std::vector<std::string> names;
      while (dirent *e = ::readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") names.push_back(n);
      }
      ::closedir(d);
      for (const auto &n : names) remove_tree(p + "/" + n);
    }
    ::rmdir(p.c_str());
  } else {
    ::unlink(p.c_str());
  }
}

bool lexists(const std::string &p, struct stat *out) {
  struct stat st {};
  bool ok = ::lstat(p.c_str(), &st) == 0;
  if (ok && out) *out = st;
  return ok;
}

[[noreturn]] void fail(const std::string &what, const std::string &path) {
  throw std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}

namespace {

void make_parents(const std::string &p) {
  std::error_code ec;
  fs::create_directories(fs::path(p).parent_path(), ec);
  if (ec) throw std::runtime_error("cannot make the directories of " + p + ": " + ec.message());
}

} // namespace

// Runs a program of the system (cp, rm, diff) and waits for it; its exit status.
int run_program(const std::vector<std::string> &argv) {
  pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    std::vector<char *> args;
    for (const auto &a : argv) args.push_back(const_cast<char *>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

namespace {

// A rename; across file systems (the run's directory elsewhere than the workspace), a copy that
// keeps modes, times and links (cp -a), then the source removed.
void move_path(const std::string &from, const std::string &to) {
  if (::rename(from.c_str(), to.c_str()) == 0) return;
  if (errno != EXDEV) fail("cannot move " + from + " to", to);
  if (run_program({"/bin/cp", "-a", "--no-target-directory", from, to}) != 0) {
    throw std::runtime_error("cannot copy " + from + " to " + to + " (cp -a failed)");
  }
  remove_tree(from);
  if (lexists(from)) throw std::runtime_error("cannot remove " + from + " after copying it");
}

bool whiteout(const struct stat &st) { return S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0); }

bool opaque(const std::string &p) {
  char v[4] = {};
  for (const char *name : {"user.overlay.opaque", "trusted.overlay.opaque"}) {
    if (::lgetxattr(p.c_str(), name, v, sizeof v) > 0 && v[0] == 'y') return true;
  }
  return false;
}

// The overlay's own attributes (user.overlay.*) stay with the layer, not the workspace.
void strip_overlay_xattrs(const std::string &p) {
  auto strip = [](const std::string &one) {
    char names[4096];
    ssize_t n = ::llistxattr(one.c_str(), names, sizeof names);
    for (ssize_t i = 0; i < n;) {
      std::string name(names + i);
      if (name.rfind("user.overlay.", 0) == 0) ::lremovexattr(one.c_str(), name.c_str());
      i += static_cast<ssize_t>(name.size()) + 1;
    }
  };
  strip(p);
  struct stat st {};
  if (!lexists(p, &st) || !S_ISDIR(st.st_mode)) return;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    strip(it->path().string());
  }
}

} // namespace

// What a path holds, as a string that changes when anything under it does: type, mode, size,
// modification time and inode of it and of everything below it.
std::string stamp_of(const std::string &p) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (i * 8)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  auto one = [&](const std::string &rel, const struct stat &st) {
    for (char c : rel) mix(static_cast<unsigned char>(c));
    mix(st.st_mode);
    mix(st.st_ino);
    if (!S_ISDIR(st.st_mode)) {
      mix(static_cast<std::uint64_t>(st.st_size));
      mix(static_cast<std::uint64_t>(st.st_mtim.tv_sec));
      mix(static_cast<std::uint64_t>(st.st_mtim.tv_nsec));
    }
  };
  struct stat st {};
  if (!lexists(p, &st)) return "absent";
  one("", st);
  if (S_ISDIR(st.st_mode)) {
    std::vector<std::pair<std::string, struct stat>> below;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      struct stat s {};
      if (lexists(it->path().string(), &s)) below.emplace_back(it->path().string().substr(p.size()), s);
    }
    std::sort(below.begin(), below.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
    for (const auto &[rel, s] : below) one(rel, s);
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

namespace {

op replace(const std::string &path, bool before, bool after) {
  op o;
  o.path = path;
  o.before = before;
  o.after = after;
  return o;
}

} // namespace

// The steps that put the upper layer's entries under `rel` into the workspace.
void plan_dir(const std::string &upper, const std::string &ws, const std::string &rel, std::vector<op> &ops) {
  DIR *d = ::opendir(join(upper, rel).c_str());
  if (!d) fail("cannot read the run's layer", join(upper, rel));
  std::vector<std::string> names;
  while (dirent *e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto &n : names) {
    std::string r = rel.empty() ? n : rel + "/" + n;
    struct stat u {}, w {};
    if (!lexists(join(upper, r), &u)) continue;
    bool there = lexists(join(ws, r), &w);
    if (whiteout(u)) {
      if (there) ops.push_back(replace(r, true, false));
      continue;
    }
    if (S_ISDIR(u.st_mode) && there && S_ISDIR(w.st_mode) && !opaque(join(upper, r))) {
      plan_dir(upper, ws, r, ops);
      op m;
      m.path = r;
      m.kind = 'm';
      m.mode = w.st_mode & 07777;
      m.umode = u.st_mode & 07777;
      m.mtime = w.st_mtim;
      m.umtime = u.st_mtim;
      ops.push_back(m);
      continue;
    }
    ops.push_back(replace(r, there, true));
  }
}

// Finishes an apply that stopped part-way: each step again, skipping what is done.
void apply_steps(const std::string &dir, const std::string &ws, std::vector<op> &ops) {
  std::string upper = dir + "/upper";
  for (auto &o : ops) {
    std::string w = join(ws, o.path), u = join(upper, o.path), b = before_of(dir, o);
    if (o.kind == 'm') {
      ::chmod(w.c_str(), o.umode);
      timespec t[2] = {{0, UTIME_OMIT}, o.umtime};
      ::utimensat(AT_FDCWD, w.c_str(), t, AT_SYMLINK_NOFOLLOW);
      continue;
    }
    if (o.before && lexists(w) && !lexists(b)) {
      make_parents(b);
      move_path(w, b);
    }
    if (o.after && lexists(u) && !lexists(w)) {
      move_path(u, w);
      strip_overlay_xattrs(w);
    }
    o.stamp = o.after ? stamp_of(w) : "absent";
  }
}

// Puts the workspace back, last step first, skipping what is done.
void undo_steps(const std::string &dir, const std::string &ws, const std::vector<op> &ops) {
  std::string trash = dir + "/trash";
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
    const auto &o = *it;
    std::string w = join(ws, o.path), b = before_of(dir, o), t = join(trash + "." + std::to_string(o.batch), o.path);
    if (o.kind == 'm') {
      ::chmod(w.c_str(), o.mode);
      timespec times[2] = {{0, UTIME_OMIT}, o.mtime};
      ::utimensat(AT_FDCWD, w.c_str(), times, AT_SYMLINK_NOFOLLOW);
      continue;
    }
    if (o.after && lexists(w) && !lexists(t)) {
      make_parents(t);
      move_path(w, t);
    }
    if (o.before && lexists(b)) {
      make_parents(w);
      move_path(b, w);
    }
  }
  std::error_code ec;
  for (const auto &e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename().string().rfind("trash.", 0) == 0) remove_tree(e.path());
  }
}

} // namespace sluice::exec::journal::detail
