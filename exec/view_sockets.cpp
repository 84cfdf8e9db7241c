// The granted Unix sockets in the view (docs/policy.md, "Unix sockets"): each one file bound over a
// placeholder at its path, so that its neighbours in the host's directory stay absent.
#include "exec/mount_view_impl.hpp"

#include <sys/mount.h>
#include <sys/stat.h>

namespace sluice::exec::detail {
namespace {

// The file at `path` is the socket sluice checked (not one put there since, nor a symlink's
// target swapped in).
bool is_checked_socket(const std::string &path, const view_spec::socket_bind &s) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == s.dev && st.st_ino == s.ino;
}

} // namespace

std::string show_sockets(const view_spec &spec, const std::string &old_root, const std::string &new_root) {
  for (const auto &s : spec.sockets) {
    std::string from = old_root + s.host;
    if (!is_checked_socket(from, s)) {
      return "the granted Unix socket " + s.host + " changed after sluice checked it (gone, or another file); "
             "start the command again once its service is up";
    }
    for (const auto &at : s.at) {
      std::string to = new_root + at;
      // Where nothing shows yet (a directory of the host's such as /run is no part of the view),
      // the directories are made in the view's own root: they hold this placeholder alone.
      struct stat st {};
      if (::lstat(to.c_str(), &st) != 0 && !make_file(to)) {
        return err("cannot make a place in the view for the granted Unix socket (is it under a read-only system "
                   "path?) at", at);
      }
      // Read-write (connect() needs write permission on the socket), without suid, devices or exec.
      if (::mount(from.c_str(), to.c_str(), nullptr, MS_BIND, nullptr) != 0 ||
          !set_attr(to, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, false)) {
        return err("cannot bind the granted Unix socket " + s.host + " at", at);
      }
      if (!is_checked_socket(to, s)) return "the granted Unix socket " + s.host + " did not show at " + at;
    }
  }
  return {};
}

} // namespace sluice::exec::detail
