// `sluice exec -- CMD` and `sluice agent HOST -- HOST_ARGS`: a command (or an agent host) whose only
// route out is the gateway.
#include "adapters/agent.hpp"
#include "cli/commands.hpp"
#include "exec/platform.hpp"
#include "exec/runner.hpp"
#include "exec/sandbox.hpp"
#include "filters/policy_loader.hpp"

#include <cstdio>
#include <cstring>
#include <memory>
#include <unistd.h>

namespace sluice::cli {

namespace {

struct exec_args {
  exec::exec_options ex;
  std::string profile, filesystem;
  std::vector<std::string> unix_sockets, root_sockets; // --allow-unix-socket, --allow-root-equivalent-socket
  adapters::agent_request agent;
};

// The options exec and agent share, bound to the one `exec_args`.
void add_exec_options(CLI::App *c, exec_args &a) {
  auto &ex = a.ex;
  c->add_option("--skill", ex.request.skill, "skill name from the policy file");
  c->add_option("--sandbox-profile", a.profile, "offline|network-read|allowlist|publish");
  c->add_option("--allow-domain", ex.request.allow_domains, "allow PATTERN (repeatable)")
      ->allow_extra_args(false); // "[v6]" is a pattern, not a CLI11 list
  c->add_option("--allow-env", ex.request.allow_env, "keep credential variable NAME");
  c->add_flag("--confirm-external-side-effects", ex.request.confirm_side_effects,
      "required by the publish profile");
  c->add_flag("--needs-approval", ex.needs_approval,
      "written by `sluice hook` into a command a person approved in the agent host's prompt; "
      "grants nothing, recorded in the JSON summary");
  c->add_option("--keep-env", ex.request.keep_env, "keep non-secret variable NAME (repeatable)");
  c->add_option("--credential", ex.request.credentials,
      "let the gateway add credential NAME ([credentials.NAME]) to its hosts' requests");
  c->add_option("--filesystem", a.filesystem, "read-only|workspace-write");
  c->add_option("--allow-write", ex.request.allow_write,
      "also let the command write directory PATH (repeatable; not system paths, "
      "the home or policy directories)");
  c->add_option("--allow-unix-socket", a.unix_sockets,
      "show Unix socket PATH in the view, nothing else of its directory (repeatable; not one that "
      "gives root on the host)")
      ->allow_extra_args(false);
  c->add_option("--allow-root-equivalent-socket", a.root_sockets,
      "show Unix socket PATH that gives root on the host (Docker's, containerd's...), knowingly; "
      "every run says so on stderr (repeatable)")
      ->allow_extra_args(false);
  c->add_option("--cache", ex.request.caches,
      "keep tool cache NAME between runs: npm, pip, uv, yarn, pnpm, cargo, go, maven, gradle");
  c->add_option("--pass-fd", ex.pass_fds, "keep descriptor N open for the command (repeatable)");
  c->add_flag("--journal", ex.journal,
      "record what the command changes in the workspace, for `sluice undo` (also [sandbox] journal)");
  c->add_flag("--stage", ex.stage,
      "work on a copy-on-write layer: nothing reaches the workspace until `sluice apply RUN`");
  c->add_option("--stage-run", ex.stage_run, "go on with staged run RUN (its earlier changes in view)");
  c->add_option("--policy", ex.request.policy_file, "trusted policy file (TOML)");
  c->add_option("--access-log", ex.access_log,
      "JSON access log: FILE or - for stderr; a chain signed with a key made for the run, whose public "
      "half --json-summary gives (sluice audit verify FILE --key KEY)");
  c->add_option("--access-log-format", ex.access_log_format,
      "json (sluice's line) or ocsf (OCSF 1.8 events); default: the policy's [log] format")
      ->check(CLI::IsMember({"json", "ocsf"}));
  c->add_option("--json-summary", ex.json_summary, "write a JSON summary here at exit");
  c->add_option("--metrics-textfile", ex.metrics_textfile,
      "add this command's metrics to DIR/sluice_exec.prom (node_exporter textfile "
      "collector)");
}

// Runs the command (or, with `agent`, the host) and leaves the process with its status; returns
// 125 only when sluice refused or could not set up the sandbox.
int run(exec_args &a, const std::vector<std::string> &child_argv, bool agent) {
  auto &ex = a.ex;
  if (!a.profile.empty()) {
    ex.request.profile = filters::parse_profile(a.profile);
    if (!ex.request.profile) {
      std::fprintf(stderr, "sluice: unknown --sandbox-profile '%s'; use offline, network-read, "
                           "allowlist or publish\n", a.profile.c_str());
      return 125;
    }
  }
  if (!a.filesystem.empty()) {
    if (a.filesystem != "read-only" && a.filesystem != "workspace-write") {
      std::fprintf(stderr, "sluice: unknown --filesystem '%s'; use read-only or workspace-write\n",
                   a.filesystem.c_str());
      return 125;
    }
    ex.request.read_only = a.filesystem == "read-only";
  }
  for (const auto &p : a.unix_sockets) ex.request.unix_sockets.push_back({p, false});
  for (const auto &p : a.root_sockets) ex.request.unix_sockets.push_back({p, true});
  char cwd[4096];
  if (::getcwd(cwd, sizeof cwd)) ex.request.working_dir = cwd;
  ex.argv = child_argv;
  try {
    // exec has reaped its child and removed its directory: leave without running the static
    // destructors and library teardown, which would only add to the start-up cost of every
    // wrapped command.
    int rc;
    if (agent) {
      a.agent.ex = ex;
      a.agent.args = child_argv;
      rc = adapters::run_agent(a.agent);
    } else {
      rc = exec::run_exec(ex);
    }
    std::fflush(nullptr);
    ::_exit(rc);
  } catch (const exec::setup_error &e) {
    // Where the platform explains it (AppArmor, a sysctl, a container's seccomp filter or
    // /proc), the same line says so and how to fix it.
    std::string what = e.what(), why;
    if (e.step == "namespaces" || e.step == "mounts" || e.step == "loopback") {
      // In a new process: this one is not dumpable by now, and its probe child could not be.
      auto line = exec::diagnose_in_fresh_process(self_path());
      if (!line.empty()) {
        what = what.substr(0, what.find("; ")); // the error itself; the cause's fix replaces generic advice
        why = "; cause: " + line;
      }
    }
    std::fprintf(stderr, "sluice: sandbox set-up failed at %s: %s; nothing was run%s "
                         "(see `sluice doctor`)\n", e.step.c_str(), what.c_str(), why.c_str());
    return 125;
  } catch (const exec::refusal &e) {
    std::fprintf(stderr, "sluice: refused: %s\n", e.what());
    return 125;
  }
}

} // namespace

int split_child_argv(int &argc, char **argv, std::vector<std::string> &child_argv) {
  bool is_exec = argc > 1 && (std::strcmp(argv[1], "exec") == 0 || std::strcmp(argv[1], "agent") == 0);
  bool is_agent = is_exec && std::strcmp(argv[1], "agent") == 0;
  if (!is_exec) return 0;
  int dashdash = -1;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) {
      dashdash = i;
      break;
    }
  }
  bool help = false;
  for (int i = 2; i < (dashdash < 0 ? argc : dashdash); ++i) {
    help = help || std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0;
  }
  if (dashdash < 0 && !help && !is_agent) {
    std::fprintf(stderr, "sluice: exec needs `--` before the command: "
                         "sluice exec [options] -- CMD [ARGS...] (see sluice exec --help)\n");
    return 125;
  }
  if (dashdash >= 0) {
    child_argv.assign(argv + dashdash + 1, argv + argc);
    argc = dashdash;
  }
  return 0;
}

