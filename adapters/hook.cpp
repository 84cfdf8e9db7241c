#include "adapters/hook.hpp"
#include "exec/doctor.hpp"
#include "exec/profile_resolver.hpp"

#include <boost/json.hpp>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <poll.h>
#include <exception>
#include <stdexcept>
#include <unistd.h>

namespace sluice::adapters {
namespace {

namespace js = boost::json;

struct deny_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

} // namespace

hook_outcome hook_deny(const std::string &reason) {
  hook_outcome o;
  o.exit_code = 2;
  js::object h{{"hookEventName", "PreToolUse"},
               {"permissionDecision", "deny"},
               {"permissionDecisionReason", reason}};
  o.out = js::serialize(js::object{{"hookSpecificOutput", std::move(h)}}) + "\n";
  o.err = "sluice: " + reason + "\n";
  return o;
}

namespace {

// The shell tools each host routes through the hook; anything else reaching it is a configuration
// error and is refused rather than waved through.
bool shell_tool(hook_host host, std::string_view name) {
  if (host == hook_host::claude) return name == "Bash" || name == "Monitor";
  if (host == hook_host::pi || host == hook_host::opencode) return name == "bash";
  return name == "Bash" || name == "exec_command" || name == "shell";
}

// Options the agent may give in its own `sluice exec ... --` prefix: choices the trusted policy then
// authorizes or refuses. Everything that widens the policy stays with the person who installed the
// adapter.
void agent_options(const std::vector<std::string> &opts, std::vector<std::string> &out) {
  for (std::size_t i = 0; i < opts.size(); ++i) {
    std::string name = opts[i], value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos && name.rfind("--", 0) == 0) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (name == "--sandbox-profile" || name == "--filesystem") {
      if (!has_value) {
        if (i + 1 >= opts.size()) throw deny_error(name + " needs a value");
        value = opts[++i];
      }
      if (name == "--sandbox-profile" && value == "publish") {
        throw deny_error("the publish profile needs a person's confirmation "
                         "(--confirm-external-side-effects); an agent cannot give it through the "
                         "hook: ask the user to run the command");
      }
      out.push_back(name);
      out.push_back(value);
      continue;
    }
    throw deny_error("option " + name + " cannot be chosen by the agent (it would widen the policy);"
                     " only --sandbox-profile and --filesystem may be, and the skill's declared "
                     "escalations decide; ask the user to change the sluice policy");
  }
}

std::string find_shell() {
  return ::access("/bin/bash", X_OK) == 0 ? "/bin/bash" : "/bin/sh";
}

} // namespace

std::string shell_word(std::string_view word) {
  bool plain = !word.empty();
  for (char c : word) {
    plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || c == '/' || c == '.' ||
                      c == '_' || c == '-' || c == '+' || c == ':' || c == '=' || c == ',');
  }
  return plain ? std::string(word) : shell_quote(word);
}

