#pragma once
// `sluice exec`'s parts (runner.hpp), shared by the files that each hold one stage of a run:
//   runner.cpp           the run in order: plan, sandbox, set-up, the command, what follows it
//   runner_plan.cpp      step 1: the policy, the workspace, the view and the environment decided
//   runner_gateway.cpp   steps 3 and 4, the parent's half: the CA and the gateway on a thread
//   runner_report.cpp    after the command: the journal, the quarantine, denials, the summary
// Private to exec/: nothing outside includes it.
#include "exec/journal.hpp"
#include "exec/runner.hpp"
#include "exec/sandbox.hpp"
#include "exec/workspace.hpp"
#include "exec/workspace_guard.hpp"
#include "scan/canary.hpp"

#include <boost/json.hpp>

#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace sluice::gateway {
class gateway;
}
namespace sluice::metrics {
class metrics;
}

namespace sluice::exec::detail {

// What run_command learnt before it failed, for the textfile of a refused command.
struct exec_progress {
  std::string skill, profile = "unknown";
  bool written = false; // run_command wrote the textfile itself
};

// Everything decided before anything runs (start-up step 1): the policy, the workspace, the
// sandbox's options and the command's environment.
struct exec_plan {
  resolved_exec resolved;
  filters::profile mode = filters::profile::offline;
  bool network = false;
  std::string command_id;
  workspace ws;
  std::string caller_home;
  workspace_guard::options guard;
  sandbox_options so;
  bool truststore = false; // the JVM trust store goes into the view
  std::vector<std::string> dropped;
  std::shared_ptr<const filters::policy> policy;
  std::string agent;                        // `sluice agent`: the host, named in /.sluice/agent
  std::vector<std::string> absent_settings; // an agent host's settings that did not exist at the start
  bool userns_limit = false; // user.max_user_namespaces = 0 held inside (sandbox::userns_limit)
  journal::run journal;      // --journal / [sandbox] journal: the run's layer and the workspace's lock
  bool staged = false;       // --stage / --stage-run: the layer is kept for `sluice apply`
  // [scan] (runner_scan.cpp): the run's canaries and where they were planted, and the caller's
  // own secrets, for the gateway's scanner.
  scan::canary_set canaries;
  std::vector<std::string> canary_files;
  std::vector<scan::secret> own_secrets;
  // Where the gateway keeps the policy's compiled rules between runs ("" for nowhere): a private
  // directory of the caller's that nothing the command can write holds or lies in.
  std::string scan_cache_dir;
  // --access-log: the Ed25519 key made for this run that signs the log's checkpoints (PEM), and
  // its public half (base64 raw) and id, which the summary gives for `sluice audit verify`.
  std::string log_key_pem, log_public_key, log_key_id;
};

// runner_scan.cpp: plants the canaries (into the view's private home) and collects the caller's
// own secrets, unless [scan] says not to. `grants`: the variables the command is given.
void plan_scan(exec_plan &plan, const std::vector<std::string> &grants);

// runner_plan.cpp. Step 1: resolves the policy and the workspace and decides what the view shows.
// Throws refusal.
exec_plan plan_command(const exec_options &opt, exec_progress &progress);

// runner_gateway.cpp. Steps 3 and 4, the parent's half: the CA, then the gateway, built on a
// thread of their own. Only the CA is on the way to the command's start (its certificate goes into
// the view); the rest of the gateway (TLS contexts, workers) is built while the command already
// runs: its first connections wait in the listener's backlog. A waiting main thread also leaves its
// core to init (the scheduler tends to start a child on its parent's core). The thread's state
// lives on the heap: when the command ends before the gateway is up (`-- true`), sluice leaves
// without waiting.
class gateway_build {
public:
  using files_t = std::vector<std::pair<std::string, std::string>>;

  // Starts the thread (nothing for an offline command).
  gateway_build(const exec_plan &plan, pid_t init);
  ~gateway_build();
  gateway_build(const gateway_build &) = delete;
  gateway_build &operator=(const gateway_build &) = delete;

  bool running() const { return thread_.joinable(); }
  // The listener and capture's sockets, or -1 when the sandbox failed.
  void hand_sockets(int listener, sandbox::capture_sockets capture);
  // sluice's files for the view; a CA failure is thrown here.
  files_t files() { return files_.get(); }

  // After the command: the gateway that served it, or nullptr (offline, or the command ended
  // before it was up). Throws what stopped the gateway from starting.
  gateway::gateway *finish();

private:
  struct state;
  std::shared_ptr<state> state_;
  std::future<files_t> files_;
  std::thread thread_;
  std::string approvals_file_; // where `sluice approvals` finds this run's admin listener and token
};

// runner_report.cpp: after the command.
// Adds one command's metrics to the textfile collector's file. A failure is reported, never turned
// into the command's exit status.
void write_textfile(const exec_options &opt, metrics::metrics &m, std::string_view profile,
                    std::string_view result, double seconds);
// The journal's run, once the command and its mounts are gone: its changes applied to the
// workspace, or kept staged. Returns the summary's `journal` entry; a failure sets `status` to 125
// and `result` to refused.
boost::json::value finish_journal(exec_plan &plan, int &status, std::string_view &result);
// What the command (and an agent host's settings) left under a guarded name, moved aside and said
// on stderr. Returns the summary's `quarantined` entries.
boost::json::array quarantine_all(workspace_guard &guard, const exec_plan &plan);
// One line on stderr per distinct denial, so that an agent sees why and what would allow it, and
// the --json-summary file.
void report(const exec_options &opt, const exec_plan &plan, gateway::gateway *gw, int status,
            double seconds, int landlock, const workspace_scan &scan, const boost::json::array &quarantined,
            const boost::json::value &journaled);

} // namespace sluice::exec::detail
