#pragma once
#include "exec/profile_resolver.hpp"

#include <string>
#include <vector>

namespace sluice::exec {

// What `sluice agent` adds to one run: the agent host's own state in the private home, its settings
// read-only, its stored credentials hidden, and its model endpoint with the key the gateway adds
// (docs/adapters.md, the whole agent). Empty for `sluice exec`.
struct host_boundary {
  std::string host;                   // "claude": also named in the view's /.sluice/agent
  std::vector<std::string> state;     // directories of the caller's home: read-write at their paths
  std::vector<std::string> protect;   // settings and hooks in them: read-only; moved aside if created
  std::vector<std::string> hide;      // stored credentials in them
  std::vector<std::pair<std::string, std::string>> home_files; // written into the private home
  std::vector<std::string> keep_env;  // the host's own non-secret variables
  std::vector<std::string> set_env;   // NAME=VALUE, set over everything else
  std::vector<std::string> allow;     // the model endpoint's host
  std::vector<filters::route_rule> routes; // the POST paths of its API
  std::vector<filters::credential_config> credentials; // the API key, added by the gateway
  std::vector<std::string> host_args; // put before the caller's arguments to the host
};

struct exec_options {
  exec_request request;
  std::vector<std::string> argv; // everything after `--`
  std::string access_log;        // "" none, "-" stderr, else a file
  std::string access_log_format; // "json" or "ocsf"; empty: the trusted policy's [log] format
  std::string json_summary;      // file to write the summary to
  std::vector<int> pass_fds;     // descriptors above 2 the command keeps (--pass-fd)
  std::string metrics_textfile;  // node_exporter textfile directory (--metrics-textfile)
  host_boundary agent;           // `sluice agent`: the host's own files and model endpoint
  bool needs_approval = false;   // --needs-approval: the hook's mark on what a person approved
  bool journal = false;          // --journal: the workspace's changes recorded for `sluice undo`
  bool stage = false;            // --stage: the changes wait in a staged run for `sluice apply`
  std::string stage_run;         // --stage-run RUN: that staged run goes on
};

// `sluice exec`: resolves the policy, runs the doctor's checks by setting the sandbox up, starts the
// in-process gateway on the sandbox's listener and runs the command. Returns the exit status of
// docs/policy.md (child's code, 128+N, 125 refused/failed, 126 not executable, 127 not found).
int run_exec(const exec_options &options);

} // namespace sluice::exec
