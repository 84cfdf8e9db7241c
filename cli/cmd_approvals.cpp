// `sluice approvals` (alias `pending`), `sluice approve ID [--run | --always]` and `sluice deny ID`:
// a person's decisions on the requests held for approval ([approvals]), over the admin listener.
#include "cli/commands.hpp"
#include "filters/policy_loader.hpp"
#include "gateway/serve.hpp"

#include <cstdlib>
#include <fstream>
#include <memory>
#include <stdexcept>

namespace sluice::cli {

namespace {

// --config FILE: what --admin and --token-file leave out, from serve's config (its [listen] admin and
// [approvals] token_file). Options given win over the file; the file wins over SLUICE_ADMIN and
// SLUICE_APPROVALS_TOKEN.
void take_from_serve_config(const std::string &file, gateway::approvals_options &appr) {
  auto access = filters::load_admin_access(file);
  if (appr.admin.empty()) {
    if (access.admin.empty()) {
      throw std::runtime_error(file + " has no [listen] admin, where sluice serve lets a person decide: add admin = "
                               "\"127.0.0.1:9090\" under [listen] (and restart serve), or give --admin HOST:PORT");
    }
    appr.admin = access.admin;
  }
  if (appr.token_file.empty()) {
    if (access.token_file.empty() && !std::getenv("SLUICE_APPROVALS_TOKEN")) {
      throw std::runtime_error(file + " has no [approvals] token_file, so sluice serve made a token at start (its "
                               "stderr shows it): give --token-file FILE or SLUICE_APPROVALS_TOKEN, or add "
                               "token_file = \"/etc/sluice/approvals.token\" under [approvals] (and restart serve)");
    }
    if (!access.token_file.empty() && !std::ifstream(access.token_file)) {
      throw std::runtime_error("cannot read the approvals token from " + access.token_file + " ([approvals] token_file of " +
                               file + "): check its permissions (run as a user who may read it), or give --token-file FILE");
    }
    appr.token_file = access.token_file;
  }
}

} // namespace

void add_approvals(CLI::App &app, commands &out) {
  struct options {
    gateway::approvals_options appr;
    std::string config;
    bool run = false, always = false;
  };
  auto o = std::make_shared<options>();
  auto &appr = o->appr;
  auto *approvals_cmd = app.add_subcommand("approvals", "list the requests waiting for a person's decision ([approvals])");
  approvals_cmd->alias("pending");
  auto *approve_cmd = app.add_subcommand("approve", "let a waiting request through: once, with --run for the rest "
                                                    "of the run, with --always for good (written to the policy file)");
  auto *deny_cmd = app.add_subcommand("deny", "refuse a waiting request (403 approval_denied)");
  for (auto *c : {approvals_cmd, approve_cmd, deny_cmd}) {
    c->add_option("--admin", appr.admin, "the admin listener HOST:PORT (default: --config's [listen] admin, else SLUICE_ADMIN)");
    c->add_option("--token-file", appr.token_file, "file holding the approvals token (default: --config's [approvals] "
                                                   "token_file, else SLUICE_APPROVALS_TOKEN)");
    c->add_option("--config", o->config, "sluice serve's config file (TOML): its [listen] admin and [approvals] "
                                         "token_file, for what --admin and --token-file leave out");
  }
  for (auto *c : {approve_cmd, deny_cmd}) c->add_option("ID", appr.id, "the request's id (sluice approvals)")->required();
  auto *run_flag = approve_cmd->add_flag("--run", o->run, "allow the host for the rest of the run, not only this request");
  approve_cmd->add_flag("--always", o->always, "allow the host for good: shows the lines it adds to the trusted "
                                               "policy file and asks before writing them")
      ->excludes(run_flag);
  approve_cmd->add_flag("--yes", appr.yes, "with --always: write without asking");
  auto decide = [o](std::string action) {
    return [o, action] {
      o->appr.action = action == "approve" ? (o->run ? "run" : o->always ? "always" : "once") : action;
      if (!o->config.empty()) take_from_serve_config(o->config, o->appr);
      return gateway::run_approvals(o->appr);
    };
  };
  out.push_back({approvals_cmd, decide("list")});
  out.push_back({approve_cmd, decide("approve")});
  out.push_back({deny_cmd, decide("deny")});
}

} // namespace sluice::cli
