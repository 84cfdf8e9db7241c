#include "exec/landlock.hpp"

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace sluice::exec {
namespace {

// The kernel ABI, spelled out here: Debian 12's headers stop at ABI 2 and this kernel offers 7.
constexpr std::uint64_t fs_execute = 1ULL << 0, fs_write_file = 1ULL << 1, fs_read_file = 1ULL << 2,
                        fs_read_dir = 1ULL << 3, fs_remove_dir = 1ULL << 4,
                        fs_remove_file = 1ULL << 5, fs_make_char = 1ULL << 6,
                        fs_make_dir = 1ULL << 7, fs_make_reg = 1ULL << 8, fs_make_sock = 1ULL << 9,
                        fs_make_fifo = 1ULL << 10, fs_make_block = 1ULL << 11,
                        fs_make_sym = 1ULL << 12, fs_refer = 1ULL << 13, fs_truncate = 1ULL << 14,
                        fs_ioctl_dev = 1ULL << 15;
constexpr std::uint64_t scope_abstract_unix = 1ULL << 0, scope_signal = 1ULL << 1;
constexpr unsigned create_ruleset_version = 1U << 0;
constexpr int rule_path_beneath = 1;

struct ruleset_attr {
  std::uint64_t handled_access_fs;
  std::uint64_t handled_access_net;
  std::uint64_t scoped;
};

struct __attribute__((packed)) path_beneath_attr {
  std::uint64_t allowed_access;
  std::int32_t parent_fd;
};

// Everything ABI `abi` can restrict on a filesystem.
std::uint64_t handled_for(int abi) {
  std::uint64_t h = fs_execute | fs_write_file | fs_read_file | fs_read_dir | fs_remove_dir |
                    fs_remove_file | fs_make_char | fs_make_dir | fs_make_reg | fs_make_sock |
                    fs_make_fifo | fs_make_block | fs_make_sym;
  if (abi >= 2) h |= fs_refer;
  if (abi >= 3) h |= fs_truncate;
  if (abi >= 5) h |= fs_ioctl_dev;
  return h;
}

constexpr std::uint64_t file_rights = fs_execute | fs_write_file | fs_read_file | fs_truncate |
                                      fs_ioctl_dev;

bool add_rule(int ruleset, int fd, std::uint64_t access, std::uint64_t handled, bool is_dir) {
  path_beneath_attr pb{access & handled & (is_dir ? ~0ULL : file_rights), fd};
  if (pb.allowed_access == 0) return true;
  return ::syscall(SYS_landlock_add_rule, ruleset, rule_path_beneath, &pb, 0) == 0;
}

// Adds a rule for `path` when it exists; a missing path needs no rule.
bool add_path(int ruleset, const std::string &path, std::uint64_t access, std::uint64_t handled,
              std::string &error) {
  int fd = ::open(path.c_str(), O_PATH | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT;
  struct stat st {};
  ::fstat(fd, &st);
  bool ok = add_rule(ruleset, fd, access, handled, S_ISDIR(st.st_mode));
  if (!ok) error = "landlock_add_rule " + path + ": " + std::strerror(errno);
  ::close(fd);
  return ok;
}

} // namespace

int landlock_abi() {
  if (const char *f = std::getenv("SLUICE_FAULT"); f && std::strcmp(f, "landlock_missing") == 0) {
    return 0;
  }
  long v = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, create_ruleset_version);
  return v < 0 ? 0 : static_cast<int>(v);
}

landlock_ruleset prepare_landlock(const landlock_rules &rules, std::string &error) {
  int abi = landlock_abi();
  if (abi <= 0) return {};
  const std::uint64_t handled = handled_for(abi);
  ruleset_attr attr{handled, 0, abi >= 6 ? (scope_abstract_unix | scope_signal) : 0};
  // Older kernels take only the fields they know.
  std::size_t size = abi >= 6 ? sizeof attr : offsetof(ruleset_attr, handled_access_net);
  if (abi >= 4 && abi < 6) size = offsetof(ruleset_attr, scoped);
  int rs = static_cast<int>(::syscall(SYS_landlock_create_ruleset, &attr, size, 0));
  if (rs < 0) {
    error = std::string("landlock_create_ruleset: ") + std::strerror(errno);
    return {-1, -1};
  }
  const std::uint64_t read = fs_execute | fs_read_file | fs_read_dir;
  const std::uint64_t write = handled & ~(fs_make_char | fs_make_block | fs_ioctl_dev);
  const std::uint64_t device = read | fs_write_file | fs_truncate | fs_ioctl_dev;
  bool ok = add_path(rs, "/", fs_read_dir, handled, error);
  for (auto &p : rules.read) ok = ok && add_path(rs, p, read, handled, error);
  for (auto &p : rules.write) ok = ok && add_path(rs, p, write, handled, error);
  for (auto &p : rules.devices) ok = ok && add_path(rs, p, device, handled, error);
  // A descriptor's own file (a terminal, a file the caller redirected to): `> /dev/stdout` reopens
  // it through /proc/self/fd, and that path leads outside the view.
  for (int fd : rules.fds) {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISCHR(st.st_mode))) continue;
    std::string link = "/proc/self/fd/" + std::to_string(fd);
    int pfd = ::open(link.c_str(), O_PATH | O_CLOEXEC);
    if (pfd < 0) continue;
    int flags = ::fcntl(fd, F_GETFL);
    std::uint64_t a = 0;
    if ((flags & O_ACCMODE) != O_WRONLY) a |= fs_read_file;
    if ((flags & O_ACCMODE) != O_RDONLY) a |= fs_write_file | fs_truncate;
    if (S_ISCHR(st.st_mode)) a |= fs_ioctl_dev;
    add_rule(rs, pfd, a, handled, false); // best effort: a pseudo file takes no rule
    ::close(pfd);
  }
  if (!ok) {
    ::close(rs);
    return {-1, -1};
  }
  return {rs, abi};
}

bool enforce_landlock(landlock_ruleset &ruleset, std::string &error) {
  if (ruleset.fd < 0) return true;
  bool ok = ::syscall(SYS_landlock_restrict_self, ruleset.fd, 0) == 0;
  if (!ok) error = std::string("landlock_restrict_self: ") + std::strerror(errno);
  ::close(ruleset.fd);
  ruleset.fd = -1;
  return ok;
}

} // namespace sluice::exec
