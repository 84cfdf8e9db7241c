#include "exec/git_metadata.hpp"

#include <catch2/catch.hpp>

using sluice::exec::harmless_git_config;

TEST_CASE("what git init and git clone write is harmless", "[exec][git]") {
  CHECK(harmless_git_config(""));
  CHECK(harmless_git_config("[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
                            "\tlogallrefupdates = true\n"));
  CHECK(harmless_git_config("[core]\n\trepositoryformatversion = 0\n[remote \"origin\"]\n"
                            "\turl = https://example.test/r.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n"
                            "[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n"
                            "[user]\n\tname = me\n\temail = me@example.test\n"));
  CHECK(harmless_git_config("# a comment\n; another\n[Core]\n\tBare = false ; trailing comment\n"));
  CHECK(harmless_git_config("[core] # comment after the header\n\tbare\n"));
}

TEST_CASE("keys that run programs, and what cannot be read, are harmful", "[exec][git]") {
  CHECK_FALSE(harmless_git_config("[core]\n\tfsmonitor = touch /tmp/x\n"));
  CHECK_FALSE(harmless_git_config("[core]\n\tFsMonitor = touch /tmp/x\n"));
  CHECK_FALSE(harmless_git_config("[core]\n\thooksPath = /tmp\n"));
  CHECK_FALSE(harmless_git_config("[core]\n\tsshCommand = evil\n"));
  CHECK_FALSE(harmless_git_config("[alias]\n\tst = !touch /tmp/x\n"));
  CHECK_FALSE(harmless_git_config("[include]\n\tpath = /tmp/other\n"));
  CHECK_FALSE(harmless_git_config("[includeIf \"gitdir:/\"]\n\tpath = /tmp/other\n"));
  CHECK_FALSE(harmless_git_config("[filter \"x\"]\n\tclean = evil\n"));
  CHECK_FALSE(harmless_git_config("[remote \"origin\"]\n\tuploadpack = evil\n"));
  CHECK_FALSE(harmless_git_config("[core.x]\n\tfsmonitor = evil\n"));
  CHECK_FALSE(harmless_git_config("[core] fsmonitor = evil\n"));            // a key on the header's line
  CHECK_FALSE(harmless_git_config("fsmonitor = evil\n"));                    // no section
  CHECK_FALSE(harmless_git_config("[core\n\tbare = false\n"));               // no closing bracket
  CHECK_FALSE(harmless_git_config("[core]\n\t\"bare\" = false\n"));          // not a key
  // Backslashes at the end of a line: a comment's does not continue, a value's does; either way the
  // next line could hide a key from a reader that guesses wrong.
  CHECK_FALSE(harmless_git_config("[core]\n# x \\\n\tfsmonitor = evil\n"));
  CHECK_FALSE(harmless_git_config("[core]\n\tbare = false # \\\n\tfsmonitor = evil\n"));
  CHECK_FALSE(harmless_git_config("[core]\n\tbare = \"fa\\\nlse\"\n"));
}
