#include "exec/doctor.hpp"
#include "certs/certificate_authority.hpp"
#include "exec/sandbox.hpp"

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

  std::string userns = fault == "namespaces" ? "fault injected" : try_unshare(CLONE_NEWUSER);
  add("user_namespaces", userns, "unprivileged user namespaces work");
  std::string netns = fault == "namespaces" ? "fault injected"
                                            : try_unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID |
                                                          CLONE_NEWNS | CLONE_NEWIPC);
  add("network_namespaces", netns, "network, PID, mount and IPC namespaces work");

  // The real sandbox set-up, stopped before anything would run.
  std::string loopback, handoff, mounts;
  if (userns.empty() && netns.empty()) {
    try {
      sandbox_options o;
      o.probe = true;
      o.fault = fault;
      o.argv = {"true"};
      sandbox sb(o);
      sb.ready();
      if (sb.listener() < 0) handoff = "no listener received";
      ::close(sb.listener());
      int e = 0;
      sb.start(e);
      sb.wait();
    } catch (const setup_error &e) {
      (e.step == "loopback" ? loopback : e.step == "mounts" ? mounts : handoff) = e.what();
    }
  } else {
    loopback = handoff = mounts = "skipped: namespaces unavailable";
  }
  add("loopback", loopback, "lo comes up inside the network namespace");
  add("fd_handoff", handoff, "the listener made inside reaches the gateway by SCM_RIGHTS");
  add("mounts", mounts, "private /proc and masked host sockets");

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

  std::string dir_err;
  std::string base = "/tmp";
  if (const char *t = std::getenv("TMPDIR"); t && *t) base = t;
  std::string templ = base + "/sluice-doctor-XXXXXX";
  if (fault == "private_dir" || ::mkdtemp(templ.data()) == nullptr) {
    dir_err = "cannot create a directory under " + base + "; point TMPDIR at a writable directory";
  } else {
    ::rmdir(templ.c_str());
  }
  add("private_dir", dir_err, "private directories can be made under " + base);
  return out;
}

int report_doctor(const std::vector<doctor_check> &checks, bool json) {
  bool ready = true;
  for (auto &c : checks) ready = ready && c.ok;
  if (json) {
    boost::json::array arr;
    for (auto &c : checks) arr.push_back({{"name", c.name}, {"ok", c.ok}, {"detail", c.detail}});
    boost::json::object o{{"runnerReady", ready}, {"checks", arr}};
    std::printf("%s\n", boost::json::serialize(o).c_str());
  } else {
    for (auto &c : checks) {
      std::printf("%-4s %-20s %s\n", c.ok ? "ok" : "FAIL", c.name.c_str(), c.detail.c_str());
    }
    std::printf("%s\n", ready ? "runner ready" : "runner NOT ready: sluice exec will refuse (exit 125)");
  }
  return ready ? 0 : 1;
}

} // namespace sluice::exec
