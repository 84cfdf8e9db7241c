#include "exec/platform.hpp"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <poll.h>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sched.h>
#include <sstream>
#include <string_view>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace sluice::exec {
namespace {

std::optional<std::string> read_text(const char *path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::ostringstream s;
  s << f.rdbuf();
  std::string t = s.str();
  while (!t.empty() && (t.back() == '\n' || t.back() == '\0')) t.pop_back();
  return t;
}

template <class T> std::optional<T> read_number(const char *path) {
  auto t = read_text(path);
  if (!t || t->empty()) return std::nullopt;
  char *end = nullptr;
  long v = std::strtol(t->c_str(), &end, 10);
  if (end == t->c_str()) return std::nullopt;
  return static_cast<T>(v);
}

// In the probe's child only raw system calls: the caller may have threads (exec's gateway), and a
// child of a threaded process must not allocate.
void write_raw(const char *path, const std::string &text) {
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;
  (void)!::write(fd, text.data(), text.size());
  ::close(fd);
}

// In a child: a user and mount namespace, the id maps, then what the sandbox needs first (a private
// mount tree, a tmpfs) and, in a PID namespace of its own, a fresh /proc. Three errnos come back.
void probe_userns(platform_facts &f) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return;
  const std::string uid_map = "0 " + std::to_string(::getuid()) + " 1\n";
  const std::string gid_map = "0 " + std::to_string(::getgid()) + " 1\n";
  const std::string deny = "deny";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    int e[3] = {0, 0, 0};
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
      e[0] = errno;
    } else {
      write_raw("/proc/self/setgroups", deny);
      write_raw("/proc/self/uid_map", uid_map);
      write_raw("/proc/self/gid_map", gid_map);
      if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
          ::mount("tmpfs", "/tmp", "tmpfs", 0, "size=64k") != 0) {
        e[1] = errno;
      } else if (::unshare(CLONE_NEWPID) != 0) {
        e[2] = errno;
      } else {
        ::mkdir("/tmp/proc", 0700);
        pid_t inner = ::fork(); // the first process of the new PID namespace
        if (inner == 0) {
          _exit(::mount("proc", "/tmp/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) == 0 ? 0 : errno);
        }
        int st = 0;
        if (inner < 0 || ::waitpid(inner, &st, 0) != inner || !WIFEXITED(st)) {
          e[2] = ECHILD;
        } else {
          e[2] = WEXITSTATUS(st);
        }
      }
    }
    (void)!::write(p[1], e, sizeof e);
    _exit(0);
  }
  ::close(p[1]);
  int e[3] = {ECHILD, 0, 0};
  if (pid > 0) {
    (void)!::read(p[0], e, sizeof e);
    int st;
    ::waitpid(pid, &st, 0);
  }
  ::close(p[0]);
  f.userns_errno = e[0];
  f.userns_mount_errno = e[1];
  f.userns_proc_errno = e[2];
}

std::string container_of() {
  if (::access("/run/.containerenv", F_OK) == 0) return "podman";
  if (::access("/.dockerenv", F_OK) == 0) return "docker";
  if (auto pid1 = read_text("/proc/1/environ")) { // readable only by root; the variable engines set
    std::string_view env(*pid1);
    auto at = env.find("container=");
    if (at != std::string_view::npos && (at == 0 || env[at - 1] == '\0')) {
      auto value = env.substr(at + 10);
      return std::string(value.substr(0, value.find('\0')));
    }
  }
  return {};
}

// Mounts over parts of /proc, as engines mask /proc/kcore, /proc/keys, /proc/sys and the like
// (binfmt_misc under /proc/sys/fs is an ordinary host's and does not count).
bool proc_masked() {
  std::ifstream f("/proc/self/mountinfo");
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string id, parent, dev, root, point;
    in >> id >> parent >> dev >> root >> point;
    if (point.rfind("/proc/", 0) == 0 && point != "/proc/sys/fs/binfmt_misc") return true;
  }
  return false;
}

