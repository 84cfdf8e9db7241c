// `sluice doctor`: preflight checks for exec (and, for exec's own use, the platform's cause of a
// sandbox failure; for the operator, the AppArmor profile this binary needs).
#include "adapters/adapter.hpp"
#include "cli/commands.hpp"
#include "exec/doctor.hpp"
#include "exec/platform.hpp"

#include <cstdio>
#include <memory>

namespace sluice::cli {

namespace {

// Claude Code in proxy mode depends on settings sluice cannot enforce from here: each missing
// guarantee is a warning (the runner's readiness is the checks' alone).
std::vector<std::string> claude_proxy_warnings() {
  std::vector<std::string> warnings;
  for (std::string scope : {"user", "project", "managed"}) {
    adapters::adapter_options ao;
    ao.host = "claude";
    ao.scope = scope;
    try {
      for (auto &st : adapters::adapter_status(ao)) {
        if (!st.installed || st.mode != "proxy") continue;
        for (auto &w : st.warnings) warnings.push_back("claude proxy mode (" + st.settings + "): " + w);
      }
    } catch (const std::exception &e) {
      warnings.push_back(std::string("claude settings (") + scope + " scope): " + e.what());
    }
  }
  return warnings;
}

} // namespace

void add_doctor(CLI::App &app, commands &out) {
  struct options {
    bool json = false, apparmor_profile = false, platform_cause = false;
  };
  auto o = std::make_shared<options>();
  auto *doctor_cmd = app.add_subcommand("doctor", "preflight checks for exec");
  doctor_cmd->add_flag("--json", o->json, "machine-readable output");
  doctor_cmd->add_flag("--platform-cause", o->platform_cause, "print the platform's cause of a sandbox failure, if any")
      ->group(""); // exec's own use
  doctor_cmd->add_flag("--apparmor-profile", o->apparmor_profile,
                       "print the AppArmor profile that lets this binary use user namespaces where the "
                       "kernel restricts them (Ubuntu 23.10 and later), then exit");
  out.push_back({doctor_cmd, [o] {
    if (o->platform_cause) {
      auto d = exec::diagnose(exec::read_platform_facts());
      if (!d.cause.empty()) std::printf("%s\n", d.line.c_str());
      return 0;
    }
    if (o->apparmor_profile) {
      std::fputs(exec::apparmor_profile(self_path()).c_str(), stdout);
      return 0;
    }
    return exec::report_doctor(exec::run_doctor(), o->json, claude_proxy_warnings());
  }});
}

} // namespace sluice::cli
