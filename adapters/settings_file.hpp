#pragma once
#include <boost/json.hpp>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace sluice::adapters {

struct adapter_options;
class host_adapter;

// Editing a host's settings files, and the record install keeps of what it changed so that remove
// can put everything back (docs/adapters.md).

inline constexpr std::size_t max_settings_bytes = 4 * 1024 * 1024;

// The file's text, nullopt when it does not exist; throws naming the file (over 4 MiB included).
std::optional<std::string> read_file(const std::string &path);
// Writes by rename, keeping the old file's mode (mode_if_new for a new one).
void write_file(const std::string &path, const std::string &data, mode_t mode_if_new = 0644);
// Indented JSON with a final newline, keys in their order.
std::string to_text(const boost::json::value &v);
// An empty object for a missing or blank file; throws naming the file when it is not a JSON object.
boost::json::object parse_settings(const std::string &path, const std::optional<std::string> &text);

// Sets root[path...] = value, creating objects on the way, and records in `undo` what was there,
// so that undo_paths can put it back even after the user edited other parts of the file.
void set_path(boost::json::object &root, const std::vector<std::string> &path,
              boost::json::value value, boost::json::array &undo);
void undo_paths(boost::json::object &root, const boost::json::array &undo);

// One file install writes: its text before (nullopt: it did not exist) and after.
struct file_change {
  std::string path;
  std::optional<std::string> before;
  std::string after;
  std::optional<std::string> replaced_line =
      {};             // config.toml: the sandbox_mode line before ("" if none)
  bool owned = false; // sluice's own file: remove deletes it, edited or not
  std::optional<boost::json::array> undo = {}; // the settings keys set, with what they held
};

// Where install keeps its record for a settings file: outside the host's configuration
// ($XDG_STATE_HOME/sluice/adapters; /var/lib/sluice/adapters for /etc), so a repository never
// carries it.
std::string state_path(const std::string &settings);
// The directories that writing `path` creates, outermost last, for remove to take away again.
void note_missing_dirs(const std::string &path, std::vector<std::string> &created);
// Writes the record: each file before and after, and the directories install creates.
void save_state(const std::string &state, boost::json::object header,
                const std::vector<file_change> &changes, const std::vector<std::string> &created);
void apply(const std::vector<file_change> &changes);
void restore(const std::vector<file_change> &changes);
// Puts back every file the record names: the exact original when a file is as install left it,
// otherwise only sluice's additions are taken out (strip for JSON, strip_text for other formats).
void remove_with_state(const host_adapter &h, const adapter_options &o, const std::string &state);

std::string env_or(const char *name, const std::string &fallback); // $NAME when set and not empty
std::string home(); // $HOME, or a refusal that says to set it

} // namespace sluice::adapters
