#pragma once
#include "exec/profile_resolver.hpp"

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

// Where a shell would find the executable `name`: as given when it holds a slash (relative to
// cwd), else the first regular executable file of that name in the PATH-style list `path` (an
// empty or relative entry is relative to cwd). "" when there is none.
std::string find_executable(const std::string &name, const std::string &path, const std::string &cwd);

// The files the command needs from wherever they are: its executable as found on `path` (the
// path given and the file it resolves to) and a script's interpreter (`#!/usr/bin/env node`
// and `env -S` too). Missing files are left out: exec reports them.
// A file outside the system paths also brings its package: the nearest directory above it (at
// most six levels, never the home directory or /) holding package.json or pyvenv.cfg; a command in
// ~/.local/bin brings ~/.local/lib.
std::vector<std::string> command_files(const std::string &argv0, const std::string &path,
                                       const std::string &cwd, const std::string &home = {});

// The directories granted writable besides the workspace (--allow-write, [skills.NAME] writable),
// resolved, nested ones folded into the outer, ones inside the workspace dropped (already
// writable). Refused (exit 125, naming the path, who granted it and the fix): a path that is not a
// directory; /, a system path or one below it (/usr, /etc, /var, /proc, /boot, ...), /tmp itself;
// the home, anything holding it, and the home's places that hold credentials or programs that run
// at login (~/.ssh, ~/.gnupg, ~/.aws, ~/.config, ~/.local/bin, ...); a directory that holds or
// lies in a trusted policy directory (`policy_dirs`) or holds the policy file in use; one that
// holds the workspace.
std::vector<std::string> check_writable(const std::vector<granted_path> &granted, const workspace &ws,
                                        const std::string &home,
                                        const std::vector<std::string> &policy_dirs,
                                        const std::string &policy_file);

// `path` resolved with realpath(3); empty when it does not exist.
std::string resolved(const std::string &path);

} // namespace sluice::exec
