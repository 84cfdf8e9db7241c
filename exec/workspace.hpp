#pragma once
#include <string>
#include <vector>

namespace sluice::exec {

// The part of the caller's filesystem a command works on: the Git worktree that contains the
// working directory, else the working directory itself. Paths are resolved (no symlinks).
struct workspace {
  std::string root;                  // shown read-write (or read-only) in the view
  std::string cwd;                   // where the command starts
  std::vector<std::string> git_meta; // a linked worktree's Git directories outside root: read-only
};

// Finds the workspace for `cwd`. Refuses (exit 125, with the fix) a working directory whose
// workspace would be the whole machine or a shared place: /, a system path, /tmp, the home
// directory itself.
workspace find_workspace(const std::string &cwd, const std::string &home);

// The files the command needs from wherever they are: its executable as found on `path` (the
// path given and the file it resolves to) and a script's interpreter (`#!/usr/bin/env node`
// and `env -S` too). Missing files are left out: exec reports them.
// A file outside the system paths also brings its package: the nearest directory above it (at
// most six levels, never the home directory or /) holding package.json or pyvenv.cfg; a command in
// ~/.local/bin brings ~/.local/lib.
std::vector<std::string> command_files(const std::string &argv0, const std::string &path,
                                       const std::string &cwd, const std::string &home = {});

// The credential-shaped names hidden in every workspace: `.env*`, `*.pem`, `*.key`, `id_rsa*`,
// `id_ed25519*`, `id_ecdsa*`, `id_dsa*`, `.netrc`, `.git-credentials`, `.npmrc`, `.pypirc`, `.pgpass`,
// `*.kdbx`, `*.p12`, `*.pfx`, the directories `.aws/`, `.ssh/`, `.gnupg/`, and `.docker/config.json`.
// A pattern is a glob on the name; "NAME/" matches directories only; "DIR/NAME" a name in DIR.
const std::vector<std::string> &default_credential_patterns();

// What a walk of the workspace found.
struct workspace_scan {
  std::vector<std::string> masks; // credential-shaped files and directories (host paths)
  std::size_t entries = 0;        // entries looked at
};

// Walks the workspace, leaving out Git's own directory, node_modules and directories marked as
// caches (CACHEDIR.TAG) or virtual environments (pyvenv.cfg): collects the entries matching
// `patterns`, and refuses (exit 125, naming the file) a regular file with a hard link outside the
// workspace, or a workspace of more than `max_entries` entries (the check could not be complete).
workspace_scan scan_workspace(const std::string &root, const std::vector<std::string> &patterns,
                              std::size_t max_entries);

// Names a sandboxed command may not create where they were absent at its start, at the workspace
// root and in its working directory, because tools outside the sandbox read them later: the agent
// hosts' project settings (`.claude/`, `.codex/`, `.opencode/`, `.pi/`, `opencode.json`,
// `opencode.jsonc`, `.mcp.json`: hooks and MCP servers run unsandboxed), the repository's
// `.sluice/`, and the exact credential names of default_credential_patterns() (`.env`, `.netrc`,
// `.git-credentials`, `.npmrc`, `.pypirc`, `.pgpass`, `.aws/`, `.ssh/`, `.gnupg/`,
// `.docker/config.json`). Where they exist at the start the view already shows them read-only or
// hides them.
const std::vector<std::string> &guarded_names();

// The guarded names absent at a command's start, per directory (the workspace root and the
// working directory). The directories are held open, so that the check at the end looks in the
// same directories whatever the command renamed meanwhile.
class absent_guard {
public:
  // `extra`: more names (the policy's credential_files entries without wildcards).
  absent_guard(const workspace &ws, const std::vector<std::string> &extra);
  ~absent_guard();
  absent_guard(const absent_guard &) = delete;
  absent_guard &operator=(const absent_guard &) = delete;

  struct moved {
    std::string path, to;    // host paths
    bool repository = false; // a .git whose config or hooks would run programs
  };
  // After the command: every guarded name that exists now is renamed, not followed through
  // symlinks and never over anything, to NAME.sluice-quarantine-ID beside it. So is a .git the
  // command created (git init) whose config holds anything but the keys git init, git clone and
  // ordinary use write (core.fsmonitor, core.hooksPath, filters, aliases, includes... would run a
  // program when Git runs there outside the sandbox), or whose hooks are more than Git's samples.
  // Returns what moved; a name that could not be moved is returned with an empty `to` (and stays).
  std::vector<moved> quarantine(const std::string &id);

private:
  struct dir {
    int fd;
    std::string path;
    std::vector<std::string> absent;
    bool git_absent; // no .git at the start: one the command makes is checked (see quarantine)
  };
  std::vector<dir> dirs_;
};

// True when a Git configuration file (its text) sets only keys that git init, git clone and
// ordinary use write, none of which runs a program: core.repositoryformatversion, core.filemode,
// core.bare, core.logallrefupdates, remote.*.url/fetch, branch.*.remote/merge, user.name/email and
// a few more. Read as Git does, as far as section and key names go; anything it does not
// understand counts as harmful, and so does a line ending in a backslash (whether that continues
// a value or ends a comment depends on quotes and escapes before it; git init never writes one).
bool harmless_git_config(const std::string &text);

// The configuration and hooks of a repository's submodules and linked worktrees inside its Git
// directory `git_dir` (modules/NAME/{config,hooks}, nested, and worktrees/NAME/config.worktree):
// Git outside the sandbox reads them (`git status` runs in each submodule), so they are read-only
// in the view like the repository's own. Existing paths only; at most 256.
std::vector<std::string> git_metadata_to_protect(const std::string &git_dir);

// `path` resolved with realpath(3); empty when it does not exist.
std::string resolved(const std::string &path);

} // namespace sluice::exec
