#include "exec/unix_sockets.hpp"
#include "filters/policy_loader.hpp"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

using namespace sluice::exec;

namespace {

// A bound (not listening: judging needs the file only) Unix socket at `path`.
void make_socket(const std::string &path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  path.copy(a.sun_path, sizeof a.sun_path - 1);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0);
  ::close(fd);
}

struct scratch {
  std::string dir;
  scratch() {
    char t[] = "/tmp/sluice-sock-test-XXXXXX";
    dir = ::mkdtemp(t);
  }
  ~scratch() { std::filesystem::remove_all(dir); }
};

const socket_origin cli{"--allow-unix-socket", "pass --allow-root-equivalent-socket PATH instead"};

} // namespace

TEST_CASE("unix sockets: a socket is granted, by its path and its real path", "[exec][unix]") {
  scratch s;
  make_socket(s.dir + "/app.sock");
  std::filesystem::create_symlink(s.dir + "/app.sock", s.dir + "/link.sock");
  auto v = judge_socket({s.dir + "/./link.sock", false}, cli, "/", "");
  REQUIRE(v.reason.empty());
  CHECK(v.grant.path == s.dir + "/link.sock");
  CHECK(v.grant.resolved == std::filesystem::canonical(s.dir + "/app.sock").string());
  CHECK_FALSE(v.grant.root_equivalent);
  auto rel = judge_socket({"app.sock", false}, cli, s.dir, "");
  CHECK((rel.reason.empty() && rel.grant.path == s.dir + "/app.sock"));
}

TEST_CASE("unix sockets: a missing path, a file and a directory are refused with the path and the fix",
          "[exec][unix]") {
  scratch s;
  auto missing = judge_socket({s.dir + "/none.sock", false}, cli, "/", "");
  CHECK(missing.reason == "unix_socket_missing");
  CHECK(missing.message.find(s.dir + "/none.sock") != std::string::npos);
  CHECK(missing.message.find("start it first") != std::string::npos);
  auto dir = judge_socket({s.dir, false}, cli, "/", "");
  CHECK(dir.reason == "not_a_unix_socket");
  CHECK(dir.message.find("a directory, not a Unix socket") != std::string::npos);
  auto home = judge_socket({"~/x.sock", false}, cli, "/", "");
  CHECK(home.message.find("HOME is unset") != std::string::npos);
}

TEST_CASE("unix sockets: root-equivalent by known path, by file name, through a symlink", "[exec][unix]") {
  CHECK(root_equivalent_name("/var/run/docker.sock", "/run/docker.sock", 0, 0) == "Docker's socket");
  CHECK(root_equivalent_name("/run/systemd/private", "/run/systemd/private", 0, 0) == "systemd's private socket");
  CHECK(root_equivalent_name("/x/y", "/run/containerd/containerd.sock", 0, 0) == "containerd's socket");
  CHECK(root_equivalent_name("/run/user/1000/podman/podman.sock", "/run/user/1000/podman/podman.sock", 0, 0)
            .find("podman.sock") != std::string::npos);
  CHECK(root_equivalent_name("/run/user/1000/app.sock", "/run/user/1000/app.sock", 0, 0).empty());
  scratch s;
  make_socket(s.dir + "/docker.sock");
  std::filesystem::create_symlink(s.dir + "/docker.sock", s.dir + "/harmless.sock");
  auto refused = judge_socket({s.dir + "/harmless.sock", false}, cli, "/", "");
  CHECK(refused.reason == "root_equivalent_socket");
  CHECK(refused.message.find("--allow-root-equivalent-socket") != std::string::npos);
  auto known = judge_socket({s.dir + "/harmless.sock", true}, cli, "/", "");
  CHECK(known.reason.empty());
  CHECK(known.grant.root_equivalent);
  // Declared so by its entry: root-equivalent, whatever its name.
  make_socket(s.dir + "/plain.sock");
  CHECK(judge_socket({s.dir + "/plain.sock", true}, cli, "/", "").grant.root_equivalent);
}

TEST_CASE("unix sockets: a skill's unix_sockets", "[exec][unix][config]") {
  auto c = sluice::filters::load_config_string(
      "[skills.x]\nunix_sockets = [\"/run/a.sock\", { path = \"/var/run/docker.sock\", root_equivalent = true }, "
      "\"~/b.sock\"]\n",
      "test.toml");
  const auto &u = c.skills.at("x").unix_sockets;
  REQUIRE(u.size() == 3);
  CHECK((u[0].path == "/run/a.sock" && !u[0].root_equivalent));
  CHECK((u[1].path == "/var/run/docker.sock" && u[1].root_equivalent));
  CHECK(u[2].path == "~/b.sock");
  for (auto bad : {"unix_sockets = \"/run/a.sock\"\n", "unix_sockets = [\"a.sock\"]\n",
                   "unix_sockets = [{ path = \"/a\", root = true }]\n", "unix_sockets = [1]\n"}) {
    INFO(bad);
    CHECK_THROWS_AS(sluice::filters::load_config_string(std::string("[skills.x]\n") + bad, "test.toml"),
                    sluice::filters::config_error);
  }
  CHECK_THROWS(sluice::filters::load_config_string("[policy]\nunix_sockets = [\"/run/a.sock\"]\n", "test.toml"));
}
