#include "exec/workspace.hpp"

#include <catch2/catch.hpp>
#include <climits>
#include <cstdlib>
#include <string>

using namespace sluice::exec;

namespace {

struct scratch {
  std::string dir;
  scratch() {
    char t[] = "/tmp/sluice-writable-XXXXXX";
    char real[PATH_MAX];
    dir = ::realpath(::mkdtemp(t), real);
  }
  ~scratch() { (void)!std::system(("rm -rf '" + dir + "'").c_str()); }
  std::string mkdir(const std::string &rel) {
    (void)!std::system(("mkdir -p '" + dir + "/" + rel + "'").c_str());
    return dir + "/" + rel;
  }
};

// The refusal's text for granting `path`, or "" when it is granted.
std::string refused(const std::string &path, const workspace &ws, const std::string &home,
                    const std::vector<std::string> &policy_dirs = {}, const std::string &policy = {}) {
  try {
    check_writable({{path, "--allow-write"}}, ws, home, policy_dirs, policy);
    return {};
  } catch (const refusal &e) {
    return e.what();
  }
}

} // namespace

TEST_CASE("granted writable directories: what is refused and why", "[exec][workspace]") {
  scratch s;
  workspace ws{s.mkdir("proj"), s.dir + "/proj", {}};
  std::string home = s.mkdir("home");
  s.mkdir("home/.ssh");
  s.mkdir("home/.local/bin");
  s.mkdir("home/build-cache");
  s.mkdir("policy/sub");
  s.mkdir("other");

  CHECK(refused(s.dir + "/other", ws, home).empty());
  CHECK(refused(home + "/build-cache", ws, home).empty());
  CHECK(refused("/etc", ws, home).find("a system path") != std::string::npos);
  CHECK(refused("/usr/lib", ws, home).find("a system path") != std::string::npos);
  CHECK(refused("/var/lib", ws, home).find("a system path") != std::string::npos);
  CHECK(refused("/proc/self", ws, home).find("a system path") != std::string::npos);
  CHECK(refused("/", ws, home).find("a shared place") != std::string::npos);
  CHECK(refused("/tmp", ws, home).find("a shared place") != std::string::npos);
  CHECK(refused(home, ws, home).find("your home directory") != std::string::npos);
  CHECK(refused(s.dir, ws, home).find("your home directory") != std::string::npos); // holds it
  CHECK(refused(home + "/.ssh", ws, home).find("~/.ssh") != std::string::npos);
  CHECK(refused(home + "/.local/bin", ws, home).find("~/.local/bin") != std::string::npos);
  CHECK(refused(s.dir + "/missing", ws, home).find("not an existing directory") != std::string::npos);
  // A symlink is judged by where it leads.
  REQUIRE(::symlink("/etc", (s.dir + "/etc-link").c_str()) == 0);
  CHECK(refused(s.dir + "/etc-link", ws, home).find("a system path") != std::string::npos);
  // Policy directories, in or around; the policy file in use.
  CHECK(refused(s.dir + "/policy", ws, home, {s.dir + "/policy/sub"}).find("trusted policy") != std::string::npos);
  CHECK(refused(s.dir + "/policy/sub", ws, home, {s.dir + "/policy"}).find("trusted policy") != std::string::npos);
  CHECK(refused(s.dir + "/policy", ws, "", {}, s.dir + "/policy/p.toml").find("the policy file") != std::string::npos);
  // The workspace's surroundings; inside it, nothing to add.
  CHECK(refused(s.dir, ws, "").find("holds the workspace") != std::string::npos);
  auto inside = check_writable({{ws.root + "/.", "--allow-write"}}, ws, home, {}, {});
  CHECK(inside.empty());
  // Nested grants fold into the outer one; the origin names who granted it.
  s.mkdir("other/deeper");
  auto folded = check_writable({{s.dir + "/other/deeper", "a"}, {s.dir + "/other", "b"}}, ws, home, {}, {});
  REQUIRE(folded.size() == 1);
  CHECK(folded[0] == s.dir + "/other");
  try {
    check_writable({{"/etc", "[skills.x] writable in /p.toml"}}, ws, home, {}, {});
    FAIL("granted /etc");
  } catch (const refusal &e) {
    CHECK(std::string(e.what()).rfind("[skills.x] writable in /p.toml /etc: ", 0) == 0);
  }
}
