// `sluice approvals` (alias `pending`), `sluice approve ID [--run | --always]` and `sluice deny ID`:
// a person's decisions on the requests held for approval ([approvals]), over the admin listener.
#include "cli/commands.hpp"
#include "gateway/serve.hpp"

#include <memory>

namespace sluice::cli {

void add_approvals(CLI::App &app, commands &out) {
  struct options {
    gateway::approvals_options appr;
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
    c->add_option("--admin", appr.admin, "the admin listener HOST:PORT (default: SLUICE_ADMIN)");
    c->add_option("--token-file", appr.token_file, "file holding the approvals token (default: SLUICE_APPROVALS_TOKEN)");
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
      return gateway::run_approvals(o->appr);
    };
  };
  out.push_back({approvals_cmd, decide("list")});
  out.push_back({approve_cmd, decide("approve")});
  out.push_back({deny_cmd, decide("deny")});
}

} // namespace sluice::cli
