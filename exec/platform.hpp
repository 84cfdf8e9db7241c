#pragma once
// Why a sandbox cannot start on this machine, in one line with the fix: Ubuntu's AppArmor
// restriction of unprivileged user namespaces, the sysctls that switch them off, a container's
// seccomp filter, a container's masked /proc. `sluice doctor` and exec's refusal (125) both use it.
#include <optional>
#include <string>

namespace sluice::exec {

// What the machine says, read from /proc and /sys (read_platform_facts) or set by a test.
struct platform_facts {
  int userns_errno = 0;           // unshare(CLONE_NEWUSER) in a child; 0: it worked
  int userns_mount_errno = 0;     // a mount inside that new namespace (a tmpfs); 0: it worked
  int userns_proc_errno = 0;      // a fresh /proc in a PID namespace inside it; 0: it worked
  std::optional<int> apparmor_restrict_userns;   // kernel.apparmor_restrict_unprivileged_userns
  std::optional<int> unprivileged_userns_clone;  // kernel.unprivileged_userns_clone (Debian's patch)
  std::optional<long> max_user_namespaces;       // user.max_user_namespaces
  bool apparmor_enabled = false;  // /sys/module/apparmor/parameters/enabled
  std::string apparmor_label;     // this process's AppArmor label ("unconfined", "sluice (unconfined)")
  int seccomp_mode = 0;           // Seccomp: in /proc/self/status (2: a filter)
  std::string container;          // "docker", "podman", "container" (another engine) or empty
  bool proc_masked = false;       // something is mounted over part of /proc (an engine's masked paths)
};

struct platform_diagnosis {
  // apparmor_userns, userns_sysctl, max_user_namespaces, container_seccomp, container_apparmor,
  // container_proc, or
  // empty: nothing here explains the failure.
  std::string cause;
  std::string line; // the cause and the fix, one line
};

// Reads the facts. `probe`: also try a user namespace and a mount in it (forks a child). The
// SLUICE_FAULT values apparmor_userns, userns_sysctl, container_seccomp, container_apparmor and
// proc_masked replace
// what was read by what such a machine shows (the doctor's and exec's fault injection).
platform_facts read_platform_facts(bool probe = true);

// The first cause that explains the facts.
platform_diagnosis diagnose(const platform_facts &f);

// diagnose(read_platform_facts()) in a new process (`BINARY doctor --platform-cause`): exec calls it
// once it is not dumpable and may hold key material, where its own probe child could neither write
// its id maps nor be left dumpable. Returns the diagnosis line, empty when there is none (or the
// process did not answer within 5 s).
std::string diagnose_in_fresh_process(const std::string &binary);

// One line about the platform for `sluice doctor` when nothing is wrong.
std::string describe(const platform_facts &f);

// The AppArmor profile that lets `binary` create user namespaces where the kernel restricts them
// (Ubuntu 23.10 and later), as Ubuntu's own profiles do for browsers and bubblewrap.
std::string apparmor_profile(const std::string &binary);

} // namespace sluice::exec
