// sluice: command-line wiring only. Each group of subcommands (cli/cmd_*.cpp) adds its options and
// hands them to the layer that does the work; start-up exceptions become one line on stderr and
// exit 125.
#include "cli/commands.hpp"

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <unistd.h>

namespace sluice::cli {

std::string self_path() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot find this binary's path (/proc/self/exe)");
  return std::string(buf, static_cast<std::size_t>(n));
}

} // namespace sluice::cli

int main(int argc, char **argv) {
  std::vector<std::string> child_argv;
  if (int rc = sluice::cli::split_child_argv(argc, argv, child_argv)) return rc;

  CLI::App app{"sluice: an egress gateway for sandboxed commands", "sluice"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("sluice ") + SLUICE_VERSION);

  sluice::cli::commands commands;
  sluice::cli::add_serve(app, commands);
  sluice::cli::add_exec(app, commands, child_argv);
  sluice::cli::add_hosts(app, commands);
  sluice::cli::add_approvals(app, commands);
  sluice::cli::add_journal(app, commands);
  sluice::cli::add_doctor(app, commands);
  sluice::cli::add_audit(app, commands);

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
