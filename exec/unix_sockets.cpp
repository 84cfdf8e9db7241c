#include "exec/unix_sockets.hpp"
#include "exec/profile_resolver.hpp"

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>

namespace sluice::exec {
namespace {

// Sockets whose service does as root whatever a client asks (start a privileged container, mount
// the host's disk, run a unit): a command that holds one holds the host. Real paths, as found on
// Debian and its kin; /var/run/... is compared as /run/....
struct known_socket {
  const char *path, *name;
};
constexpr known_socket known_paths[] = {
    {"/run/docker.sock", "Docker's socket"},
    {"/run/containerd/containerd.sock", "containerd's socket"},
    {"/run/containerd/containerd.sock.ttrpc", "containerd's socket"},
    {"/run/k3s/containerd/containerd.sock", "k3s's containerd socket"},
    {"/run/podman/podman.sock", "rootful Podman's socket"},
    {"/run/buildkit/buildkitd.sock", "BuildKit's socket"},
    {"/run/crio/crio.sock", "CRI-O's socket"},
    {"/run/cri-dockerd.sock", "cri-dockerd's socket"},
    {"/run/libvirt/libvirt-sock", "libvirt's read-write socket"},
    {"/var/lib/lxd/unix.socket", "LXD's socket"},
    {"/var/snap/lxd/common/lxd/unix.socket", "LXD's socket"},
    {"/var/lib/incus/unix.socket", "Incus's socket"},
    {"/run/systemd/private", "systemd's private socket"},
};
// File names that are those services' wherever they lie (a rootless engine, a socket moved or
// linked elsewhere): a container engine's socket runs what it is told outside the sandbox.
constexpr known_socket known_names[] = {
    {"docker.sock", "Docker's"},        {"containerd.sock", "containerd's"},
    {"containerd.sock.ttrpc", "containerd's"}, {"podman.sock", "Podman's"},
    {"buildkitd.sock", "BuildKit's"},   {"crio.sock", "CRI-O's"},
    {"cri-dockerd.sock", "cri-dockerd's"}, {"libvirt-sock", "libvirt's"},
};

std::string as_run(const std::string &p) {
  return p.rfind("/var/run/", 0) == 0 ? p.substr(4) : p;
}

std::string file_name(const std::string &p) {
  auto slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// `p` made absolute (relative to `working_dir`) and lexically clean ("//", "/./", a trailing "/");
// empty when it holds "..", whose meaning depends on the symlinks on the way.
std::string absolute_path(const std::string &p, const std::string &working_dir) {
  std::string in = p[0] == '/' ? p : working_dir + "/" + p, out;
  for (std::size_t at = 0; at < in.size();) {
    auto end = std::min(in.find('/', at), in.size());
    std::string part = in.substr(at, end - at);
    if (part == "..") return {};
    if (!part.empty() && part != ".") out += "/" + part;
    at = end + 1;
  }
  return out.empty() ? "/" : out;
}

std::string kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISREG(m)) return "a regular file";
  if (S_ISFIFO(m)) return "a named pipe";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  return "not a socket";
}

std::string skill_origin(const std::string &skill, const std::string &policy_source) {
  return "[skills." + skill + "] unix_sockets in " + policy_source;
}

socket_origin policy_origin(const std::string &skill, const std::string &policy_source, const std::string &path) {
  return {skill_origin(skill, policy_source), "write { path = \"" + path + "\", root_equivalent = true } in " +
                                                  skill_origin(skill, policy_source) + " instead"};
}

} // namespace

std::string root_equivalent_name(const std::string &path, const std::string &resolved, std::uint64_t dev,
                                 std::uint64_t ino) {
  for (const auto &k : known_paths) {
    if (as_run(path) == k.path || as_run(resolved) == k.path) return k.name;
  }
  for (const auto &k : known_names) {
    if (file_name(path) == k.path || file_name(resolved) == k.path) {
      return std::string("a socket named ") + k.path + ", as " + k.name + " is";
    }
  }
  // The same file under another name: a bind mount or a hard link of a known socket.
  for (const auto &k : known_paths) {
    struct stat st {};
    if (::stat(k.path, &st) == 0 && st.st_dev == dev && st.st_ino == ino) return k.name;
  }
  return {};
}

