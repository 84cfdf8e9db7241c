#include "adapters/adapter.hpp"
#include "adapters/hook.hpp"

#include <boost/json.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <stdexcept>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace sluice::adapters {
namespace {

namespace js = boost::json;
namespace fs = std::filesystem;

constexpr std::size_t max_settings_bytes = 4 * 1024 * 1024;
constexpr const char *claude_minimum = "2.0.10";
constexpr const char *claude_matcher = "Bash|Monitor";

std::string env_or(const char *name, const std::string &fallback) {
  const char *v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

std::string home() {
  std::string h = env_or("HOME", "");
  if (h.empty()) throw std::runtime_error("HOME is not set; set it or use --scope project --dir DIR");
  return h;
}

std::string settings_path(const adapter_options &o) {
  if (o.host != "claude") {
    throw std::runtime_error("unknown host '" + o.host + "'; this version has adapters for: claude");
  }
  if (o.scope == "user") return env_or("CLAUDE_CONFIG_DIR", home() + "/.claude") + "/settings.json";
  if (o.scope == "project") {
    std::string dir = o.dir.empty() ? fs::current_path().string() : o.dir;
    if (!fs::is_directory(dir)) {
      throw std::runtime_error("--dir " + dir + ": not a directory; give the project's directory");
    }
    return fs::absolute(dir).lexically_normal().string() + "/.claude/settings.json";
  }
  if (o.scope == "managed") return "/etc/claude-code/managed-settings.json";
  throw std::runtime_error("unknown --scope '" + o.scope + "'; use user, project or managed");
}

// Where install keeps what remove needs to put things back: outside the host's configuration, so a
// repository never carries it.
std::string state_path(const std::string &settings) {
  std::string base = ::geteuid() == 0 && settings.rfind("/etc/", 0) == 0
                         ? std::string("/var/lib/sluice/adapters")
                         : env_or("XDG_STATE_HOME", home() + "/.local/state") + "/sluice/adapters";
  std::string name;
  for (char c : settings) name += (c == '/') ? '!' : c;
  return base + "/" + name + ".json";
}

std::optional<std::string> read_file(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
  }
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > max_settings_bytes) {
      ::close(fd);
      throw std::runtime_error(path + " is larger than 4 MiB; it cannot be a settings file");
    }
  }
  ::close(fd);
  return out;
}

// Writes by rename, keeping the old file's mode (0644 for a new one).
void write_file(const std::string &path, const std::string &data, mode_t mode_if_new = 0644) {
  struct stat st{};
  mode_t mode = ::stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : mode_if_new;
  std::string tmp = path + ".sluice-tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(errno));
  ::fchmod(fd, mode);
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
      throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(errno));
    }
    done += static_cast<std::size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot replace " + path + ": " + std::strerror(errno));
  }
}

void pretty(const js::value &v, std::string &out, int indent) {
  std::string pad(static_cast<std::size_t>(indent) * 2, ' ');
  std::string inner(static_cast<std::size_t>(indent + 1) * 2, ' ');
  if (v.is_object()) {
    const auto &o = v.as_object();
    if (o.empty()) {
      out += "{}";
      return;
    }
    out += "{\n";
    std::size_t i = 0;
    for (auto &kv : o) {
      out += inner + js::serialize(js::value(kv.key())) + ": ";
      pretty(kv.value(), out, indent + 1);
      out += (++i < o.size() ? ",\n" : "\n");
    }
    out += pad + "}";
  } else if (v.is_array()) {
    const auto &a = v.as_array();
    if (a.empty()) {
      out += "[]";
      return;
    }
    out += "[\n";
    for (std::size_t i = 0; i < a.size(); ++i) {
      out += inner;
      pretty(a[i], out, indent + 1);
      out += (i + 1 < a.size() ? ",\n" : "\n");
    }
    out += pad + "]";
  } else {
    out += js::serialize(v);
  }
}

