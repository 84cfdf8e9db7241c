#include "exec/platform.hpp"

#include <catch2/catch.hpp>

#include <cerrno>
#include <fstream>
#include <sstream>

using namespace sluice::exec;

TEST_CASE("the platform's cause of a namespace failure, with its fix", "[exec][platform]") {
  SECTION("Ubuntu's AppArmor restriction: a namespace without capabilities") {
    platform_facts f;
    f.userns_mount_errno = EPERM;
    f.apparmor_restrict_userns = 1;
    f.apparmor_enabled = true;
    f.apparmor_label = "unconfined";
    auto d = diagnose(f);
    CHECK(d.cause == "apparmor_userns");
    CHECK_THAT(d.line, Catch::Contains("kernel.apparmor_restrict_unprivileged_userns = 1") &&
                           Catch::Contains("sluice doctor --apparmor-profile") &&
                           Catch::Contains("sysctl -w kernel.apparmor_restrict_unprivileged_userns=0") &&
                           Catch::Contains("runs as unconfined"));
    // The same mount failure without the restriction is something else.
    f.apparmor_restrict_userns = 0;
    CHECK(diagnose(f).cause.empty());
    f.apparmor_restrict_userns.reset();
    CHECK(diagnose(f).cause.empty());
  }
  SECTION("sysctls that switch user namespaces off") {
    platform_facts f;
    f.userns_errno = ENOSPC;
    f.max_user_namespaces = 0;
    CHECK(diagnose(f).cause == "max_user_namespaces");
    platform_facts g;
    g.userns_errno = EPERM;
    g.unprivileged_userns_clone = 0;
    CHECK(diagnose(g).cause == "userns_sysctl");
    CHECK_THAT(diagnose(g).line, Catch::Contains("kernel.unprivileged_userns_clone=1"));
    g.unprivileged_userns_clone = 1;
    CHECK(diagnose(g).cause.empty()); // EPERM with the sysctl on and no filter: not explained here
  }
  SECTION("a container's seccomp filter, and its masked /proc") {
    platform_facts f;
    f.userns_errno = EPERM;
    f.seccomp_mode = 2;
    f.container = "docker";
    CHECK(diagnose(f).cause == "container_seccomp");
    CHECK_THAT(diagnose(f).line, Catch::Contains("docker container's seccomp filter"));
    f.container.clear();
    CHECK_THAT(diagnose(f).line, Catch::Contains("a seccomp filter on this process"));
    f.userns_errno = ENOSYS; // a filter whose default answer is ENOSYS (podman's default errno)
    CHECK(diagnose(f).cause == "container_seccomp");
    f.seccomp_mode = 0;
    CHECK(diagnose(f).cause.empty());
    f.userns_errno = EPERM;
    CHECK(diagnose(f).cause.empty());
    platform_facts p;
    p.userns_proc_errno = EPERM;
    p.proc_masked = true;
    p.container = "podman";
    CHECK(diagnose(p).cause == "container_proc");
    CHECK_THAT(diagnose(p).line, Catch::Contains("unmask=ALL") && Catch::Contains("systempaths=unconfined"));
    p.proc_masked = false;
    CHECK(diagnose(p).cause.empty());
    // A filter that allows unshare but not mount (a namespace made, its mounts refused).
    platform_facts m;
    m.userns_mount_errno = EPERM;
    m.seccomp_mode = 2;
    m.container = "docker";
    CHECK(diagnose(m).cause == "container_seccomp");
    CHECK_THAT(diagnose(m).line, Catch::Contains("refuses mount") && Catch::Contains("seccomp.json"));
  }
  SECTION("a container's AppArmor profile that refuses mounts (Docker's docker-default)") {
    platform_facts f;
    f.userns_mount_errno = EACCES;
    f.seccomp_mode = 2;
    f.container = "docker";
    f.apparmor_enabled = true;
    f.apparmor_label = "docker-default (enforce)";
    CHECK(diagnose(f).cause == "container_apparmor");
    CHECK_THAT(diagnose(f).line, Catch::Contains("docker-default (enforce)") &&
                                     Catch::Contains("--security-opt apparmor=unconfined"));
    f.apparmor_label = "unconfined"; // not AppArmor, then: the seccomp filter is what is left
    CHECK(diagnose(f).cause == "container_seccomp");
    f.container.clear(); // outside a container a confined label is not this case
    f.apparmor_label = "docker-default (enforce)";
    CHECK(diagnose(f).cause != "container_apparmor");
  }
  SECTION("a machine where everything works has no cause, and says what it saw") {
    platform_facts f;
    CHECK(diagnose(f).cause.empty());
    f.apparmor_enabled = true;
    f.apparmor_restrict_userns = 1;
    f.apparmor_label = "sluice (unconfined)";
    CHECK(diagnose(f).cause.empty()); // the profile is loaded: the namespace holds its capabilities
    CHECK_THAT(describe(f), Catch::Contains("AppArmor enabled") && Catch::Contains("sluice (unconfined)"));
  }
}

TEST_CASE("the AppArmor profile: the packaged file is what doctor prints for /usr/bin/sluice", "[exec][platform]") {
  std::ifstream f(SLUICE_SOURCE_DIR "/deploy/apparmor/sluice");
  REQUIRE(f);
  std::stringstream s;
  s << f.rdbuf();
  CHECK(s.str() == apparmor_profile("/usr/bin/sluice"));
  auto p = apparmor_profile("/opt/my tools/sluice");
  CHECK_THAT(p, Catch::Contains("profile sluice \"/opt/my tools/sluice\" flags=(unconfined) {") &&
                    Catch::Contains("  userns,\n") && Catch::Contains("abi <abi/4.0>,"));
}
