#pragma once
// The workspace journal (docs/policy.md "Undo"): a journaled run's command writes into the upper
// layer of an overlay over the workspace (mount_view.cpp); when it has ended, apply() moves what it
// changed into the workspace and what that replaced into the run's before/ directory, recording
// each step, so that `sluice undo` can put the workspace back as it was. Every step is a rename (a
// copy where the run directory is on another file system) and is recorded before it is taken: a
// run killed in the middle is finished by recover(). One journaled run per workspace at a time.
#include <cstdint>
#include <string>
#include <vector>

namespace sluice::exec::journal {

// Where runs are kept: $XDG_STATE_HOME/sluice/runs, else HOME/.local/state/sluice/runs.
std::string runs_dir(const std::string &home);

struct counts {
  std::size_t created = 0, modified = 0, deleted = 0;
};

// A run's directory, prepared before the sandbox starts.
struct run {
  std::string id, dir, upper, work, workspace;
  int lock_fd = -1; // the workspace's lock, held until the run's changes are applied
};

struct limits {
  std::int64_t max_age_seconds = 14 * 24 * 3600; // runs older than this go first
  std::uint64_t max_bytes = 2ull << 30;            // what all runs' saved files may take
};

// Makes RUNS/ID (upper/, work/, meta.json) for `argv` in `workspace`, finishes a run of this
// workspace that a crash left half-applied, takes the workspace's lock, and removes the oldest
// runs beyond `lim`. Throws std::runtime_error saying why (another journaled run holds the
// workspace, a path the overlay cannot name, no home).
run prepare(const std::string &home, const std::string &id, const std::string &workspace,
            const std::vector<std::string> &argv, const limits &lim);

// A staged run (--stage): as prepare(), but its changes stay in its layer until `sluice apply`.
// With `continue_id`, the staged run of that id goes on (its earlier changes in view).
run prepare_stage(const std::string &home, const std::string &id, const std::string &continue_id,
                  const std::string &workspace, const std::vector<std::string> &argv, const limits &lim);

// After a staged run's command: its record says "staged", with what its layer holds; the lock goes.
counts stage_end(run &r, int exit_status);

// After the command (its mounts gone with it): moves its changes into the workspace. Throws
// std::runtime_error when a step fails; the record says how far it got (recover() finishes it).
counts apply(run &r, int exit_status);

// `sluice runs`, `sluice undo`, `sluice diff`: exit statuses (0, 1 refused or failed).
int list_runs(const std::string &home, bool files, bool json);
int undo(const std::string &home, const std::string &id, bool force);
int recover(const std::string &home);
int diff(const std::string &home, const std::string &id);
// `sluice apply RUN [PATH...]`: a staged run's changes (all, or those at and under PATHs) into the
// workspace, undoable as a journaled run's are. Shell, editor, Git and agent settings are held back
// (named) unless `include_guarded`. `sluice discard RUN`: a staged run's layer removed.
int apply_staged(const std::string &home, const std::string &id, const std::vector<std::string> &paths,
                 bool include_guarded);
int discard(const std::string &home, const std::string &id);

} // namespace sluice::exec::journal
