#pragma once
// Git over SSH: what an exec request names. A Git client runs `git-upload-pack 'org/repo.git'`
// (fetch, clone, ls-remote), `git-upload-archive '...'` (git archive --remote) or
// `git-receive-pack '...'` (push) on the server; nothing else an SSH session can ask for passes
// sluice's SSH gateway. Pure: no I/O.
#include <string>
#include <string_view>
#include <vector>

namespace sluice::filters {

enum class git_ssh_service { upload_pack, upload_archive, receive_pack };

struct git_ssh_command {
  git_ssh_service service = git_ssh_service::upload_pack;
  std::string program; // "git-upload-pack", ...
  std::string path;    // the repository as the client named it, unquoted ("org/repo.git", "/org/r")
  std::string repository; // normalized for rules: no leading '/' or "~/", no trailing '/' ("org/repo.git")
};

// Parses an exec request strictly, as Git quotes it (sq_quote: the argument in single quotes, an
// embedded quote as '\'' and '!' as '\!'; also the older unquoted form with no shell byte at all).
// Returns an empty view and fills `out` when it is one of the three Git programs (also as
// "git upload-pack") with one repository argument; else a stable reason:
//  "ssh_command_refused"   not one of Git's three programs (a shell command, scp, rsync...)
//  "ssh_bad_repository"    the argument is missing, badly quoted, holds more than one word, a
//                          control byte, a shell byte outside quotes, a ".." segment, or starts with '-'
std::string_view parse_git_ssh_command(std::string_view command, git_ssh_command &out);

// Whether `repository` (normalized, as above) matches one of `patterns`: exact ("org/repo.git";
// "org/repo" also matches "org/repo.git" and the reverse), or a prefix ending in '*' ("org/*").
// An empty pattern list matches every repository.
bool ssh_repository_matches(const std::vector<std::string> &patterns, std::string_view repository);

// The value of a GIT_PROTOCOL environment request that may be passed on: "version=N" (N 0-2), or
// a ':'-separated list of such.
bool is_git_protocol_value(std::string_view value);

// A pkt-line carrying "ERR <message>" (Git prints "fatal: remote error: <message>").
std::string git_error_pkt_line(std::string_view message);

std::string_view git_ssh_service_name(git_ssh_service s);

} // namespace sluice::filters
