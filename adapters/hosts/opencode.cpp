// OpenCode: sluice's plugin (deploy/hosts/opencode/sluice.js), listed under "plugin" in
// opencode.json (user or project scope), and the ask rule that has OpenCode's own prompt ask about
// the rewrites that need a person's approval.
#include "adapters/hook.hpp"
#include "adapters/host_adapter.hpp"

#include <filesystem>
#include <iterator>
#include <stdexcept>

namespace sluice::adapters {

extern const std::string_view
    opencode_plugin_source; // deploy/hosts/opencode/sluice.js, compiled in

namespace {

namespace js = boost::json;
namespace fs = std::filesystem;

// How sluice's ask rule ends: approval_prefix(SLUICE) + "*".
constexpr std::string_view ask_rule_tail = " exec --needs-approval *";

bool is_ask_rule(std::string_view k) {
  return k.size() > ask_rule_tail.size() &&
         k.substr(k.size() - ask_rule_tail.size()) == ask_rule_tail;
}

// Where sluice's plugin goes, beside the config file it is listed in.
std::string opencode_plugin(const std::string &config_path, bool project) {
  fs::path dir = fs::path(config_path).parent_path();
  return (project ? dir / ".opencode" / "sluice" : dir / "sluice").string() + "/sluice.js";
}

bool is_our_plugin(const js::value &v) {
  if (!v.is_string())
    return false;
  std::string_view p = v.as_string();
  return p.rfind("file://", 0) == 0 && p.size() > 17 &&
         p.substr(p.size() - 17) == "/sluice/sluice.js";
}

// OpenCode asks a person about a bash command when the last permission rule matching it says "ask":
// sluice's rule (every rewrite that needs approval) goes last under permission.bash. A plain string
// for "permission" or for "bash" becomes the object form that means the same, with the rule added.
void ask_rule(const std::string &path, js::object &s, const std::string &rule, js::array &undo) {
  js::value *perm = s.if_contains("permission");
  if (!perm || perm->is_null()) {
    set_path(s, {"permission", "bash", rule}, js::string("ask"), undo);
    return;
  }
  if (perm->is_string()) {
    js::value all = *perm;
    set_path(s, {"permission"}, js::object{{"*", all}, {"bash", js::object{{rule, "ask"}}}}, undo);
    return;
  }
  if (!perm->is_object()) {
    throw std::runtime_error(path +
                             ": \"permission\" is neither a string nor an object; fix it first");
  }
  js::value *bash = perm->as_object().if_contains("bash");
  if (bash && bash->is_string()) {
    js::value all = *bash;
    set_path(s, {"permission", "bash"}, js::object{{"*", all}, {rule, "ask"}}, undo);
    return;
  }
  if (bash && !bash->is_null() && !bash->is_object()) {
    throw std::runtime_error(
        path + ": \"permission.bash\" is neither a string nor an object; fix it first");
  }
  set_path(s, {"permission", "bash", rule}, js::string("ask"), undo);
}

class opencode_adapter final : public host_adapter {
public:
  std::string_view name() const override { return "opencode"; }
  std::string_view minimum() const override { return "1.3.2"; }

  void check_scope(const adapter_options &o) const override {
    if (o.scope != "user" && o.scope != "project") {
      throw std::runtime_error("the opencode adapter installs at --scope user or project");
    }
  }

  std::string settings_path(const adapter_options &o) const override {
    if (o.scope == "user")
      return env_or("XDG_CONFIG_HOME", home() + "/.config") + "/opencode/opencode.json";
    return project_dir(o) + "/opencode.json";
  }

  std::string skill_path(const adapter_options &o) const override {
    return (o.scope == "user" ? env_or("XDG_CONFIG_HOME", home() + "/.config") + "/opencode/skills"
                              : project_dir(o) + "/.opencode/skills") +
           "/sluice/SKILL.md";
  }

