#include "adapters/adapter.hpp"
#include "adapters/hook.hpp"
#include "certs/ca_files.hpp"
#include "exec/doctor.hpp"
#include "exec/profile_resolver.hpp"
#include "filters/policy_loader.hpp"

#include <boost/json.hpp>
#include <chrono>
#include <csignal>
#include <optional>
#include <poll.h>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <sys/socket.h>
#include <sys/time.h>
#include <regex>
#include <sstream>
#include <toml++/toml.h>
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

extern const std::string_view pi_extension;           // deploy/hosts/pi/index.ts, compiled in
extern const std::string_view opencode_plugin_source; // deploy/hosts/opencode/sluice.js
extern const std::string_view agent_skill;            // deploy/hosts/skill/SKILL.md

namespace {

namespace js = boost::json;
namespace fs = std::filesystem;

constexpr std::size_t max_settings_bytes = 4 * 1024 * 1024;
constexpr const char *claude_minimum = "2.0.10";
constexpr const char *claude_matcher = "Bash|Monitor";
constexpr const char *codex_minimum = "0.131.0";
constexpr const char *pi_minimum = "0.51.0";
constexpr const char *opencode_minimum = "1.3.2";

std::string env_or(const char *name, const std::string &fallback) {
  const char *v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

std::string home() {
  std::string h = env_or("HOME", "");
  if (h.empty()) throw std::runtime_error("HOME is not set; set it or use --scope project --dir DIR");
  return h;
}

std::string codex_home() { return env_or("CODEX_HOME", home() + "/.codex"); }

void check_host(const adapter_options &o) {
  if (o.host != "claude" && o.host != "codex" && o.host != "pi" && o.host != "opencode") {
    throw std::runtime_error("unknown host '" + o.host +
                             "'; this version has adapters for claude, codex, opencode and pi");
  }
  if ((o.host == "pi" || o.host == "opencode") && o.scope != "user" && o.scope != "project") {
    throw std::runtime_error("the " + o.host + " adapter installs at --scope user or project");
  }
  if (o.host == "codex" && o.scope != "user") {
    throw std::runtime_error("the codex adapter installs at --scope user only ($CODEX_HOME or ~/.codex): "
                             "Codex trusts hooks per user, and a project's hooks would need that trust too");
  }
}

// --dir (default: the working directory), absolute; it must exist.
std::string project_dir(const adapter_options &o) {
  std::string dir = o.dir.empty() ? fs::current_path().string() : o.dir;
  if (!fs::is_directory(dir)) {
    throw std::runtime_error("--dir " + dir + ": not a directory; give the project's directory");
  }
  return fs::absolute(dir).lexically_normal().string();
}

// The file the hook entry goes into.
std::string settings_path(const adapter_options &o) {
  check_host(o);
  if (o.host == "codex") return codex_home() + "/hooks.json";
  if (o.host == "opencode") {
    if (o.scope == "user") {
      return env_or("XDG_CONFIG_HOME", home() + "/.config") + "/opencode/opencode.json";
    }
    return project_dir(o) + "/opencode.json";
  }
  if (o.host == "pi") {
    std::string base;
    if (o.scope == "user") {
      base = env_or("PI_CODING_AGENT_DIR", home() + "/.pi/agent");
    } else {
      base = project_dir(o) + "/.pi";
    }
    return base + "/extensions/sluice/index.ts";
  }
  if (o.scope == "user") return env_or("CLAUDE_CONFIG_DIR", home() + "/.claude") + "/settings.json";
  if (o.scope == "project") return project_dir(o) + "/.claude/settings.json";
  if (o.scope == "managed") return "/etc/claude-code/managed-settings.json";
  throw std::runtime_error("unknown --scope '" + o.scope + "'; use user, project or managed");
}

// Where the host discovers sluice's agent skill (NAME/SKILL.md in its skills folder, for the
// adapter's scope); "" where it has none (Claude's managed scope).
std::string skill_path(const adapter_options &o) {
  std::string dir;
  if (o.host == "codex") {
    dir = codex_home() + "/skills";
  } else if (o.host == "opencode") {
    dir = o.scope == "user" ? env_or("XDG_CONFIG_HOME", home() + "/.config") + "/opencode/skills"
                            : project_dir(o) + "/.opencode/skills";
  } else if (o.host == "pi") {
    dir = o.scope == "user" ? env_or("PI_CODING_AGENT_DIR", home() + "/.pi/agent") + "/skills"
                            : project_dir(o) + "/.pi/skills";
  } else if (o.scope == "user") {
    dir = env_or("CLAUDE_CONFIG_DIR", home() + "/.claude") + "/skills";
  } else if (o.scope == "project") {
    dir = project_dir(o) + "/.claude/skills";
  } else {
    return {};
  }
  return dir + "/sluice/SKILL.md";
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
  std::string cmd = sluice_command(o.sluice_path, "hook " + o.host, o.skill, o.policy_file);
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
    if (c && c->is_string() &&
        (std::string_view(c->as_string()).find(" hook claude") != std::string_view::npos ||
         std::string_view(c->as_string()).find(" hook codex") != std::string_view::npos) &&
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

// OpenCode: where sluice's plugin goes, beside the config file it is listed in.
// How sluice's OpenCode ask rule ends: approval_prefix(SLUICE) + "*".
constexpr std::string_view ask_rule_tail = " exec --needs-approval *";

std::string opencode_plugin(const std::string &config_path, bool project) {
  fs::path dir = fs::path(config_path).parent_path();
  return (project ? dir / ".opencode" / "sluice" : dir / "sluice").string() + "/sluice.js";
}

bool is_our_plugin(const js::value &v) {
  if (!v.is_string()) return false;
  std::string_view p = v.as_string();
  return p.rfind("file://", 0) == 0 && p.size() > 17 && p.substr(p.size() - 17) == "/sluice/sluice.js";
}

// Removes what install added (our hook entries and exclusion), dropping containers left empty.
void strip(js::object &s, const adapter_options &o) {
  if (auto *plugins = s.if_contains("plugin"); plugins && plugins->is_array()) {
    js::array kept;
    for (auto &e : plugins->as_array()) {
      if (!is_our_plugin(e)) kept.push_back(e);
    }
    plugins->as_array() = std::move(kept);
    if (plugins->as_array().empty()) s.erase("plugin");
  }
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
  // OpenCode's ask rule for the rewrites that need approval ("SLUICE exec --needs-approval *").
  if (auto *perm = s.if_contains("permission"); perm && perm->is_object()) {
    auto &po = perm->as_object();
    bool removed = false;
    if (auto *bash = po.if_contains("bash"); bash && bash->is_object()) {
      std::vector<std::string> ours;
      for (auto &[k, v] : bash->as_object()) {
        if (k.size() > ask_rule_tail.size() && k.substr(k.size() - ask_rule_tail.size()) == ask_rule_tail) ours.emplace_back(k);
      }
      for (auto &k : ours) bash->as_object().erase(k);
      removed = !ours.empty();
      if (removed && bash->as_object().empty()) po.erase("bash");
    }
    if (removed && po.empty()) s.erase("permission");
  }
}

bool installed_in(const js::object &s) {
  if (auto *plugins = s.if_contains("plugin"); plugins && plugins->is_array()) {
    for (auto &e : plugins->as_array()) {
      if (is_our_plugin(e)) return true;
    }
  }
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

namespace {

std::string toml_string(std::string_view v) {
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

bool is_table_header(std::string_view line) {
  auto i = line.find_first_not_of(" \t");
  return i != std::string_view::npos && line[i] == '[';
}

// Sets a top-level `key = value` in TOML text without reformatting the rest: replaces the line that
// sets it before the first table, or inserts one at the top. Returns the replaced line ("" if none).
std::string set_top_level(std::string &text, const std::string &key, const std::string &value) {
  std::string line = key + " = " + value;
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto nl = text.find('\n', pos);
    std::string_view l(text.data() + pos, (nl == std::string::npos ? text.size() : nl) - pos);
    if (is_table_header(l)) break;
    auto k = l.find_first_not_of(" \t");
    if (k != std::string_view::npos && l.substr(k, key.size()) == key) {
      auto rest = l.substr(k + key.size());
      auto e = rest.find_first_not_of(" \t");
      if (e != std::string_view::npos && rest[e] == '=') {
        std::string old(l);
        text.replace(pos, l.size(), line);
        return old;
      }
    }
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  text.insert(0, line + "\n");
  return {};
}

struct codex_hook {
  std::string key, hash, trust_status;
};

// Asks `codex app-server` (JSON-RPC on stdio) for the hooks it sees and returns the key, current
// hash and trust status of the one whose command is `command`. Bounded to 20 s.
codex_hook codex_hook_trust(const std::string &codex, const std::string &command) {
  std::signal(SIGPIPE, SIG_IGN); // codex may exit before it has read the requests
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) ::dup2(devnull, 2);
    ::execl(codex.c_str(), "codex", "app-server", static_cast<char *>(nullptr));
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  std::string requests =
      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"clientInfo\":"
      "{\"name\":\"sluice\",\"version\":\"1\"}}}\n"
      "{\"jsonrpc\":\"2.0\",\"method\":\"initialized\"}\n"
      "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"hooks/list\",\"params\":{}}\n";
  [[maybe_unused]] auto w = ::write(in[1], requests.data(), requests.size());
  std::string buf;
  codex_hook found;
  bool answered = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!answered) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{out[0], POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    char chunk[65536];
    ssize_t n = ::read(out[0], chunk, sizeof chunk);
    if (n <= 0) break;
    buf.append(chunk, static_cast<std::size_t>(n));
    if (buf.size() > max_settings_bytes) break;
    std::size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      boost::system::error_code ec;
      auto v = js::parse(line, ec);
      if (ec || !v.is_object()) continue;
      auto *id = v.as_object().if_contains("id");
      if (!id || !id->is_int64() || id->as_int64() != 2) continue;
      answered = true;
      auto *result = v.as_object().if_contains("result");
      auto *data = result && result->is_object() ? result->as_object().if_contains("data") : nullptr;
      if (!data || !data->is_array()) break;
      for (auto &entry : data->as_array()) {
        auto *hooks = entry.is_object() ? entry.as_object().if_contains("hooks") : nullptr;
        if (!hooks || !hooks->is_array()) continue;
        for (auto &h : hooks->as_array()) {
          if (!h.is_object()) continue;
          auto &ho = h.as_object();
          auto *c = ho.if_contains("command");
          auto *key = ho.if_contains("key");
          auto *hash = ho.if_contains("currentHash");
          auto *trust = ho.if_contains("trustStatus");
          if (c && c->is_string() && c->as_string() == command && key && key->is_string() && hash &&
              hash->is_string()) {
            found = {std::string(key->as_string()), std::string(hash->as_string()),
                     trust && trust->is_string() ? std::string(trust->as_string()) : std::string()};
          }
        }
      }
      break;
    }
  }
  ::close(in[1]);
  ::close(out[0]);
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  if (found.key.empty()) {
    throw std::runtime_error(std::string("`codex app-server` did not list the sluice hook") +
                             (answered ? "" : " (no answer within 20 s)") +
                             "; without Codex's trust the hook would be skipped silently, so nothing "
                             "was installed; check that `codex` runs");
  }
  return found;
}

struct file_change {
  std::string path;
  std::optional<std::string> before;
  std::string after;
  std::optional<std::string> replaced_line = {}; // config.toml: the sandbox_mode line before ("" if none)
  bool owned = false;                            // sluice's own file: remove deletes it, edited or not
  std::optional<js::array> undo = {};            // proxy mode: the settings keys set, with what they held
};

// The directories that writing `path` creates, outermost last, for remove to take away again.
void note_missing_dirs(const std::string &path, std::vector<std::string> &created) {
  for (fs::path p = fs::path(path).parent_path(); !p.empty() && !fs::exists(p); p = p.parent_path()) {
    created.push_back(p.string());
  }
}

// What remove needs: each file before and after install, and the directories install creates.
void save_state(const std::string &state, js::object header, const std::vector<file_change> &changes,
                const std::vector<std::string> &created) {
  js::array files;
  for (auto &c : changes) {
    js::object f{{"path", c.path},
                 {"existed", c.before.has_value()},
                 {"original", c.before.value_or("")},
                 {"written", c.after}};
    if (c.owned) f["owned"] = true;
    if (c.replaced_line) f["sandbox_line_before"] = *c.replaced_line;
    if (c.undo) f["undo"] = *c.undo;
    files.push_back(std::move(f));
  }
  header["files"] = std::move(files);
  header["created_dirs"] = js::value_from(created);
  fs::create_directories(fs::path(state).parent_path());
  write_file(state, to_text(header), 0600);
}

void apply(const std::vector<file_change> &changes) {
  for (auto &c : changes) {
    fs::create_directories(fs::path(c.path).parent_path());
    write_file(c.path, c.after);
  }
}

void restore(const std::vector<file_change> &changes) {
  for (auto &c : changes) {
    if (c.before) {
      write_file(c.path, *c.before);
    } else {
      ::unlink(c.path.c_str());
    }
  }
}

js::object hook_entry(const adapter_options &o) {
  return js::object{
      {"matcher", o.host == "claude" ? claude_matcher : "Bash"},
      {"hooks", js::array{js::object{{"type", "command"}, {"command", hook_command(o)}, {"timeout", 60}}}}};
}

void remove_with_state(const adapter_options &o, const std::string &state);

// --- Claude Code proxy mode ----------------------------------------------------------------------

// The CA variables Claude passes into its sandbox from the settings' env block: every client the
// sandbox runs must trust sluice's CA, and Claude sets none of them for a custom proxy.
const char *const ca_variables[] = {"SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE",
                                    "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "PIP_CERT",
                                    "AWS_CA_BUNDLE", "DENO_CERT"};

// Sets obj[path...] = value, creating objects on the way, and records what was there before so
// that remove can put it back even after the user edited other parts of the file.
void set_path(js::object &root, const std::vector<std::string> &path, js::value value, js::array &undo) {
  js::object *o = &root;
  for (std::size_t i = 0; i + 1 < path.size(); ++i) {
    auto &next = (*o)[path[i]];
    if (next.is_null()) next = js::object{};
    if (!next.is_object()) {
      throw std::runtime_error("\"" + path[i] + "\" is not an object; fix the settings file first");
    }
    o = &next.as_object();
  }
  js::object entry{{"path", js::value_from(path)}, {"set", value}};
  if (auto *old = o->if_contains(path.back())) entry["before"] = *old;
  undo.push_back(std::move(entry));
  (*o)[path.back()] = std::move(value);
}

void undo_paths(js::object &root, const js::array &undo) {
  for (auto it = undo.rbegin(); it != undo.rend(); ++it) {
    auto &e = it->as_object();
    auto path = js::value_to<std::vector<std::string>>(e.at("path"));
    std::vector<js::object *> chain{&root};
    bool reachable = true;
    for (std::size_t i = 0; i + 1 < path.size() && reachable; ++i) {
      auto *next = chain.back()->if_contains(path[i]);
      reachable = next && next->is_object();
      if (reachable) chain.push_back(&next->as_object());
    }
    if (!reachable) continue;
    auto &leaf = *chain.back();
    auto *now = leaf.if_contains(path.back());
    if (!e.contains("set")) { // a key install removed: back, unless the user set it again
      if (!now) leaf[path.back()] = e.at("before");
      continue;
    }
    if (!now || *now != e.at("set")) continue; // changed since: the user's value stays
    if (auto *before = e.if_contains("before")) {
      *now = *before;
    } else {
      leaf.erase(path.back());
      for (std::size_t i = chain.size() - 1; i > 0 && chain[i]->empty(); --i) chain[i - 1]->erase(path[i - 1]);
    }
  }
}

// OpenCode asks a person about a bash command when the last permission rule matching it says "ask":
// sluice's rule (every rewrite that needs approval) goes last under permission.bash. A plain string
// for "permission" or for "bash" becomes the object form that means the same, with the rule added.
void ask_rule(const std::string &path, js::object &s, const std::string &rule, js::array &undo) {
  js::value *perm = s.if_contains("permission");
  if (!perm || perm->is_null()) {
    set_path(s, {"permission", "bash", rule}, js::string("ask"), undo);
    return;
  }
  if (perm->is_string()) {
    js::value all = *perm;
    set_path(s, {"permission"}, js::object{{"*", all}, {"bash", js::object{{rule, "ask"}}}}, undo);
    return;
  }
  if (!perm->is_object()) {
    throw std::runtime_error(path + ": \"permission\" is neither a string nor an object; fix it first");
  }
  js::value *bash = perm->as_object().if_contains("bash");
  if (bash && bash->is_string()) {
    js::value all = *bash;
    set_path(s, {"permission", "bash"}, js::object{{"*", all}, {rule, "ask"}}, undo);
    return;
  }
  if (bash && !bash->is_null() && !bash->is_object()) {
    throw std::runtime_error(path + ": \"permission.bash\" is neither a string nor an object; fix it first");
  }
  set_path(s, {"permission", "bash", rule}, js::string("ask"), undo);
}

unsigned loopback_port(const std::string &listen, const std::string &config) {
  auto colon = listen.rfind(':');
  std::string host = colon == std::string::npos ? "" : listen.substr(0, colon);
  if (host != "127.0.0.1" && host != "localhost" && host != "[::1]") {
    throw std::runtime_error(config + ": [listen] proxy is " + listen + "; Claude Code reaches its "
                             "proxy on localhost only: listen on 127.0.0.1:PORT");
  }
  return static_cast<unsigned>(std::stoul(listen.substr(colon + 1)));
}

void install_claude_proxy(const adapter_options &o, const std::string &path, const std::string &state) {
  if (o.serve_config.empty() || o.ca_bundle.empty()) {
    throw std::runtime_error("--mode proxy needs --config FILE (the `sluice serve` config) and "
                             "--ca-bundle FILE (what `sluice serve --ca-bundle-out FILE` writes)");
  }
  auto cfg = filters::load_config_file(o.serve_config);
  unsigned port = 0;
  if (o.agent.empty()) {
    port = loopback_port(cfg.proxy_listen, o.serve_config);
  } else {
    // The agent's own listener: its traffic is named in sluice's log and metrics, and other users'
    // processes cannot use it.
    auto it = std::find_if(cfg.agents.begin(), cfg.agents.end(),
                           [&](const filters::agent_listener &a) { return a.name == o.agent; });
    if (it == cfg.agents.end()) {
      throw std::runtime_error(o.serve_config + " has no [listen.agents." + o.agent + "]; add one, e.g.\n"
                               "  [listen.agents." + o.agent + "]\n  address = \"127.0.0.1:3129\"\n  uids = [" +
                               std::to_string(::getuid()) + "]\nand restart sluice serve");
    }
    if (std::find(it->uids.begin(), it->uids.end(), ::getuid()) == it->uids.end()) {
      throw std::runtime_error("[listen.agents." + o.agent + "] in " + o.serve_config + " does not list uid " +
                               std::to_string(::getuid()) + " (this user) in uids: sluice would refuse "
                               "Claude Code's connections; add it and restart sluice serve");
    }
    port = loopback_port(it->address, o.serve_config);
  }
  std::string bundle = fs::absolute(o.ca_bundle).lexically_normal().string();
  std::vector<file_change> changes;
  if (!fs::exists(bundle)) {
    if (cfg.ca_cert.empty()) {
      throw std::runtime_error(bundle + " does not exist and the serve config has no [tls] ca_cert: start "
                               "`sluice serve --config " + o.serve_config + " --ca-bundle-out " + bundle +
                               "` first (its CA is new at every start)");
    }
    auto ca = read_file(cfg.ca_cert);
    if (!ca) throw std::runtime_error("cannot read [tls] ca_cert " + cfg.ca_cert);
    changes.push_back({bundle, std::nullopt, certs::system_trust_bundle() + *ca});
    changes.back().owned = true;
  }
  auto before = read_file(path);
  js::object s = parse_settings(path, before);
  js::array undo;
  for (const char *v : ca_variables) set_path(s, {"env", v}, js::string(bundle), undo);
  set_path(s, {"sandbox", "enabled"}, true, undo);
  set_path(s, {"sandbox", "failIfUnavailable"}, true, undo);
  set_path(s, {"sandbox", "autoAllowBashIfSandboxed"}, true, undo);
  set_path(s, {"sandbox", "allowUnsandboxedCommands"}, false, undo);
  // Both proxies: with only the HTTP one, Claude's own SOCKS proxy stays up and obeys its own
  // allowedDomains, which would let any method through to a listed domain.
  set_path(s, {"sandbox", "network", "httpProxyPort"}, port, undo);
  set_path(s, {"sandbox", "network", "socksProxyPort"}, port, undo);
  if (auto *sb = s.if_contains("sandbox"); sb && sb->is_object()) {
    if (auto *net = sb->as_object().if_contains("network"); net && net->is_object()) {
      if (auto *domains = net->as_object().if_contains("allowedDomains")) {
        // They no longer apply to traffic sent to a custom proxy: sluice's policy decides. Removed,
        // and put back by remove.
        undo.push_back(js::object{{"path", js::value_from(std::vector<std::string>{"sandbox", "network",
                                                                                    "allowedDomains"})},
                                  {"before", *domains}});
        net->as_object().erase("allowedDomains");
      }
    }
  }
  if (!cfg.ca_key.empty()) {
    // A persistent CA key must stay out of the sandbox's reach.
    auto &fsys = s["sandbox"].as_object()["filesystem"];
    if (fsys.is_null()) fsys = js::object{};
    auto &deny = fsys.as_object()["denyRead"];
    js::array list = deny.is_array() ? deny.as_array() : js::array{};
    list.push_back(js::string(fs::absolute(cfg.ca_key).string()));
    set_path(s, {"sandbox", "filesystem", "denyRead"}, std::move(list), undo);
  }
  changes.push_back({path, before, to_text(s)});
  changes.back().undo = std::move(undo);
  std::vector<std::string> created;
  note_missing_dirs(path, created);
  save_state(state, {{"host", o.host}, {"mode", "proxy"}, {"serve_config", o.serve_config}}, changes, created);
  apply(changes);
}


} // namespace

// Before anything is written: this machine can sandbox (else every call would be refused) and the
// skill exists in the trusted policy (else every call would be refused with that reason).
void preflight(const adapter_options &o) {
  if (std::string failed = exec::doctor_failures(exec::run_doctor()); !failed.empty()) {
    throw std::runtime_error("sluice cannot sandbox commands on this machine (" + failed +
                             "); with the adapter installed every shell call would be refused; "
                             "fix what `sluice doctor` reports first");
  }
  exec::exec_request req;
  req.skill = o.skill;
  req.policy_file = o.policy_file;
  req.working_dir = o.dir.empty() ? fs::current_path().string() : o.dir;
  try {
    exec::resolve_exec(req);
  } catch (const exec::refusal &e) {
    throw std::runtime_error(std::string("the trusted policy refuses the adapter's skill: ") + e.what());
  }
}

void adapter_install(const adapter_options &o) {
  std::string path = settings_path(o);
  std::string state = state_path(path);
  if (o.mode != "proxy") preflight(o); // proxy mode: Claude's sandbox isolates, not sluice exec
  if (read_file(state)) remove_with_state(o, state); // a reinstall starts from what was there before
  if (o.host == "pi" || o.host == "opencode") {
    // The extension or plugin is sluice's own file (compiled in from deploy/hosts/), with its
    // settings beside it. Pi finds it by its place; OpenCode by an entry in opencode.json.
    std::string file = o.host == "pi" ? path : opencode_plugin(path, o.scope == "project");
    std::string config_path = fs::path(file).parent_path().string() + "/sluice-adapter.json";
    js::object cfg{{"sluice", o.sluice_path}, {"skill", o.skill}, {"policy", o.policy_file}};
    if (o.host == "opencode") cfg["ask_prefix"] = approval_prefix(o.sluice_path);
    std::vector<file_change> changes{
        {file, read_file(file), std::string(o.host == "pi" ? pi_extension : opencode_plugin_source)},
        {config_path, read_file(config_path), to_text(cfg)}};
    std::string skill = skill_path(o);
    changes.push_back({skill, read_file(skill), std::string(agent_skill)});
    for (auto &c : changes) c.owned = true;
    std::vector<std::string> created;
    note_missing_dirs(file, created);
    note_missing_dirs(skill, created);
    if (o.host == "opencode") {
      auto before = read_file(path);
      js::object s = parse_settings(path, before);
      strip(s, o);
      auto &plugins = s["plugin"];
      if (plugins.is_null()) plugins = js::array{};
      if (!plugins.is_array()) throw std::runtime_error(path + ": \"plugin\" is not an array; fix it first");
      plugins.as_array().push_back(js::string("file://" + file));
      js::array undo;
      ask_rule(path, s, approval_prefix(o.sluice_path) + "*", undo);
      changes.push_back({path, before, to_text(s)});
      changes.back().undo = std::move(undo);
      note_missing_dirs(path, created);
    }
    save_state(state, {{"host", o.host}}, changes, created);
    apply(changes);
    return;
  }
  if (o.host == "claude" && o.mode == "proxy") {
    install_claude_proxy(o, path, state);
    return;
  }
  if (o.mode != "hook") throw std::runtime_error("--mode " + o.mode + " is for claude only (hook or proxy)");
  auto before = read_file(path);
  js::object s = parse_settings(path, before);
  if (auto *d = s.if_contains("disableAllHooks"); d && d->is_bool() && d->as_bool()) {
    throw std::runtime_error(path + " sets \"disableAllHooks\": true, which would switch the sluice "
                             "hook off; remove that setting first");
  }
  strip(s, o); // an entry left by hand or by an older install
  pre_tool_use(s, true)->push_back(hook_entry(o));
  std::vector<file_change> changes;
  std::string codex_config, codex;
  std::optional<std::string> config_before;
  if (o.host == "claude") {
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
  } else {
    codex = find_on_path("codex");
    if (codex.empty()) {
      throw std::runtime_error("codex is not on PATH: the adapter needs it to have Codex trust the "
                               "hook (an untrusted hook is skipped silently); install Codex first");
    }
    codex_config = codex_home() + "/config.toml";
    config_before = read_file(codex_config);
  }
  changes.push_back({path, before, to_text(s)});

  std::vector<std::string> created;
  note_missing_dirs(path, created);
  // The skill that tells the model what the sandbox is (the host lists its name and description).
  if (std::string skill = skill_path(o); !skill.empty()) {
    changes.push_back({skill, read_file(skill), std::string(agent_skill)});
    changes.back().owned = true;
    note_missing_dirs(skill, created);
  }
  if (o.host == "codex") {
    // Codex's own sandbox cannot nest sluice's namespaces either: its shell runs with full access
    // and the hook is the boundary. The hook must be trusted, by the hash Codex computes for it.
    std::string text = config_before.value_or("");
    if (!text.empty() && text.back() != '\n') text += '\n';
    std::string replaced = set_top_level(text, "sandbox_mode", "\"danger-full-access\"");
    changes.push_back({codex_config, config_before, text, replaced});
    apply(changes);
    codex_hook trust;
    try {
      trust = codex_hook_trust(codex, hook_command(o));
    } catch (...) {
      restore(changes);
      throw;
    }
    text += "\n# added by sluice adapter install codex: trust for the sluice hook\n[hooks.state." +
            toml_string(trust.key) + "]\ntrusted_hash = " + toml_string(trust.hash) + "\n";
    changes.back().after = text;
    try {
      auto parsed = toml::parse(text);
      if (parsed["sandbox_mode"].value_or(std::string()) != "danger-full-access" ||
          parsed["hooks"]["state"][trust.key]["trusted_hash"].value_or(std::string()) != trust.hash) {
        throw std::runtime_error("the edited file does not say what was meant");
      }
    } catch (const std::exception &e) {
      restore(changes);
      throw std::runtime_error(codex_config + ": cannot add sluice's settings safely (" + e.what() +
                               "); nothing was changed; fix the file or add them by hand");
    }
  }
  save_state(state, {{"host", o.host}}, changes, created);
  apply(changes);
}

namespace {

// Puts back every file install changed: the exact original when the file is as install left it,
// otherwise only sluice's additions are taken out.
void remove_with_state(const adapter_options &o, const std::string &state) {
  js::object st = parse_settings(state, read_file(state));
  auto *files = st.if_contains("files");
  if (!files || !files->is_array()) throw std::runtime_error(state + ": not a sluice adapter state file");
  for (auto &f : files->as_array()) {
    auto &fo = f.as_object();
    std::string path(fo.at("path").as_string());
    std::string written(fo.at("written").as_string());
    std::string original(fo.at("original").as_string());
    bool existed = fo.at("existed").as_bool();
    auto now = read_file(path);
    if (!now) continue;
    bool owned = fo.contains("owned") && fo.at("owned").as_bool();
    if (owned && !existed) { // sluice's own file: it goes, edited or not
      ::unlink(path.c_str());
      continue;
    }
    if (*now == written) {
      if (existed) {
        write_file(path, original);
      } else {
        ::unlink(path.c_str());
      }
      continue;
    }
    if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
      js::object s = parse_settings(path, now);
      if (auto *undo = fo.if_contains("undo"); undo && undo->is_array()) undo_paths(s, undo->as_array());
      strip(s, o);
      write_file(path, to_text(s));
    } else {
      // config.toml edited since (Codex itself records trusted projects there): drop the trust
      // table sluice appended and put the sandbox_mode line back as it was, if it still says what
      // sluice wrote.
      std::string text = *now;
      auto mark = text.find("\n# added by sluice adapter install codex: trust for the sluice hook\n");
      if (mark != std::string::npos) {
        auto end = text.find("trusted_hash = ", mark);
        end = end == std::string::npos ? std::string::npos : text.find('\n', end);
        text.erase(mark, end == std::string::npos ? std::string::npos : end - mark + 1);
      }
      if (auto *before_line = fo.if_contains("sandbox_line_before"); before_line && before_line->is_string()) {
        std::string ours = "sandbox_mode = \"danger-full-access\"";
        std::size_t pos = 0;
        while (pos < text.size()) {
          auto nl = text.find('\n', pos);
          std::string_view l(text.data() + pos, (nl == std::string::npos ? text.size() : nl) - pos);
          if (is_table_header(l)) break;
          if (l == ours) {
            std::string old(before_line->as_string());
            if (old.empty()) {
              text.erase(pos, nl == std::string::npos ? std::string::npos : nl - pos + 1);
            } else {
              text.replace(pos, l.size(), old);
            }
            break;
          }
          if (nl == std::string::npos) break;
          pos = nl + 1;
        }
      }
      write_file(path, text);
    }
    std::fprintf(stderr, "sluice: %s changed since the adapter was installed; removed only what "
                         "sluice added, kept the rest\n", path.c_str());
  }
  if (auto *dirs = st.if_contains("created_dirs"); dirs && dirs->is_array()) {
    for (auto &d : dirs->as_array()) ::rmdir(std::string(d.as_string()).c_str()); // only if empty
  }
  ::unlink(state.c_str());
}

} // namespace

void adapter_remove(const adapter_options &o) {
  std::string path = settings_path(o);
  std::string state = state_path(path);
  if (read_file(state)) {
    remove_with_state(o, state);
    return;
  }
  js::object s = parse_settings(path, read_file(path));
  if (!installed_in(s)) throw std::runtime_error("no sluice adapter is installed in " + path);
  strip(s, o);
  write_file(path, to_text(s));
}


// GET http://127.0.0.1:PORT/PATH with a 2 s deadline; the body, or nullopt.
std::optional<std::string> local_get(const std::string &listen, const std::string &target) {
  auto colon = listen.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  std::string host = listen.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  if (!host.empty() && host.front() == '[') host = host.substr(1, host.size() - 2);
  boost::system::error_code ec;
  auto addr = boost::asio::ip::make_address(host, ec);
  if (ec) return std::nullopt;
  int fd = ::socket(addr.is_v6() ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  boost::asio::ip::tcp::endpoint ep(addr, static_cast<unsigned short>(std::stoul(listen.substr(colon + 1))));
  bool ok = ::connect(fd, ep.data(), static_cast<socklen_t>(ep.size())) == 0;
  std::string out;
  if (ok && !target.empty()) {
    std::string req = "GET " + target + " HTTP/1.0\r\nHost: sluice\r\n\r\n";
    ok = ::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size());
    char buf[16384];
    for (ssize_t n; ok && (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) {
      out.append(buf, static_cast<std::size_t>(n));
      if (out.size() > max_settings_bytes) break;
    }
    auto body = out.find("\r\n\r\n");
    ok = out.rfind("HTTP/1.", 0) == 0 && out.find(" 200 ") == 8 && body != std::string::npos;
    if (ok) out = out.substr(body + 4);
  }
  ::close(fd);
  if (!ok) return std::nullopt;
  return out;
}

// Proxy mode: what keeps it working, checked where it can be.
void check_proxy_mode(adapter_state &a, const js::object &s, const std::string &state_file) {
  auto *sb = s.if_contains("sandbox");
  auto *net = sb && sb->is_object() ? sb->as_object().if_contains("network") : nullptr;
  if (!net || !net->is_object()) return;
  auto &n = net->as_object();
  auto *http_port = n.if_contains("httpProxyPort");
  if (!http_port || !http_port->is_number()) return;
  a.mode = "proxy";
  unsigned port = static_cast<unsigned>(http_port->to_number<double>());
  auto *socks = n.if_contains("socksProxyPort");
  if (n.contains("allowedDomains") && !socks) {
    a.warnings.push_back("sandbox.network.allowedDomains without socksProxyPort: Claude's own SOCKS "
                         "proxy lets any method through to those domains, past sluice; set "
                         "socksProxyPort to sluice's port (sluice adapter install claude --mode proxy)");
  }
  if (socks && socks->is_number() && static_cast<unsigned>(socks->to_number<double>()) != port) {
    a.warnings.push_back("socksProxyPort differs from httpProxyPort: SOCKS traffic does not reach sluice");
  }
  bool answering = local_get("127.0.0.1:" + std::to_string(port), "").has_value();
  if (!answering) {
    a.warnings.push_back("nothing answers on 127.0.0.1:" + std::to_string(port) + ": Claude starts anyway "
                         "and every command fails with 'Proxy CONNECT aborted'; start sluice serve");
  }
  std::string bundle_path;
  if (auto *env = s.if_contains("env"); env && env->is_object()) {
    if (auto *b = env->as_object().if_contains("SSL_CERT_FILE"); b && b->is_string()) bundle_path = b->as_string();
  }
  auto bundle = bundle_path.empty() ? std::nullopt : read_file(bundle_path);
  bool current = bundle.has_value();
  if (bundle_path.empty() || !bundle) {
    a.warnings.push_back("no CA bundle for the sandbox (env SSL_CERT_FILE " +
                         (bundle_path.empty() ? std::string("unset") : bundle_path + " missing") +
                         "): clients inside will refuse sluice's certificates; start serve with --ca-bundle-out");
  } else if (auto st = read_file(state_file)) {
    // The CA serve uses now must be in the bundle; an ephemeral CA changes at every start.
    try {
      auto sto = parse_settings(state_file, st);
      if (auto *conf = sto.if_contains("serve_config"); conf && conf->is_string()) {
        auto cfg = filters::load_config_file(std::string(conf->as_string()));
        if (!cfg.admin_listen.empty()) {
          auto pem = local_get(cfg.admin_listen, "/ca.pem");
          if (pem && bundle->find(*pem) == std::string::npos) {
            current = false;
            a.warnings.push_back(bundle_path + " does not hold the CA sluice serves now (stale: an "
                                 "ephemeral CA is new at every start); restart serve with --ca-bundle-out " +
                                 bundle_path + " or give it a persistent CA ([tls] ca_cert)");
          }
        }
      }
    } catch (const std::exception &e) {
      a.warnings.push_back(e.what());
    }
  }
  a.installed = true;
  a.hook_verified = answering && current;
}

adapter_state status_of(const adapter_options &o);

std::vector<adapter_state> adapter_status(const adapter_options &base) {
  std::vector<adapter_state> out;
  for (std::string host : {"claude", "codex", "opencode", "pi"}) {
    if (!base.host.empty() && base.host != host) continue;
    adapter_options o = base;
    o.host = host;
    if (host == "codex" && o.scope != "user") continue;
    out.push_back(status_of(o));
  }
  if (out.empty()) check_host(base);
  return out;
}

adapter_state status_of(const adapter_options &o) {
  adapter_state a;
  a.host = o.host;
  a.settings = settings_path(o);
  a.minimum = o.host == "claude"   ? claude_minimum
              : o.host == "codex"  ? codex_minimum
              : o.host == "pi"     ? pi_minimum
                                   : opencode_minimum;
  js::object s;
  std::string pi_command;
  if (o.host == "pi" || o.host == "opencode") {
    // Installed: the extension (and for OpenCode its entry) is there; its hook command is what the
    // extension would run.
    std::string file = o.host == "pi" ? a.settings : opencode_plugin(a.settings, o.scope == "project");
    auto ext = read_file(file);
    a.installed = ext.has_value();
    if (o.host == "opencode") {
      try {
        js::object oc = parse_settings(a.settings, read_file(a.settings));
        a.installed = a.installed && installed_in(oc);
        // The ask rule must be the last bash rule, or OpenCode's prompt is not what decides.
        const js::value *perm = oc.if_contains("permission");
        const js::value *bash = perm && perm->is_object() ? perm->as_object().if_contains("bash") : nullptr;
          bool last_is_ours = bash && bash->is_object() && !bash->as_object().empty() &&
                            [&] {
                              std::string_view k = std::prev(bash->as_object().end())->key();
                              return k.size() > ask_rule_tail.size() && k.substr(k.size() - ask_rule_tail.size()) == ask_rule_tail;
                            }();
        if (a.installed && !last_is_ours) {
          a.warnings.push_back(a.settings + ": sluice's ask rule is not the last under permission.bash, so "
                               "commands that need a person's approval are refused; run `sluice adapter "
                               "install opencode` again");
        }
      } catch (const std::exception &e) {
        a.warnings.push_back(e.what());
        a.installed = false;
      }
    }
    if (ext && *ext != (o.host == "pi" ? pi_extension : opencode_plugin_source)) {
      a.warnings.push_back(file + " differs from this sluice's copy; run `sluice adapter install " + o.host + "` again");
    }
    try {
      std::string cfg_path = fs::path(file).parent_path().string() + "/sluice-adapter.json";
      if (auto t = read_file(cfg_path)) {
        auto cfg = parse_settings(cfg_path, t);
        pi_command = sluice_command(std::string(cfg.at("sluice").as_string()), "hook " + o.host,
                                    std::string(cfg.at("skill").as_string()),
                                    std::string(cfg.at("policy").as_string()));
      }
    } catch (const std::exception &e) {
      a.warnings.push_back(e.what());
    }
  } else {
    try {
      s = parse_settings(a.settings, read_file(a.settings));
    } catch (const std::exception &e) {
      a.warnings.push_back(e.what());
    }
    a.installed = installed_in(s);
  }
  a.host_binary = find_on_path(o.host);
  if (!a.host_binary.empty()) {
    auto [rc, text] = run_shell(shell_quote(a.host_binary) + " --version 2>&1", "");
    if (rc == 0) {
      // "2.1.332 (Claude Code)", "codex-cli 0.171.0", "0.73.1"; warnings may come first.
      static const std::regex version_word(R"(^v?[0-9]+\.[0-9]+(\.[0-9]+)?$)");
      std::istringstream words(text);
      for (std::string w; words >> w;) {
        if (std::regex_match(w, version_word)) {
          a.version = w[0] == 'v' ? w.substr(1) : w;
          break;
        }
      }
      a.at_least_minimum = !a.version.empty() && version_at_least(a.version, a.minimum);
    }
  }
  if (a.host_binary.empty()) a.warnings.push_back(o.host + " is not on PATH");
  if (!a.version.empty() && !a.at_least_minimum) {
    a.warnings.push_back(o.host + " " + a.version + " ignores a hook's rewrite (updatedInput) and would "
                         "run the original command; upgrade to " + a.minimum + " or later");
  }
  bool trusted = true;
  if (a.installed && o.host == "codex" && !a.host_binary.empty()) {
    trusted = false;
    try {
      auto h = codex_hook_trust(a.host_binary, installed_command(s));
      if (h.trust_status != "trusted") {
        a.warnings.push_back("Codex does not trust the sluice hook (" + h.trust_status +
                             "): it would be skipped; run `sluice adapter install codex` again");
      } else {
        trusted = true;
      }
    } catch (const std::exception &e) {
      a.warnings.push_back(e.what());
    }
  }
  if (a.installed) {
    std::string cmd = (o.host == "pi" || o.host == "opencode") ? pi_command : installed_command(s);
    js::object sample{{"session_id", "sluice-status"},
                      {"cwd", fs::current_path().string()},
                      {"hook_event_name", "PreToolUse"},
                      {"tool_name", (o.host == "pi" || o.host == "opencode") ? "bash" : "Bash"},
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
  if (!trusted) a.hook_verified = false;
  if (o.host == "claude" && !a.installed) check_proxy_mode(a, s, state_path(a.settings));
  // Settings that switch the hook off or keep it from deciding.
  std::vector<std::string> others;
  if (o.host == "claude") others = {env_or("CLAUDE_CONFIG_DIR", env_or("HOME", "/nonexistent") + "/.claude") +
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
  return a;
}

int report_status(const std::vector<adapter_state> &states, bool json) {
  bool good = true;
  js::array arr;
  for (auto &a : states) {
    if (a.installed && !(a.hook_verified && a.at_least_minimum)) good = false;
    arr.push_back(js::object{{"host", a.host},
                             {"mode", a.mode},
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
      if (a.installed && a.mode == "proxy") {
        std::printf("         proxy mode: %s\n", a.hook_verified ? "sluice answers, CA bundle current" : "NOT WORKING");
      } else if (a.installed) {
        std::printf("         hook %s\n", a.hook_verified ? "verified" : "NOT VERIFIED");
      }
      for (auto &w : a.warnings) std::printf("         warning: %s\n", w.c_str());
    }
  }
  return good ? 0 : 1;
}

} // namespace sluice::adapters