std::string to_text(const js::value &v) {
  std::string out;
  pretty(v, out, 0);
  return out + "\n";
}

js::object parse_settings(const std::string &path, const std::optional<std::string> &text) {
  if (!text || text->find_first_not_of(" \t\r\n") == std::string::npos) return {};
  js::value v;
  try {
    v = js::parse(*text);
  } catch (const std::exception &e) {
    throw std::runtime_error(path + " is not valid JSON (" + e.what() +
                             "); fix it first: sluice does not overwrite a file it cannot read");
  }
  if (!v.is_object()) throw std::runtime_error(path + " is not a JSON object; fix it first");
  return v.as_object();
}

std::string hook_command(const adapter_options &o) {
  std::string cmd = shell_word(o.sluice_path) + " hook " + o.host;
  if (!o.skill.empty()) cmd += " --skill " + shell_word(o.skill);
  if (!o.policy_file.empty()) cmd += " --policy " + shell_word(o.policy_file);
  // Hosts run the original command when a hook exits with anything but 0 or 2 (a missing binary,
  // a crash): turn every failure into 2, which blocks.
  return cmd + " || { echo 'sluice: the hook failed; the command was blocked, not run' >&2; exit 2; }";
}

std::string excluded_pattern(const adapter_options &o) {
  return shell_word(o.sluice_path) + " exec:*";
}

bool is_ours(const js::value &entry) {
  if (!entry.is_object()) return false;
  auto *hooks = entry.as_object().if_contains("hooks");
  if (!hooks || !hooks->is_array()) return false;
  for (auto &h : hooks->as_array()) {
    if (!h.is_object()) continue;
    auto *c = h.as_object().if_contains("command");
    if (c && c->is_string() && std::string_view(c->as_string()).find(" hook claude") != std::string_view::npos &&
        std::string_view(c->as_string()).find("sluice") != std::string_view::npos) {
      return true;
    }
  }
  return false;
}

js::array *pre_tool_use(js::object &s, bool create) {
  auto *hooks = s.if_contains("hooks");
  if (!hooks) {
    if (!create) return nullptr;
    hooks = &s.emplace("hooks", js::object{}).first->value();
  }
  if (!hooks->is_object()) throw std::runtime_error("\"hooks\" is not an object");
  auto &ho = hooks->as_object();
  auto *ptu = ho.if_contains("PreToolUse");
  if (!ptu) {
    if (!create) return nullptr;
    ptu = &ho.emplace("PreToolUse", js::array{}).first->value();
  }
  if (!ptu->is_array()) throw std::runtime_error("\"hooks.PreToolUse\" is not an array");
  return &ptu->as_array();
}

// Removes what install added (our hook entries and exclusion), dropping containers left empty.
void strip(js::object &s, const adapter_options &o) {
  if (auto *ptu = pre_tool_use(s, false)) {
    js::array kept;
    for (auto &e : *ptu) {
      if (!is_ours(e)) kept.push_back(e);
    }
    *ptu = std::move(kept);
    auto &ho = s["hooks"].as_object();
    if (ptu->empty()) ho.erase("PreToolUse");
    if (ho.empty()) s.erase("hooks");
  }
  if (auto *sb = s.if_contains("sandbox"); sb && sb->is_object()) {
    auto &sbo = sb->as_object();
    if (auto *ex = sbo.if_contains("excludedCommands"); ex && ex->is_array()) {
      js::array kept;
      for (auto &e : ex->as_array()) {
        if (!(e.is_string() && e.as_string() == excluded_pattern(o))) kept.push_back(e);
      }
      ex->as_array() = std::move(kept);
      if (ex->as_array().empty()) sbo.erase("excludedCommands");
    }
    if (sbo.empty()) s.erase("sandbox");
  }
}

bool installed_in(const js::object &s) {
  auto *hooks = s.if_contains("hooks");
  if (!hooks || !hooks->is_object()) return false;
  auto *ptu = hooks->as_object().if_contains("PreToolUse");
  if (!ptu || !ptu->is_array()) return false;
  for (auto &e : ptu->as_array()) {
    if (is_ours(e)) return true;
  }
  return false;
}

