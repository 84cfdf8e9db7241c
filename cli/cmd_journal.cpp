// `sluice runs`, `undo`, `diff`, `apply` and `discard`: the workspace journal's runs
// (sluice exec --journal or --stage). Without RUN, undo, diff, apply and discard take the newest run
// (exec/journal.cpp's find_run), as `sluice runs` lists it first.
#include "cli/commands.hpp"
#include "exec/journal.hpp"

#include <cstdlib>
#include <memory>
#include <stdexcept>

namespace sluice::cli {

namespace {

// The caller's home, under which the journal keeps its runs.
std::string home() {
  const char *home = std::getenv("HOME");
  std::string h = home ? home : "";
  if (h.empty() || h[0] != '/') throw std::runtime_error("HOME is unset; the journal keeps runs in HOME/.local/state/sluice/runs");
  return h;
}

} // namespace

void add_journal(CLI::App &app, commands &out) {
  struct options {
    bool runs_files = false, runs_json = false, undo_force = false, undo_recover = false, apply_guarded = false;
    std::string run_id;
    std::vector<std::string> apply_paths;
  };
  auto o = std::make_shared<options>();
  auto *runs_cmd = app.add_subcommand("runs", "list journaled runs (sluice exec --journal): when, what, what changed");
  runs_cmd->add_flag("--files", o->runs_files, "list the paths each run created (A), modified (M) or deleted (D)");
  runs_cmd->add_flag("--json", o->runs_json, "machine-readable output");
  auto *undo_cmd = app.add_subcommand("undo", "put the workspace back as it was before a journaled run");
  undo_cmd->add_option("RUN", o->run_id, "the run's id (default: the newest; sluice runs lists them)");
  undo_cmd->add_flag("--force", o->undo_force, "undo even where a path changed after the run (that later change is lost)");
  undo_cmd->add_flag("--recover", o->undo_recover, "finish applying or undoing runs a crash interrupted");
  auto *diff_cmd = app.add_subcommand("diff", "what a journaled run changed, or a staged run would change, as a unified diff");
  diff_cmd->add_option("RUN", o->run_id, "the run's id (default: the newest)");
  auto *apply_cmd = app.add_subcommand("apply", "apply a staged run's changes to the workspace (all, or those at PATHs)");
  apply_cmd->add_option("RUN", o->run_id, "the staged run's id (default: the newest; give it to name PATHs)");
  apply_cmd->add_option("PATH", o->apply_paths, "only these paths (and what is under them)");
  apply_cmd->add_flag("--include-guarded", o->apply_guarded,
                      "also shell, editor, Git and agent settings the run made (held back otherwise)");
  auto *discard_cmd = app.add_subcommand("discard", "drop a staged run's changes");
  discard_cmd->add_option("RUN", o->run_id, "the staged run's id (default: the newest)");

  out.push_back({runs_cmd, [o] { return exec::journal::list_runs(home(), o->runs_files, o->runs_json); }});
  out.push_back({undo_cmd, [o] {
    auto h = home();
    if (o->undo_recover) return exec::journal::recover(h);
    return exec::journal::undo(h, o->run_id, o->undo_force);
  }});
  out.push_back({diff_cmd, [o] { return exec::journal::diff(home(), o->run_id); }});
  out.push_back({apply_cmd, [o] {
    return exec::journal::apply_staged(home(), o->run_id, o->apply_paths, o->apply_guarded);
  }});
  out.push_back({discard_cmd, [o] { return exec::journal::discard(home(), o->run_id); }});
}

} // namespace sluice::cli
