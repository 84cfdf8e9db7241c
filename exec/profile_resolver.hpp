#pragma once
#include "exec/unix_sockets.hpp"
#include "filters/policy.hpp"

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace sluice::exec {

// A refusal before anything runs: exit 125 with this one line (cause and fix).
struct refusal : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What the caller of `sluice exec` asked for.
struct exec_request {
  std::string skill;                      // empty: the policy's default_skill
  std::optional<filters::profile> profile; // empty: the skill's default profile
  std::vector<std::string> allow_domains;
  std::vector<std::string> allow_env;
  std::vector<std::string> keep_env;      // non-secret names to keep (--keep-env)
  std::vector<std::string> credentials;   // --credential NAME: injected by the gateway
  std::optional<bool> read_only;          // --filesystem read-only|workspace-write; empty: skill's
  bool confirm_side_effects = false;
  std::string policy_file;                // --policy; empty: search
  std::string working_dir;                // where a repository policy may narrow
  std::vector<std::string> allow_write;   // --allow-write PATH: more writable directories
  std::vector<std::string> caches;        // --cache NAME: tool caches kept between runs
  // --allow-unix-socket PATH, and --allow-root-equivalent-socket PATH (root_equivalent set)
  std::vector<filters::unix_socket_rule> unix_sockets;
};

// A directory the trusted side lets the command write besides the workspace, and who granted it
// (for the message when it is refused).
struct granted_path {
  std::string path;   // as given, made absolute (relative to the working directory, ~/ expanded)
  std::string origin; // "--allow-write" or "[skills.NAME] writable in FILE"
};

// The outcome: the gateway config for this command plus what the environment may keep.
struct resolved_exec {
  filters::config gateway;                // mode, allow list, deny list, ...
  std::string skill;
  std::string policy_source;
  std::string repo_policy;                // the working-directory file applied, if any
  std::vector<std::string> grants;
  std::vector<std::string> keep;          // non-secret variables kept (skill keep_env + --keep-env)
  std::vector<std::string> placeholders;  // "VAR=sluice-credential-NAME" for granted credentials
  bool read_only_workspace = false;
  bool require_landlock = false;
  bool nested_userns = false;             // [sandbox] or [skills.NAME] nested_userns (trusted only)
  bool journal = false;                   // [sandbox] or [skills.NAME] journal (trusted only)
  std::vector<std::string> credential_files; // the defaults plus the policy's
  std::size_t max_workspace_entries = 0;
  std::vector<std::string> guarded_names; // the policy's, beside guarded_names()
  std::vector<granted_path> writable;     // checked by the runner (check_writable)
  std::vector<std::string> caches;        // [sandbox] caches and --cache, not yet validated
  filters::skill_config skill_config;     // the skill as the trusted policy declares it
  std::vector<socket_grant> unix_sockets; // the skill's and the command line's, checked
};

// The policy file search: --policy, $XDG_CONFIG_HOME/sluice/policy.toml (or ~/.config/...),
// /etc/sluice/policy.toml, then the built-in default.
filters::config load_trusted_policy(const std::string &explicit_file);

// The directories that search looks in: $XDG_CONFIG_HOME/sluice (or ~/.config/sluice), /etc/sluice.
std::vector<std::string> trusted_policy_dirs();

// Applies docs/policy.md (profiles and skills): skill -> default profile and declared escalations; publish needs
// confirmation; grants must be declared by the skill and permitted by the profile; a repository
// policy (.sluice/policy.toml in the working directory) may only narrow. Throws `refusal`.
resolved_exec resolve_exec(const exec_request &req);

// Profile strength for "may only narrow": offline > network-read > publish > allowlist.
int strength(filters::profile p);

} // namespace sluice::exec
