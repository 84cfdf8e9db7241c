#include "exec/doctor.hpp"
#include "certs/certificate_authority.hpp"
#include "exec/landlock.hpp"
#include "exec/platform.hpp"
#include "exec/profile_resolver.hpp"
#include "exec/sandbox.hpp"

#include <map>

#include <boost/json.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace sluice::exec {
namespace {

// Runs `flags` of unshare in a throwaway child; empty on success, else the error.
std::string try_unshare(int flags) {
  int p[2];
  if (::pipe(p) != 0) return std::strerror(errno);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    int e = ::unshare(flags) == 0 ? 0 : errno;
    (void)!::write(p[1], &e, sizeof e);
    _exit(0);
  }
  ::close(p[1]);
  int e = -1;
  (void)!::read(p[0], &e, sizeof e);
  ::close(p[0]);
  int st;
  ::waitpid(pid, &st, 0);
  return e == 0 ? std::string() : std::string(std::strerror(e < 0 ? ECHILD : e));
}

} // namespace

std::vector<doctor_check> run_doctor() {
  std::vector<doctor_check> out;
  auto add = [&](std::string name, const std::string &err, std::string ok_detail) {
    out.push_back({std::move(name), err.empty(), err.empty() ? std::move(ok_detail) : err});
  };
  std::string fault;
  if (const char *f = std::getenv("SLUICE_FAULT")) fault = f;

  // The platform first: why namespaces would fail here, with the fix (AppArmor's restriction, the
  // sysctls, a container's seccomp filter or masked /proc).
  auto facts = read_platform_facts();
  auto why = diagnose(facts);
  add("platform", why.line, describe(facts));
  const bool no_userns = fault == "namespaces" || fault == "userns_sysctl" || fault == "container_seccomp";
  std::string userns = no_userns ? "fault injected" : try_unshare(CLONE_NEWUSER);
  add("user_namespaces", userns, "unprivileged user namespaces work");
  std::string netns = no_userns ? "fault injected"
                                            : try_unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID |
                                                          CLONE_NEWNS | CLONE_NEWIPC);
  add("network_namespaces", netns, "network, PID, mount and IPC namespaces work");

  // The real sandbox set-up, run to the last step before the command's execve.
  bool require_landlock = false, nested_userns = false, userns_limit = false;
  std::string policy_source = "the built-in policy";
  try {
    auto trusted = load_trusted_policy("");
    require_landlock = trusted.require_landlock;
    nested_userns = trusted.nested_userns;
    policy_source = trusted.source;
  } catch (const std::exception &) {
    // a broken policy is exec's to report, with its line; the machine checks go on
  }
  std::map<std::string, std::string> errs;
  int abi = -1;
  const char *steps[] = {"loopback", "capture", "fd_handoff", "mounts", "private_dir", "landlock", "seccomp", "setsid"};
  if (userns.empty() && netns.empty()) {
    try {
      sandbox_options o;
      o.probe = true;
      o.fault = fault;
      o.argv = {"true"};
      o.cwd = "/";
      o.capture_ports = {80, 443};
      o.require_landlock = require_landlock;
      o.nested_userns = nested_userns;
      sandbox sb(o);
      sb.ready();
      if (sb.listener() < 0) errs["fd_handoff"] = "no listener received";
      ::close(sb.listener());
      if (sb.capture().dns_udp < 0 || sb.capture().listeners.empty()) { // the sandbox closes them
        errs["capture"] = "the capture sockets were not handed over";
      }
      abi = sb.provision({{"probe", "x"}});
      userns_limit = sb.userns_limit();
      int e = 0;
      if (!sb.start(e)) errs["setsid"] = std::string("the command's process failed its last set-up: ") + std::strerror(e);
      if (sb.wait() != 0 && errs["setsid"].empty()) errs["setsid"] = "the probe command's process failed";
    } catch (const setup_error &e) {
      errs[e.step == "namespaces" ? "fd_handoff" : e.step] = e.what();
      bool after = false;
      for (auto step : steps) { // the steps after a failed one did not run
        if (after && errs[step].empty()) errs[step] = "skipped: an earlier step failed";
        if (step == e.step) after = true;
      }
    }
  } else {
    for (auto step : steps) errs[step] = "skipped: namespaces unavailable";
  }
  add("loopback", errs["loopback"], "lo comes up inside the network namespace");
  add("capture", errs["capture"], "every address of the namespace is local, listeners on the ports the "
                                  "policy can allow and a DNS responder on 127.0.0.1:53 catch clients "
                                  "that ignore the proxy variables");
  add("fd_handoff", errs["fd_handoff"], "the listener made inside reaches the gateway by SCM_RIGHTS");
  add("mounts", errs["mounts"], "a filesystem view built with pivot_root: system paths read-only, "
                                "private /tmp, /dev and /proc (/proc/sys read-only), no host sockets");
  add("private_dir", errs["private_dir"], "sluice's files (the CA certificate) are written into the "
                                          "view, whose root is then read-only");
  if (abi < 0) abi = landlock_abi();
  std::string landlock_detail =
      abi > 0 ? "Landlock ABI " + std::to_string(abi) + " applied" +
                    (abi >= 6 ? " (filesystem rules, abstract Unix socket and signal scopes)"
                              : " (filesystem rules)")
              : "this kernel has no Landlock: the mount view holds alone (set [sandbox] "
                "require_landlock = true to refuse instead)";
  add("landlock", errs["landlock"], landlock_detail);
  add("seccomp", errs["seccomp"], "seccomp filter: no TIOCSTI/TIOCLINUX, sockets AF_UNIX/INET/INET6/"
                                  "NETLINK only, no io_uring, keyrings, bpf, mounts");
  // Which of the two is in force, from the trusted policy's [sandbox] (a skill may set its own).
  std::string nested =
      nested_userns
          ? "nested user namespaces allowed: [sandbox] nested_userns = true in " + policy_source +
                " lets commands create namespaces of their own (and the kernel interfaces behind "
                "them: nf_tables, traffic control)"
          : std::string("nested user namespaces refused: seccomp refuses unshare and clone with "
                        "CLONE_NEW* flags (EPERM), clone3 answers ENOSYS") +
                (userns_limit ? ", user.max_user_namespaces is 0 inside" : "") +
                "; for commands that nest a sandbox (Chromium, bubblewrap, podman) set [sandbox] "
                "nested_userns = true in the trusted policy";
  add("nested_userns", errs["seccomp"].empty() ? "" : "skipped: the seccomp step failed", nested);
  add("setsid", errs["setsid"], "the command runs in a session of its own, without capabilities, "
                                "with no descriptor above 2");

  std::string ca;
  try {
    if (fault == "ca") throw certs::crypto_error("fault injected");
    auto authority = certs::certificate_authority::generate("sluice doctor", std::chrono::minutes(5),
                                                            {true, {"example.com"}, {}});
    authority.mint("example.com", false, std::chrono::minutes(5));
  } catch (const std::exception &e) {
    ca = e.what();
  }
  add("ca", ca, "ECDSA P-256 CA and leaf minting work");

  return out;
}

