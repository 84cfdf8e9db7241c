#include "exec/mount_view_impl.hpp"

#include <climits>
#include <cstring>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

// The view sealed (seal_view), once built and before the command starts: sluice's files in
// sandbox_files_dir, the system files they replace bound over (CA bundles, resolv.conf, hosts,
// OpenSSH's configuration), and the root read-only.
namespace sluice::exec {
using namespace detail;
namespace {

// Every HTTPS connection the sandbox makes is terminated by sluice, so the per-command CA is the
// only trust it needs: tools that read the system store and no variable (wget with GnuTLS, Go,
// rustls-native-certs, node --use-openssl-ca) then trust it too.
std::string replace_system_trust(const std::vector<std::pair<std::string, std::string>> &files) {
  const std::string ca = std::string(sandbox_files_dir) + "/ca.pem";
  std::string hash;
  for (auto &[name, data] : files) {
    if (name == "ca.hash") hash = data;
  }
  if (::access(ca.c_str(), R_OK) != 0) return {}; // no CA (offline): nothing to trust
  const std::uint64_t ro = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
  struct stat st {};
  for (auto bundle : {"/etc/ssl/cert.pem", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/pki/tls/cert.pem",
                      "/etc/ssl/ca-bundle.pem", "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem"}) {
    if (::stat(bundle, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (::mount(ca.c_str(), bundle, nullptr, MS_BIND, nullptr) != 0 || !set_attr(bundle, ro, false)) {
      return err("cannot replace the CA bundle", bundle);
    }
  }
  const char *dir = "/etc/ssl/certs";
  if (::stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) {
    if (::mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=64k") != 0) {
      return err("cannot replace", dir);
    }
    std::vector<std::string> links = {"ca-certificates.crt", "sluice-ca.pem"};
    if (!hash.empty() && hash.find('/') == std::string::npos) links.push_back(hash);
    for (auto &l : links) {
      if (::symlink(ca.c_str(), (std::string(dir) + "/" + l).c_str()) != 0) return err("cannot link", l);
    }
    std::string java = std::string(dir) + "/java";
    if (::mkdir(java.c_str(), 0755) != 0 ||
        ::symlink((std::string(sandbox_files_dir) + "/truststore.p12").c_str(), (java + "/cacerts").c_str()) != 0) {
      return err("cannot link", java + "/cacerts");
    }
    if (!set_attr(dir, ro, false)) return err("cannot make read-only", dir);
  }
  // The JVM's system trust store where Fedora and RHEL keep it (Debian's is /etc/ssl/certs/java).
  const std::string store = std::string(sandbox_files_dir) + "/truststore.p12";
  for (auto cacerts : {"/etc/pki/ca-trust/extracted/java/cacerts", "/etc/pki/java/cacerts"}) {
    if (::stat(cacerts, &st) != 0 || !S_ISREG(st.st_mode) || ::access(store.c_str(), R_OK) != 0) continue;
    if (::mount(store.c_str(), cacerts, nullptr, MS_BIND, nullptr) != 0 || !set_attr(cacerts, ro, false)) {
      return err("cannot replace the JVM trust store", cacerts);
    }
  }
  return {};
}

// Capture's DNS responder listens on the sandbox's 127.0.0.1:53; the view's resolver configuration
// names it (and nothing else: no search domains, no host resolver). A resolv.conf that is a symlink
// into a directory the view does not have (systemd-resolved's /run/systemd/resolve/...) gets its
// target created in the view's own root. With no resolv.conf at all, glibc, Go and c-ares ask
// 127.0.0.1 anyway.
std::string point_resolver_at_stub() {
  const std::string stub = std::string(sandbox_files_dir) + "/resolv.conf";
  const std::string text = "# sluice: names resolve to the gateway's capture addresses\nnameserver 127.0.0.1\n";
  int fd = ::open(stub.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    if (fd >= 0) ::close(fd);
    return err("cannot write", stub);
  }
  ::close(fd);
  const char *conf = "/etc/resolv.conf";
  struct stat st {};
  if (::lstat(conf, &st) != 0) return {};
  std::string target = conf;
  if (S_ISLNK(st.st_mode)) {
    char link[PATH_MAX];
    ssize_t n = ::readlink(conf, link, sizeof link - 1);
    if (n <= 0) return {};
    target.assign(link, static_cast<std::size_t>(n));
    if (target[0] != '/') target = "/etc/" + target;
    if (::stat(target.c_str(), &st) != 0) {
      // Made in the view's root (a tmpfs, not yet read-only; the view has no /run), never on the
      // host: a target anywhere else is left as it is.
      if (target.rfind("/run/", 0) != 0 || !make_file(target)) return {};
    }
  }
  if (::stat(target.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
  if (::mount(stub.c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0 ||
      !set_attr(target, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, false)) {
    return err("cannot point the resolver at the capture responder:", target);
  }
  return {};
}

// The host's /etc/hosts maps names to addresses sluice never judges by name (a client resolving
// through it connects to a bare address, which capture refuses): the view's names the loopback
// addresses and the sandbox's own host name only.
std::string loopback_hosts() {
  const std::string file = std::string(sandbox_files_dir) + "/hosts";
  char host[256] = {};
  std::string text = "# sluice: every other name resolves through sluice\n"
                     "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";
  if (::gethostname(host, sizeof host - 1) == 0 && host[0] && std::strcmp(host, "localhost") != 0 &&
      std::strpbrk(host, " \t\n#") == nullptr) {
    text += "127.0.1.1\t" + std::string(host) + "\n";
  }
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    if (fd >= 0) ::close(fd);
    return err("cannot write", file);
  }
  ::close(fd);
  struct stat st {};
  const char *hosts = "/etc/hosts";
  if (::stat(hosts, &st) != 0 || !S_ISREG(st.st_mode)) return {}; // none: glibc knows localhost
  if (::mount(file.c_str(), hosts, nullptr, MS_BIND, nullptr) != 0 ||
      !set_attr(hosts, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, false)) {
    return err("cannot replace", hosts);
  }
  return {};
}

// /etc/ssh/NAME, where the view has it, replaced by sluice's file NAME, where there is one.
std::string replace_ssh_file(const std::string &name) {
  const std::string ours = std::string(sandbox_files_dir) + "/" + name, system = "/etc/ssh/" + name;
  struct stat st {};
  if (::access(ours.c_str(), R_OK) != 0 || ::stat(system.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
  if (::mount(ours.c_str(), system.c_str(), nullptr, MS_BIND, nullptr) != 0 ||
      !set_attr(system, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, false)) {
    return err("cannot replace", system);
  }
  return {};
}

} // namespace

std::string seal_view(const std::vector<std::pair<std::string, std::string>> &files, bool replace_trust,
                      bool dns_stub) {
  for (auto &[name, data] : files) {
    if (name == "ca.hash") continue; // a name for replace_system_trust, not a file
    std::string path = std::string(sandbox_files_dir) + "/" + name;
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 || ::write(fd, data.data(), data.size()) != static_cast<ssize_t>(data.size())) {
      if (fd >= 0) ::close(fd);
      return err("cannot write", path);
    }
    ::close(fd);
  }
  if (replace_trust) {
    if (auto e = replace_system_trust(files); !e.empty()) return e;
  }
  if (dns_stub) {
    if (auto e = point_resolver_at_stub(); !e.empty()) return e;
  }
  if (auto e = loopback_hosts(); !e.empty()) return e;
  // Git over SSH: OpenSSH's system configuration becomes the one that trusts the command's host key,
  // and so does its default global known-hosts file, which it reads without any configuration.
  for (auto name : {"ssh_config", "ssh_known_hosts"}) {
    if (auto e = replace_ssh_file(name); !e.empty()) return e;
  }
  if (!set_attr("/", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, false)) {
    return err("cannot make read-only", "the view's root");
  }
  return {};
}

} // namespace sluice::exec
