#pragma once
#include "exec/landlock.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace sluice::exec {

// Where sluice's own files for the command live inside the view (read-only): the per-command CA
// certificate and the JVM trust store.
inline constexpr const char *sandbox_files_dir = "/.sluice";

// What the command's filesystem view is built from. All paths are absolute and resolved (no
// symlinks), as the caller sees them; the view shows each at the same path.
struct view_spec {
  std::string workspace;           // read-write (or read-only) at its own path
  bool workspace_writable = true;
  // The journal (exec/journal.hpp): the workspace shows as an overlay whose upper layer takes every
  // change, applied to the workspace by sluice once the command has ended. Empty: a plain bind.
  std::string journal_upper, journal_work;
  std::string home;                // an empty private tmpfs here; "" for none
  std::vector<std::string> protect; // trusted files and directories: read-only where they show
  std::vector<std::string> extra;   // files outside the system paths the command needs: read-only
  std::vector<std::string> writable; // directories the trusted side granted (--allow-write): read-write
  // Directories of sluice's shown at another path in the private home (tool caches: host path,
  // view path), read-write.
  std::vector<std::pair<std::string, std::string>> binds;
  std::vector<std::string> hide;    // paths shown as an empty file or directory (an agent's stored keys)
  // Files written into the private home before the command starts (path in the view, contents),
  // 0600: copies of an agent host's state that must not go back to the caller's home.
  std::vector<std::pair<std::string, std::string>> home_files;
  // [scan] canaries planted in the private home (names relative to it: ".env", ".netrc", ".aws"):
  // a workspace credential file of the same name shows that decoy instead of nothing.
  std::vector<std::string> canaries;
  bool hide_unreadable_etc = false; // mask /etc entries others may not read (a root caller)
  bool bind_sys = true;             // a read-only /sys
  bool replace_trust = false;       // the system CA bundles become the per-command CA (seal_view)
  bool dns_stub = false;            // /etc/resolv.conf names the capture responder on 127.0.0.1
  // Git over SSH: /etc/ssh/ssh_known_hosts exists in the view (an empty file where the host has
  // none), for seal_view to bind the gateway's known hosts over.
  bool ssh_known_hosts = false;
  // Unix sockets the trusted side granted (exec/unix_sockets.hpp): each host socket (`host`, its
  // real path) bound at the view's paths `at`, read-write, last, over whatever shows there; the
  // directories made for it on the way hold nothing else. `dev` and `ino` are the socket sluice
  // checked: another file there by the time the view is built fails the set-up.
  struct socket_bind {
    std::string host;
    std::vector<std::string> at;
    std::uint64_t dev = 0, ino = 0;
  };
  std::vector<socket_bind> sockets;
};

// What the workspace walk found (workspace_guard::scan): paths to hide (credential files, Unix
// sockets) and paths to show read-only (guarded names, Git metadata).
struct view_marks {
  std::vector<std::string> hide, protect;
};

// Runs in the sandbox's init, in its own user and mount namespaces: builds a new root on a tmpfs
// (system runtime paths read-only, a fresh /dev, /proc with /proc/sys read-only, a private /tmp and
// /dev/shm, an empty $HOME, the workspace, secret-bearing /etc files masked) and pivots into it, so
// that nothing else of the host's filesystem, its Unix sockets among it, exists for the command.
// Returns an empty string, or what failed.
// `workspace_marks`, when given, is called once the view stands, before the host's root goes: it
// returns the workspace paths to hide and to show read-only, as workspace_guard::scan finds them.
// `system_etc`, with `hide_unreadable_etc`, is called for /etc: a detached, id-mapped copy of it
// that sluice made (the view shows it at /etc; see sandbox.cpp), or -1; without one, or where it
// cannot be attached, /etc is bound as for any caller and the entries others may not read are
// masked one by one (a walk of /etc, about 2 ms).
std::string build_view(const view_spec &spec,
                       const std::function<view_marks()> &workspace_marks = {},
                       const std::function<int()> &system_etc = {});


// Writes sluice's files into sandbox_files_dir and makes the view's root read-only. With
// `replace_trust`, the system's CA bundles (/etc/ssl/certs with its hashed names,
// /etc/ssl/cert.pem, /etc/pki/tls/...) show the per-command CA `ca.pem` instead; the file `ca.hash`
// names its hashed link (`xxxxxxxx.0`). After build_view, before the command starts. Returns an
// empty string, or what failed.
// With `dns_stub`, /etc/resolv.conf (or the file its symlink names) says `nameserver 127.0.0.1`.
// /etc/hosts holds the loopback names only (and the sandbox's host name), so that every other name
// goes through sluice's naming and capture judges a connection by its name.
// A file `ssh_config` replaces /etc/ssh/ssh_config and a file `ssh_known_hosts` replaces
// /etc/ssh/ssh_known_hosts (see view_spec::ssh_known_hosts), where the view has them.
std::string seal_view(const std::vector<std::pair<std::string, std::string>> &files,
                      bool replace_trust = false, bool dns_stub = false);

// The Landlock rules that mirror the view built from `spec`.
landlock_rules view_landlock_rules(const view_spec &spec);

// True when `path` is `dir` or lies below it (both absolute, resolved; "/" holds everything).
bool is_under(const std::string &path, const std::string &dir);

// The system runtime paths the view shows read-only (those present on this machine).
const std::vector<std::string> &system_paths();

} // namespace sluice::exec
