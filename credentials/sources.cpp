// Where a credential's value comes from (filters/credentials.hpp, credential_config::source): an
// environment variable, a file or a command's output. The I/O that filters/ does not do.
#include "credentials/load.hpp"
#include "filters/policy_loader.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

namespace sluice::credentials {

using filters::command_argv;
using filters::config_error;
using filters::credential_config;
namespace {

// Runs a command source: its standard output (at most 64 KiB), or a config_error naming the
// credential, the command and what went wrong (its first line of stderr; never its stdout).
std::string run_source_command(const credential_config &c) {
  auto argv = command_argv(c.source);
  std::string shown = c.source.substr(8);
  auto fail = [&](const std::string &why) {
    return config_error("credential '" + c.name + "': the command `" + shown + "` " + why +
                        "; check it by running it yourself, as the user that runs sluice");
  };
  if (argv.empty()) throw fail("is empty");
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw fail("could not start (no pipe)");
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    throw fail("could not start (no pipe)");
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group, so that a timeout ends whatever it started too.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  std::vector<char *> args;
  for (auto &a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(out[1]);
  ::close(err[1]);
  if (rc != 0) {
    ::close(out[0]);
    ::close(err[0]);
    throw fail("could not start: " + std::string(std::strerror(rc)));
  }
  std::string value, errors;
  constexpr std::size_t max_out = 64 * 1024, max_err = 4 * 1024;
  auto deadline = std::chrono::steady_clock::now() + command_timeout;
  bool timed_out = false, too_long = false;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open = 2;
  while (open > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    int n = ::poll(fds, 2, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      ssize_t r = ::read(fds[i].fd, buf, sizeof buf);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        fds[i].fd = -1;
        --open;
        continue;
      }
      auto &into = i == 0 ? value : errors;
      auto cap = i == 0 ? max_out : max_err;
      into.append(buf, static_cast<std::size_t>(std::min<ssize_t>(r, static_cast<ssize_t>(cap - std::min(cap, into.size())))));
      if (i == 0 && into.size() >= max_out) too_long = true;
    }
    if (too_long) break;
  }
  ::close(out[0]);
  ::close(err[0]);
  if (timed_out || too_long) ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) throw fail("did not finish within " + std::to_string(command_timeout.count()) + " s");
  if (too_long) throw fail("printed more than 64 KiB");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    auto line = errors.substr(0, errors.find('\n'));
    throw fail((WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                  : std::string("was killed by a signal")) +
               (line.empty() ? std::string() : " (" + line + ")"));
  }
  while (!value.empty() && (value.back() == '\n' || value.back() == '\r')) value.pop_back();
  if (value.empty()) throw fail("printed nothing");
  return value;
}

} // namespace

std::string command_output(const credential_config &c) { return run_source_command(c); }

std::string file_stamp(std::string_view source) {
  struct stat st {};
  if (source.substr(0, 5) != "file:" || ::stat(std::string(source.substr(5)).c_str(), &st) != 0) return "missing";
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
         std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
}

namespace {

// The value `c.source` names, as it is (line breaks inside kept); throws naming the source.
std::string source_value(credential_config &c) {
  std::string value;
  if (c.source.rfind("env:", 0) == 0) {
    const char *v = std::getenv(c.source.c_str() + 4);
    if (!v || !*v) {
      throw config_error("credential '" + c.name + "': the variable " + c.source.substr(4) +
                         " (source = \"" + c.source + "\") is not set; export it for sluice, "
                         "or use source = \"file:/path\"");
    }
    value = v;
  } else if (c.source.rfind("file:", 0) == 0) {
    c.file_stamp = file_stamp(c.source); // before the read: a change during it is read again
    std::ifstream f(c.source.substr(5), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    value = ss.str();
    while (!value.empty() && (value.back() == '\n' || value.back() == '\r')) value.pop_back();
    if (!f || value.empty()) {
      throw config_error("credential '" + c.name + "': cannot read a secret from " +
                         c.source.substr(5) + "; check the path, its permissions and that it is "
                         "not empty");
    }
  } else if (c.source.rfind("command:", 0) == 0) {
    value = run_source_command(c);
  } else {
    throw config_error("credential '" + c.name + "': source must be \"env:VAR\", \"file:/path\" or "
                       "\"command:PROGRAM ARGS...\"");
  }
  return value;
}

} // namespace

std::string read_key_source(const std::string &name, const std::string &source) {
  credential_config c;
  c.name = name;
  c.source = source;
  return source_value(c);
}

void load_secret(credential_config &c) {
  if (c.oauth2) {
    throw config_error("credential '" + c.name + "': an OAuth2 client is obtained by the gateway (load_credential)");
  }
  if (c.aws) throw config_error("credential '" + c.name + "': an AWS key pair is read by the gateway (load_credential)");
  std::string value = source_value(c);
  if (value.find_first_of("\r\n") != std::string::npos) {
    throw config_error("credential '" + c.name + "': the secret holds a line break and cannot go "
                       "into a header");
  }
  c.secret = std::move(value);
  if (c.ttl.count() > 0) c.refresh_at = std::chrono::steady_clock::now() + c.ttl;
}

} // namespace sluice::credentials
