// sluice: command-line wiring only. Each subcommand hands its options to the layer that does the work;
// start-up exceptions become one line on stderr and exit 125.
#include "adapters/adapter.hpp"
#include "adapters/agent.hpp"
#include "adapters/hook.hpp"
#include "certs/ca_files.hpp"
#include "exec/journal.hpp"
#include "exec/doctor.hpp"
#include "exec/platform.hpp"
#include "exec/runner.hpp"
#include "exec/sandbox.hpp"
#include "filters/policy_loader.hpp"
#include "gateway/policy_suggest.hpp"
#include "gateway/serve.hpp"

#include <iostream>

#include <cstring>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <unistd.h>

int main(int argc, char **argv) {
  // `exec`: everything after the first `--` is the child's argv, untouched; CLI11 sees only the rest.
  std::vector<std::string> child_argv;
  // `agent HOST`: the same, HOST_ARGS after `--` go to the host.
  bool is_exec = argc > 1 && (std::strcmp(argv[1], "exec") == 0 || std::strcmp(argv[1], "agent") == 0);
  bool is_agent = is_exec && std::strcmp(argv[1], "agent") == 0;
  if (is_exec) {
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
  }

  CLI::App app{"sluice: an egress gateway for sandboxed commands", "sluice"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("sluice ") + SLUICE_VERSION);

  sluice::gateway::serve_options serve;
  auto *serve_cmd = app.add_subcommand("serve", "run the long-lived gateway");
  serve_cmd->add_option("--config", serve.config_file, "TOML config file")->required();
  serve_cmd->add_option("--ca-out", serve.ca_out, "write the ephemeral CA certificate here");
  serve_cmd->add_option("--ca-bundle-out", serve.ca_bundle_out,
                        "write the system roots plus sluice's CA here (for clients' CA variables)");
  serve_cmd->add_option("--threads", serve.threads, "worker threads (default: one per core)");

  std::string check_config, check_profile, check_method, check_url;
  std::vector<std::string> check_allow, check_deny;
  auto *check_cmd = app.add_subcommand(
      "check", "dry run: ALLOW or DENY for METHOD URL (or a Git program and an ssh:// URL)");
  check_cmd->add_option("--config,--policy", check_config, "TOML config or policy file");
  check_cmd->add_option("--sandbox-profile", check_profile, "offline|network-read|publish|allowlist");
  check_cmd->add_option("--allow-domain", check_allow, "allow PATTERN (repeatable)")
      ->allow_extra_args(false); // "[v6]" is a pattern, not a CLI11 list
  check_cmd->add_option("--deny-domain", check_deny, "deny PATTERN (repeatable)")
      ->allow_extra_args(false); // "[v6]" is a pattern, not a CLI11 list
  std::string check_client;
  check_cmd->add_option("--client", check_client, "judge as this [clients.NAME] entry, by its role");
  std::string check_skill;
  check_cmd->add_option("--skill", check_skill,
                        "for ssh:// URLs: the skill whose ssh entries judge (default: \"default\")");
  check_cmd->add_option("METHOD", check_method)->required();
  check_cmd->add_option("URL", check_url)->required();

  auto *policy_cmd = app.add_subcommand("policy", "work on a serve policy: suggest entries, make client tokens");
  policy_cmd->require_subcommand(1);
  std::string suggest_log, suggest_client;
  auto *suggest_cmd = policy_cmd->add_subcommand(
      "suggest", "allow entries that would have admitted what an access log shows refused");
  suggest_cmd->add_option("--access-log", suggest_log, "the JSON access log ([log] access_log)")->required();
  suggest_cmd->add_option("--client", suggest_client, "only this client's requests");
  std::string token_name, token_role;
  auto *token_cmd = policy_cmd->add_subcommand(
      "token", "a new client token and the [clients.NAME] section that holds its hash");
  token_cmd->add_option("NAME", token_name, "the client's name (its Basic user name)")->required();
  token_cmd->add_option("--role", token_role, "the [roles.NAME] it is judged by")->required();

  auto *ca_cmd = app.add_subcommand("ca", "persistent CA for `serve`");
  ca_cmd->require_subcommand(1);
  std::string ca_cert = "sluice-ca.pem", ca_key = "sluice-ca.key", ca_name = "sluice CA";
  int ca_days = 365;
  bool ca_force = false;
  auto *ca_init = ca_cmd->add_subcommand("init", "create a CA certificate and key");
  ca_init->add_option("--cert", ca_cert, "certificate file to write")->capture_default_str();
  ca_init->add_option("--key", ca_key, "key file to write (0600)")->capture_default_str();
  ca_init->add_option("--days", ca_days, "validity in days")->capture_default_str();
  ca_init->add_option("--name", ca_name, "subject common name")->capture_default_str();
  ca_init->add_flag("--force", ca_force, "replace existing files");
  auto *ca_show = ca_cmd->add_subcommand("show", "describe a CA certificate");
  ca_show->add_option("--cert", ca_cert, "certificate file")->capture_default_str();

  sluice::exec::exec_options ex;
  std::string ex_profile;
  auto *exec_cmd = app.add_subcommand("exec", "run a command whose only route out is the gateway");
  exec_cmd->footer("The command runs in fresh namespaces: its only route out is the gateway, its filesystem\n"
                   "is a view built for it (system paths read-only, the workspace, a private /tmp and\n"
                   "$HOME), its environment an allow-list. Exit status: the command's own, 128+N for\n"
                   "signal N, 125 when sluice refused or failed, 126 not executable, 127 not found.\n");
  std::string ex_filesystem;
  auto exec_options_of = [&](CLI::App *c) {
    c->add_option("--skill", ex.request.skill, "skill name from the policy file");
    c->add_option("--sandbox-profile", ex_profile, "offline|network-read|allowlist|publish");
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
    c->add_option("--filesystem", ex_filesystem, "read-only|workspace-write");
    c->add_option("--allow-write", ex.request.allow_write,
        "also let the command write directory PATH (repeatable; not system paths, "
        "the home or policy directories)");
    c->add_option("--cache", ex.request.caches,
        "keep tool cache NAME between runs: npm, pip, uv, yarn, pnpm, cargo, go, maven, gradle");
    c->add_option("--pass-fd", ex.pass_fds, "keep descriptor N open for the command (repeatable)");
    c->add_flag("--journal", ex.journal,
        "record what the command changes in the workspace, for `sluice undo` (also [sandbox] journal)");
    c->add_flag("--stage", ex.stage,
        "work on a copy-on-write layer: nothing reaches the workspace until `sluice apply RUN`");
    c->add_option("--stage-run", ex.stage_run, "go on with staged run RUN (its earlier changes in view)");
    c->add_option("--policy", ex.request.policy_file, "trusted policy file (TOML)");
    c->add_option("--access-log", ex.access_log, "JSON access log: FILE or - for stderr");
    c->add_option("--access-log-format", ex.access_log_format,
        "json (sluice's line) or ocsf (OCSF 1.8 events); default: the policy's [log] format")
        ->check(CLI::IsMember({"json", "ocsf"}));
    c->add_option("--json-summary", ex.json_summary, "write a JSON summary here at exit");
    c->add_option("--metrics-textfile", ex.metrics_textfile,
        "add this command's metrics to DIR/sluice_exec.prom (node_exporter textfile "
        "collector)");
  };
  exec_options_of(exec_cmd);

  // `agent HOST -- HOST_ARGS`: the host itself inside one exec boundary.
  sluice::adapters::agent_request agent;
  auto *agent_cmd = app.add_subcommand("agent", "run an agent host (claude, codex, opencode, pi) itself inside one sandbox");
  agent_cmd->footer("The host, its shell tool, MCP servers and subprocesses run inside one sluice exec boundary:\n"
                    "its model endpoint is a route that may POST to the API, its key is added by the\n"
                    "gateway (the host holds a placeholder), its state directory is writable and its\n"
                    "settings and hooks read-only. Default profile: network-read.\n");
  agent_cmd->add_option("host", agent.host, "claude, codex, opencode or pi")->required();
  agent_cmd->add_option("--model-url", agent.model_url,
                        "the model API's base URL (default: the host's own configuration)");
  exec_options_of(agent_cmd);

  // `hook HOST`: a host's PreToolUse hook. Every way out is 0 (rewrite) or 2 (deny): hosts run the
  // original command on any other status.
  std::string hook_host_name;
  sluice::adapters::hook_options hook;
  auto *hook_cmd = app.add_subcommand("hook", "PreToolUse hook for claude|codex: host JSON on stdin "
                                              "-> rewrite through sluice exec, or deny (fails closed)");
  hook_cmd->add_option("host", hook_host_name, "claude|codex|opencode|pi")->required();
  hook_cmd->add_option("--skill", hook.skill, "skill every rewritten command runs under");
  hook_cmd->add_option("--policy", hook.policy_file, "trusted policy file (TOML)");

  sluice::adapters::adapter_options adapter;
  bool adapter_json = false;
  auto *adapter_cmd = app.add_subcommand("adapter", "route an agent host's shell through sluice exec");
  adapter_cmd->require_subcommand(1);
  auto *ad_install = adapter_cmd->add_subcommand("install", "write the host's hook configuration");
  auto *ad_remove = adapter_cmd->add_subcommand("remove", "restore the host's configuration");
  auto *ad_status = adapter_cmd->add_subcommand("status", "installed, host version, hook verified");
  for (auto *c : {ad_install, ad_remove}) {
    c->add_option("host", adapter.host, "claude, codex, opencode or pi")->required();
  }
  ad_status->add_option("host", adapter.host, "claude, codex, opencode or pi (default: all)");
  for (auto *c : {ad_install, ad_remove, ad_status}) {
    c->add_option("--scope", adapter.scope, "user (default), project or managed");
    c->add_option("--dir", adapter.dir, "project directory for --scope project");
  }
  ad_install->add_option("--skill", adapter.skill, "skill every command runs under");
  ad_install->add_option("--policy", adapter.policy_file, "trusted policy file (TOML)");
  ad_install->add_option("--mode", adapter.mode,
                         "claude: hook (default; Bash through sluice exec) or proxy (Claude's sandbox "
                         "with sluice serve as its proxy)");
  ad_install->add_option("--config", adapter.serve_config, "proxy mode: the sluice serve config");
  ad_install->add_option("--ca-bundle", adapter.ca_bundle,
                         "proxy mode: the bundle serve --ca-bundle-out writes");
  ad_install->add_option("--agent", adapter.agent,
                         "proxy mode: use the serve config's [listen.agents.NAME] listener (traffic "
                         "named NAME in the log and metrics; other users refused)");
  ad_status->add_flag("--json", adapter_json, "machine-readable output");

  sluice::gateway::approvals_options appr;
  auto *approvals_cmd = app.add_subcommand("approvals", "list the requests waiting for a person's decision ([approvals])");
  approvals_cmd->alias("pending");
  auto *approve_cmd = app.add_subcommand("approve", "let a waiting request through: once, with --run for the rest "
                                                    "of the run, with --always for good (written to the policy file)");
  auto *deny_cmd = app.add_subcommand("deny", "refuse a waiting request (403 approval_denied)");
  bool approve_run = false;
  for (auto *c : {approvals_cmd, approve_cmd, deny_cmd}) {
    c->add_option("--admin", appr.admin, "the admin listener HOST:PORT (default: SLUICE_ADMIN)");
    c->add_option("--token-file", appr.token_file, "file holding the approvals token (default: SLUICE_APPROVALS_TOKEN)");
  }
  for (auto *c : {approve_cmd, deny_cmd}) c->add_option("ID", appr.id, "the request's id (sluice approvals)")->required();
  bool approve_always = false;
  auto *run_flag = approve_cmd->add_flag("--run", approve_run, "allow the host for the rest of the run, not only this request");
  approve_cmd->add_flag("--always", approve_always, "allow the host for good: shows the lines it adds to the trusted "
                                                   "policy file and asks before writing them")
      ->excludes(run_flag);
  approve_cmd->add_flag("--yes", appr.yes, "with --always: write without asking");

  // The journal: `runs`, `undo`, `diff`.
  bool runs_files = false, runs_json = false, undo_force = false, undo_recover = false;
  std::string run_id;
  auto *runs_cmd = app.add_subcommand("runs", "list journaled runs (sluice exec --journal): when, what, what changed");
  runs_cmd->add_flag("--files", runs_files, "list the paths each run created (A), modified (M) or deleted (D)");
  runs_cmd->add_flag("--json", runs_json, "machine-readable output");
  auto *undo_cmd = app.add_subcommand("undo", "put the workspace back as it was before a journaled run");
  undo_cmd->add_option("RUN", run_id, "the run's id (default: the newest; sluice runs lists them)");
  undo_cmd->add_flag("--force", undo_force, "undo even where a path changed after the run (that later change is lost)");
  undo_cmd->add_flag("--recover", undo_recover, "finish applying or undoing runs a crash interrupted");
  auto *diff_cmd = app.add_subcommand("diff", "what a journaled run changed, or a staged run would change, as a unified diff");
  diff_cmd->add_option("RUN", run_id, "the run's id (default: the newest)");
  std::vector<std::string> apply_paths;
  bool apply_guarded = false;
  auto *apply_cmd = app.add_subcommand("apply", "apply a staged run's changes to the workspace (all, or those at PATHs)");
  apply_cmd->add_option("RUN", run_id, "the staged run's id")->required();
  apply_cmd->add_option("PATH", apply_paths, "only these paths (and what is under them)");
  apply_cmd->add_flag("--include-guarded", apply_guarded,
                      "also shell, editor, Git and agent settings the run made (held back otherwise)");
  auto *discard_cmd = app.add_subcommand("discard", "drop a staged run's changes");
  discard_cmd->add_option("RUN", run_id, "the staged run's id")->required();

  bool doctor_json = false;
  auto *doctor_cmd = app.add_subcommand("doctor", "preflight checks for exec");
  doctor_cmd->add_flag("--json", doctor_json, "machine-readable output");
  bool apparmor_profile = false, platform_cause = false;
  doctor_cmd->add_flag("--platform-cause", platform_cause, "print the platform's cause of a sandbox failure, if any")
      ->group(""); // exec's own use
  doctor_cmd->add_flag("--apparmor-profile", apparmor_profile,
                       "print the AppArmor profile that lets this binary use user namespaces where the "
                       "kernel restricts them (Ubuntu 23.10 and later), then exit");

  bool is_hook = argc > 1 && std::strcmp(argv[1], "hook") == 0;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    if (is_hook && e.get_exit_code() != 0) {
      auto d = sluice::adapters::hook_deny(std::string("bad hook command line (") + e.what() +
                                           "); reinstall with `sluice adapter install`");
      std::fputs(d.out.c_str(), stdout);
      std::fputs(d.err.c_str(), stderr);
      return 2;
    }
    int rc = app.exit(e);
    return rc == 0 ? 0 : 125;
  }

  auto self_path = [] {
    char buf[4096];
    ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) throw std::runtime_error("cannot find this binary's path (/proc/self/exe)");
    return std::string(buf, static_cast<std::size_t>(n));
  };
  if (*hook_cmd) {
    try {
      hook.host = hook_host_name;
      hook.sluice_path = self_path();
      return sluice::adapters::hook_main(hook);
    } catch (const std::exception &e) {
      auto d = sluice::adapters::hook_deny(e.what());
      std::fputs(d.out.c_str(), stdout);
      std::fputs(d.err.c_str(), stderr);
      return 2;
    }
  }

  try {
    if (*exec_cmd || *agent_cmd) {
      if (!ex_profile.empty()) {
        ex.request.profile = sluice::filters::parse_profile(ex_profile);
        if (!ex.request.profile) {
          std::fprintf(stderr, "sluice: unknown --sandbox-profile '%s'; use offline, network-read, "
                               "allowlist or publish\n", ex_profile.c_str());
          return 125;
        }
      }
      if (!ex_filesystem.empty()) {
        if (ex_filesystem != "read-only" && ex_filesystem != "workspace-write") {
          std::fprintf(stderr, "sluice: unknown --filesystem '%s'; use read-only or workspace-write\n",
                       ex_filesystem.c_str());
          return 125;
        }
        ex.request.read_only = ex_filesystem == "read-only";
      }
      char cwd[4096];
      if (::getcwd(cwd, sizeof cwd)) ex.request.working_dir = cwd;
      ex.argv = child_argv;
      try {
        // exec has reaped its child and removed its directory: leave without running the static
        // destructors and library teardown, which would only add to the start-up cost of every
        // wrapped command.
        int rc;
        if (*agent_cmd) {
          agent.ex = ex;
          agent.args = child_argv;
          rc = sluice::adapters::run_agent(agent);
        } else {
          rc = sluice::exec::run_exec(ex);
        }
        std::fflush(nullptr);
        ::_exit(rc);
      } catch (const sluice::exec::setup_error &e) {
        // Where the platform explains it (AppArmor, a sysctl, a container's seccomp filter or
        // /proc), the same line says so and how to fix it.
        std::string what = e.what(), why;
        if (e.step == "namespaces" || e.step == "mounts" || e.step == "loopback") {
          // In a new process: this one is not dumpable by now, and its probe child could not be.
          auto line = sluice::exec::diagnose_in_fresh_process(self_path());
          if (!line.empty()) {
            what = what.substr(0, what.find("; ")); // the error itself; the cause's fix replaces generic advice
            why = "; cause: " + line;
          }
        }
        std::fprintf(stderr, "sluice: sandbox set-up failed at %s: %s; nothing was run%s "
                             "(see `sluice doctor`)\n", e.step.c_str(), what.c_str(), why.c_str());
        return 125;
      } catch (const sluice::exec::refusal &e) {
        std::fprintf(stderr, "sluice: refused: %s\n", e.what());
        return 125;
      }
    }
    if (*adapter_cmd) {
      adapter.sluice_path = self_path();
      if (*ad_install) {
        sluice::adapters::adapter_install(adapter);
        std::printf("installed the sluice adapter for %s (%s scope); check it with `sluice adapter "
                    "status`\n", adapter.host.c_str(), adapter.scope.c_str());
        return 0;
      }
      if (*ad_remove) {
        sluice::adapters::adapter_remove(adapter);
        std::printf("removed the sluice adapter for %s (%s scope)\n", adapter.host.c_str(),
                    adapter.scope.c_str());
        return 0;
      }
      return sluice::adapters::report_status(sluice::adapters::adapter_status(adapter), adapter_json);
    }
    if (*doctor_cmd && platform_cause) {
      auto d = sluice::exec::diagnose(sluice::exec::read_platform_facts());
      if (!d.cause.empty()) std::printf("%s\n", d.line.c_str());
      return 0;
    }
    if (*doctor_cmd && apparmor_profile) {
      std::fputs(sluice::exec::apparmor_profile(self_path()).c_str(), stdout);
      return 0;
    }
    if (*doctor_cmd) {
      // Claude Code in proxy mode depends on settings sluice cannot enforce from here: each missing
      // guarantee is a warning (the runner's readiness is the checks' alone).
      std::vector<std::string> warnings;
      for (std::string scope : {"user", "project", "managed"}) {
        sluice::adapters::adapter_options ao;
        ao.host = "claude";
        ao.scope = scope;
        try {
          for (auto &st : sluice::adapters::adapter_status(ao)) {
            if (!st.installed || st.mode != "proxy") continue;
            for (auto &w : st.warnings) warnings.push_back("claude proxy mode (" + st.settings + "): " + w);
          }
        } catch (const std::exception &e) {
          warnings.push_back(std::string("claude settings (") + scope + " scope): " + e.what());
        }
      }
      return sluice::exec::report_doctor(sluice::exec::run_doctor(), doctor_json, warnings);
    }
    if (*serve_cmd) return sluice::gateway::run_serve(serve);
    if (*check_cmd) {
      return sluice::gateway::run_check(check_config, check_profile, check_allow, check_deny,
                                        check_method, check_url, check_client, check_skill);
    }
    if (*suggest_cmd) return sluice::gateway::run_policy_suggest(suggest_log, suggest_client, std::cout);
    if (*token_cmd) return sluice::gateway::run_policy_token(token_name, token_role, std::cout);
    if (*runs_cmd || *undo_cmd || *diff_cmd || *apply_cmd || *discard_cmd) {
      const char *home = std::getenv("HOME");
      std::string h = home ? home : "";
      if (h.empty() || h[0] != '/') throw std::runtime_error("HOME is unset; the journal keeps runs in HOME/.local/state/sluice/runs");
      if (*runs_cmd) return sluice::exec::journal::list_runs(h, runs_files, runs_json);
      if (*diff_cmd) return sluice::exec::journal::diff(h, run_id);
      if (*apply_cmd) return sluice::exec::journal::apply_staged(h, run_id, apply_paths, apply_guarded);
      if (*discard_cmd) return sluice::exec::journal::discard(h, run_id);
      if (undo_recover) return sluice::exec::journal::recover(h);
      return sluice::exec::journal::undo(h, run_id, undo_force);
    }
    if (*approvals_cmd || *approve_cmd || *deny_cmd) {
      appr.action = *approvals_cmd ? "list" : *deny_cmd ? "deny" : approve_run ? "run" : approve_always ? "always" : "once";
      return sluice::gateway::run_approvals(appr);
    }
    if (*ca_init) {
      sluice::certs::write_ca_files(ca_cert, ca_key, ca_days, ca_name, ca_force);
      std::printf("wrote %s and %s\n", ca_cert.c_str(), ca_key.c_str());
      return 0;
    }
    if (*ca_show) {
      std::fputs(sluice::certs::describe_ca(ca_cert).c_str(), stdout);
      return 0;
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "sluice: %s\n", e.what());
    return 125;
  }
  return 125;
}
