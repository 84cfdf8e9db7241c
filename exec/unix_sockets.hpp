#pragma once
// Unix sockets granted into the command's view one at a time (docs/policy.md, "Unix sockets"): by
// the trusted policy ([skills.NAME] unix_sockets) or the caller's own command line
// (--allow-unix-socket, --allow-root-equivalent-socket), never by a repository's .sluice/.
#include "filters/policy.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::exec {

// One socket the view shows, and who granted it.
struct socket_grant {
  std::string path;             // as granted, made absolute ("~/" expanded): the view shows it here
  std::string resolved;         // its real path (symlinks followed): bound, and shown here too
  bool root_equivalent = false; // a socket known to give root, or one its entry declares so
  std::string known_as;         // which known socket it is ("Docker's socket"), when judged so
  std::string origin;           // "--allow-unix-socket" or "[skills.NAME] unix_sockets in FILE"
  std::uint64_t dev = 0, ino = 0; // the file checked: init binds this very socket or fails
};

// Where an entry came from, for the messages: its origin and how this origin acknowledges a
// root-equivalent socket.
struct socket_origin {
  std::string text; // "--allow-unix-socket" or "[skills.NAME] unix_sockets in FILE"
  std::string acknowledge; // the fix that says "I know": a flag, or the entry's table form
};

// One entry judged: `reason` empty when granted, else a short code (unix_socket_missing,
// not_a_unix_socket, root_equivalent_socket) and `message` the line that names the path and the
// fix. `home` expands "~/"; `working_dir` makes a relative path (command line only) absolute.
struct socket_verdict {
  socket_grant grant;
  std::string reason, message;
};
socket_verdict judge_socket(const filters::unix_socket_rule &rule, const socket_origin &origin,
                            const std::string &working_dir, const std::string &home);

// The name of the root-giving socket `path` is ("Docker's socket"), judged by its real path
// (`resolved`), by either path's file name and by being the same file (`dev`, `ino`) as one of the
// known paths; empty when it is none of them.
std::string root_equivalent_name(const std::string &path, const std::string &resolved, std::uint64_t dev,
                                 std::uint64_t ino);

// The skill's entries, then the command line's, each judged; the first refusal is thrown (exec's
// `refusal`). A socket granted twice is shown once, root-equivalent if either entry says so.
std::vector<socket_grant> grant_sockets(const std::vector<filters::unix_socket_rule> &from_skill,
                                        const std::string &skill, const std::string &policy_source,
                                        const std::vector<filters::unix_socket_rule> &from_command_line,
                                        const std::string &working_dir);

// `sluice check unix:PATH`: whether exec would show PATH with the policy exec would load
// (`policy_file`, else the search) and `skill` (else its default), by which entry, root-equivalent
// or not. Prints one line as `sluice check` does; 0 granted, 1 not. Throws std::runtime_error for
// a policy that does not load or a skill it does not have.
int check_unix_socket(const std::string &policy_file, const std::string &skill, const std::string &path);

} // namespace sluice::exec
