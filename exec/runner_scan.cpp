// What leaves ([scan], docs/policy.md "What leaves"), the run's half: the canaries planted in the
// private home (and shown in place of the workspace's hidden files of the same names), and the caller's own secrets (its secret-looking variables the command was not
// given), both handed to the gateway's scanner. The values never reach the log or the summary.
#include "exec/mount_view.hpp"
#include "exec/runner_impl.hpp"
#include "exec/tool_cache.hpp"

#include <algorithm>
#include <cstring>
#include <unistd.h>

namespace sluice::exec::detail {

namespace {

// The directory for the compiled rules, unless the command could write there: a database put in
// their place could match nothing, or attack the loader. The workspace, the granted writable
// directories, the journal's layer and every read-write bind (tool caches, an agent host's state)
// are kept apart from it both ways; the private home the command sees is a tmpfs, not the
// caller's. "" when unsafe or unusable (no home, a directory not the caller's): then the run
// compiles its rules itself.
std::string rules_cache_dir(const exec_plan &plan) {
  std::string dir = sluice_cache_dir(plan.caller_home, "scan");
  if (dir.empty()) return {};
  std::vector<std::string> writable = plan.guard.roots; // the workspace and the granted directories
  for (const auto &b : plan.so.view.binds) writable.push_back(b.first);
  writable.push_back(plan.so.view.journal_upper); // the journal's layer takes the command's writes
  writable.push_back(plan.so.view.journal_work);
  for (const auto &w : writable) {
    if (!w.empty() && (is_under(dir, w) || is_under(w, dir))) return {};
  }
  return make_private_dirs(dir).empty() ? dir : std::string();
}

} // namespace

void plan_scan(exec_plan &plan, const std::vector<std::string> &grants) {
  const auto &sc = plan.policy->cfg().scan;
  if (!plan.network || !sc.enabled) return;
  auto &view = plan.so.view;
  if (sc.canaries && !view.home.empty()) {
    // Decoys where a command that hunts for credentials looks first: well-formed, unique to
    // this run; a file an agent host writes there itself wins.
    plan.canaries = scan::make_canaries();
    for (const auto &f : plan.canaries.files) {
      std::string path = view.home + "/" + f.path;
      bool taken = std::any_of(view.home_files.begin(), view.home_files.end(),
                               [&](const auto &hf) { return hf.first == path; });
      if (!taken) {
        view.home_files.emplace_back(path, f.contents);
        plan.canary_files.push_back("~/" + f.path);
        // The workspace's hidden entry of that name (".aws" for ".aws/credentials") shows it too.
        view.canaries.push_back(f.path.substr(0, f.path.find('/')));
      }
    }
  }
  plan.scan_cache_dir = rules_cache_dir(plan);
  if (sc.caller_secrets) {
    for (char **e = environ; *e; ++e) {
      const char *eq = std::strchr(*e, '=');
      if (!eq) continue;
      std::string name(*e, static_cast<std::size_t>(eq - *e));
      std::string_view value(eq + 1);
      if (value.empty() || !filters::secret_name(sc.own_secret_names, name)) continue;
      if (std::find(grants.begin(), grants.end(), name) != grants.end()) continue; // --allow-env: usable
      plan.own_secrets.push_back({name, std::string(value), {}});
    }
  }
}

} // namespace sluice::exec::detail