std::string installed_command(const js::object &s) {
  auto *hooks = s.if_contains("hooks");
  if (!hooks || !hooks->is_object()) return {};
  auto *ptu = hooks->as_object().if_contains("PreToolUse");
  if (!ptu || !ptu->is_array()) return {};
  for (auto &e : ptu->as_array()) {
    if (!is_ours(e)) continue;
    for (auto &h : e.as_object().at("hooks").as_array()) {
      auto *c = h.is_object() ? h.as_object().if_contains("command") : nullptr;
      if (c && c->is_string()) return std::string(c->as_string());
    }
  }
  return {};
}

// Runs `command` with `input` on stdin through /bin/sh, as a host runs a hook; returns exit status
// and stdout. Bounded: 20 s, 1 MiB of output.
std::pair<int, std::string> run_shell(const std::string &command, const std::string &input) {
  char path[] = "/tmp/sluice-hook-input-XXXXXX";
  int in = ::mkstemp(path);
  if (in < 0) throw std::runtime_error(std::string("mkstemp: ") + std::strerror(errno));
  ::unlink(path);
  if (::write(in, input.data(), input.size()) != static_cast<ssize_t>(input.size())) {
    ::close(in);
    throw std::runtime_error("cannot write the sample hook input");
  }
  ::lseek(in, 0, SEEK_SET);
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in);
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(in, 0);
    ::dup2(out[1], 1);
    int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) ::dup2(devnull, 2);
    ::alarm(20);
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char *>(nullptr));
    ::_exit(127);
  }
  ::close(in);
  ::close(out[1]);
  std::string text;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (text.size() < (1u << 20)) text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(out[0]);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), text};
}

std::string find_on_path(const std::string &name) {
  std::string path = env_or("PATH", "/usr/local/bin:/usr/bin:/bin");
  std::size_t start = 0;
  while (start <= path.size()) {
    auto end = path.find(':', start);
    std::string dir = path.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!dir.empty()) {
      std::string cand = dir + "/" + name;
      if (::access(cand.c_str(), X_OK) == 0) return cand;
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return {};
}

} // namespace

bool version_at_least(const std::string &version, const std::string &minimum) {
  auto parts = [](const std::string &v) {
    std::vector<long> out;
    std::size_t i = 0;
    while (i < v.size() && !std::isdigit(static_cast<unsigned char>(v[i]))) ++i;
    while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i]))) {
      long n = 0;
      while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i]))) n = n * 10 + (v[i++] - '0');
      out.push_back(n);
      if (i < v.size() && v[i] == '.') ++i;
      else break;
    }
    return out;
  };
  auto a = parts(version), b = parts(minimum);
  if (a.empty()) return false;
  for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    long x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
    if (x != y) return x > y;
  }
  return true;
}

