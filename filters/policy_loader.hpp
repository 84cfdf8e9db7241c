#pragma once
#include "filters/policy.hpp"

#include <stdexcept>
#include <string>
#include <string_view>

namespace sluice::filters {

// A config that cannot be loaded. The message names the file, the line and the fix.
struct config_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Parses a TOML config. Every key is validated; unknown keys, bad patterns, malformed addresses and
// unreadable files are refused with "FILE:LINE: message".
config load_config_file(const std::string &path);
config load_config_string(std::string_view text, const std::string &source_name);

// Where `sluice approvals`, `approve` and `deny --config FILE` reach a `sluice serve`: its config's
// [listen] admin and [approvals] token_file (empty when the file has none), read by the same table
// loaders as load_config_file, with the same messages. The file's other tables are not read: they
// may name files (a CA key) that only serve's user can read.
struct admin_access {
  std::string admin;
  std::string token_file;
};
admin_access load_admin_access(const std::string &path);

// The built-in policy used when no file is found: one skill "default" whose default profile is offline
// and which may escalate to network-read, with no domains and no grants.
config builtin_config();

// "30s", "500ms", "5m", "2h" or a bare number of seconds.
std::chrono::milliseconds parse_duration(std::string_view text);

} // namespace sluice::filters
