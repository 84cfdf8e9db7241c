#pragma once
// The subcommands of `sluice`, a file per group (cli/cmd_*.cpp). Each group adds its CLI11 options
// to the app and, for each subcommand, the work to run when that subcommand was given; main.cpp
// only assembles them, parses and runs the one given.
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace sluice::cli {

// The work of one subcommand: its exit status. An exception it lets through becomes one line on
// stderr ("sluice: WHAT") and exit 125.
struct command {
  CLI::App *app;
  std::function<int()> run;
};
using commands = std::vector<command>;

// This binary's path (/proc/self/exe): what the hook writes into commands, what doctor's profile
// names, what exec runs again to explain a failed set-up.
std::string self_path();

// `exec` and `agent`: everything after the first `--` is the child's argv (for `agent HOST`, the
// host's arguments), untouched; CLI11 sees only the rest (argc shrinks). Returns 0, or 125 after
// saying on stderr that `exec` needs `--`.
int split_child_argv(int &argc, char **argv, std::vector<std::string> &child_argv);

// cmd_serve.cpp: serve, check, policy suggest|token, ca init|show.
void add_serve(CLI::App &app, commands &out);
// cmd_exec.cpp: exec and agent; `child_argv` is what split_child_argv found after `--`.
void add_exec(CLI::App &app, commands &out, const std::vector<std::string> &child_argv);
// cmd_hosts.cpp: hook and adapter install|remove|status.
void add_hosts(CLI::App &app, commands &out);
// The hook's answer to a command line it cannot parse: a deny on stdout and stderr, exit 2 (a host
// runs the original command on any status but 0 and 2).
int hook_bad_command_line(const std::string &why);
// cmd_approvals.cpp: approvals (pending), approve, deny.
void add_approvals(CLI::App &app, commands &out);
// cmd_journal.cpp: runs, undo, diff, apply, discard.
void add_journal(CLI::App &app, commands &out);
// cmd_doctor.cpp: doctor.
void add_doctor(CLI::App &app, commands &out);
// cmd_audit.cpp: audit verify.
void add_audit(CLI::App &app, commands &out);

} // namespace sluice::cli
