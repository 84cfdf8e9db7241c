#include "exec/runner_impl.hpp"
#include "gateway/gateway.hpp"
#include "metrics/textfile.hpp"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

// `sluice exec`: one run in order. Step 1 plans it (runner_plan.cpp); step 2 makes the sandbox;
// steps 3 and 4 set it up while the gateway is built (runner_gateway.cpp); steps 5 and 6 run the
// command; then what follows it (runner_report.cpp).
namespace sluice::exec {
using namespace detail;
namespace {

// Steps 3 and 4 on the main thread, while init builds the view: the guard's walk (init waits for
// its result before it lets go of the host's root), the hand-over of the listeners and sluice's
// files, and the seal. Returns the Landlock ABI applied and what the walk found.
int set_up(const exec_plan &plan, sandbox &sb, workspace_guard &guard, gateway_build &build,
           workspace_scan &scan) {
  std::exception_ptr ready_error;
  try {
    sb.share_system_etc(); // once the CA is under way: it is on the way to the start too
    scan = guard.scan();
    sb.send_marks({scan.masks, scan.protect});
    sb.send_seccomp(); // while init builds the view
    if (!plan.network) sb.send_files({}); // nothing to wait for: init seals its view once it is built
    sb.ready(); // init's own failure (loopback, listener, mounts) is the one to report
  } catch (...) {
    ready_error = std::current_exception();
  }
  if (plan.network) {
    if (ready_error) {
      build.hand_sockets(-1, {});
    } else {
      build.hand_sockets(sb.listener(), sb.take_capture());
    }
  }
  if (ready_error) std::rethrow_exception(ready_error);
  if (plan.network) {
    auto files = build.files();
    if (!plan.agent.empty()) files.emplace_back("agent", plan.agent + "\n");
    sb.send_files(files);
  }
  return sb.sealed();
}

// Steps 5 and 6: starts the command and forwards signals until init has exited. Returns the exit
// status; `result` is the textfile's exit_zero, exit_nonzero or refused.
int run_to_end(const exec_options &opt, sandbox &sb, int sfd, std::string_view &result) {
  int exec_errno = 0;
  if (!sb.start(exec_errno)) {
    int status = exec_errno == ENOENT ? 127 : exec_errno == EPERM ? 125 : 126;
    result = exec_errno == EPERM ? "refused" : "exit_nonzero";
    if (exec_errno == EPERM) {
      std::fprintf(stderr, "sluice: sandbox set-up failed at setsid: the command could not be given "
                           "a session of its own or could not drop its capabilities; nothing was run "
                           "(see `sluice doctor`)\n");
    } else {
      std::fprintf(stderr, "sluice: %s: %s\n", opt.argv[0].c_str(),
                   exec_errno == ENOENT
                       ? "command not found in the sandbox; check the name and PATH (the sandbox "
                         "shows the system paths, the workspace and the command's own files)"
                       : (std::string("cannot execute: ") + std::strerror(exec_errno)).c_str());
    }
    sb.wait();
    return status;
  }
  int status = 125;
  bool report = true; // init's exit report is still to come on the control socket
  for (;;) {
    pollfd p[2] = {{sfd, POLLIN, 0}, {report ? sb.control_fd() : -1, POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) continue;
    if (p[1].revents != 0) {
      if (sb.exit_report(status)) {
        result = status == 0 ? "exit_zero" : "exit_nonzero"; // 128+N: died of signal N
        return status;
      }
      report = false; // init died without it: its exit says how
    }
    if (!(p[0].revents & POLLIN)) continue;
    signalfd_siginfo si{};
    if (::read(sfd, &si, sizeof si) != sizeof si) continue;
    if (si.ssi_signo == SIGCHLD) {
      int st = 0;
      if (::waitpid(sb.init_pid(), &st, WNOHANG) == sb.init_pid()) {
        status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        result = status == 0 ? "exit_zero" : "exit_nonzero"; // 128+N: died of signal N
        break;
      }
      continue;
    }
    sb.signal(static_cast<int>(si.ssi_signo));
  }
  sb.release_reaped();
  return status;
}

int run_command(const exec_options &opt, std::chrono::steady_clock::time_point t0,
                exec_progress &progress) {
  exec_plan plan = plan_command(opt, progress);
  const auto &resolved = plan.resolved;
  // Every run says it, not only the first: a root-equivalent socket is the host, whoever reads the log.
  for (const auto &g : resolved.unix_sockets) {
    if (!g.root_equivalent) continue;
    std::fprintf(stderr, "sluice: warning: this command holds a root-equivalent socket, %s%s (granted by %s): "
                         "what it asks that service is done as root on the host\n",
                 g.path.c_str(), g.known_as.empty() ? "" : (", " + g.known_as).c_str(), g.origin.c_str());
  }

  // Signals to forward are taken by this thread only; the gateway's threads inherit the mask.
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCHLD}) {
    sigaddset(&set, sig);
  }
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  int sfd = ::signalfd(-1, &set, SFD_CLOEXEC);

  // Step 2. The sandbox is made before any key exists, so its init never holds key material. From
  // here on this process is not dumpable: no core dumps, no ptrace, no /proc/PID/mem for others.
  sandbox sb(plan.so);
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  gateway_build build(plan, sb.init_pid());
  workspace_guard guard(plan.guard);
  workspace_scan scan;
  int landlock = set_up(plan, sb, guard, build, scan);
  plan.userns_limit = sb.userns_limit();
  std::string_view result;
  int status = run_to_end(opt, sb, sfd, result);
  ::close(sfd);
  // The journal: the command and its mounts are gone; what it changed goes into the workspace now,
  // before the guard looks at what it left there. init reports the status before its own exit; the
  // layer is read once the mount namespace that held the overlay is gone with it.
  if (plan.journal.lock_fd >= 0) sb.wait();
  boost::json::value journaled = finish_journal(plan, status, result);
  boost::json::array quarantined = quarantine_all(guard, plan);

  gateway::gateway *gw = nullptr;
  try {
    gw = build.finish();
  } catch (const std::exception &e) {
    std::fprintf(stderr, "sluice: the gateway could not start: %s; the command was stopped\n", e.what());
    status = 125;
    result = "refused";
  }
  if (gw) {
    // The command is gone, but a request it saw answered may not be counted yet (the response is
    // written before the request is logged): let those finish, briefly, so the summary, the log
    // and the metrics hold every request.
    gw->drain(std::chrono::seconds(2));
    gw->join();
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!opt.metrics_textfile.empty()) {
    progress.written = true;
    if (gw) {
      write_textfile(opt, gw->instruments(), progress.profile, result, seconds);
    } else {
      metrics::metrics m(resolved.skill); // offline, or the command ended before the gateway was up
      write_textfile(opt, m, progress.profile, result, seconds);
    }
  }

  report(opt, plan, gw, status, seconds, landlock, scan, quarantined, journaled);
  return status;
}

} // namespace

int run_exec(const exec_options &opt) {
  auto t0 = std::chrono::steady_clock::now();
  if (!opt.metrics_textfile.empty()) {
    try {
      metrics::check_textfile_dir(opt.metrics_textfile);
    } catch (const std::runtime_error &e) {
      throw refusal(e.what());
    }
  }
  exec_progress progress;
  try {
    return run_command(opt, t0, progress);
  } catch (...) {
    if (!opt.metrics_textfile.empty() && !progress.written) {
      metrics::metrics m(progress.skill);
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      write_textfile(opt, m, progress.profile, "refused", seconds);
    }
    throw;
  }
}

} // namespace sluice::exec
