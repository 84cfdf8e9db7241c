#include "adapters/hook.hpp"
#include "adapters/host_adapter.hpp"
#include "adapters/adapter.hpp"
#include "filters/host_matcher.hpp"
#include "filters/host_pattern.hpp"
#include "exec/doctor.hpp"
#include "exec/profile_resolver.hpp"
#include "exec/workspace.hpp"

#include <boost/json.hpp>
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <poll.h>
#include <exception>
#include <stdexcept>
#include <sys/stat.h>
#include <sys/statvfs.h>
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

// What the agent chose in its own `sluice exec ... --` prefix. The profile and the filesystem the
// trusted policy then authorizes (the skill's escalations) or lets a person approve (ask_profiles);
// domains are only ever approved by a person (ask_domains). Every other option stays with the
// person who installed the adapter.
struct agent_choice {
  std::optional<std::string> profile, filesystem;
  std::vector<std::string> domains;
};

agent_choice agent_options(const std::vector<std::string> &opts) {
  agent_choice out;
  for (std::size_t i = 0; i < opts.size(); ++i) {
    std::string name = opts[i], value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos && name.rfind("--", 0) == 0) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (name == "--sandbox-profile" || name == "--filesystem" || name == "--allow-domain") {
      if (!has_value) {
        if (i + 1 >= opts.size()) throw deny_error(name + " needs a value");
        value = opts[++i];
      }
      if (name == "--sandbox-profile") {
        out.profile = value;
      } else if (name == "--filesystem") {
        out.filesystem = value;
      } else {
        out.domains.push_back(value);
      }
      continue;
    }
    throw deny_error("option " + name + " cannot be chosen by the agent (it would widen the policy);"
                     " only --sandbox-profile, --filesystem and --allow-domain may be, and the "
                     "skill's escalations and ask lists decide; ask the user to change the sluice policy");
  }
  return out;
}

// An agent's --allow-domain is askable when the skill's ask_domains lists it as written, or, for
// one exact name, when an ask_domains pattern matches that name on its port.
bool askable_domain(const std::vector<std::string> &ask, const std::string &domain) {
  if (std::find(ask.begin(), ask.end(), domain) != ask.end()) return true;
  filters::host_pattern p;
  try {
    p = filters::parse_host_pattern(domain);
  } catch (const filters::pattern_error &) {
    return false;
  }
  if (p.type != filters::host_pattern::kind::exact || ask.empty()) return false;
  filters::host_matcher m(ask);
  return m.match(p.value, "https", p.port ? p.port : 443) != nullptr ||
         m.match(p.value, "http", p.port ? p.port : 80) != nullptr;
}

