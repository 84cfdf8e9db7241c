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
std::vector<std::string> command_files(const std::string &argv0, const std::string &path,
                                       const std::string &cwd);

// `path` resolved with realpath(3); empty when it does not exist.
std::string resolved(const std::string &path);

} // namespace sluice::exec