void inject(platform_facts &f, const std::string &fault) {
  if (fault == "apparmor_userns") {
    f = {};
    f.userns_mount_errno = EPERM;
    f.userns_proc_errno = 0;
    f.apparmor_restrict_userns = 1;
    f.apparmor_enabled = true;
    f.apparmor_label = "unconfined";
  } else if (fault == "userns_sysctl") {
    f = {};
    f.userns_errno = EPERM;
    f.unprivileged_userns_clone = 0;
  } else if (fault == "container_seccomp") {
    f = {};
    f.userns_errno = EPERM;
    f.seccomp_mode = 2;
    f.container = "docker";
  } else if (fault == "container_apparmor") {
    f = {};
    f.userns_mount_errno = EACCES;
    f.seccomp_mode = 2;
    f.container = "docker";
    f.apparmor_enabled = true;
    f.apparmor_label = "docker-default (enforce)";
  } else if (fault == "proc_masked") {
    f = {};
    f.userns_proc_errno = EPERM;
    f.seccomp_mode = 2;
    f.container = "podman";
    f.proc_masked = true;
  }
}

std::string errno_text(int e) { return std::strerror(e); }

} // namespace

platform_facts read_platform_facts(bool probe) {
  platform_facts f;
  f.apparmor_restrict_userns = read_number<int>("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
  f.unprivileged_userns_clone = read_number<int>("/proc/sys/kernel/unprivileged_userns_clone");
  f.max_user_namespaces = read_number<long>("/proc/sys/user/max_user_namespaces");
  auto enabled = read_text("/sys/module/apparmor/parameters/enabled");
  f.apparmor_enabled = enabled && !enabled->empty() && (*enabled)[0] == 'Y';
  if (auto label = read_text("/proc/self/attr/apparmor/current")) {
    f.apparmor_label = *label;
  } else if (f.apparmor_enabled) {
    if (auto old = read_text("/proc/self/attr/current")) f.apparmor_label = *old;
  }
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Seccomp:", 0) == 0) f.seccomp_mode = std::atoi(line.c_str() + 8);
  }
  f.container = container_of();
  f.proc_masked = proc_masked();
  if (probe) probe_userns(f);
  if (const char *fault = std::getenv("SLUICE_FAULT")) inject(f, fault);
  return f;
}

namespace {

// Whose seccomp filter refused, and the fix both container_seccomp lines give.
std::string seccomp_filter(const platform_facts &f) {
  return f.container.empty() ? "a seccomp filter on this process" : "the " + f.container + " container's seccomp filter";
}
constexpr const char *seccomp_fix =
    "run the container with sluice's profile (--security-opt seccomp=/usr/share/sluice/container/seccomp.json, "
    "from the .deb or deploy/container/ in the source), or run `sluice serve` outside the container and give it "
    "no other route (docs/deploy.md)";

} // namespace

platform_diagnosis diagnose(const platform_facts &f) {
  // A filter may answer with ENOSYS (podman's default errno) as well as EPERM: unshare exists on
  // every kernel sluice runs on, so under a filter ENOSYS means the filter refused it.
  const bool denied = f.userns_errno == EPERM || f.userns_errno == EACCES ||
                      (f.userns_errno == ENOSYS && f.seccomp_mode == 2);
  if (f.userns_errno != 0) {
    if (f.max_user_namespaces && *f.max_user_namespaces == 0) {
      return {"max_user_namespaces",
              "user namespaces are switched off (user.max_user_namespaces = 0); fix: sudo sysctl -w "
              "user.max_user_namespaces=15000 (and in /etc/sysctl.d/ to keep it), which lets every user "
              "create them, as bubblewrap and browsers need"};
    }
    if (f.unprivileged_userns_clone && *f.unprivileged_userns_clone == 0 && denied) {
      return {"userns_sysctl",
              "unprivileged user namespaces are switched off (kernel.unprivileged_userns_clone = 0); fix: "
              "sudo sysctl -w kernel.unprivileged_userns_clone=1 (and in /etc/sysctl.d/ to keep it), which "
              "lets every user create them, as bubblewrap and browsers need"};
    }
    if (f.seccomp_mode == 2 && denied) {
      return {"container_seccomp", seccomp_filter(f) + " refuses unshare(CLONE_NEWUSER) (Docker's default "
                                   "profile does); fix: " + seccomp_fix};
    }
    return {};
  }
  const bool mount_denied = f.userns_mount_errno == EPERM || f.userns_mount_errno == EACCES ||
                            (f.userns_mount_errno == ENOSYS && f.seccomp_mode == 2);
  const bool confined = f.apparmor_enabled && !f.apparmor_label.empty() &&
                        f.apparmor_label.rfind("unconfined", 0) != 0 &&
                        f.apparmor_label.find("(unconfined)") == std::string::npos;
  if (mount_denied && !f.container.empty() && confined) {
    return {"container_apparmor",
            "the " + f.container + " container's AppArmor profile (" + f.apparmor_label + ") refuses mounts, "
            "so the sandbox cannot build its file system view (Docker's docker-default does); fix: run the "
            "container with --security-opt apparmor=unconfined, or a profile of yours that allows mount and "
            "userns, or run `sluice serve` outside it (docs/deploy.md)"};
  }
  if (mount_denied && f.apparmor_restrict_userns &&
      *f.apparmor_restrict_userns == 1) {
    std::string label = f.apparmor_label.empty() ? "unconfined" : f.apparmor_label;
    return {"apparmor_userns",
            "the kernel restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1) "
            "and no AppArmor profile lets this binary use them (it runs as " + label + "): a namespace is "
            "made but holds no capabilities; fix: install sluice's profile (sluice doctor --apparmor-profile "
            "| sudo tee /etc/apparmor.d/sluice && sudo apparmor_parser -r /etc/apparmor.d/sluice; the .deb "
            "does this for /usr/bin/sluice), or sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, "
            "which lifts the restriction for every program"};
  }
  if (mount_denied && f.seccomp_mode == 2) {
    return {"container_seccomp",
            seccomp_filter(f) + " refuses mount inside the sandbox's user namespace; fix: " + seccomp_fix};
  }
  if (f.userns_mount_errno == 0 && (f.userns_proc_errno == EPERM || f.userns_proc_errno == EACCES) &&
      f.proc_masked) {
    std::string where = f.container.empty() ? "this machine's /proc" : "the " + f.container + " container's /proc";
    return {"container_proc",
            where + " has masked paths (an engine's default), so the kernel refuses the sandbox a /proc of its "
                    "own; fix: run the container with --security-opt systempaths=unconfined (docker) or "
                    "--security-opt unmask=ALL (podman), or run `sluice serve` outside it"};
  }
  return {};
}