socket_verdict judge_socket(const filters::unix_socket_rule &rule, const socket_origin &origin,
                            const std::string &working_dir, const std::string &home) {
  socket_verdict v;
  auto &g = v.grant;
  g.origin = origin.text;
  std::string shown = origin.text + ": " + rule.path;
  std::string named = rule.path;
  if (named.rfind("~/", 0) == 0) {
    if (home.empty() || home[0] != '/') {
      v.reason = "unix_socket_missing";
      v.message = shown + " names the home, but HOME is unset; set HOME or give an absolute path";
      return v;
    }
    named = home + named.substr(1);
  }
  if (named.empty()) {
    v.reason = "unix_socket_missing";
    v.message = origin.text + ": the path is empty; name a socket file";
    return v;
  }
  g.path = absolute_path(named, working_dir);
  char real[PATH_MAX];
  struct stat st {};
  if (!::realpath((g.path.empty() ? named : g.path).c_str(), real) || ::stat(real, &st) != 0) {
    v.reason = "unix_socket_missing";
    v.message = shown + ": " + std::strerror(errno) + "; name the socket of a running service (start it first), "
                "or leave the entry out";
    return v;
  }
  g.resolved = real;
  if (g.path.empty()) g.path = g.resolved;
  std::string real_note = g.resolved == g.path ? std::string() : " (" + g.resolved + ")";
  if (!S_ISSOCK(st.st_mode)) {
    v.reason = "not_a_unix_socket";
    v.message = shown + real_note + " is " + kind_of(st.st_mode) +
                ", not a Unix socket; name the socket file itself (only a socket, never a directory, is shown)";
    return v;
  }
  g.dev = st.st_dev;
  g.ino = st.st_ino;
  g.known_as = root_equivalent_name(g.path, g.resolved, g.dev, g.ino);
  g.root_equivalent = rule.root_equivalent || !g.known_as.empty();
  if (!g.known_as.empty() && !rule.root_equivalent) {
    v.reason = "root_equivalent_socket";
    v.message = shown + real_note + " is " + g.known_as + ": its service does as root whatever the command "
                "asks (a privileged container, the host's disk), so the sandbox would hold nothing. If the "
                "command may have that, " + origin.acknowledge;
  }
  return v;
}

std::vector<socket_grant> grant_sockets(const std::vector<filters::unix_socket_rule> &from_skill,
                                        const std::string &skill, const std::string &policy_source,
                                        const std::vector<filters::unix_socket_rule> &from_command_line,
                                        const std::string &working_dir) {
  const char *home_env = std::getenv("HOME");
  std::string home = home_env ? home_env : "";
  std::vector<socket_grant> out;
  auto add = [&](const filters::unix_socket_rule &rule, const socket_origin &origin) {
    auto v = judge_socket(rule, origin, working_dir, home);
    if (!v.reason.empty()) throw refusal(v.message);
    for (auto &g : out) {
      if (g.path == v.grant.path && g.resolved == v.grant.resolved) {
        g.root_equivalent = g.root_equivalent || v.grant.root_equivalent;
        return;
      }
    }
    out.push_back(std::move(v.grant));
  };
  for (const auto &r : from_skill) add(r, policy_origin(skill, policy_source, r.path));
  for (const auto &r : from_command_line) {
    add(r, {r.root_equivalent ? "--allow-root-equivalent-socket" : "--allow-unix-socket",
            "pass --allow-root-equivalent-socket " + r.path + " instead of --allow-unix-socket"});
  }
  return out;
}

int check_unix_socket(const std::string &policy_file, const std::string &skill, const std::string &path) {
  filters::config trusted = load_trusted_policy(policy_file);
  const std::string name = skill.empty() ? trusted.default_skill : skill;
  auto it = trusted.skills.find(name);
  if (it == trusted.skills.end()) {
    throw std::runtime_error("unix: paths are judged by a skill's unix_sockets, and " + trusted.source +
                             " has no [skills." + name + "]; name one with --skill");
  }
  if (path.empty()) throw std::runtime_error("unix: names no path; write unix:/path/to/socket");
  char cwd[PATH_MAX];
  std::string working_dir = ::getcwd(cwd, sizeof cwd) ? cwd : "/";
  const char *home = std::getenv("HOME");
  std::string want = absolute_path(path, working_dir), want_real;
  char real[PATH_MAX];
  if (::realpath(path.c_str(), real)) want_real = real;
  for (const auto &rule : it->second.unix_sockets) {
    auto v = judge_socket(rule, policy_origin(name, trusted.source, rule.path), working_dir, home ? home : "");
    bool same = (!want.empty() && v.grant.path == want) || (!want_real.empty() && v.grant.resolved == want_real);
    if (!same) continue;
    if (!v.reason.empty()) {
      std::printf("DENY reason=%s rule=unix:%s skill=%s\n  (exec refuses: %s)\n", v.reason.c_str(), rule.path.c_str(),
                  name.c_str(), v.message.c_str());
      return 1;
    }
    std::printf("ALLOW rule=unix:%s skill=%s root_equivalent=%s\n", rule.path.c_str(), name.c_str(),
                v.grant.root_equivalent ? "true" : "false");
    if (v.grant.root_equivalent) {
      std::printf("  (root-equivalent%s%s: exec says so on stderr at every run)\n",
                  v.grant.known_as.empty() ? "" : ", ", v.grant.known_as.c_str());
    }
    return 0;
  }
  std::printf("DENY reason=unix_socket_not_granted skill=%s\n  (no entry of %s names it; add it there, or pass "
              "--allow-unix-socket %s to sluice exec)\n",
              name.c_str(), skill_origin(name, trusted.source).c_str(), path.c_str());
  return 1;
}

} // namespace sluice::exec
