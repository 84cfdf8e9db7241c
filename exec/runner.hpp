#pragma once
#include "exec/profile_resolver.hpp"

#include <string>
#include <vector>

namespace sluice::exec {

struct exec_options {
  exec_request request;
  std::vector<std::string> argv; // everything after `--`
  std::string access_log;        // "" none, "-" stderr, else a file
  std::string json_summary;      // file to write the summary to
  std::vector<int> pass_fds;     // descriptors above 2 the command keeps (--pass-fd)
  std::string metrics_textfile;  // node_exporter textfile directory (--metrics-textfile)
};

// `sluice exec`: resolves the policy, runs the doctor's checks by setting the sandbox up, starts the
// in-process gateway on the sandbox's listener and runs the command. Returns the exit status of
// docs/policy.md (child's code, 128+N, 125 refused/failed, 126 not executable, 127 not found).
int run_exec(const exec_options &options);

} // namespace sluice::exec
