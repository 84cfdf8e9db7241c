#include "filters/credentials.hpp"
#include "filters/policy_loader.hpp"

#include <boost/beast/core/detail/base64.hpp>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

namespace sluice::filters {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  for (auto at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

// The user:password of a "Basic ..." value, if it is one.
std::optional<std::string> basic_credentials(std::string_view value) {
  if (value.size() < 6 || !iequals(value.substr(0, 6), "basic ")) return std::nullopt;
  auto b64 = value.substr(6);
  while (!b64.empty() && b64.front() == ' ') b64.remove_prefix(1);
  return base64_decode(b64);
}

} // namespace

std::string credential_placeholder(std::string_view name) {
  return "sluice-credential-" + std::string(name);
}

const std::vector<placeholder_kind> &placeholder_kinds() {
  static constexpr std::string_view alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  static constexpr std::string_view upper = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
  static const std::vector<placeholder_kind> kinds = {
      {"github", "ghp_", 40, alnum},                 // a classic personal access token
      {"github-fine-grained", "github_pat_", 93, alnum},
      {"gitlab", "glpat-", 26, alnum},
      {"openai", "sk-proj-", 164, alnum},
      {"anthropic", "sk-ant-api03-", 108, alnum},
      {"slack-bot", "xoxb-", 56, alnum},
      {"npm", "npm_", 40, alnum},
      {"aws-access-key-id", "AKIA", 20, upper},       // AWS: 20 characters, base32 after AKIA
      {"aws-secret-access-key", "", 40, alnum},
  };
  return kinds;
}

std::string shaped_placeholder(const credential_config &c, bool random) {
  if (c.placeholder_shape.empty()) return credential_placeholder(c.name);
  std::string_view prefix = c.placeholder_shape, alphabet = placeholder_kinds().front().alphabet;
  unsigned length = c.placeholder_length;
  for (const auto &k : placeholder_kinds()) {
    if (k.name == c.placeholder_shape) {
      prefix = k.prefix;
      length = k.length;
      alphabet = k.alphabet;
    }
  }
  std::string out(prefix);
  unsigned char bytes[64];
  std::size_t have = 0, used = 0;
  std::uint64_t counter = 0;
  auto next = [&]() -> unsigned char {
    if (used == have) {
      if (random) {
        if (RAND_bytes(bytes, sizeof bytes) != 1) throw config_error("no random bytes for a placeholder");
      } else {
        // Derived: SHA-256 of the name and a counter, as many blocks as it takes.
        std::string seed = "sluice-placeholder:" + c.name + ":" + std::to_string(counter++);
        SHA256(reinterpret_cast<const unsigned char *>(seed.data()), seed.size(), bytes);
        SHA256(bytes, 32, bytes + 32);
      }
      have = sizeof bytes;
      used = 0;
    }
    return bytes[used++];
  };
  const unsigned limit = 256 - 256 % alphabet.size(); // no bias: draws at or past it are dropped
  while (out.size() < length) {
    unsigned b = next();
    if (b < limit) out += alphabet[b % alphabet.size()];
  }
  return out;
}

std::string base64_encode(std::string_view in) {
  namespace b64 = boost::beast::detail::base64;
  std::string out(b64::encoded_size(in.size()), '\0');
  out.resize(b64::encode(out.data(), in.data(), in.size()));
  return out;
}

std::optional<std::string> base64_decode(std::string_view in) {
  namespace b64 = boost::beast::detail::base64;
  if (in.size() % 4 != 0) return std::nullopt;
  for (char c : in) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/' || c == '=')) return std::nullopt;
  }
  std::string out(b64::decoded_size(in.size()), '\0');
  auto [written, read] = b64::decode(out.data(), in.data(), in.size());
  if (in.substr(read).find_first_not_of('=') != std::string_view::npos) return std::nullopt;
  out.resize(written);
  return out;
}

std::vector<std::string> command_argv(std::string_view source) {
  std::vector<std::string> argv;
  if (source.rfind("command:", 0) != 0) return argv;
  std::string word;
  for (char ch : source.substr(8)) {
    if (ch == ' ' || ch == '\t') {
      if (!word.empty()) argv.push_back(std::move(word));
      word.clear();
    } else {
      word += ch;
    }
  }
  if (!word.empty()) argv.push_back(std::move(word));
  return argv;
}

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

void load_secret(credential_config &c) {
  if (c.oauth2) {
    throw config_error("credential '" + c.name + "': an OAuth2 client is obtained by the gateway (load_credential)");
  }
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
  if (value.find_first_of("\r\n") != std::string::npos) {
    throw config_error("credential '" + c.name + "': the secret holds a line break and cannot go "
                       "into a header");
  }
  c.secret = std::move(value);
  if (c.ttl.count() > 0) c.refresh_at = std::chrono::steady_clock::now() + c.ttl;
}

credential_injector::credential_injector(std::vector<credential_config> credentials) {
  for (auto &c : credentials) {
    entry e{c, host_matcher(c.hosts), c.placeholder.empty() ? credential_placeholder(c.name) : c.placeholder, {}};
    if (c.format.rfind("basic:", 0) == 0) {
      e.value = "Basic " + base64_encode(c.format.substr(6) + ":" + c.secret);
    } else {
      e.value = replace_all(c.format, "{}", c.secret);
    }
    entries_.push_back(std::move(e));
  }
}

credential_result credential_injector::apply(
    const std::vector<std::pair<std::string_view, std::string_view>> &fields, std::string_view target,
    std::string_view host, std::string_view scheme, unsigned port) const {
  credential_result r;
  // First every placeholder bound elsewhere: one leaking is refused whatever else the request is.
  for (const auto &e : entries_) {
    bool belongs = e.hosts.match(host, scheme, port) != nullptr;
    if (belongs) continue;
    bool carried = target.find(e.placeholder) != std::string_view::npos;
    for (const auto &[name, value] : fields) {
      if (carried) break;
      carried = value.find(e.placeholder) != std::string_view::npos;
      if (!carried) {
        auto basic = basic_credentials(value);
        carried = basic && basic->find(e.placeholder) != std::string::npos;
      }
    }
    if (carried) {
      r.reason = "credential_host_mismatch";
      r.credential = e.cfg.name;
      return r;
    }
  }
  for (const auto &e : entries_) {
    if (!e.hosts.match(host, scheme, port)) continue;
    bool has_header = false;
    for (const auto &[name, value] : fields) {
      if (iequals(name, e.cfg.header)) has_header = true;
      std::string v(value);
      if (v.find(e.placeholder) != std::string::npos) {
        r.set.emplace_back(std::string(name), replace_all(v, e.placeholder, e.cfg.secret));
        r.credential = e.cfg.name;
      } else if (auto basic = basic_credentials(value); basic && basic->find(e.placeholder) != std::string::npos) {
        r.set.emplace_back(std::string(name),
                           "Basic " + base64_encode(replace_all(*basic, e.placeholder, e.cfg.secret)));
        r.credential = e.cfg.name;
      }
    }
    bool set_already = false;
    for (auto &[n, v] : r.set) set_already = set_already || iequals(n, e.cfg.header);
    if (!has_header && !set_already) {
      r.set.emplace_back(e.cfg.header, e.value);
      r.credential = e.cfg.name;
    }
  }
  return r;
}

} // namespace sluice::filters
