// sluice: command-line wiring only. Each group of subcommands (cli/cmd_*.cpp) adds its options and
// hands them to the layer that does the work; start-up exceptions become one line on stderr and
// exit 125.
#include "cli/commands.hpp"

#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string_view>
#include <unistd.h>

namespace sluice::cli {

std::string self_path() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot find this binary's path (/proc/self/exe)");
  return std::string(buf, static_cast<std::size_t>(n));
}

namespace {

// The groups of subcommands by the top-level names each adds. Building every group's options costs
// about 0.4 ms (CLI11 makes some 150 options), paid by every `sluice exec` and every hook call
// before any work: when the first argument names a subcommand, only its group is built. Anything
// else (no subcommand, --help, --version, a name not listed here) builds them all, so a name
// missing from this table still works, only slower; test_cli checks that every subcommand
// `sluice --help` lists runs when named first.
struct group {
  std::initializer_list<std::string_view> names;
  void (*add)(CLI::App &, commands &, const std::vector<std::string> &child_argv);
};
const group groups[] = {
    {{"serve", "check", "policy", "ca"}, [](CLI::App &a, commands &c, const auto &) { add_serve(a, c); }},
    {{"exec", "agent"}, [](CLI::App &a, commands &c, const auto &child) { add_exec(a, c, child); }},
    {{"hook", "adapter"}, [](CLI::App &a, commands &c, const auto &) { add_hosts(a, c); }},
    {{"approvals", "pending", "approve", "deny"}, [](CLI::App &a, commands &c, const auto &) { add_approvals(a, c); }},
    {{"runs", "undo", "diff", "apply", "discard"}, [](CLI::App &a, commands &c, const auto &) { add_journal(a, c); }},
    {{"doctor"}, [](CLI::App &a, commands &c, const auto &) { add_doctor(a, c); }},
    {{"audit"}, [](CLI::App &a, commands &c, const auto &) { add_audit(a, c); }},
};

// The group that adds `first`, or none.
const group *group_of(std::string_view first) {
  for (const auto &g : groups) {
    for (auto name : g.names) {
      if (name == first) return &g;
    }
  }
  return nullptr;
}

} // namespace
} // namespace sluice::cli

int main(int argc, char **argv) {
  std::vector<std::string> child_argv;
  if (int rc = sluice::cli::split_child_argv(argc, argv, child_argv)) return rc;

  CLI::App app{"sluice: an egress gateway for sandboxed commands", "sluice"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("sluice ") + SLUICE_VERSION);

  sluice::cli::commands commands;
  if (const auto *g = argc > 1 ? sluice::cli::group_of(argv[1]) : nullptr) {
    g->add(app, commands, child_argv);
  } else {
    for (const auto &each : sluice::cli::groups) each.add(app, commands, child_argv);
  }

  bool is_hook = argc > 1 && std::strcmp(argv[1], "hook") == 0;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    if (is_hook && e.get_exit_code() != 0) return sluice::cli::hook_bad_command_line(e.what());
    int rc = app.exit(e);
    return rc == 0 ? 0 : 125;
  }

  try {
    for (const auto &c : commands) {
      if (*c.app) return c.run();
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "sluice: %s\n", e.what());
    return 125;
  }
  return 125;
}