std::string doctor_failures(const std::vector<doctor_check> &checks) {
  std::string failed;
  for (auto &c : checks) {
    if (!c.ok && c.detail.rfind("skipped", 0) != 0) {
      failed += (failed.empty() ? "" : "; ") + c.name + ": " + c.detail;
    }
  }
  return failed;
}

int report_doctor(const std::vector<doctor_check> &checks, bool json,
                  const std::vector<std::string> &warnings) {
  bool ready = true;
  for (auto &c : checks) ready = ready && c.ok;
  if (json) {
    boost::json::array arr;
    for (auto &c : checks) arr.push_back({{"name", c.name}, {"ok", c.ok}, {"detail", c.detail}});
    boost::json::array warn;
    for (auto &w : warnings) warn.emplace_back(w);
    boost::json::object o{{"runnerReady", ready}, {"checks", arr}, {"warnings", warn}};
    std::printf("%s\n", boost::json::serialize(o).c_str());
  } else {
    for (auto &c : checks) {
      std::printf("%-4s %-20s %s\n", c.ok ? "ok" : "FAIL", c.name.c_str(), c.detail.c_str());
    }
    for (auto &w : warnings) std::printf("warn %s\n", w.c_str());
    std::printf("%s\n", ready ? "runner ready" : "runner NOT ready: sluice exec will refuse (exit 125)");
  }
  return ready ? 0 : 1;
}

} // namespace sluice::exec
