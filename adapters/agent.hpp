#pragma once
#include "exec/runner.hpp"

#include <string>
#include <vector>

namespace sluice::adapters {

// `sluice agent HOST [OPTIONS] -- HOST_ARGS...`: the agent host itself in one `sluice exec`
// boundary (docs/adapters.md, the whole agent).
struct agent_request {
  std::string host;               // claude
  std::string model_url;          // --model-url; else the host's own configuration
  std::vector<std::string> args;  // HOST_ARGS
  exec::exec_options ex;          // the exec options it shares (skill, profile, policy, logs, ...)
};

// What the boundary of `host` holds for this caller: its binary, state, settings, model endpoint
// and key. Throws exec::refusal naming what is missing and the fix.
exec::exec_options agent_exec_options(const agent_request &request);

// Runs it; returns the host's exit status (or 125 when sluice refused).
int run_agent(const agent_request &request);

} // namespace sluice::adapters
