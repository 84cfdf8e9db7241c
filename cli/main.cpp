// sluice: command-line wiring only. Each subcommand hands its options to the layer that does the work;
// start-up exceptions become one line on stderr and exit 125.
#include "certs/ca_files.hpp"
#include "gateway/serve.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>

int main(int argc, char **argv) {
  CLI::App app{"sluice: an egress gateway for sandboxed commands", "sluice"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("sluice ") + SLUICE_VERSION);

  sluice::gateway::serve_options serve;
  auto *serve_cmd = app.add_subcommand("serve", "run the long-lived gateway");
  serve_cmd->add_option("--config", serve.config_file, "TOML config file")->required();
  serve_cmd->add_option("--ca-out", serve.ca_out, "write the ephemeral CA certificate here");
  serve_cmd->add_option("--threads", serve.threads, "worker threads (default: one per core)");

  std::string check_config, check_profile, check_method, check_url;
  std::vector<std::string> check_allow, check_deny;
  auto *check_cmd = app.add_subcommand("check", "dry run: ALLOW or DENY for METHOD URL");
  check_cmd->add_option("--config,--policy", check_config, "TOML config or policy file");
  check_cmd->add_option("--sandbox-profile", check_profile, "offline|network-read|publish|allowlist");
  check_cmd->add_option("--allow-domain", check_allow, "allow PATTERN (repeatable)");
  check_cmd->add_option("--deny-domain", check_deny, "deny PATTERN (repeatable)");
  check_cmd->add_option("METHOD", check_method)->required();
  check_cmd->add_option("URL", check_url)->required();

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

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 125;
  }

  try {
    if (*serve_cmd) return sluice::gateway::run_serve(serve);
    if (*check_cmd) {
      return sluice::gateway::run_check(check_config, check_profile, check_allow, check_deny,
                                        check_method, check_url);
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
