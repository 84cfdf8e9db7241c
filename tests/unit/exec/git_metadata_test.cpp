#include "exec/git_metadata.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <climits>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

using namespace sluice::exec;

namespace {

// A scratch directory, removed at the end.
struct scratch {
  std::string dir;
  scratch() {
    char t[] = "/tmp/sluice-git-metadata-XXXXXX";
    dir = ::mkdtemp(t);
  }
  ~scratch() { (void)!std::system(("rm -rf '" + dir + "'").c_str()); }
  void write(const std::string &rel, const std::string &text) {
    std::string p = dir + "/" + rel;
    (void)!std::system(("mkdir -p \"$(dirname '" + p + "')\"").c_str());
    std::ofstream(p) << text;
  }
  void mkdir(const std::string &rel) { (void)!std::system(("mkdir -p '" + dir + "/" + rel + "'").c_str()); }
};

bool metadata_harmless(scratch &s, const std::string &parent, const std::string &name, bool hooks) {
  int fd = ::open((s.dir + "/" + parent).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  bool ok = harmless_git_metadata(fd, name, hooks);
  ::close(fd);
  return ok;
}

} // namespace

TEST_CASE("core.hooksPath is read as Git reads it", "[exec][git]") {
  scratch s;
  s.mkdir("repo/.git");
  CHECK(git_hooks_path(s.dir + "/repo/.git", s.dir + "/repo", "/home/u").empty());
  s.write("repo/.git/config", "[core]\n\tbare = false\n[Core]\n\tHooksPath = .githooks\n");
  CHECK(git_hooks_path(s.dir + "/repo/.git", s.dir + "/repo", "/home/u") == s.dir + "/repo/.githooks");
  s.write("repo/.git/config", "[core]\n\thooksPath = \"/abs/hooks\" # comment\n");
  CHECK(git_hooks_path(s.dir + "/repo/.git", s.dir + "/repo", "/home/u") == "/abs/hooks");
  s.write("repo/.git/config", "[core]\n\thooksPath = ~/hooks\n");
  CHECK(git_hooks_path(s.dir + "/repo/.git", s.dir + "/repo", "/home/u") == "/home/u/hooks");
  // The last one wins; config.worktree comes after config; another section's key is not it.
  s.write("repo/.git/config", "[core]\n\thooksPath = first\n[other]\n\thooksPath = no\n[core]\n\thooksPath = second\n");
  CHECK(git_hooks_path(s.dir + "/repo/.git", s.dir + "/repo", "") == s.dir + "/repo/second");
  s.write("repo/.git/config.worktree", "[core]\n\thookspath = third\n");
  CHECK(git_hooks_path(s.dir + "/repo/.git", s.dir + "/repo", "") == s.dir + "/repo/third");
}

TEST_CASE("a .git entry names its Git directory", "[exec][git]") {
  scratch s;
  s.mkdir("a/.git");
  s.mkdir("meta");
  s.write("b/.git", "gitdir: ../meta\n");
  s.write("c/.git", "gitdir: " + s.dir + "/meta\n");
  s.write("d/.git", "not a gitdir line\n");
  s.write("e/.git", "gitdir: ../missing\n");
  char real[PATH_MAX];
  std::string root = ::realpath(s.dir.c_str(), real);
  CHECK(git_dir_of(s.dir + "/a/.git") == root + "/a/.git");
  CHECK(git_dir_of(s.dir + "/b/.git") == root + "/meta");
  CHECK(git_dir_of(s.dir + "/c/.git") == root + "/meta");
  CHECK(git_dir_of(s.dir + "/d/.git").empty());
  CHECK(git_dir_of(s.dir + "/e/.git").empty());
  CHECK(git_dir_of(s.dir + "/none/.git").empty());
}

TEST_CASE("the metadata Git reads is listed, symlinks and submodules included", "[exec][git]") {
  scratch s;
  s.mkdir("g/hooks");
  s.write("g/config", "");
  s.write("g/modules/lib/sub/HEAD", "ref: refs/heads/main\n");
  s.write("g/modules/lib/sub/config", "");
  s.write("g/modules/lib/sub/commondir", "../..\n");
  s.write("g/worktrees/wt/config.worktree", "");
  auto got = git_metadata_to_protect(s.dir + "/g");
  auto has = [&](const std::string &rel) {
    return std::find(got.begin(), got.end(), s.dir + "/g/" + rel) != got.end();
  };
  CHECK(has("config"));
  CHECK(has("hooks"));
  CHECK_FALSE(has("commondir")); // not there
  CHECK(has("modules/lib/sub/config"));
  CHECK(has("modules/lib/sub/commondir"));
  CHECK(has("worktrees/wt/config.worktree"));
  REQUIRE(::symlink("elsewhere", (s.dir + "/g/commondir").c_str()) == 0);
  got = git_metadata_to_protect(s.dir + "/g");
  CHECK(has("commondir")); // a dangling symlink is listed: it is what Git would follow
}

TEST_CASE("new Git metadata is harmless only when it runs nothing", "[exec][git]") {
  scratch s;
  s.write("g/config", "[core]\n\tbare = false\n\tworktree = ../..\n");
  CHECK(metadata_harmless(s, "g", "config", false));
  s.write("g/config.worktree", "[core]\n\tfsmonitor = touch /tmp/x\n");
  CHECK_FALSE(metadata_harmless(s, "g", "config.worktree", false));
  s.write("g/commondir", "../..\n");
  CHECK_FALSE(metadata_harmless(s, "g", "commondir", false)); // another directory's config
  s.write("g/hooks/pre-commit.sample", "#!/bin/sh\n");
  CHECK(metadata_harmless(s, "g", "hooks", true));
  s.write("g/hooks/pre-commit", "#!/bin/sh\n");
  CHECK_FALSE(metadata_harmless(s, "g", "hooks", true));
  s.mkdir("g/empty-hooks");
  CHECK(metadata_harmless(s, "g", "empty-hooks", true));
  s.write("h/real", "[core]\n\tbare = false\n");
  REQUIRE(::symlink("real", (s.dir + "/h/config").c_str()) == 0);
  CHECK_FALSE(metadata_harmless(s, "h", "config", false)); // never followed
  CHECK_FALSE(metadata_harmless(s, "g", "missing", false));
}