void add_exec(CLI::App &app, commands &out, const std::vector<std::string> &child_argv) {
  auto a = std::make_shared<exec_args>();
  auto *exec_cmd = app.add_subcommand("exec", "run a command whose only route out is the gateway");
  exec_cmd->footer("The command runs in fresh namespaces: its only route out is the gateway, its filesystem\n"
                   "is a view built for it (system paths read-only, the workspace, a private /tmp and\n"
                   "$HOME), its environment an allow-list. Exit status: the command's own, 128+N for\n"
                   "signal N, 125 when sluice refused or failed, 126 not executable, 127 not found.\n");
  add_exec_options(exec_cmd, *a);

  // `agent HOST -- HOST_ARGS`: the host itself inside one exec boundary.
  auto *agent_cmd = app.add_subcommand("agent", "run an agent host (claude, codex, opencode, pi) itself inside one sandbox");
  agent_cmd->footer("The host, its shell tool, MCP servers and subprocesses run inside one sluice exec boundary:\n"
                    "its model endpoint is a route that may POST to the API, its key is added by the\n"
                    "gateway (the host holds a placeholder), its state directory is writable and its\n"
                    "settings and hooks read-only. Default profile: network-read.\n");
  agent_cmd->add_option("host", a->agent.host, "claude, codex, opencode or pi")->required();
  agent_cmd->add_option("--model-url", a->agent.model_url,
                        "the model API's base URL (default: the host's own configuration)");
  add_exec_options(agent_cmd, *a);
  out.push_back({exec_cmd, [a, &child_argv] { return run(*a, child_argv, false); }});
  out.push_back({agent_cmd, [a, &child_argv] { return run(*a, child_argv, true); }});
}

} // namespace sluice::cli
