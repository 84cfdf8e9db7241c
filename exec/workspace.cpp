#include "exec/workspace.hpp"
#include "exec/mount_view.hpp"
#include "exec/profile_resolver.hpp"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <fcntl.h>
#include <sys/stat.h>
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

} // namespace

std::string find_executable(const std::string &name, const std::string &path, const std::string &cwd) {
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

std::vector<std::string> check_writable(const std::vector<granted_path> &granted, const workspace &ws,
                                        const std::string &home,
                                        const std::vector<std::string> &policy_dirs,
                                        const std::string &policy_file) {
  std::vector<std::string> out;
  for (const auto &g : granted) {
    std::string r = resolved(g.path);
    auto refuse = [&](const std::string &why) {
      throw refusal(g.origin + " " + g.path + (r.empty() || r == g.path ? "" : " (" + r + ")") + ": " + why);
    };
    struct stat st {};
    if (r.empty() || ::stat(r.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      refuse("not an existing directory; create it first, or name the directory to write in");
    }
    if (r == "/" || r == "/tmp" || r == "/var/tmp") refuse("a shared place; grant a directory of its own inside it");
    for (auto p : {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc",
                   "/sys", "/dev", "/boot", "/run", "/var", "/snap", "/root", "/home"}) {
      if (is_under(r, p) && !(std::string(p) == "/var" && is_under(r, "/var/tmp")) &&
          !(std::string(p) == "/root" && !home.empty() && is_under(home, "/root") && r != home) &&
          !(std::string(p) == "/home" && !home.empty() && is_under(r, home) && r != home)) {
        refuse("a system path, which a sandboxed command never writes; grant a directory of your own");
      }
    }
    if (!home.empty()) {
      if (is_under(home, r)) refuse("your home directory (or one holding it), with every dotfile and credential in it; grant a directory inside it");
      for (auto p : {"/.ssh", "/.gnupg", "/.aws", "/.azure", "/.kube", "/.docker", "/.config", "/.local/bin",
                     "/.local/share/applications", "/bin", "/.claude", "/.codex", "/.pi", "/.mozilla"}) {
        if (is_under(r, home + p)) {
          refuse(std::string("~") + p + " holds credentials, settings or programs that run outside the "
                 "sandbox; grant another directory");
        }
      }
    }
    for (const auto &d : policy_dirs) {
      std::string pd = resolved(d).empty() ? d : resolved(d);
      if (is_under(pd, r) || is_under(r, pd)) {
        refuse("holds (or lies in) the trusted policy directory " + pd + ", and a command there could "
               "rewrite the policy of later runs; grant another directory");
      }
    }
    if (!policy_file.empty() && is_under(policy_file, r)) {
      refuse("holds the policy file in use (" + policy_file + "); grant another directory");
    }
    if (is_under(r, ws.root)) continue; // the workspace or in it: writable already
    if (is_under(ws.root, r)) {
      refuse("holds the workspace " + ws.root + ", whose guarded files would be writable from "
             "outside it; run sluice exec from that directory instead, or grant a directory beside it");
    }
    out.push_back(r);
  }
  std::sort(out.begin(), out.end(), [](const std::string &a, const std::string &b) { return a.size() < b.size(); });
  std::vector<std::string> outer;
  for (auto &r : out) {
    bool inside = false;
    for (auto &o : outer) inside = inside || is_under(r, o);
    if (!inside) outer.push_back(r);
  }
  return outer;
}

namespace {

// The package a file belongs to: see command_files. A package inside node_modules finds its
// dependencies in the node_modules directories above it (npm hoists them to the top one): the
// outermost node_modules of its path is what it needs.
std::string package_root(const std::string &file, const std::string &home) {
  std::string dir = parent_of(file);
  if (!home.empty() && dir == home + "/.local/bin") return home + "/.local/lib";
  for (int level = 0; level < 6 && dir != "/" && dir != home; ++level, dir = parent_of(dir)) {
    for (auto marker : {"/package.json", "/pyvenv.cfg"}) {
      if (::access((dir + marker).c_str(), F_OK) == 0) {
        constexpr std::string_view nm = "/node_modules/";
        auto at = dir.find(nm);
        return at == std::string::npos ? dir : dir.substr(0, at + nm.size() - 1);
      }
    }
  }
  return {};
}

} // namespace

std::vector<std::string> command_files(const std::string &argv0, const std::string &path,
                                       const std::string &cwd, const std::string &home) {
  std::vector<std::string> out;
  std::string found = find_executable(argv0, path, cwd);
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
      std::string target = find_executable(words[k], path, cwd);
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