  void install(const adapter_options &o, const std::string &path,
               const std::string &state) const override {
    if (o.mode != "hook")
      throw std::runtime_error("--mode " + o.mode + " is for claude only (hook or proxy)");
    // The plugin is sluice's own file (compiled in), with its settings beside it; OpenCode finds it
    // by its entry in opencode.json.
    std::string file = opencode_plugin(path, o.scope == "project");
    auto changes = extension_files(o, file, opencode_plugin_source,
                                   {{"ask_prefix", approval_prefix(o.sluice_path)}});
    std::vector<std::string> created;
    note_missing_dirs(file, created);
    add_skill(*this, o, changes, created);
    auto before = read_file(path);
    js::object s = parse_settings(path, before);
    strip(s, o);
    auto &plugins = s["plugin"];
    if (plugins.is_null())
      plugins = js::array{};
    if (!plugins.is_array())
      throw std::runtime_error(path + ": \"plugin\" is not an array; fix it first");
    plugins.as_array().push_back(js::string("file://" + file));
    js::array undo;
    ask_rule(path, s, approval_prefix(o.sluice_path) + "*", undo);
    changes.push_back({path, before, to_text(s)});
    changes.back().undo = std::move(undo);
    note_missing_dirs(path, created);
    save_state(state, {{"host", o.host}}, changes, created);
    apply(changes);
  }

  // Removes the plugin's entry and the ask rule.
  void strip(js::object &s, const adapter_options &) const override {
    if (auto *plugins = s.if_contains("plugin"); plugins && plugins->is_array()) {
      js::array kept;
      for (auto &e : plugins->as_array()) {
        if (!is_our_plugin(e))
          kept.push_back(e);
      }
      plugins->as_array() = std::move(kept);
      if (plugins->as_array().empty())
        s.erase("plugin");
    }
    // OpenCode's ask rule for the rewrites that need approval ("SLUICE exec --needs-approval *").
    if (auto *perm = s.if_contains("permission"); perm && perm->is_object()) {
      auto &po = perm->as_object();
      bool removed = false;
      if (auto *bash = po.if_contains("bash"); bash && bash->is_object()) {
        std::vector<std::string> ours;
        for (auto &[k, v] : bash->as_object()) {
          if (is_ask_rule(k))
            ours.emplace_back(k);
        }
        for (auto &k : ours)
          bash->as_object().erase(k);
        removed = !ours.empty();
        if (removed && bash->as_object().empty())
          po.erase("bash");
      }
      if (removed && po.empty())
        s.erase("permission");
    }
  }

  // Installed: the plugin and its entry are there; its hook command is what the plugin would run.
  std::string installed_hook(const adapter_options &o, adapter_state &a) const override {
    std::string cmd = extension_hook_command(o, opencode_plugin(a.settings, o.scope == "project"),
                                             opencode_plugin_source, a);
    try {
      js::object oc = parse_settings(a.settings, read_file(a.settings));
      bool listed = false;
      if (auto *plugins = oc.if_contains("plugin"); plugins && plugins->is_array()) {
        for (auto &e : plugins->as_array())
          listed = listed || is_our_plugin(e);
      }
      a.installed = a.installed && listed;
      // The ask rule must be the last bash rule, or OpenCode's prompt is not what decides.
      const js::value *perm = oc.if_contains("permission");
      const js::value *bash =
          perm && perm->is_object() ? perm->as_object().if_contains("bash") : nullptr;
      bool last_is_ours = bash && bash->is_object() && !bash->as_object().empty() && [&] {
        std::string_view k = std::prev(bash->as_object().end())->key();
        return is_ask_rule(k);
      }();
      if (a.installed && !last_is_ours) {
        a.warnings.push_back(
            a.settings + ": sluice's ask rule is not the last under permission.bash, so "
                         "commands that need a person's approval are refused; run `sluice adapter "
                         "install opencode` again");
      }
    } catch (const std::exception &e) {
      a.warnings.push_back(e.what());
      a.installed = false;
    }
    return cmd;
  }

  bool shell_tool(std::string_view tool) const override { return tool == "bash"; }

  // The adapter's ask rule has OpenCode's own prompt ask about the rewrite.
  ask_route route(std::string &) const override { return ask_route::ask; }
};

} // namespace

const host_adapter &opencode_host() {
  static const opencode_adapter h;
  return h;
}

} // namespace sluice::adapters