void adapter_install(const adapter_options &o) {
  std::string path = settings_path(o);
  std::string state = state_path(path);
  auto before = read_file(path);
  js::object s = parse_settings(path, before);
  if (auto *d = s.if_contains("disableAllHooks"); d && d->is_bool() && d->as_bool()) {
    throw std::runtime_error(path + " sets \"disableAllHooks\": true, which would switch the sluice "
                             "hook off; remove that setting first");
  }
  // A reinstall keeps the first backup: remove must restore what was there before sluice.
  auto previous_state = read_file(state);
  strip(s, o);
  pre_tool_use(s, true)->push_back(js::object{
      {"matcher", claude_matcher},
      {"hooks", js::array{js::object{{"type", "command"}, {"command", hook_command(o)}, {"timeout", 60}}}}});
  // Claude's own sandbox cannot nest sluice's namespaces: the rewritten commands run outside it,
  // with sluice as the boundary.
  auto &sandbox = s["sandbox"];
  if (!sandbox.is_object()) {
    if (!sandbox.is_null()) throw std::runtime_error(path + ": \"sandbox\" is not an object; fix it first");
    sandbox = js::object{};
  }
  auto &excluded = sandbox.as_object()["excludedCommands"];
  if (excluded.is_null()) excluded = js::array{};
  if (!excluded.is_array()) {
    throw std::runtime_error(path + ": \"sandbox.excludedCommands\" is not an array; fix it first");
  }
  excluded.as_array().push_back(js::string(excluded_pattern(o)));

  std::string written = to_text(s);
  fs::path dir = fs::path(path).parent_path();
  std::vector<std::string> created;
  for (fs::path p = dir; !p.empty() && !fs::exists(p); p = p.parent_path()) created.push_back(p.string());
  fs::create_directories(dir);
  js::object st;
  if (previous_state) {
    st = parse_settings(state, previous_state);
  } else {
    st = {{"host", o.host},
          {"settings", path},
          {"existed", before.has_value()},
          {"original", before ? *before : std::string()},
          {"created_dirs", js::value_from(created)}};
  }
  st["written"] = written;
  fs::create_directories(fs::path(state).parent_path());
  write_file(state, to_text(st), 0600);
  write_file(path, written);
}

void adapter_remove(const adapter_options &o) {
  std::string path = settings_path(o);
  std::string state = state_path(path);
  auto st_text = read_file(state);
  auto now = read_file(path);
  if (!st_text) {
    js::object s = parse_settings(path, now);
    if (!installed_in(s)) throw std::runtime_error("no sluice adapter is installed in " + path);
    strip(s, o);
    write_file(path, to_text(s));
    return;
  }
  js::object st = parse_settings(state, st_text);
  std::string written = st.contains("written") ? std::string(st["written"].as_string()) : "";
  bool existed = st.contains("existed") && st["existed"].as_bool();
  if (now && *now == written) {
    // Nothing changed since install: put back exactly what was there.
    if (existed) {
      write_file(path, std::string(st["original"].as_string()));
    } else {
      ::unlink(path.c_str());
      if (auto *dirs = st.if_contains("created_dirs"); dirs && dirs->is_array()) {
        for (auto &d : dirs->as_array()) ::rmdir(std::string(d.as_string()).c_str()); // only if empty
      }
    }
  } else if (now) {
    // Edited since: take out only what sluice added.
    js::object s = parse_settings(path, now);
    strip(s, o);
    write_file(path, to_text(s));
    std::fprintf(stderr, "sluice: %s changed since the adapter was installed; removed only the "
                         "sluice hook and exclusion, kept the rest\n", path.c_str());
  }
  ::unlink(state.c_str());
}

