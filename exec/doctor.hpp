#pragma once
#include <string>
#include <vector>

namespace sluice::exec {

struct doctor_check {
  std::string name;
  bool ok = false;
  std::string detail;
};

// Preflight of everything `exec` needs: user namespaces, network namespaces, loopback bring-up,
// listener fd hand-off, mounts, CA generation, the private directory. Each check does the real thing.
std::vector<doctor_check> run_doctor();

// The failed checks as one line ("name: detail; ..."), leaving out those skipped because an earlier
// one failed; empty when the runner is ready.
std::string doctor_failures(const std::vector<doctor_check> &checks);

// Prints the checks as text or JSON ({"runnerReady": bool, "checks": [...], "warnings": [...]});
// returns 0 when ready. `warnings` (an agent host's settings that leave a guarantee missing) are
// printed, not counted against readiness.
int report_doctor(const std::vector<doctor_check> &checks, bool json,
                  const std::vector<std::string> &warnings = {});

} // namespace sluice::exec
