#include "adapters/host_adapter.hpp"
#include "adapters/hook.hpp"
#include "exec/workspace.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <stdexcept>
#include <sys/wait.h>
#include <unistd.h>

namespace sluice::adapters {

namespace js = boost::json;
namespace fs = std::filesystem;

extern const std::string_view agent_skill; // deploy/hosts/skill/SKILL.md, compiled in

const host_adapter &claude_host();
const host_adapter &codex_host();
const host_adapter &opencode_host();
const host_adapter &pi_host();

const std::vector<const host_adapter *> &all_hosts() {
  static const std::vector<const host_adapter *> hosts{&claude_host(), &codex_host(),
                                                       &opencode_host(), &pi_host()};
  return hosts;
}

const host_adapter *host_named(std::string_view name) {
  for (auto *h : all_hosts()) {
    if (h->name() == name)
      return h;
  }
  return nullptr;
}

const host_adapter &host_or_throw(std::string_view name) {
  if (auto *h = host_named(name))
    return *h;
  std::string names;
  for (auto *h : all_hosts())
    names += (names.empty() ? "" : ", ") + std::string(h->name());
  throw std::runtime_error("unknown host '" + std::string(name) +
                           "'; this version has adapters for " + names);
}

// --dir (default: the working directory), absolute; it must exist.
std::string project_dir(const adapter_options &o) {
  std::string dir = o.dir.empty() ? fs::current_path().string() : o.dir;
  if (!fs::is_directory(dir)) {
    throw std::runtime_error("--dir " + dir + ": not a directory; give the project's directory");
  }
  return fs::absolute(dir).lexically_normal().string();
}

std::string hook_command(const adapter_options &o) {
  std::string cmd = sluice_command(o.sluice_path, "hook " + o.host, o.skill, o.policy_file);
  // Hosts run the original command when a hook exits with anything but 0 or 2 (a missing binary,
  // a crash): turn every failure into 2, which blocks.
  return cmd +
         " || { echo 'sluice: the hook failed; the command was blocked, not run' >&2; exit 2; }";
}

// Runs `command` with `input` on stdin through /bin/sh, as a host runs a hook; returns exit status
// and stdout. Bounded: 20 s, 1 MiB of output.
std::pair<int, std::string> run_shell(const std::string &command, const std::string &input) {
  char path[] = "/tmp/sluice-hook-input-XXXXXX";
  int in = ::mkstemp(path);
  if (in < 0)
    throw std::runtime_error(std::string("mkstemp: ") + std::strerror(errno));
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
    if (devnull >= 0)
      ::dup2(devnull, 2);
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
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    if (text.size() < (1u << 20))
      text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(out[0]);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), text};
}

std::string find_on_path(const std::string &name) {
  std::string cwd = fs::current_path().string();
  return exec::find_executable(name, env_or("PATH", "/usr/local/bin:/usr/bin:/bin"), cwd);
}

js::object hook_entry(const adapter_options &o, const char *matcher) {
  return js::object{
      {"matcher", matcher},
      {"hooks",
       js::array{js::object{{"type", "command"}, {"command", hook_command(o)}, {"timeout", 60}}}}};
}

js::array *pre_tool_use(js::object &s, bool create) {
  auto *hooks = s.if_contains("hooks");
  if (!hooks) {
    if (!create)
      return nullptr;
    hooks = &s.emplace("hooks", js::object{}).first->value();
  }
  if (!hooks->is_object())
    throw std::runtime_error("\"hooks\" is not an object");
  auto &ho = hooks->as_object();
  auto *ptu = ho.if_contains("PreToolUse");
  if (!ptu) {
    if (!create)
      return nullptr;
    ptu = &ho.emplace("PreToolUse", js::array{}).first->value();
  }
  if (!ptu->is_array())
    throw std::runtime_error("\"hooks.PreToolUse\" is not an array");
  return &ptu->as_array();
}

bool is_our_hook(const js::value &entry) {
  if (!entry.is_object())
    return false;
  auto *hooks = entry.as_object().if_contains("hooks");
  if (!hooks || !hooks->is_array())
    return false;
  for (auto &h : hooks->as_array()) {
    if (!h.is_object())
      continue;
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

void strip_hooks(js::object &s) {
  if (auto *ptu = pre_tool_use(s, false)) {
    js::array kept;
    for (auto &e : *ptu) {
      if (!is_our_hook(e))
        kept.push_back(e);
    }
    *ptu = std::move(kept);
    auto &ho = s["hooks"].as_object();
    if (ptu->empty())
      ho.erase("PreToolUse");
    if (ho.empty())
      s.erase("hooks");
  }
}

std::string installed_hook_command(const js::object &s) {
  auto *hooks = s.if_contains("hooks");
  if (!hooks || !hooks->is_object())
    return {};
  auto *ptu = hooks->as_object().if_contains("PreToolUse");
  if (!ptu || !ptu->is_array())
    return {};
  for (auto &e : ptu->as_array()) {
    if (!is_our_hook(e))
      continue;
    for (auto &h : e.as_object().at("hooks").as_array()) {
      auto *c = h.is_object() ? h.as_object().if_contains("command") : nullptr;
      if (c && c->is_string())
        return std::string(c->as_string());
    }
  }
  return {};
}

void add_skill(const host_adapter &h, const adapter_options &o, std::vector<file_change> &changes,
               std::vector<std::string> &created) {
  std::string skill = h.skill_path(o);
  if (skill.empty())
    return;
  changes.push_back({skill, read_file(skill), std::string(agent_skill)});
  changes.back().owned = true;
  note_missing_dirs(skill, created);
}

std::vector<file_change> extension_files(const adapter_options &o, const std::string &file,
                                         std::string_view source, js::object settings) {
  std::string config_path = fs::path(file).parent_path().string() + "/sluice-adapter.json";
  settings["sluice"] = o.sluice_path;
  settings["skill"] = o.skill;
  settings["policy"] = o.policy_file;
  std::vector<file_change> changes{{file, read_file(file), std::string(source)},
                                   {config_path, read_file(config_path), to_text(settings)}};
  for (auto &c : changes)
    c.owned = true;
  return changes;
}

std::string extension_hook_command(const adapter_options &o, const std::string &file,
                                   std::string_view source, adapter_state &a) {
  auto ext = read_file(file);
  a.installed = ext.has_value();
  if (ext && *ext != source) {
    a.warnings.push_back(file + " differs from this sluice's copy; run `sluice adapter install " +
                         o.host + "` again");
  }
  try {
    std::string cfg_path = fs::path(file).parent_path().string() + "/sluice-adapter.json";
    if (auto t = read_file(cfg_path)) {
      auto cfg = parse_settings(cfg_path, t);
      return sluice_command(std::string(cfg.at("sluice").as_string()), "hook " + o.host,
                            std::string(cfg.at("skill").as_string()),
                            std::string(cfg.at("policy").as_string()));
    }
  } catch (const std::exception &e) {
    a.warnings.push_back(e.what());
  }
  return {};
}

} // namespace sluice::adapters