std::string diagnose_in_fresh_process(const std::string &binary) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return {};
  const char *argv[] = {binary.c_str(), "doctor", "--platform-cause", nullptr};
  pid_t pid = ::fork();
  if (pid == 0) { // only async-signal-safe calls: the caller has threads
    ::dup2(p[1], 1);
    int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0) ::dup2(null, 2);
    ::execv(binary.c_str(), const_cast<char *const *>(argv));
    _exit(127);
  }
  ::close(p[1]);
  std::string out;
  if (pid > 0) {
    struct pollfd pfd = {p[0], POLLIN, 0};
    char buf[1024];
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (out.size() < 4096) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || ::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) break;
      ssize_t n = ::read(p[0], buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<std::size_t>(n));
    }
    ::kill(pid, SIGKILL); // gone already, or too slow
    ::waitpid(pid, nullptr, 0);
  }
  ::close(p[0]);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string describe(const platform_facts &f) {
  std::string out = "AppArmor ";
  out += f.apparmor_enabled ? "enabled" : "not enabled";
  if (f.apparmor_restrict_userns) {
    out += ", restrict_unprivileged_userns = " + std::to_string(*f.apparmor_restrict_userns);
  }
  if (!f.apparmor_label.empty()) out += ", running as " + f.apparmor_label;
  out += "; seccomp ";
  out += f.seccomp_mode == 2 ? "filtered" : f.seccomp_mode == 1 ? "strict" : "off";
  out += f.container.empty() ? "; not in a container" : "; in a " + f.container + " container";
  if (f.userns_errno) out += "; user namespace: " + errno_text(f.userns_errno);
  if (f.userns_mount_errno) out += "; mount in it: " + errno_text(f.userns_mount_errno);
  if (f.userns_proc_errno) out += "; /proc in it: " + errno_text(f.userns_proc_errno);
  return out;
}

std::string apparmor_profile(const std::string &binary) {
  std::string path = binary.find_first_of(" \t\"") == std::string::npos ? binary : "\"" + binary + "\"";
  return "# AppArmor profile for sluice (sluice doctor --apparmor-profile): lets it create user namespaces\n"
         "# where the kernel restricts them (kernel.apparmor_restrict_unprivileged_userns = 1, Ubuntu 23.10\n"
         "# and later), as Ubuntu's own profiles do for bubblewrap and browsers. It confines nothing else:\n"
         "# sluice builds the sandbox of the command it runs itself (namespaces, Landlock, seccomp).\n"
         "abi <abi/4.0>,\n"
         "include <tunables/global>\n"
         "\n"
         "profile sluice " + path + " flags=(unconfined) {\n"
         "  userns,\n"
         "\n"
         "  # Site-specific additions and overrides.\n"
         "  include if exists <local/sluice>\n"
         "}\n";
}

} // namespace sluice::exec