// Whether the command's first word is this sluice: on a host that shows a person the original
// command instead of the rewrite (or runs it once approved), what runs is then still sluice.
bool names_this_sluice(const std::string &command, const std::string &cwd, const std::string &self) {
  std::size_t i = command.find_first_not_of(" \t");
  if (i == std::string::npos) return false;
  std::size_t end = command.find_first_of(" \t", i);
  std::string word = command.substr(i, end == std::string::npos ? std::string::npos : end - i);
  if (word.find_first_of("'\"\\") != std::string::npos) return false;
  const char *path = std::getenv("PATH");
  std::string found = exec::find_executable(word, path ? path : "", cwd);
  struct stat a {}, b {};
  return !found.empty() && ::stat(found.c_str(), &a) == 0 && ::stat(self.c_str(), &b) == 0 &&
         a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// /.sluice/agent exists only in the view of a `sluice agent` run: sluice writes it into the view's
// read-only root. Outside a sandbox, / is not an unprivileged caller's to write.
bool inside_agent_boundary() {
  struct stat st {};
  struct statvfs vfs {};
  return ::lstat("/.sluice/agent", &st) == 0 && S_ISREG(st.st_mode) &&
         ::statvfs("/.sluice/agent", &vfs) == 0 && (vfs.f_flag & ST_RDONLY);
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

std::string approval_prefix(const std::string &sluice_path) {
  return shell_word(sluice_path) + " exec --needs-approval ";
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
    const host_adapter *host = host_named(opt.host);
    if (!host) throw deny_error("unknown hook host '" + opt.host + "'; use claude, codex, opencode or pi");
    std::string tool = str(o, "tool_name");
    if (!host->shell_tool(tool)) {
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

    // Inside `sluice agent`'s boundary the host's shell already runs in the sandbox, where no
    // sandbox can be nested: the command runs as it is, inside that boundary.
    if (inside_agent_boundary()) {
      js::object h{{"hookEventName", "PreToolUse"},
                   {"permissionDecision", "allow"},
                   {"permissionDecisionReason", "inside the sluice agent boundary"},
                   {"updatedInput", std::move(input_obj)}};
      hook_outcome out;
      out.exit_code = 0;
      out.out = js::serialize(js::object{{"hookSpecificOutput", std::move(h)}}) + "\n";
      return out;
    }

    // The runner must be able to sandbox before anything is promised to the host.
    if (std::string failed = exec::doctor_failures(exec::run_doctor()); !failed.empty()) {
      throw deny_error("sluice cannot sandbox commands on this machine (" + failed +
                       "); nothing was run; see `sluice doctor`");
    }

    agent_choice chosen;
    std::string inner = command;
    if (auto prefix = parse_sluice_prefix(command)) {
      chosen = agent_options(prefix->options);
      inner = prefix->rest;
    }

    // Resolve now, so that a refused escalation or a broken policy reaches the agent as a reason.
    exec::exec_request req;
    req.skill = opt.skill;
    req.policy_file = opt.policy_file;
    req.working_dir = cwd;
    if (chosen.profile) {
      req.profile = filters::parse_profile(*chosen.profile);
      if (!req.profile) {
        throw deny_error("unknown --sandbox-profile '" + *chosen.profile +
                         "'; use offline, network-read or allowlist");
      }
      // publish always needs a person; the prompt is that person's confirmation.
      req.confirm_side_effects = *req.profile == filters::profile::publish;
    }
    if (chosen.filesystem) {
      if (*chosen.filesystem != "read-only" && *chosen.filesystem != "workspace-write") {
        throw deny_error("unknown --filesystem '" + *chosen.filesystem + "'; use read-only or workspace-write");
      }
      req.read_only = *chosen.filesystem == "read-only";
    }
    req.allow_domains = chosen.domains;
    exec::resolved_exec resolved;
    try {
      resolved = exec::resolve_exec(req);
    } catch (const exec::refusal &e) {
      throw deny_error(std::string("refused: ") + e.what());
    }

    // What of the agent's choice needs a person: domains (always, and only those ask_domains
    // covers), a profile ask_profiles lists but the escalations do not, and publish.
    const auto &skill = resolved.skill_config;
    const std::string where = "[skills." + resolved.skill + "] in " + resolved.policy_source;
    std::vector<std::string> asks, policy_lines;
    for (const auto &d : chosen.domains) {
      if (!askable_domain(skill.ask_domains, d)) {
        throw deny_error("option --allow-domain " + d + " cannot be chosen by the agent (it would widen "
                         "the policy), and ask_domains under " + where + " does not let a person approve "
                         "it; ask the user to run the command or to change the sluice policy");
      }
      asks.push_back("network access to " + d);
      policy_lines.push_back("allow_domains = [\"" + d + "\"]");
    }
    if (req.profile) {
      auto p = *req.profile;
      auto in = [&](const std::vector<filters::profile> &list) {
        return std::find(list.begin(), list.end(), p) != list.end();
      };
      bool automatic = p == skill.default_profile || in(skill.escalations);
      bool askable = in(skill.ask_profiles);
      std::string name(filters::to_string(p));
      if (p == filters::profile::publish && !askable) {
        throw deny_error("the publish profile needs a person's confirmation, and ask_profiles under " +
                         where + " does not list it, so the hook cannot ask; ask the user to run the "
                         "command (with --confirm-external-side-effects)");
      }
      if (!automatic || p == filters::profile::publish) {
        if (!askable) {
          throw deny_error("profile " + name + " is not allowed for skill '" + resolved.skill +
                           "'; declare it under escalations or ask_profiles in " + where);
        }
        asks.push_back(p == filters::profile::publish
                           ? "the publish profile (it can change things outside this machine)"
                           : p == filters::profile::allowlist
                               ? "the allowlist profile (tunnels to allowed hosts sluice does not look inside)"
                               : "the " + name + " profile");
        policy_lines.push_back("escalations = [\"" + name + "\"]");
      }
    }

    std::string rewritten = sluice_command(opt.sluice_path, "exec", opt.skill, opt.policy_file);
    if (!asks.empty()) { // "SLUICE exec --needs-approval [--skill S] [--policy P]"
      std::string prefix = approval_prefix(opt.sluice_path);
      prefix.pop_back();
      rewritten = prefix + rewritten.substr(shell_word(opt.sluice_path).size() + 5);
    }
    if (chosen.profile) rewritten += " --sandbox-profile " + shell_word(*chosen.profile);
    if (req.confirm_side_effects) rewritten += " --confirm-external-side-effects";
    if (chosen.filesystem) rewritten += " --filesystem " + shell_word(*chosen.filesystem);
    for (const auto &d : chosen.domains) rewritten += " --allow-domain " + shell_word(d);
    rewritten += " -- " + find_shell() + " -c " + shell_quote(inner);

    std::string decision = "allow";
    std::string reason = "sandboxed by sluice" + (opt.skill.empty() ? std::string() : " (skill " + opt.skill + ")");
    if (!asks.empty()) {
      std::string what;
      for (std::size_t i = 0; i < asks.size(); ++i) {
        what += (i == 0 ? "" : i + 1 == asks.size() ? " and " : ", ") + asks[i];
      }
      std::string why;
      if (!names_this_sluice(command, cwd.empty() ? std::string("/") : cwd, opt.sluice_path)) {
        throw deny_error("this command asks for " + what + ", which needs a person's approval, but its "
                         "first word is not this sluice (" + opt.sluice_path + "); write it as `sluice "
                         "exec OPTIONS -- CMD` with sluice on PATH, or by that path");
      }
      if (host->route(why) == ask_route::no_prompt) {
        std::string lines;
        for (auto &l : policy_lines) lines += (lines.empty() ? "" : "; ") + l;
        throw deny_error("this command asks for " + what + ", beyond what skill '" + resolved.skill +
                         "' gives; that needs a person's approval and " + why + ". Nothing was run: "
                         "ask the user to run it, or to add " + lines + " under " + where);
      }
      decision = "ask";
      reason = "sluice: allow " + what + " for this one command, beyond what skill '" + resolved.skill +
               "' gives? It still runs in the sandbox, and the next command does not keep it.";
    }

    input_obj[field] = rewritten;
    js::object h{{"hookEventName", "PreToolUse"},
                 {"permissionDecision", decision},
                 {"permissionDecisionReason", reason},
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