std::string shell_quote(std::string_view word) {
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

std::optional<sluice_prefix> parse_sluice_prefix(std::string_view command) {
  std::size_t i = 0;
  auto skip_space = [&] {
    while (i < command.size() && (command[i] == ' ' || command[i] == '\t')) ++i;
  };
  // One shell word: plain characters, '...' and "..." (with \" \\ \$ \` escapes). Shell syntax
  // (; | & < > ( ) $ ` newline) outside quotes ends the attempt: such a command is not a plain
  // `sluice exec` call and is wrapped whole.
  auto word = [&]() -> std::optional<std::string> {
    std::string w;
    bool any = false;
    while (i < command.size()) {
      char c = command[i];
      if (c == ' ' || c == '\t') break;
      if (std::string_view(";|&<>()$`\n\\*?[#~{}").find(c) != std::string_view::npos) return std::nullopt;
      any = true;
      if (c == '\'') {
        auto end = command.find('\'', i + 1);
        if (end == std::string_view::npos) return std::nullopt;
        w.append(command.substr(i + 1, end - i - 1));
        i = end + 1;
      } else if (c == '"') {
        ++i;
        for (;;) {
          if (i >= command.size()) return std::nullopt;
          char d = command[i];
          if (d == '"') break;
          if (d == '$' || d == '`') return std::nullopt;
          if (d == '\\' && i + 1 < command.size() &&
              std::string_view("\"\\$`").find(command[i + 1]) != std::string_view::npos) {
            w += command[i + 1];
            i += 2;
            continue;
          }
          w += d;
          ++i;
        }
        ++i;
      } else {
        w += c;
        ++i;
      }
    }
    if (!any) return std::nullopt;
    return w;
  };
  skip_space();
  auto first = word();
  if (!first) return std::nullopt;
  auto slash = first->rfind('/');
  if ((slash == std::string::npos ? *first : first->substr(slash + 1)) != "sluice") return std::nullopt;
  skip_space();
  auto sub = word();
  if (!sub || *sub != "exec") return std::nullopt;
  sluice_prefix p;
  for (;;) {
    skip_space();
    if (i >= command.size()) return std::nullopt; // no `--`: nothing to run
    auto w = word();
    if (!w) return std::nullopt;
    if (*w == "--") break;
    p.options.push_back(*w);
  }
  skip_space();
  p.rest = std::string(command.substr(i));
  if (p.rest.empty()) return std::nullopt;
  return p;
}

std::string sluice_command(const std::string &sluice_path, const std::string &subcommand,
                           const std::string &skill, const std::string &policy_file) {
  std::string out = shell_word(sluice_path) + " " + subcommand;
  if (!skill.empty()) out += " --skill " + shell_word(skill);
  if (!policy_file.empty()) out += " --policy " + shell_word(policy_file);
  return out;
}

hook_outcome run_hook(const hook_options &opt, std::string_view input) {
  try {
    boost::system::error_code ec;
    js::value v = js::parse(input, ec);
    if (ec) {
      throw deny_error("the hook input is not JSON (" + ec.message() +
                       "); the host's hook configuration is wrong: reinstall with `sluice adapter "
                       "install`");
    }
    if (!v.is_object()) throw deny_error("the hook input is not a JSON object");
    const auto &o = v.as_object();
    auto str = [&](const js::object &from, const char *key) -> std::string {
      auto *p = from.if_contains(key);
      return p && p->is_string() ? std::string(p->as_string()) : std::string();
    };
    std::string event = str(o, "hook_event_name");
    if (!event.empty() && event != "PreToolUse") {
      throw deny_error("unexpected hook event '" + event + "'; sluice answers PreToolUse only");
    }
    std::string tool = str(o, "tool_name");
    if (!shell_tool(opt.host, tool)) {
      throw deny_error("tool '" + tool + "' reached the sluice hook, which only sandboxes shell "
                       "tools; fix the hook matcher (sluice adapter install writes it)");
    }
    auto *ti = o.if_contains("tool_input");
    if (!ti || !ti->is_object()) throw deny_error("the hook input has no tool_input object");
    js::object input_obj = ti->as_object();
    const char *field = input_obj.contains("command") ? "command" : "cmd";
    auto *cmd = input_obj.if_contains(field);
    if (!cmd || !cmd->is_string() || cmd->as_string().empty()) {
      throw deny_error("tool_input has no command string to sandbox");
    }
    std::string command(cmd->as_string());
    std::string cwd = str(o, "cwd");

    // The runner must be able to sandbox before anything is promised to the host.
    if (std::string failed = exec::doctor_failures(exec::run_doctor()); !failed.empty()) {
      throw deny_error("sluice cannot sandbox commands on this machine (" + failed +
                       "); nothing was run; see `sluice doctor`");
    }

    std::vector<std::string> chosen;
    std::string inner = command;
    if (auto prefix = parse_sluice_prefix(command)) {
      agent_options(prefix->options, chosen);
      inner = prefix->rest;
    }

    // Resolve now, so that a refused escalation or a broken policy reaches the agent as a reason.
    exec::exec_request req;
    req.skill = opt.skill;
    req.policy_file = opt.policy_file;
    req.working_dir = cwd;
    for (std::size_t i = 0; i + 1 < chosen.size(); i += 2) {
      if (chosen[i] == "--sandbox-profile") {
        req.profile = filters::parse_profile(chosen[i + 1]);
        if (!req.profile) {
          throw deny_error("unknown --sandbox-profile '" + chosen[i + 1] +
                           "'; use offline, network-read or allowlist");
        }
      } else {
        if (chosen[i + 1] != "read-only" && chosen[i + 1] != "workspace-write") {
          throw deny_error("unknown --filesystem '" + chosen[i + 1] + "'; use read-only or workspace-write");
        }
        req.read_only = chosen[i + 1] == "read-only";
      }
    }
    try {
      exec::resolve_exec(req);
    } catch (const exec::refusal &e) {
      throw deny_error(std::string("refused: ") + e.what());
    }

    std::string rewritten = sluice_command(opt.sluice_path, "exec", opt.skill, opt.policy_file);
    for (auto &c : chosen) rewritten += " " + shell_word(c);
    rewritten += " -- " + find_shell() + " -c " + shell_quote(inner);

    input_obj[field] = rewritten;
    js::object h{{"hookEventName", "PreToolUse"},
                 {"permissionDecision", "allow"},
                 {"permissionDecisionReason",
                  "sandboxed by sluice" + (opt.skill.empty() ? std::string() : " (skill " + opt.skill + ")")},
                 {"updatedInput", std::move(input_obj)}};
    hook_outcome out;
    out.exit_code = 0;
    out.out = js::serialize(js::object{{"hookSpecificOutput", std::move(h)}}) + "\n";
    return out;
  } catch (const deny_error &e) {
    return hook_deny(e.what());
  } catch (const std::exception &e) {
    return hook_deny(std::string("internal error in the sluice hook (") + e.what() +
                "); the command was blocked, not run");
  } catch (...) {
    return hook_deny("internal error in the sluice hook; the command was blocked, not run");
  }
}

} // namespace sluice::adapters