std::vector<adapter_state> adapter_status(const adapter_options &base) {
  std::vector<adapter_state> out;
  adapter_options o = base;
  if (o.host.empty()) o.host = "claude";
  adapter_state a;
  a.host = o.host;
  a.settings = settings_path(o);
  a.minimum = claude_minimum;
  js::object s;
  try {
    s = parse_settings(a.settings, read_file(a.settings));
  } catch (const std::exception &e) {
    a.warnings.push_back(e.what());
  }
  a.installed = installed_in(s);
  a.host_binary = find_on_path("claude");
  if (!a.host_binary.empty()) {
    auto [rc, text] = run_shell(shell_quote(a.host_binary) + " --version", "");
    if (rc == 0) {
      a.version = text.substr(0, text.find_first_of(" \n"));
      a.at_least_minimum = version_at_least(a.version, a.minimum);
    }
  }
  if (a.host_binary.empty()) a.warnings.push_back("claude is not on PATH");
  if (!a.version.empty() && !a.at_least_minimum) {
    a.warnings.push_back("Claude Code " + a.version + " ignores a hook's rewrite (updatedInput) and would "
                         "run the original command; upgrade to " + a.minimum + " or later");
  }
  if (a.installed) {
    std::string cmd = installed_command(s);
    js::object sample{{"session_id", "sluice-status"},
                      {"cwd", fs::current_path().string()},
                      {"hook_event_name", "PreToolUse"},
                      {"tool_name", "Bash"},
                      {"tool_input", js::object{{"command", "true"}, {"description", "sluice status"}}}};
    auto [rc, text] = run_shell(cmd, js::serialize(sample));
    try {
      auto v = js::parse(text);
      auto &h = v.at("hookSpecificOutput").as_object();
      std::string rewritten(h.at("updatedInput").at("command").as_string());
      a.hook_verified = rc == 0 && h.at("permissionDecision") == "allow" &&
                        rewritten.find(" exec ") != std::string::npos;
    } catch (const std::exception &) {
      a.hook_verified = false;
    }
    if (!a.hook_verified) {
      a.warnings.push_back("the installed hook did not rewrite a sample call (exit " + std::to_string(rc) +
                           "); every shell call is refused until `sluice doctor` passes");
    }
  }
  // Settings that switch the hook off or keep it from deciding.
  std::vector<std::string> others{env_or("CLAUDE_CONFIG_DIR", env_or("HOME", "/nonexistent") + "/.claude") +
                                      "/settings.json",
                                  fs::current_path().string() + "/.claude/settings.json",
                                  fs::current_path().string() + "/.claude/settings.local.json"};
  for (auto &p : others) {
    try {
      auto t = read_file(p);
      if (!t) continue;
      auto so = parse_settings(p, t);
      if (auto *d = so.if_contains("disableAllHooks"); d && d->is_bool() && d->as_bool()) {
        a.warnings.push_back(p + " sets disableAllHooks: the hook does not run there; install with "
                                 "--scope managed (root) to keep it on");
      }
      if (auto *perm = so.if_contains("permissions"); perm && perm->is_object()) {
        if (auto *ask = perm->as_object().if_contains("ask"); ask && ask->is_array()) {
          for (auto &r : ask->as_array()) {
            if (r.is_string() && std::string_view(r.as_string()).rfind("Bash", 0) == 0) {
              a.warnings.push_back(p + " has an ask rule for Bash; a hook's allow does not override "
                                       "it, so headless runs refuse those commands");
              break;
            }
          }
        }
      }
    } catch (const std::exception &) {
    }
  }
  out.push_back(std::move(a));
  return out;
}

int report_status(const std::vector<adapter_state> &states, bool json) {
  bool good = true;
  js::array arr;
  for (auto &a : states) {
    if (a.installed && !(a.hook_verified && a.at_least_minimum)) good = false;
    arr.push_back(js::object{{"host", a.host},
                             {"settings", a.settings},
                             {"installed", a.installed},
                             {"hostBinary", a.host_binary},
                             {"version", a.version},
                             {"minimumVersion", a.minimum},
                             {"atLeastMinimum", a.at_least_minimum},
                             {"hookVerified", a.hook_verified},
                             {"warnings", js::value_from(a.warnings)}});
  }
  if (json) {
    std::printf("%s\n", js::serialize(js::object{{"adapters", std::move(arr)}}).c_str());
  } else {
    for (auto &a : states) {
      std::printf("%-8s %s  %s\n", a.host.c_str(), a.installed ? "installed" : "not installed",
                  a.settings.c_str());
      std::printf("         host %s %s (minimum %s%s)\n",
                  a.host_binary.empty() ? "not found" : a.host_binary.c_str(), a.version.c_str(),
                  a.minimum.c_str(), a.version.empty() ? "" : a.at_least_minimum ? ", ok" : ", TOO OLD");
      if (a.installed) std::printf("         hook %s\n", a.hook_verified ? "verified" : "NOT VERIFIED");
      for (auto &w : a.warnings) std::printf("         warning: %s\n", w.c_str());
    }
  }
  return good ? 0 : 1;
}

} // namespace sluice::adapters
