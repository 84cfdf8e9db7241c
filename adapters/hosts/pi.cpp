// Pi: sluice's extension (deploy/hosts/pi/index.ts) where Pi finds extensions (user or project
// scope); it asks `sluice hook pi` about every bash call and asks a person through Pi's own UI.
#include "adapters/host_adapter.hpp"

#include <stdexcept>

namespace sluice::adapters {

extern const std::string_view pi_extension; // deploy/hosts/pi/index.ts, compiled in

namespace {

class pi_adapter final : public host_adapter {
public:
  std::string_view name() const override { return "pi"; }
  std::string_view minimum() const override { return "0.51.0"; }

  void check_scope(const adapter_options &o) const override {
    if (o.scope != "user" && o.scope != "project") {
      throw std::runtime_error("the pi adapter installs at --scope user or project");
    }
  }

  std::string settings_path(const adapter_options &o) const override {
    return base(o) + "/extensions/sluice/index.ts";
  }

  std::string skill_path(const adapter_options &o) const override {
    return base(o) + "/skills/sluice/SKILL.md";
  }

  // The extension is sluice's own file (compiled in), with its settings beside it: Pi finds it by
  // its place.
  void install(const adapter_options &o, const std::string &path,
               const std::string &state) const override {
    if (o.mode != "hook")
      throw std::runtime_error("--mode " + o.mode + " is for claude only (hook or proxy)");
    auto changes = extension_files(o, path, pi_extension, {});
    std::vector<std::string> created;
    note_missing_dirs(path, created);
    add_skill(*this, o, changes, created);
    save_state(state, {{"host", o.host}}, changes, created);
    apply(changes);
  }

  void strip(boost::json::object &, const adapter_options &) const override {
  } // no JSON file of Pi's is edited

  std::string installed_hook(const adapter_options &o, adapter_state &a) const override {
    return extension_hook_command(o, a.settings, pi_extension, a);
  }

  bool shell_tool(std::string_view tool) const override { return tool == "bash"; }

  // sluice's extension asks through Pi's UI, or refuses without one.
  ask_route route(std::string &) const override { return ask_route::ask; }

private:
  static std::string base(const adapter_options &o) {
    return o.scope == "user" ? env_or("PI_CODING_AGENT_DIR", home() + "/.pi/agent")
                             : project_dir(o) + "/.pi";
  }
};

} // namespace

const host_adapter &pi_host() {
  static const pi_adapter h;
  return h;
}

} // namespace sluice::adapters