namespace sluice::adapters {
namespace {

// Printed from the SIGALRM handler when the hook runs out of time: the host must get a deny before
// its own timeout, which it would treat as "run the original command".
constexpr char timeout_deny[] =
    "{\"hookSpecificOutput\":{\"hookEventName\":\"PreToolUse\",\"permissionDecision\":\"deny\","
    "\"permissionDecisionReason\":\"the sluice hook ran out of time; the command was blocked, not "
    "run\"}}\n";
constexpr char timeout_err[] = "sluice: the hook ran out of time; the command was blocked, not run\n";

extern "C" void on_alarm(int) {
  [[maybe_unused]] auto a = ::write(1, timeout_deny, sizeof timeout_deny - 1);
  [[maybe_unused]] auto b = ::write(2, timeout_err, sizeof timeout_err - 1);
  ::_exit(2);
}

} // namespace

int hook_main(const hook_options &options) {
  struct sigaction sa{};
  sa.sa_handler = on_alarm;
  ::sigaction(SIGALRM, &sa, nullptr);
  ::alarm(25); // hosts are told 60 s; the hook answers well before
  std::string input;
  hook_outcome out;
  bool ok = true;
  for (;;) {
    pollfd p{0, POLLIN, 0};
    int r = ::poll(&p, 1, 10'000);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      ok = false;
      break;
    }
    char buf[65536];
    ssize_t n = ::read(0, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ok = false;
      break;
    }
    if (n == 0) break;
    input.append(buf, static_cast<std::size_t>(n));
    if (input.size() > (1u << 20)) {
      ok = false;
      break;
    }
  }
  if (ok) {
    out = run_hook(options, input);
  } else {
    out = hook_deny("the hook input could not be read (an error, over 1 MiB or no data within "
                    "10 s); the command was blocked, not run");
  }
  std::fwrite(out.out.data(), 1, out.out.size(), stdout);
  std::fflush(stdout);
  std::fwrite(out.err.data(), 1, out.err.size(), stderr);
  return out.exit_code;
}

} // namespace sluice::adapters
