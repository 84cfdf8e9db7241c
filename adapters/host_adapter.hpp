#pragma once
#include "adapters/adapter.hpp"
#include "adapters/settings_file.hpp"

#include <boost/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::adapters {

// How a command that needs a person's approval reaches one: the host's own prompt, or a refusal
// that says why and what the policy would need where the host has no prompt a hook can use.
enum class ask_route { ask, no_prompt };

// One agent host: everything sluice knows about it, behind one interface, each in its own file
// (adapters/hosts/NAME.cpp). `sluice adapter` and `sluice hook` find a host by its name; a fifth
// host is one more file and one more line in host_named().
class host_adapter {
public:
  virtual ~host_adapter() = default;
  virtual std::string_view name() const = 0;
  // The first version whose hook rewrite holds (older ones run the original command).
  virtual std::string_view minimum() const = 0;

  // --- sluice adapter install|remove|status --------------------------------------------------
  // Throws when the adapter is not offered at o.scope.
  virtual void check_scope(const adapter_options &o) const = 0;
  // The file the adapter writes at o's scope (what status names and the state record is kept for).
  virtual std::string settings_path(const adapter_options &o) const = 0;
  // Where the host discovers sluice's agent skill at that scope; "" where it has none.
  virtual std::string skill_path(const adapter_options &o) const = 0;
  // Whether install needs a machine that can sandbox and a skill the trusted policy knows.
  virtual bool needs_preflight(const adapter_options &) const { return true; }
  // Writes what the adapter changes and the state record (before the files, so that a failure
  // leaves what remove needs); throws naming the file and the fix, having written nothing then.
  virtual void install(const adapter_options &o, const std::string &settings,
                       const std::string &state) const = 0;
  // Takes what install added out of a JSON settings file edited since.
  virtual void strip(boost::json::object &settings, const adapter_options &o) const = 0;
  // The same for a file of another format (Codex's config.toml), given its state record entry.
  virtual std::string strip_text(std::string text, const boost::json::object & /*record*/) const {
    return text;
  }
  // Status: sets installed (and may add warnings), returns the hook command the host would run.
  virtual std::string installed_hook(const adapter_options &o, adapter_state &a) const = 0;
  // Status, after the hook was verified: what the host's own files or state say against it.
  virtual void check(const adapter_options &, adapter_state &, const std::string & /*hook*/) const {
  }

  // --- sluice hook ----------------------------------------------------------------------------
  // The host's shell tools (anything else reaching the hook is a configuration error).
  virtual bool shell_tool(std::string_view tool) const = 0;
  // How a person is asked; `why` is filled when the host cannot ask.
  virtual ask_route route(std::string &why) const = 0;
};

// The host called `name`, or nullptr.
const host_adapter *host_named(std::string_view name);
// Every host, in the order status lists them.
const std::vector<const host_adapter *> &all_hosts();
// host_named, or a refusal that lists the hosts there are.
const host_adapter &host_or_throw(std::string_view name);

// --- what the hosts' files share ----------------------------------------------------------------

// --dir (default: the working directory), absolute; it must exist.
std::string project_dir(const adapter_options &o);
// The command a host runs as its hook: `sluice hook HOST ...`, with every failure turned into exit
// 2 (hosts run the original command when a hook exits with anything else).
std::string hook_command(const adapter_options &o);
// The first executable `name` on PATH, or "".
std::string find_on_path(const std::string &name);
// Runs `command` with `input` on stdin through /bin/sh, as a host runs a hook: exit status and
// stdout. Bounded: 20 s, 1 MiB of output.
std::pair<int, std::string> run_shell(const std::string &command, const std::string &input);

// Settings with a `hooks.PreToolUse` list (Claude Code's settings.json, Codex's hooks.json).
boost::json::object hook_entry(const adapter_options &o, const char *matcher);
boost::json::array *pre_tool_use(boost::json::object &s, bool create);
bool is_our_hook(const boost::json::value &entry);
void strip_hooks(boost::json::object &s);
std::string
installed_hook_command(const boost::json::object &s); // "" when sluice's entry is absent

// Adds sluice's agent skill to what install writes (nothing where the host has none at the scope).
void add_skill(const host_adapter &h, const adapter_options &o, std::vector<file_change> &changes,
               std::vector<std::string> &created);

// Hosts whose adapter is sluice's own file with its settings beside it (Pi's extension, OpenCode's
// plugin): the changes that write both, and the hook command that file would run ("" when absent).
std::vector<file_change> extension_files(const adapter_options &o, const std::string &file,
                                         std::string_view source, boost::json::object settings);
std::string extension_hook_command(const adapter_options &o, const std::string &file,
                                   std::string_view source, adapter_state &a);

} // namespace sluice::adapters
