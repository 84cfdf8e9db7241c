#pragma once
#include "exec/mount_view.hpp"

#include <stdexcept>
#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

namespace sluice::exec {

// A set-up step that failed; the command has not run. `step` names it for the message and doctor.
struct setup_error : std::runtime_error {
  setup_error(std::string s, const std::string &what) : std::runtime_error(what), step(std::move(s)) {}
  std::string step;
};

// At most this many ports are captured (80, 443 and the ports the allowlist names); the rest reach
// the gateway through the proxy variables only.
inline constexpr std::size_t max_capture_ports = 100;

struct sandbox_options {
  bool network = true;             // false: `offline`, no listener at all
  unsigned port = 3128;            // the listener's port on the sandbox's 127.0.0.1
  // Transparent capture (docs/policy.md): every address of the namespace is made local, and these
  // TCP ports get a listener on any address (IPv4 and IPv6); a DNS responder's sockets listen on
  // 127.0.0.1:53 (UDP and TCP). Empty: no capture, only the proxy listener.
  std::vector<unsigned> capture_ports;
  std::vector<std::string> argv;   // the command, untouched
  std::vector<std::string> env;    // its environment
  view_spec view;                  // its filesystem
  std::string cwd;                 // where it starts (inside the view)
  std::vector<int> pass_fds;       // descriptors above 2 it keeps (--pass-fd)
  bool require_landlock = false;   // refuse when the kernel has no Landlock
  // The trusted policy's opt-out ([sandbox] nested_userns): the command may create user namespaces
  // (and others in them) for a sandbox of its own. Off: seccomp refuses them and the sandbox's
  // user.max_user_namespaces is 0.
  bool nested_userns = false;
  bool await_masks = false;        // init waits for send_marks() before finishing the view
  std::string fault;               // test hook: the named step fails (SLUICE_FAULT)
  bool probe = false;              // doctor: set up, hand the fd over, start nothing
};

// A sandbox whose init is running and waiting for `start()`.
class sandbox {
public:
  // Creates the namespaces (user, network, PID, mount, IPC, UTS, cgroup) with init as PID 1 and
  // writes its id maps; init then brings up lo, makes the listener and builds the filesystem view
  // while the caller goes on (see ready()). Throws setup_error; nothing has run then.
  explicit sandbox(const sandbox_options &options);

  // For a root caller (view.hide_unreadable_etc): makes the id-mapped /etc (idmapped_etc) and
  // hands it to init, which waits for it when it mounts /etc. Once; send_marks() and ready() call
  // it if the caller has not, so that it can be left to them or done early, beside other work.
  void share_system_etc();

  // Waits for init's set-up and receives the listener by SCM_RIGHTS. Throws setup_error.
  void ready();

  // Hands sluice's files for the command (name, contents) to init, which writes them into the
  // view, seals it and applies Landlock and seccomp. Returns the Landlock ABI applied (0: none).
  // Throws setup_error.
  int provision(const std::vector<std::pair<std::string, std::string>> &files);
  // provision() in two halves: the files may be sent before ready() (init reads them after its
  // set-up), and sealed() waits for the answer.
  void send_files(const std::vector<std::pair<std::string, std::string>> &files);
  // The workspace paths to hide and to show read-only (workspace_guard::scan), which init waits
  // for before it leaves the host's root. Sent first, before send_files.
  void send_marks(const view_marks &marks);
  // Compiles the seccomp program (build_seccomp) and hands it to init, which applies it when it
  // seals the view. Once; send_files() calls it if the caller has not, so that it can be done
  // while init builds the view. Throws setup_error.
  void send_seccomp();
  int sealed();
  // After sealed(): whether user.max_user_namespaces = 0 holds inside (with nested user namespaces
  // refused; false where /proc/sys could not be written and seccomp holds alone).
  bool userns_limit() const { return userns_limit_; }

  ~sandbox();
  sandbox(const sandbox &) = delete;
  sandbox &operator=(const sandbox &) = delete;

  int listener() const { return listener_; } // -1 offline; the caller takes ownership

  // Capture's sockets, made inside the namespace (empty without capture); the caller takes
  // ownership of those it takes, the sandbox closes the rest.
  struct capture_sockets {
    int dns_udp = -1, dns_tcp = -1;
    std::vector<int> listeners;
  };
  capture_sockets take_capture();
  const capture_sockets &capture() const { return capture_; } // what was handed over (doctor)

  // Lets init run the command. Returns false with `errno_out` set when it could not be executed
  // (ENOENT: not found, EPERM: the last set-up step in the command's process failed, else not
  // executable).
  bool start(int &errno_out);

  // Forwards a signal to the command through init.
  void signal(int sig);

  // Waits for the command; returns its wait status as exec reports it (code, or 128+N).
  int wait();

  // init's last word: once the command has ended, init kills what is left in the sandbox, reaps
  // until nothing remains and sends the status (code, or 128+N) before its own exit, whose
  // teardown of the namespaces then runs beside sluice's last steps. Call when control_fd() is
  // readable; false when the message is not that report (init died: wait for its exit instead).
  int control_fd() const { return control_; }
  bool exit_report(int &status);

  pid_t init_pid() const { return init_; }
  // The caller reaped init itself (waitpid on init_pid()).
  void release_reaped() { reaped_ = true; }

private:
  pid_t init_ = -1;
  int control_ = -1;   // SOCK_SEQPACKET to init; EOF tells init that sluice is gone
  int exec_pipe_ = -1; // read end: errno of a failed execve, EOF on success
  int listener_ = -1;
  capture_sockets capture_;
  bool reaped_ = false;
  bool network_ = true;
  bool etc_pending_ = false; // share_system_etc() still to do
  bool seccomp_pending_ = true;
  bool nested_userns_ = false;
  bool userns_limit_ = false;
  bool exited_ = false; // exit_report() came: init is on its way out, reaped if already gone
  std::string fault_;
};

} // namespace sluice::exec
