// `sluice hook HOST` (an agent host's PreToolUse hook) and `sluice adapter install|remove|status`
// (the host's configuration that routes its shell through sluice exec).
#include "adapters/adapter.hpp"
#include "adapters/hook.hpp"
#include "cli/commands.hpp"

#include <cstdio>
#include <memory>

namespace sluice::cli {

namespace {

// Every way out of the hook is 0 (rewrite) or 2 (deny): hosts run the original command on any
// other status.
int hook_deny(const std::string &why) {
  auto d = adapters::hook_deny(why);
  std::fputs(d.out.c_str(), stdout);
  std::fputs(d.err.c_str(), stderr);
  return 2;
}

void add_hook(CLI::App &app, commands &out) {
  struct options {
    std::string host;
    adapters::hook_options hook;
  };
  auto o = std::make_shared<options>();
  auto *hook_cmd = app.add_subcommand("hook", "PreToolUse hook for claude|codex: host JSON on stdin "
                                              "-> rewrite through sluice exec, or deny (fails closed)");
  hook_cmd->add_option("host", o->host, "claude|codex|opencode|pi")->required();
  hook_cmd->add_option("--skill", o->hook.skill, "skill every rewritten command runs under");
  hook_cmd->add_option("--policy", o->hook.policy_file, "trusted policy file (TOML)");
  out.push_back({hook_cmd, [o] {
    try {
      o->hook.host = o->host;
      o->hook.sluice_path = self_path();
      return adapters::hook_main(o->hook);
    } catch (const std::exception &e) {
      return hook_deny(e.what());
    }
  }});
}

void add_adapter(CLI::App &app, commands &out) {
  struct options {
    adapters::adapter_options adapter;
    bool json = false;
  };
  auto o = std::make_shared<options>();
  auto &adapter = o->adapter;
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
  ad_status->add_flag("--json", o->json, "machine-readable output");
  out.push_back({ad_install, [o] {
    o->adapter.sluice_path = self_path();
    adapters::adapter_install(o->adapter);
    std::printf("installed the sluice adapter for %s (%s scope); check it with `sluice adapter "
                "status`\n", o->adapter.host.c_str(), o->adapter.scope.c_str());
    return 0;
  }});
  out.push_back({ad_remove, [o] {
    o->adapter.sluice_path = self_path();
    adapters::adapter_remove(o->adapter);
    std::printf("removed the sluice adapter for %s (%s scope)\n", o->adapter.host.c_str(),
                o->adapter.scope.c_str());
    return 0;
  }});
  out.push_back({ad_status, [o] {
    o->adapter.sluice_path = self_path();
    return adapters::report_status(adapters::adapter_status(o->adapter), o->json);
  }});
}

} // namespace

int hook_bad_command_line(const std::string &why) {
  return hook_deny("bad hook command line (" + why + "); reinstall with `sluice adapter install`");
}

void add_hosts(CLI::App &app, commands &out) {
  add_hook(app, out);
  add_adapter(app, out);
}

} // namespace sluice::cli
