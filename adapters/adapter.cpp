// `sluice adapter install|remove|status`: what every host shares. Each host's own part is in
// adapters/hosts/NAME.cpp behind the host_adapter interface; the settings files and the state
// record are adapters/settings_file.cpp.
#include "adapters/adapter.hpp"
#include "adapters/hook.hpp"
#include "adapters/host_adapter.hpp"
#include "exec/doctor.hpp"
#include "exec/profile_resolver.hpp"

#include <boost/json.hpp>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace sluice::adapters {

namespace js = boost::json;
namespace fs = std::filesystem;

bool version_at_least(const std::string &version, const std::string &minimum) {
  auto parts = [](const std::string &v) {
    std::vector<long> out;
    std::size_t i = 0;
    while (i < v.size() && !std::isdigit(static_cast<unsigned char>(v[i]))) ++i;
    while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i]))) {
      long n = 0;
      while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i]))) n = n * 10 + (v[i++] - '0');
      out.push_back(n);
      if (i < v.size() && v[i] == '.') ++i;
      else break;
    }
    return out;
  };
  auto a = parts(version), b = parts(minimum);
  if (a.empty()) return false;
  for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    long x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
    if (x != y) return x > y;
  }
  return true;
}

namespace {

const host_adapter &host_for(const adapter_options &o) {
  const host_adapter &h = host_or_throw(o.host);
  h.check_scope(o);
  return h;
}

// Before anything is written: this machine can sandbox (else every call would be refused) and the
// skill exists in the trusted policy (else every call would be refused with that reason).
void preflight(const adapter_options &o) {
  if (std::string failed = exec::doctor_failures(exec::run_doctor()); !failed.empty()) {
    throw std::runtime_error("sluice cannot sandbox commands on this machine (" + failed +
                             "); with the adapter installed every shell call would be refused; "
                             "fix what `sluice doctor` reports first");
  }
  exec::exec_request req;
  req.skill = o.skill;
  req.policy_file = o.policy_file;
  req.working_dir = o.dir.empty() ? fs::current_path().string() : o.dir;
  try {
    exec::resolve_exec(req);
  } catch (const exec::refusal &e) {
    throw std::runtime_error(std::string("the trusted policy refuses the adapter's skill: ") + e.what());
  }
}

} // namespace

void adapter_install(const adapter_options &o) {
  const host_adapter &h = host_for(o);
  std::string path = h.settings_path(o);
  std::string state = state_path(path);
  if (h.needs_preflight(o)) preflight(o);
  if (read_file(state)) remove_with_state(h, o, state); // a reinstall starts from what was there before
  h.install(o, path, state);
}

void adapter_remove(const adapter_options &o) {
  const host_adapter &h = host_for(o);
  std::string path = h.settings_path(o);
  std::string state = state_path(path);
  if (read_file(state)) {
    remove_with_state(h, o, state);
    return;
  }
  // No record (installed by hand, or the record was lost): take out what sluice adds.
  adapter_state a;
  a.settings = path;
  h.installed_hook(o, a);
  if (!a.installed) throw std::runtime_error("no sluice adapter is installed in " + path);
  js::object s = parse_settings(path, read_file(path));
  h.strip(s, o);
  write_file(path, to_text(s));
}

