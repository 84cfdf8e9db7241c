#include "exec/mount_view_impl.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <functional>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace sluice::exec {
namespace detail {

std::string err(const std::string &what, const std::string &path) {
  return what + " " + path + ": " + std::strerror(errno);
}

bool make_dirs(const std::string &path, mode_t mode) {
  for (std::size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      std::string part = path.substr(0, i);
      if (::mkdir(part.c_str(), mode) != 0 && errno != EEXIST) return false;
    }
  }
  return true;
}

bool make_file(const std::string &path) {
  auto slash = path.rfind('/');
  if (slash != 0 && !make_dirs(path.substr(0, slash), 0755)) return false;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return errno == EEXIST || errno == EROFS ? ::access(path.c_str(), F_OK) == 0 : false;
  ::close(fd);
  return true;
}

bool set_attr(const std::string &path, std::uint64_t attrs, bool recursive) {
  mount_attr a{};
  a.attr_set = attrs;
  return ::mount_setattr(AT_FDCWD, path.c_str(), recursive ? AT_RECURSIVE : 0, &a, sizeof a) == 0;
}

} // namespace detail

using namespace detail;

namespace {

// After the first pivot the host's root is here, and the new root is built here.
const std::string old_root = "/oldroot";
const std::string new_root = "/newroot";

// /etc entries that hold secrets on any machine: masked for every caller.
const char *const etc_secrets[] = {
    "/etc/shadow", "/etc/shadow-",  "/etc/gshadow",     "/etc/gshadow-",         "/etc/sudoers",
    "/etc/sudoers.d", "/etc/ssl/private", "/etc/sluice", "/etc/security/opasswd",
};

// Binds host `src` (a path as the host sees it) at the same path in the new root.
std::string bind_host(const std::string &src, std::uint64_t attrs, bool recursive = true) {
  std::string from = old_root + src, to = new_root + src;
  struct stat st {};
  if (::stat(from.c_str(), &st) != 0) return err("cannot stat", src);
  bool ok = S_ISDIR(st.st_mode) ? make_dirs(to, 0755) : make_file(to);
  if (!ok) return err("cannot make the mount point for", src);
  if (::mount(from.c_str(), to.c_str(), nullptr, MS_BIND | (recursive ? MS_REC : 0), nullptr) != 0) {
    return err("cannot bind", src);
  }
  if (attrs && !set_attr(to, attrs, recursive)) return err("cannot restrict the mount of", src);
  return {};
}

std::string mount_tmpfs(const std::string &to, const char *options, unsigned long flags = 0) {
  if (!make_dirs(to, 0755)) return err("cannot make", to);
  if (::mount("tmpfs", to.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | flags, options) != 0) {
    return err("cannot mount a tmpfs on", to);
  }
  return {};
}

// Hides a host /etc entry: an empty file or an empty read-only directory in its place.
std::string mask(const std::string &host_path) {
  std::string to = new_root + host_path;
  struct stat st {};
  if (::lstat(to.c_str(), &st) != 0) return {};
  if (S_ISDIR(st.st_mode)) {
    if (::mount("tmpfs", to.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY,
                "mode=0755,size=4k") != 0) {
      return err("cannot mask", host_path);
    }
  } else if (S_ISREG(st.st_mode) || S_ISSOCK(st.st_mode)) {
    // An empty read-only regular file (not /dev/null, which would swallow writes silently); over a
    // socket, a connect() finds no one listening.
    const char *empty = "/empty";
    if (::mount(empty, to.c_str(), nullptr, MS_BIND, nullptr) != 0 ||
        !set_attr(to, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false)) {
      return err("cannot mask", host_path);
    }
  }
  return {};
}

// A hidden workspace entry named as a canary of the run (".env", ".netrc", ".aws"): the home's
// decoy, read-only, in its place, so a command that looks for credentials finds one it cannot use
// unseen ([scan]). Returns "none" where no canary has that name, "" when shown, else what failed.
std::string show_canary(const view_spec &spec, const std::string &host_path) {
  if (spec.home.empty()) return "none";
  auto slash = host_path.rfind('/');
  std::string name = host_path.substr(slash == std::string::npos ? 0 : slash + 1);
  if (std::find(spec.canaries.begin(), spec.canaries.end(), name) == spec.canaries.end()) return "none";
  std::string from = new_root + spec.home + "/" + name, to = new_root + host_path;
  struct stat a {}, b {};
  if (::lstat(from.c_str(), &a) != 0 || ::lstat(to.c_str(), &b) != 0 || S_ISDIR(a.st_mode) != S_ISDIR(b.st_mode)) {
    return "none"; // a file where the decoy is a directory, or the other way round: masked as before
  }
  if (::mount(from.c_str(), to.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0 ||
      !set_attr(to, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC | MOUNT_ATTR_NODEV, true)) {
    return err("cannot show the canary at", host_path);
  }
  return {};
}

// Collects the entries under directory `dir` (host path `path`) that others may not read: for a
// root caller, whose uid owns them. Relative lookups (openat, fstatat) keep the walk cheap: /etc has
// over a thousand entries and this runs on every root caller's start-up.
void collect_unreadable(int dir, const std::string &path, int depth, std::vector<std::string> &out) {
  DIR *d = ::fdopendir(dir);
  if (!d) {
    ::close(dir);
    return;
  }
  while (dirent *de = ::readdir(d)) {
    const char *n = de->d_name;
    if (n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0'))) continue;
    if (de->d_type == DT_LNK || de->d_type == DT_SOCK || de->d_type == DT_FIFO) continue;
    struct stat st {};
    if (::fstatat(::dirfd(d), n, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    std::string child = path + "/" + n;
    if (!(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))) continue;
    if (!(st.st_mode & S_IROTH) || (S_ISDIR(st.st_mode) && !(st.st_mode & S_IXOTH))) {
      out.push_back(child); // the whole entry: a directory is masked with everything in it
      continue;
    }
    if (S_ISDIR(st.st_mode) && depth < 16) {
      int sub = ::openat(::dirfd(d), n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) collect_unreadable(sub, child, depth + 1, out);
    }
  }
  ::closedir(d);
}

std::string make_dev() {
  std::string dev = new_root + "/dev";
  if (auto e = mount_tmpfs(dev, "mode=0755,size=64k", MS_NOEXEC); !e.empty()) return e;
  // Device nodes bound from the host, read-only mounts: writing to /dev/null still works, changing
  // the host's node (chmod by a root caller) does not.
  for (auto name : {"null", "zero", "full", "random", "urandom", "tty"}) {
    std::string from = old_root + "/dev/" + name, to = dev + "/" + name;
    if (::access(from.c_str(), F_OK) != 0) continue;
    if (!make_file(to) || ::mount(from.c_str(), to.c_str(), nullptr, MS_BIND, nullptr) != 0 ||
        !set_attr(to, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false)) {
      return err("cannot bind device", from);
    }
  }
  const std::pair<const char *, const char *> links[] = {
      {"fd", "/proc/self/fd"},     {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"},
      {"stderr", "/proc/self/fd/2"}, {"ptmx", "pts/ptmx"},       {"core", "/proc/kcore"}};
  for (auto [name, target] : links) {
    if (::symlink(target, (dev + "/" + name).c_str()) != 0) return err("cannot link", dev + "/" + name);
  }
  std::string pts = dev + "/pts";
  if (!make_dirs(pts, 0755) ||
      ::mount("devpts", pts.c_str(), "devpts", MS_NOSUID | MS_NOEXEC,
              "newinstance,ptmxmode=0666,mode=620") != 0) {
    return err("cannot mount a private devpts on", "/dev/pts");
  }
  return mount_tmpfs(dev + "/shm", "mode=1777", MS_NOEXEC);
}

std::string make_proc() {
  std::string proc = new_root + "/proc";
  if (!make_dirs(proc, 0555)) return err("cannot make", "/proc");
  if (::mount("proc", proc.c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
    return err("cannot mount a /proc for the sandbox on", "/proc");
  }
  // Host-wide knobs stay read-only, as bubblewrap does: /proc/sys (core_pattern, hostname, ...),
  // the sysrq trigger, interrupt affinities, bus settings.
  for (auto name : {"sys", "sysrq-trigger", "irq", "bus"}) {
    std::string p = proc + "/" + name;
    if (::access(p.c_str(), F_OK) != 0) continue;
    if (::mount(p.c_str(), p.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0 ||
        !set_attr(p, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                  true)) {
      return err("cannot make read-only", "/proc/" + std::string(name));
    }
  }
  return {};
}

} // namespace

bool is_under(const std::string &path, const std::string &dir) {
  if (dir == "/") return true;
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
                         path[dir.size()] == '/');
}

const std::vector<std::string> &system_paths() {
  static const std::vector<std::string> paths = [] {
    std::vector<std::string> out;
    for (auto p : {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}) {
      if (::access(p, F_OK) == 0) out.push_back(p);
    }
    return out;
  }();
  return paths;
}

namespace {

constexpr std::uint64_t ro_attrs = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;

// Stage 1, as bubblewrap: a tmpfs becomes the root, the host's root moves to /oldroot, and a
// second tmpfs at /newroot will receive what the command may see.
std::string new_root_on_tmpfs() {
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return err("cannot make mounts private at", "/");
  }
  const char *base = "/tmp";
  struct stat st {};
  if (::stat(base, &st) != 0 || !S_ISDIR(st.st_mode)) base = "/dev";
  if (::mount("tmpfs", base, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k") != 0) {
    return err("cannot mount a tmpfs on", base);
  }
  std::string b = base;
  if (::mkdir((b + old_root).c_str(), 0755) != 0 || ::mkdir((b + new_root).c_str(), 0755) != 0) {
    return err("cannot make directories in", b);
  }
  if (::syscall(SYS_pivot_root, base, (b + old_root).c_str()) != 0) return err("pivot_root to", b);
  if (::chdir("/") != 0) return err("chdir", "/");
  if (int fd = ::open("/empty", O_WRONLY | O_CREAT | O_CLOEXEC, 0444); fd >= 0) {
    ::close(fd);
  } else {
    return err("cannot make", "/empty");
  }
  if (::mount("tmpfs", new_root.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") != 0) {
    return err("cannot mount the new root on", new_root);
  }
  return {};
}

// Stage 2: the system paths, read-only; a root caller's /etc as sluice's id-mapped copy when it
// can be attached (`etc_idmapped`), else as any caller's.
std::string show_system_paths(const view_spec &spec, const std::vector<std::string> &sys_paths,
                              const std::function<int()> &system_etc, bool &etc_idmapped) {
  struct stat st {};
  for (const auto &p : sys_paths) {
    std::string host = old_root + p;
    if (::lstat(host.c_str(), &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) { // merged /usr: /bin -> usr/bin
      char target[4096];
      ssize_t n = ::readlink(host.c_str(), target, sizeof target - 1);
      if (n <= 0) return err("cannot read link", p);
      target[n] = '\0';
      if (::symlink(target, (new_root + p).c_str()) != 0) return err("cannot link", p);
      continue;
    }
    if (p == "/etc" && spec.hide_unreadable_etc && system_etc) {
      int tree = system_etc();
      if (tree >= 0) {
        std::string to = new_root + p;
        etc_idmapped = make_dirs(to, 0755) &&
                       ::move_mount(tree, "", AT_FDCWD, to.c_str(), MOVE_MOUNT_F_EMPTY_PATH) == 0;
        ::close(tree);
        if (etc_idmapped) continue;
        // A kernel that will not attach it here: /etc as for any caller, and the walk below.
      }
    }
    if (auto e = bind_host(p, ro_attrs); !e.empty()) return e;
  }
  return {};
}

// Stage 3: /dev, /proc, /sys, a private /tmp, and the directory for sluice's files.
std::string show_devices_and_tmp(const view_spec &spec) {
  if (auto e = make_dev(); !e.empty()) return e;
  if (auto e = make_proc(); !e.empty()) return e;
  if (spec.bind_sys && ::access((old_root + "/sys").c_str(), F_OK) == 0) {
    if (auto e = bind_host("/sys", ro_attrs | MOUNT_ATTR_NOEXEC); !e.empty()) return e;
  }
  if (auto e = mount_tmpfs(new_root + "/tmp", "mode=1777"); !e.empty()) return e;
  if (!make_dirs(new_root + sandbox_files_dir, 0755)) return err("cannot make", sandbox_files_dir);
  return {};
}

// Shows `from` (a directory entry of the view in the making) at `to`: a symlink made again, anything
// else bound with what is mounted below it.
bool show_entry(const std::string &from, const std::string &to) {
  struct stat st {};
  if (::lstat(from.c_str(), &st) != 0) return true; // gone meanwhile
  if (S_ISLNK(st.st_mode)) {
    char target[PATH_MAX];
    ssize_t n = ::readlink(from.c_str(), target, sizeof target - 1);
    return n > 0 && ::symlink(std::string(target, static_cast<std::size_t>(n)).c_str(), to.c_str()) == 0;
  }
  return (S_ISDIR(st.st_mode) ? make_dirs(to, 0755) : make_file(to)) &&
         ::mount(from.c_str(), to.c_str(), nullptr, MS_BIND | MS_REC, nullptr) == 0;
}

// Stage 2b, for Git over SSH (spec.ssh_known_hosts): OpenSSH's default global known-hosts file,
// which seal_view replaces with the gateway's known hosts, must exist to be bound over. Where the
// host has /etc/ssh without one, the view's /etc/ssh becomes a read-only tmpfs of its own with
// each of its entries shown in it (from the view's /etc, so that a root caller's id mapping holds;
// the host keys among them are masked at stage 5 as before) and an empty ssh_known_hosts.
std::string make_known_hosts_mount_point(const view_spec &spec) {
  const std::string dir = new_root + "/etc/ssh";
  const std::string aside = "/etc-ssh"; // in the first root, which goes at the pivot
  struct stat st {};
  if (!spec.ssh_known_hosts || ::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return {};
  if (::lstat((dir + "/ssh_known_hosts").c_str(), &st) == 0) return {}; // the host's, bound over as it is
  if (!make_dirs(aside, 0755) || ::mount(dir.c_str(), aside.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
    return err("cannot set aside", "/etc/ssh");
  }
  std::string failed = mount_tmpfs(dir, "mode=0755,size=64k");
  DIR *d = failed.empty() ? ::opendir(aside.c_str()) : nullptr;
  if (failed.empty() && !d) failed = err("cannot read", "/etc/ssh");
  while (dirent *de = d ? ::readdir(d) : nullptr) {
    std::string n = de->d_name;
    if (n == "." || n == "..") continue;
    if (!show_entry(aside + "/" + n, dir + "/" + n)) {
      failed = err("cannot show", "/etc/ssh/" + n);
      break;
    }
  }
  if (d) ::closedir(d);
  if (failed.empty() && !make_file(dir + "/ssh_known_hosts")) failed = err("cannot make", "/etc/ssh/ssh_known_hosts");
  ::umount2(aside.c_str(), MNT_DETACH);
  if (failed.empty() && !set_attr(dir, ro_attrs, true)) failed = err("cannot make read-only", "/etc/ssh");
  return failed;
}

// The journal's layer over the workspace (exec/journal.hpp): the workspace below, the run's layer
// above it (user.overlay.* attributes, as a user namespace needs; no redirects or metacopy, so
// that every change is whole in the layer; volatile: a copy-up is not synced, the workspace below
// is never written anyway). The run's directory is the caller's, outside the view.
std::string layer_workspace(const view_spec &spec) {
  std::string to = new_root + spec.workspace;
  std::string opts = "lowerdir=" + old_root + spec.workspace + ",upperdir=" + old_root + spec.journal_upper +
                     ",workdir=" + old_root + spec.journal_work +
                     ",userxattr,redirect_dir=nofollow,metacopy=off,index=off,volatile";
  if (!make_dirs(to, 0755) || ::mount("overlay", to.c_str(), "overlay", MS_NOSUID | MS_NODEV, opts.c_str()) != 0) {
    return err("cannot layer the journal (overlayfs, upper layer in " + spec.journal_upper + ") over", spec.workspace);
  }
  return {};
}

std::string show_workspace(const view_spec &spec) {
  if (spec.workspace.empty()) return {};
  if (!spec.journal_upper.empty() && spec.workspace_writable) return layer_workspace(spec);
  return bind_host(spec.workspace, spec.workspace_writable ? MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV : ro_attrs);
}

// Stage 4: the home and the workspace, the outer one first so that the inner one shows through;
// the granted writable directories; the tool caches in the private home; files written into it.
std::string show_home_and_workspace(const view_spec &spec) {
  auto mount_home = [&]() -> std::string {
    return spec.home.empty() ? std::string() : mount_tmpfs(new_root + spec.home, "mode=0700");
  };
  bool home_inside = !spec.home.empty() && !spec.workspace.empty() && is_under(spec.home, spec.workspace);
  if (auto e = home_inside ? show_workspace(spec) : mount_home(); !e.empty()) return e;
  if (auto e = home_inside ? mount_home() : show_workspace(spec); !e.empty()) return e;
  // Granted writable directories (never inside the workspace or the home: the policy refuses
  // those), then the tool caches in the private home.
  for (auto &w : spec.writable) {
    if (auto e = bind_host(w, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV); !e.empty()) return e;
  }
  for (auto &[from, to] : spec.binds) {
    std::string target = new_root + to;
    if (!make_dirs(target, 0700) ||
        ::mount((old_root + from).c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0 ||
        !set_attr(target, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, false)) {
      return err("cannot show " + from + " at", to);
    }
  }
  for (auto &[path, data] : spec.home_files) {
    std::string to = new_root + path;
    auto slash = to.rfind('/');
    int fd = -1;
    if (spec.home.empty() || !is_under(path, spec.home) || !make_dirs(to.substr(0, slash), 0700) ||
        (fd = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0) {
      return err("cannot write into the private home", path);
    }
    std::size_t done = 0;
    while (done < data.size()) {
      ssize_t n = ::write(fd, data.data() + done, data.size() - done);
      if (n <= 0) {
        ::close(fd);
        return err("cannot write into the private home", path);
      }
      done += static_cast<std::size_t>(n);
    }
    ::close(fd);
  }
  return {};
}

// Stage 5: /etc files that hold secrets, the host's SSH keys, and for a root caller without the
// id-mapped copy every /etc entry others may not read, masked.
std::string mask_secrets(const view_spec &spec, bool etc_idmapped) {
  for (auto p : etc_secrets) {
    if (auto e = mask(p); !e.empty()) return e;
  }
  if (DIR *d = ::opendir((old_root + "/etc/ssh").c_str())) { // host keys: ssh_host_*_key
    while (dirent *de = ::readdir(d)) {
      std::string n = de->d_name;
      if (n.rfind("ssh_host_", 0) == 0 && n.size() > 4 && n.compare(n.size() - 4, 4, "_key") == 0) {
        if (auto e = mask("/etc/ssh/" + n); !e.empty()) {
          ::closedir(d);
          return e;
        }
      }
    }
    ::closedir(d);
  }
  if (spec.hide_unreadable_etc && !etc_idmapped) {
    std::vector<std::string> hidden;
    int etc = ::open((old_root + "/etc").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (etc >= 0) collect_unreadable(etc, "/etc", 0, hidden);
    for (auto &p : hidden) {
      if (auto e = mask(p); !e.empty()) return e;
    }
  }
  return {};
}

// Stage 6: files the command needs from outside the system paths (its executable, its
// interpreter). (Paths are compared as strings: host symlinks such as /usr/bin/java ->
// /etc/alternatives/java do not resolve while the host's root is at /oldroot.) Outer paths
// first: a linked worktree's Git directory lies inside the common one.
std::string show_command_files(const view_spec &spec, const std::vector<std::string> &sys_paths) {
  std::vector<std::string> extra = spec.extra, bound;
  std::sort(extra.begin(), extra.end(),
            [](const std::string &a, const std::string &b) { return a.size() < b.size(); });
  for (auto &f : extra) {
    auto under = [&](const std::string &p) { return is_under(f, p); };
    bool shown = (!spec.workspace.empty() && is_under(f, spec.workspace)) ||
                 std::any_of(sys_paths.begin(), sys_paths.end(), under) ||
                 std::any_of(bound.begin(), bound.end(), under);
    if (shown) continue;
    // A symlink (a launcher on PATH naming the real binary, which is in the list too) is made
    // again in the view: bound, it would be followed from the host's root, which is not "/" here.
    struct stat lst {};
    if (::lstat((old_root + f).c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
      char target[PATH_MAX];
      ssize_t n = ::readlink((old_root + f).c_str(), target, sizeof target - 1);
      std::string to = new_root + f;
      if (n <= 0 || !make_dirs(to.substr(0, to.rfind('/')), 0755)) return err("cannot show the symlink", f);
      target[n] = '\0';
      if (::symlink(target, to.c_str()) != 0 && errno != EEXIST) return err("cannot show the symlink", f);
      continue;
    }
    if (auto e = bind_host(f, ro_attrs); !e.empty()) return e;
    bound.push_back(f);
  }
  return {};
}

// A path of the view made read-only where it shows (a file, or a directory and all below it).
std::string protect(const std::string &f) {
  std::string to = new_root + f;
  struct stat st {};
  if (::lstat(to.c_str(), &st) != 0 || !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))) return {};
  bool dir = S_ISDIR(st.st_mode);
  if (::mount(to.c_str(), to.c_str(), nullptr, MS_BIND | (dir ? MS_REC : 0), nullptr) != 0 ||
      !set_attr(to, ro_attrs, dir)) {
    return err("cannot make read-only the trusted", f);
  }
  return {};
}

// Stage 7: trusted files read-only where they show (the policy in the workspace, say), an agent's
// stored keys hidden, then what sluice's walk of the workspace found meanwhile
// (workspace_guard::scan): guarded names and Git metadata read-only, credential files and host
// sockets hidden.
std::string protect_and_hide(const view_spec &spec, const std::function<view_marks()> &workspace_marks) {
  for (auto &f : spec.protect) {
    if (auto e = protect(f); !e.empty()) return e;
  }
  struct stat st {};
  for (auto &f : spec.hide) {
    if (::lstat((new_root + f).c_str(), &st) != 0) continue; // nothing there to hide
    if (auto e = mask(f); !e.empty()) return e;
  }
  if (workspace_marks) {
    view_marks marks = workspace_marks();
    for (auto &p : marks.protect) {
      if (auto e = protect(p); !e.empty()) return e;
    }
    for (auto &p : marks.hide) {
      if (auto e = show_canary(spec, p); e != "none") {
        if (!e.empty()) return e;
        continue;
      }
      if (auto e = mask(p); !e.empty()) return e;
    }
  }
  return {};
}

// Stage 8: the host's root dropped, and the new root made the root.
std::string pivot_into_new_root() {
  if (::umount2(old_root.c_str(), MNT_DETACH) != 0) return err("cannot detach", "the host's root");
  int old_fd = ::open("/", O_DIRECTORY | O_RDONLY | O_CLOEXEC);
  if (old_fd < 0 || ::chdir(new_root.c_str()) != 0 || ::syscall(SYS_pivot_root, ".", ".") != 0 ||
      ::fchdir(old_fd) != 0 || ::umount2(".", MNT_DETACH) != 0 || ::chdir("/") != 0) {
    return err("cannot pivot into", "the new root");
  }
  ::close(old_fd);
  return {};
}

} // namespace

std::string build_view(const view_spec &spec,
                       const std::function<view_marks()> &workspace_marks,
                       const std::function<int()> &system_etc) {
  const auto &sys_paths = system_paths(); // looked up before the host's root moves
  bool etc_idmapped = false;              // a root caller's /etc with no file of root's: no walk needed
  for (auto stage : std::initializer_list<std::function<std::string()>>{
           [&] { return new_root_on_tmpfs(); },
           [&] { return show_system_paths(spec, sys_paths, system_etc, etc_idmapped); },
           [&] { return make_known_hosts_mount_point(spec); },
           [&] { return show_devices_and_tmp(spec); },
           [&] { return show_home_and_workspace(spec); },
           [&] { return mask_secrets(spec, etc_idmapped); },
           [&] { return show_command_files(spec, sys_paths); },
           [&] { return protect_and_hide(spec, workspace_marks); },
           [&] { return show_sockets(spec, old_root, new_root); }, // last: over a mask of the walk's
           [&] { return pivot_into_new_root(); }}) {
    if (auto e = stage(); !e.empty()) return e;
  }
  return {};
}

landlock_rules view_landlock_rules(const view_spec &spec) {
  landlock_rules r;
  for (auto &p : system_paths()) r.read.push_back(p);
  for (auto p : {"/proc", "/sys", sandbox_files_dir}) r.read.push_back(p);
  for (auto &f : spec.extra) r.read.push_back(f);
  r.devices = {"/dev"};
  r.write = {"/tmp", "/dev/shm"};
  if (!spec.home.empty()) r.write.push_back(spec.home);
  if (!spec.workspace.empty()) (spec.workspace_writable ? r.write : r.read).push_back(spec.workspace);
  for (auto &w : spec.writable) r.write.push_back(w);
  for (auto &b : spec.binds) r.write.push_back(b.second);
  // The granted Unix sockets need no rule: connect() is no right Landlock handles (to ABI 7), so
  // the view alone decides which sockets exist.
  return r;
}

} // namespace sluice::exec
