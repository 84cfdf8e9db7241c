// `sluice serve`, `check`, `policy suggest|token` and `ca init|show`: the long-lived gateway and
// the tools for its configuration.
#include "certs/ca_files.hpp"
#include "cli/commands.hpp"
#include "exec/unix_sockets.hpp"
#include "gateway/admin/policy_suggest.hpp"
#include "gateway/serve.hpp"

#include <cstdio>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <utility>

namespace sluice::cli {

namespace {

void add_check(CLI::App &app, commands &out) {
  auto o = std::make_shared<gateway::check_request>();
  auto *check_cmd = app.add_subcommand(
      "check", "dry run: ALLOW or DENY for METHOD URL (or a Git program and an ssh:// URL, tcp://HOST:PORT or unix:PATH)");
  check_cmd->add_option("--config,--policy", o->config_file, "TOML config or policy file");
  check_cmd->add_option("--sandbox-profile", o->profile, "offline|network-read|publish|allowlist");
  check_cmd->add_option("--allow-domain", o->allow, "allow PATTERN (repeatable)")
      ->allow_extra_args(false); // "[v6]" is a pattern, not a CLI11 list
  check_cmd->add_option("--deny-domain", o->deny, "deny PATTERN (repeatable)")
      ->allow_extra_args(false); // "[v6]" is a pattern, not a CLI11 list
  check_cmd->add_option("--client", o->client, "judge as this [clients.NAME] entry, by its role");
  check_cmd->add_option("--skill", o->skill,
                        "for ssh://, tcp:// URLs and unix:PATH: the skill whose entries judge (default: \"default\"; "
                        "for unix:, the policy's default_skill)");
  check_cmd->add_option("--header,-H", o->headers, "a field the request carries, \"Name: value\" (repeatable; scanned)")
      ->allow_extra_args(false);
  check_cmd->add_option("--body", o->body_file, "a file the request carries as its body (scanned, as [scan] does)");
  check_cmd->add_option("METHOD", o->method, "METHOD, a Git program, or tcp://HOST:PORT or unix:PATH alone")->required();
  check_cmd->add_option("URL", o->url);
  out.push_back({check_cmd, [o] {
    // unix:PATH: a Unix socket as `sluice exec` judges it (exec/unix_sockets.hpp), by the policy
    // exec would load.
    if (o->method.rfind("unix:", 0) == 0 && o->url.empty()) {
      return exec::check_unix_socket(o->config_file, o->skill, o->method.substr(5));
    }
    if (o->url.rfind("unix:", 0) == 0) return exec::check_unix_socket(o->config_file, o->skill, o->url.substr(5));
    // TCP has no method: `sluice check tcp://HOST:PORT`.
    if (o->url.empty() && o->method.rfind("tcp://", 0) == 0) std::swap(o->url, o->method);
    if (o->url.empty()) {
      throw std::runtime_error("check needs METHOD URL (GET https://example.com/), a Git program and an "
                               "ssh:// URL, tcp://HOST:PORT or unix:PATH");
    }
    return gateway::run_check(*o);
  }});
}

void add_policy(CLI::App &app, commands &out) {
  struct options {
    std::string suggest_log, suggest_client, token_name, token_role;
  };
  auto o = std::make_shared<options>();
  auto *policy_cmd = app.add_subcommand("policy", "work on a serve policy: suggest entries, make client tokens");
  policy_cmd->require_subcommand(1);
  auto *suggest_cmd = policy_cmd->add_subcommand(
      "suggest", "allow entries that would have admitted what an access log shows refused");
  suggest_cmd->add_option("--access-log", o->suggest_log, "the JSON access log ([log] access_log)")->required();
  suggest_cmd->add_option("--client", o->suggest_client, "only this client's requests");
  auto *token_cmd = policy_cmd->add_subcommand(
      "token", "a new client token and the [clients.NAME] section that holds its hash");
  token_cmd->add_option("NAME", o->token_name, "the client's name (its Basic user name)")->required();
  token_cmd->add_option("--role", o->token_role, "the [roles.NAME] it is judged by")->required();
  out.push_back({suggest_cmd, [o] { return gateway::run_policy_suggest(o->suggest_log, o->suggest_client, std::cout); }});
  out.push_back({token_cmd, [o] { return gateway::run_policy_token(o->token_name, o->token_role, std::cout); }});
}

void add_ca(CLI::App &app, commands &out) {
  struct options {
    std::string cert = "sluice-ca.pem", key = "sluice-ca.key", name = "sluice CA";
    int days = 365;
    bool force = false;
  };
  auto o = std::make_shared<options>();
  auto *ca_cmd = app.add_subcommand("ca", "persistent CA for `serve`");
  ca_cmd->require_subcommand(1);
  auto *ca_init = ca_cmd->add_subcommand("init", "create a CA certificate and key");
  ca_init->add_option("--cert", o->cert, "certificate file to write")->capture_default_str();
  ca_init->add_option("--key", o->key, "key file to write (0600)")->capture_default_str();
  ca_init->add_option("--days", o->days, "validity in days")->capture_default_str();
  ca_init->add_option("--name", o->name, "subject common name")->capture_default_str();
  ca_init->add_flag("--force", o->force, "replace existing files");
  auto *ca_show = ca_cmd->add_subcommand("show", "describe a CA certificate");
  ca_show->add_option("--cert", o->cert, "certificate file")->capture_default_str();
  out.push_back({ca_init, [o] {
    certs::write_ca_files(o->cert, o->key, o->days, o->name, o->force);
    std::printf("wrote %s and %s\n", o->cert.c_str(), o->key.c_str());
    return 0;
  }});
  out.push_back({ca_show, [o] {
    std::fputs(certs::describe_ca(o->cert).c_str(), stdout);
    return 0;
  }});
}

} // namespace

void add_serve(CLI::App &app, commands &out) {
  auto serve = std::make_shared<gateway::serve_options>();
  auto *serve_cmd = app.add_subcommand("serve", "run the long-lived gateway");
  serve_cmd->add_option("--config", serve->config_file, "TOML config file")->required();
  serve_cmd->add_option("--ca-out", serve->ca_out, "write the ephemeral CA certificate here");
  serve_cmd->add_option("--ca-bundle-out", serve->ca_bundle_out,
                        "write the system roots plus sluice's CA here (for clients' CA variables)");
  serve_cmd->add_option("--threads", serve->threads, "worker threads (default: one per core)");
  out.push_back({serve_cmd, [serve] { return gateway::run_serve(*serve); }});
  add_check(app, out);
  add_policy(app, out);
  add_ca(app, out);
}

} // namespace sluice::cli
