#include "filters/ssh_command.hpp"

#include <catch2/catch.hpp>

using namespace sluice::filters;

namespace {
std::string_view parse(std::string_view command, git_ssh_command &out) { return parse_git_ssh_command(command, out); }
} // namespace

TEST_CASE("Git's exec requests are read as Git quotes them", "[filters][ssh]") {
  git_ssh_command c;
  REQUIRE(parse("git-upload-pack 'org/repo.git'", c).empty());
  CHECK(c.service == git_ssh_service::upload_pack);
  CHECK(c.program == "git-upload-pack");
  CHECK(c.path == "org/repo.git");
  CHECK(c.repository == "org/repo.git");

  REQUIRE(parse("git-receive-pack '/org/repo.git/'", c).empty());
  CHECK(c.service == git_ssh_service::receive_pack);
  CHECK(c.path == "/org/repo.git/");
  CHECK(c.repository == "org/repo.git");

  REQUIRE(parse("git-upload-archive '~/org/r.git'", c).empty());
  CHECK(c.service == git_ssh_service::upload_archive);
  CHECK(c.repository == "org/r.git");

  REQUIRE(parse("git upload-pack 'org/r'", c).empty());
  CHECK(c.program == "git-upload-pack");

  SECTION("an embedded quote and '!' as sq_quote writes them") {
    REQUIRE(parse(R"(git-upload-pack '/org/it'\''s'\!'.git')", c).empty());
    CHECK(c.path == "/org/it's!.git");
  }
  SECTION("the older unquoted form, plain bytes only") {
    REQUIRE(parse("git-upload-pack org/repo.git", c).empty());
    CHECK(c.repository == "org/repo.git");
    CHECK(parse("git-upload-pack org/repo.git;id", c) == "ssh_bad_repository");
    CHECK(parse("git-upload-pack $(id)", c) == "ssh_bad_repository");
  }
}

TEST_CASE("everything else an exec request may hold is refused", "[filters][ssh]") {
  git_ssh_command c;
  for (auto cmd : {"sh", "sh -c 'id'", "scp -t /tmp", "rsync --server .", "git-upload-packx 'a'", "git-upload-pack",
                   "internal-sftp", "git-upload-pack'a'", "", "git status"}) {
    CAPTURE(cmd);
    CHECK(parse(cmd, c) == "ssh_command_refused");
  }
  for (auto cmd : {"git-upload-pack 'a' 'b'", "git-upload-pack 'a'; id", "git-upload-pack 'a", "git-upload-pack ''",
                   "git-upload-pack '--upload-pack=id'", "git-upload-pack '../etc'", "git-upload-pack 'org/../x'",
                   "git-upload-pack 'org//x'", "git-upload-pack '~other/x'", "git-upload-pack 'a\nb'",
                   "git-upload-pack 'a'\\''b", "git-upload-pack 'a'`id`", "git-upload-pack '/'",
                   "git-receive-pack '/-'", "git-upload-pack '~/--upload-pack=x'"}) {
    CAPTURE(cmd);
    CHECK(parse(cmd, c) == "ssh_bad_repository");
  }
}

TEST_CASE("repository rules", "[filters][ssh]") {
  CHECK(ssh_repository_matches({}, "any/thing.git"));
  CHECK(ssh_repository_matches({"org/*"}, "org/repo.git"));
  CHECK_FALSE(ssh_repository_matches({"org/*"}, "other/repo.git"));
  CHECK_FALSE(ssh_repository_matches({"org/*"}, "organization/repo.git"));
  CHECK(ssh_repository_matches({"org/repo"}, "org/repo.git"));
  CHECK(ssh_repository_matches({"/org/repo.git"}, "org/repo"));
  CHECK_FALSE(ssh_repository_matches({"org/repo"}, "org/repo2.git"));
}

TEST_CASE("GIT_PROTOCOL values and ERR pkt-lines", "[filters][ssh]") {
  CHECK(is_git_protocol_value("version=2"));
  CHECK(is_git_protocol_value("version=1:version=2"));
  CHECK_FALSE(is_git_protocol_value("version=3"));
  CHECK_FALSE(is_git_protocol_value("version=2;id"));
  CHECK_FALSE(is_git_protocol_value(""));
  CHECK(git_error_pkt_line("no") == "000bERR no\n");
}
