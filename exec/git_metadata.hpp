#pragma once
#include <string>
#include <vector>

namespace sluice::exec {

// True when a Git configuration file (its text) sets only keys that git init, git clone and
// ordinary use write, none of which runs a program: core.repositoryformatversion, core.filemode,
// core.bare, core.logallrefupdates, core.worktree, remote.*.url/fetch, branch.*.remote/merge,
// user.name/email and a few more. Read as Git does, as far as section and key names go; anything
// it does not understand counts as harmful, and so does a line ending in a backslash (whether that
// continues a value or ends a comment depends on quotes and escapes before it; git init never
// writes one).
bool harmless_git_config(const std::string &text);

// The files of a Git directory that make Git outside the sandbox run a program or read another
// directory's configuration: its config, config.worktree, commondir and hooks, the same of its
// submodules (modules/NAME, nested) and the config.worktree of its linked worktrees
// (worktrees/NAME). Existing paths only (symlinks among them too), at most 256.
std::vector<std::string> git_metadata_to_protect(const std::string &git_dir);

// The Git directory a `.git` entry names: the directory itself, the target of a symlink, or the
// `gitdir:` line of a file (a linked worktree, a submodule, --separate-git-dir), resolved. "" when
// it names nothing that exists.
std::string git_dir_of(const std::string &dot_git);

// The directory core.hooksPath names in `git_dir`'s config (and config.worktree), as Git finds it
// for a work tree at `work_tree` (a relative path is relative to it; `~/` to `home`); "" when it is
// unset or unreadable. Not resolved: it may not exist.
std::string git_hooks_path(const std::string &git_dir, const std::string &work_tree,
                           const std::string &home);

// Whether a piece of Git metadata the command created (a path git_metadata_to_protect would name,
// or a hooks directory) runs nothing: a config or config.worktree with harmless_git_config text, a
// hooks directory holding only Git's samples. A new commondir, anything unreadable or of another
// type is harmful. `fd` is the entry's parent directory, `name` the entry.
bool harmless_git_metadata(int fd, const std::string &name, bool hooks_dir);

// A .git directory the command created: harmless when its config holds only harmless keys, its
// hooks only Git's samples, and it has none of what git init does not make (commondir,
// config.worktree, modules, worktrees). `base` holds the `.git` entry; a .git file or symlink
// (naming a Git directory elsewhere) is never harmless.
bool harmless_new_repository(int base);

} // namespace sluice::exec
