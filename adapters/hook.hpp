#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::adapters {

// The first Claude Code whose hooks may answer "ask" with a rewritten command: it shows the rewrite
// to a person (or to --permission-prompt-tool) and runs it only once allowed; headless (`-p`) it
// refuses. Checked version by version: before 2.1.2 an "ask" drops the rewrite (the prompt shows
// and runs the original command); from 2.1.2 to 2.1.84 the rewrite runs, but a prompt only comes
// where Claude's own rules would ask. The hook learns the version from AI_AGENT (from 2.1.120), so
// in practice it asks from 2.1.120 and refuses below, or where AI_AGENT is missing.
inline constexpr const char *claude_ask_minimum = "2.1.85";

struct hook_options {
  std::string host = "claude"; // the agent host whose PreToolUse event this is (adapters/hosts/)
  std::string skill;       // --skill: the trusted skill every rewritten command runs under
  std::string policy_file; // --policy: the trusted policy file (else the usual search)
  std::string sluice_path; // absolute path of this binary, written into the rewrite
};

// What the hook prints and how it exits: 0 with an allow + updatedInput rewrite, 0 with an ask +
// updatedInput (the command needs a person: the host asks through its own prompt, or sluice's
// extension does), or 2 with a JSON deny on stdout and the reason on stderr (the host blocks the
// call).
struct hook_outcome {
  int exit_code = 2;
  std::string out, err;
};

// The deny the host blocks on: JSON on stdout, the reason on stderr, exit 2.
hook_outcome hook_deny(const std::string &reason);

// Answers one PreToolUse event (the host's JSON from stdin). Never throws: every failure, including
// an internal one, becomes a deny.
hook_outcome run_hook(const hook_options &options, std::string_view input);

// `sluice hook HOST`: reads the event from stdin (1 MiB, 10 s), answers within 25 s whatever happens,
// prints the outcome and returns the exit status.
int hook_main(const hook_options &options);

// POSIX shell single-quoting: the word comes back as exactly one argument.
std::string shell_quote(std::string_view word);
// The word as is when it holds only characters the shell takes literally, else shell_quote'd.
std::string shell_word(std::string_view word);

// "SLUICE SUBCOMMAND [--skill S] [--policy P]", each word quoted as needed: the start of every
// rewritten command (SUBCOMMAND "exec", also the prefix a host's own sandbox is told to exclude)
// and the hook command hosts run ("hook HOST").
std::string sluice_command(const std::string &sluice_path, const std::string &subcommand,
                           const std::string &skill, const std::string &policy_file);

// How every rewrite that needs a person's approval starts: "SLUICE exec --needs-approval ". A host
// whose prompt is driven by its own permission rules (OpenCode) gets a rule that asks for every
// command starting so; the option itself grants nothing (the run's summary records it).
std::string approval_prefix(const std::string &sluice_path);

// A command the agent wrote as `sluice exec OPTIONS -- REST`: the options (split as the shell would)
// and REST as raw shell text. Empty when the command does not start that way or quotes oddly.
struct sluice_prefix {
  std::vector<std::string> options;
  std::string rest;
};
std::optional<sluice_prefix> parse_sluice_prefix(std::string_view command);

} // namespace sluice::adapters
