// Codex: a PreToolUse hook in $CODEX_HOME/hooks.json (user scope), trusted by the hash Codex
// computes for it, with Codex's own sandbox set to full access (sluice's boundary holds its shell).
#include "adapters/hook.hpp"
#include "adapters/host_adapter.hpp"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <stdexcept>
#include <sys/wait.h>
#include <toml++/toml.h>
#include <unistd.h>

namespace sluice::adapters {
namespace {

namespace js = boost::json;

// What install appends to config.toml before the trust table, so that remove finds it again.
constexpr std::string_view trust_comment = "\n# added by sluice adapter install codex: trust for the sluice hook\n";

std::string codex_home() { return env_or("CODEX_HOME", home() + "/.codex"); }

std::string toml_string(std::string_view v) {
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

bool is_table_header(std::string_view line) {
  auto i = line.find_first_not_of(" \t");
  return i != std::string_view::npos && line[i] == '[';
}

// The first line before any table for which match(line) holds: its offset and length (without
// the newline), or npos.
template <class Match>
std::pair<std::size_t, std::size_t> top_level_line(const std::string &text, Match match) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto nl = text.find('\n', pos);
    std::string_view l(text.data() + pos, (nl == std::string::npos ? text.size() : nl) - pos);
    if (is_table_header(l))
      break;
    if (match(l))
      return {pos, l.size()};
    if (nl == std::string::npos)
      break;
    pos = nl + 1;
  }
  return {std::string::npos, 0};
}

// Sets a top-level `key = value` in TOML text without reformatting the rest: replaces the line that
// sets it before the first table, or inserts one at the top. Returns the replaced line ("" if
// none).
std::string set_top_level(std::string &text, const std::string &key, const std::string &value) {
  std::string line = key + " = " + value;
  auto [pos, len] = top_level_line(text, [&](std::string_view l) {
    auto k = l.find_first_not_of(" \t");
    if (k == std::string_view::npos || l.substr(k, key.size()) != key)
      return false;
    auto rest = l.substr(k + key.size());
    auto e = rest.find_first_not_of(" \t");
    return e != std::string_view::npos && rest[e] == '=';
  });
  if (pos == std::string::npos) {
    text.insert(0, line + "\n");
    return {};
  }
  std::string old = text.substr(pos, len);
  text.replace(pos, len, line);
  return old;
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
    if (devnull >= 0)
      ::dup2(devnull, 2);
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
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      break;
    pollfd p{out[0], POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    char chunk[65536];
    ssize_t n = ::read(out[0], chunk, sizeof chunk);
    if (n <= 0)
      break;
    buf.append(chunk, static_cast<std::size_t>(n));
    if (buf.size() > max_settings_bytes)
      break;
    std::size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      boost::system::error_code ec;
      auto v = js::parse(line, ec);
      if (ec || !v.is_object())
        continue;
      auto *id = v.as_object().if_contains("id");
      if (!id || !id->is_int64() || id->as_int64() != 2)
        continue;
      answered = true;
      auto *result = v.as_object().if_contains("result");
      auto *data =
          result && result->is_object() ? result->as_object().if_contains("data") : nullptr;
      if (!data || !data->is_array())
        break;
      for (auto &entry : data->as_array()) {
        auto *hooks = entry.is_object() ? entry.as_object().if_contains("hooks") : nullptr;
        if (!hooks || !hooks->is_array())
          continue;
        for (auto &h : hooks->as_array()) {
          if (!h.is_object())
            continue;
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
    throw std::runtime_error(
        std::string("`codex app-server` did not list the sluice hook") +
        (answered ? "" : " (no answer within 20 s)") +
        "; without Codex's trust the hook would be skipped silently, so nothing "
        "was installed; check that `codex` runs");
  }
  return found;
}

class codex_adapter final : public host_adapter {
public:
  std::string_view name() const override { return "codex"; }
  std::string_view minimum() const override { return "0.131.0"; }

  void check_scope(const adapter_options &o) const override {
    if (o.scope != "user") {
      throw std::runtime_error(
          "the codex adapter installs at --scope user only ($CODEX_HOME or ~/.codex): "
          "Codex trusts hooks per user, and a project's hooks would need that trust too");
    }
  }

  std::string settings_path(const adapter_options &) const override {
    return codex_home() + "/hooks.json";
  }
  std::string skill_path(const adapter_options &) const override {
    return codex_home() + "/skills/sluice/SKILL.md";
  }

  void install(const adapter_options &o, const std::string &path,
               const std::string &state) const override {
    if (o.mode != "hook")
      throw std::runtime_error("--mode " + o.mode + " is for claude only (hook or proxy)");
    auto before = read_file(path);
    js::object s = parse_settings(path, before);
    strip(s, o); // an entry left by hand or by an older install
    pre_tool_use(s, true)->push_back(hook_entry(o, "Bash"));
    std::string codex = find_on_path("codex");
    if (codex.empty()) {
      throw std::runtime_error("codex is not on PATH: the adapter needs it to have Codex trust the "
                               "hook (an untrusted hook is skipped silently); install Codex first");
    }
    std::string codex_config = codex_home() + "/config.toml";
    std::optional<std::string> config_before = read_file(codex_config);
    std::vector<file_change> changes{{path, before, to_text(s)}};
    std::vector<std::string> created;
    note_missing_dirs(path, created);
    add_skill(*this, o, changes, created);
    {
      // Codex's own sandbox cannot nest sluice's namespaces either: its shell runs with full access
      // and the hook is the boundary. The hook must be trusted, by the hash Codex computes for it.
      std::string text = config_before.value_or("");
      if (!text.empty() && text.back() != '\n')
        text += '\n';
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
      text +=
          std::string(trust_comment) + "[hooks.state." +
          toml_string(trust.key) + "]\ntrusted_hash = " + toml_string(trust.hash) + "\n";
      changes.back().after = text;
      try {
        auto parsed = toml::parse(text);
        if (parsed["sandbox_mode"].value_or(std::string()) != "danger-full-access" ||
            parsed["hooks"]["state"][trust.key]["trusted_hash"].value_or(std::string()) !=
                trust.hash) {
          throw std::runtime_error("the edited file does not say what was meant");
        }
      } catch (const std::exception &e) {
        restore(changes);
        throw std::runtime_error(codex_config + ": cannot add sluice's settings safely (" +
                                 e.what() +
                                 "); nothing was changed; fix the file or add them by hand");
      }
    }
    save_state(state, {{"host", o.host}}, changes, created);
    apply(changes);
  }

  void strip(js::object &s, const adapter_options &) const override { strip_hooks(s); }

  // config.toml edited since (Codex itself records trusted projects there): drop the trust table
  // sluice appended and put the sandbox_mode line back as it was, if it still says what sluice
  // wrote.
  std::string strip_text(std::string text, const js::object &fo) const override {
    auto mark = text.find(trust_comment);
    if (mark != std::string::npos) {
      auto end = text.find("trusted_hash = ", mark);
      end = end == std::string::npos ? std::string::npos : text.find('\n', end);
      text.erase(mark, end == std::string::npos ? std::string::npos : end - mark + 1);
    }
    if (auto *before_line = fo.if_contains("sandbox_line_before");
        before_line && before_line->is_string()) {
      auto [pos, len] = top_level_line(
          text, [](std::string_view l) { return l == "sandbox_mode = \"danger-full-access\""; });
      if (pos != std::string::npos) {
        std::string old(before_line->as_string());
        if (old.empty()) {
          text.erase(pos, len + (pos + len < text.size() ? 1 : 0));
        } else {
          text.replace(pos, len, old);
        }
      }
    }
    return text;
  }

  std::string installed_hook(const adapter_options &, adapter_state &a) const override {
    js::object s;
    try {
      s = parse_settings(a.settings, read_file(a.settings));
    } catch (const std::exception &e) {
      a.warnings.push_back(e.what());
    }
    std::string cmd = installed_hook_command(s);
    a.installed = !cmd.empty();
    return cmd;
  }

  // An untrusted hook is skipped silently by Codex: it is as good as none.
  void check(const adapter_options &, adapter_state &a, const std::string &hook) const override {
    if (!a.installed || a.host_binary.empty())
      return;
    bool trusted = false;
    try {
      auto h = codex_hook_trust(a.host_binary, hook);
      if (h.trust_status != "trusted") {
        a.warnings.push_back("Codex does not trust the sluice hook (" + h.trust_status +
                             "): it would be skipped; run `sluice adapter install codex` again");
      } else {
        trusted = true;
      }
    } catch (const std::exception &e) {
      a.warnings.push_back(e.what());
    }
    if (!trusted)
      a.hook_verified = false;
  }

  bool shell_tool(std::string_view tool) const override {
    return tool == "Bash" || tool == "exec_command" || tool == "shell";
  }

  ask_route route(std::string &why) const override {
    why = "Codex has no permission prompt a hook can use";
    return ask_route::no_prompt;
  }
};

} // namespace

const host_adapter &codex_host() {
  static const codex_adapter h;
  return h;
}

} // namespace sluice::adapters