namespace {

adapter_state status_of(const host_adapter &h, const adapter_options &o) {
  adapter_state a;
  a.host = o.host;
  a.settings = h.settings_path(o);
  a.minimum = std::string(h.minimum());
  std::string hook = h.installed_hook(o, a);
  a.host_binary = find_on_path(o.host);
  if (!a.host_binary.empty()) {
    auto [rc, text] = run_shell(shell_quote(a.host_binary) + " --version 2>&1", "");
    if (rc == 0) {
      // "2.1.332 (Claude Code)", "codex-cli 0.171.0", "0.73.1"; warnings may come first.
      static const std::regex version_word(R"(^v?[0-9]+\.[0-9]+(\.[0-9]+)?$)");
      std::istringstream words(text);
      for (std::string w; words >> w;) {
        if (std::regex_match(w, version_word)) {
          a.version = w[0] == 'v' ? w.substr(1) : w;
          break;
        }
      }
      a.at_least_minimum = !a.version.empty() && version_at_least(a.version, a.minimum);
    }
  }
  if (a.host_binary.empty()) a.warnings.push_back(o.host + " is not on PATH");
  if (!a.version.empty() && !a.at_least_minimum) {
    a.warnings.push_back(o.host + " " + a.version + " ignores a hook's rewrite (updatedInput) and would "
                         "run the original command; upgrade to " + a.minimum + " or later");
  }
  if (a.installed) {
    js::object sample{{"session_id", "sluice-status"},
                      {"cwd", fs::current_path().string()},
                      {"hook_event_name", "PreToolUse"},
                      {"tool_name", h.shell_tool("Bash") ? "Bash" : "bash"},
                      {"tool_input", js::object{{"command", "true"}, {"description", "sluice status"}}}};
    auto [rc, text] = run_shell(hook, js::serialize(sample));
    try {
      auto v = js::parse(text);
      auto &out = v.at("hookSpecificOutput").as_object();
      std::string rewritten(out.at("updatedInput").at("command").as_string());
      a.hook_verified = rc == 0 && out.at("permissionDecision") == "allow" &&
                        rewritten.find(" exec ") != std::string::npos;
    } catch (const std::exception &) {
      a.hook_verified = false;
    }
    if (!a.hook_verified) {
      a.warnings.push_back("the installed hook did not rewrite a sample call (exit " + std::to_string(rc) +
                           "); every shell call is refused until `sluice doctor` passes");
    }
  }
  h.check(o, a, hook);
  return a;
}

} // namespace

std::vector<adapter_state> adapter_status(const adapter_options &base) {
  std::vector<adapter_state> out;
  if (!base.host.empty()) host_or_throw(base.host);
  for (const host_adapter *h : all_hosts()) {
    if (!base.host.empty() && base.host != h->name()) continue;
    adapter_options o = base;
    o.host = std::string(h->name());
    try {
      h->check_scope(o);
    } catch (const std::exception &) {
      if (!base.host.empty()) throw; // asked for by name: say why not
      continue;                      // not offered at this scope (codex: user only)
    }
    out.push_back(status_of(*h, o));
  }
  return out;
}

int report_status(const std::vector<adapter_state> &states, bool json) {
  bool good = true;
  js::array arr;
  for (auto &a : states) {
    if (a.installed && !(a.hook_verified && a.at_least_minimum)) good = false;
    arr.push_back(js::object{{"host", a.host},
                             {"mode", a.mode},
                             {"settings", a.settings},
                             {"installed", a.installed},
                             {"hostBinary", a.host_binary},
                             {"version", a.version},
                             {"minimumVersion", a.minimum},
                             {"atLeastMinimum", a.at_least_minimum},
                             {"hookVerified", a.hook_verified},
                             {"warnings", js::value_from(a.warnings)}});
  }
  if (json) {
    std::printf("%s\n", js::serialize(js::object{{"adapters", std::move(arr)}}).c_str());
  } else {
    for (auto &a : states) {
      std::printf("%-8s %s  %s\n", a.host.c_str(), a.installed ? "installed" : "not installed",
                  a.settings.c_str());
      std::printf("         host %s %s (minimum %s%s)\n",
                  a.host_binary.empty() ? "not found" : a.host_binary.c_str(), a.version.c_str(),
                  a.minimum.c_str(), a.version.empty() ? "" : a.at_least_minimum ? ", ok" : ", TOO OLD");
      if (a.installed && a.mode == "proxy") {
        std::printf("         proxy mode: %s\n", a.hook_verified ? "sluice answers, CA bundle current" : "NOT WORKING");
      } else if (a.installed) {
        std::printf("         hook %s\n", a.hook_verified ? "verified" : "NOT VERIFIED");
      }
      for (auto &w : a.warnings) std::printf("         warning: %s\n", w.c_str());
    }
  }
  return good ? 0 : 1;
}

} // namespace sluice::adapters
