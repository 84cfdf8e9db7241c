"""Where the sandbox cannot start, one line names the cause and the fix: Ubuntu's AppArmor
restriction of unprivileged user namespaces, the sysctls that switch them off, a container's seccomp
filter or AppArmor profile, a container's masked /proc. `sluice doctor` (text and JSON) and `sluice exec`'s refusal
(125, nothing run), as root and as an unprivileged user (65534). This machine has none of those
restrictions, so each is shown by the doctor's fault injection (SLUICE_FAULT), which replaces what
the probes read by what such a machine shows; the diagnosis and the reporting are the real ones.
The AppArmor profile `doctor --apparmor-profile` prints is checked with this machine's
apparmor_parser (Debian 12's 3.0, which predates the profile's userns rule: see the test)."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from harness import SLUICE

CAUSES = {
    "apparmor_userns": ("apparmor_restrict_unprivileged_userns = 1", "sluice doctor --apparmor-profile"),
    "userns_sysctl": ("kernel.unprivileged_userns_clone = 0", "sysctl -w kernel.unprivileged_userns_clone=1"),
    "container_seccomp": ("seccomp filter refuses unshare(CLONE_NEWUSER)",
                          "--security-opt seccomp=/usr/share/sluice/container/seccomp.json"),
    "container_apparmor": ("AppArmor profile (docker-default (enforce)) refuses mounts",
                           "--security-opt apparmor=unconfined"),
    "proc_masked": ("/proc has masked paths", "--security-opt unmask=ALL"),
}


class PlatformCauses(unittest.TestCase):
    user = None  # root; the subclass runs everything again as 65534

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sluice-platform-")
        os.chmod(self.tmp, 0o755)
        self.ws = os.path.join(self.tmp, "project")
        os.makedirs(self.ws)
        if self.user is not None:
            os.chown(self.ws, self.user, self.user)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_as(self, args, fault=None, **kw):
        env = {"PATH": "/usr/bin:/bin", "HOME": self.tmp, "LANG": "C.UTF-8"}
        if fault:
            env["SLUICE_FAULT"] = fault
        prefix = [] if self.user is None else ["setpriv", "--reuid=%d" % self.user, "--regid=%d" % self.user,
                                               "--clear-groups"]
        return subprocess.run(prefix + [SLUICE] + args, capture_output=True, text=True, env=env, timeout=60, **kw)

    def test_doctor_names_each_cause_and_its_fix(self):
        for fault, (cause, fix) in CAUSES.items():
            with self.subTest(fault=fault):
                p = self.run_as(["doctor", "--json"], fault)
                self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
                report = json.loads(p.stdout)
                self.assertFalse(report["runnerReady"])
                platform = [c for c in report["checks"] if c["name"] == "platform"][0]
                self.assertFalse(platform["ok"])
                self.assertIn(cause, platform["detail"])
                self.assertIn(fix, platform["detail"])
                text = self.run_as(["doctor"], fault).stdout
                self.assertIn("FAIL platform", text)
                self.assertIn("runner NOT ready", text)

    def test_exec_refuses_with_the_cause_in_one_line_and_runs_nothing(self):
        marker = os.path.join(self.ws, "ran")
        for fault, (cause, fix) in CAUSES.items():
            with self.subTest(fault=fault):
                p = self.run_as(["exec", "--", "/usr/bin/touch", marker], fault, cwd=self.ws)
                self.assertEqual(p.returncode, 125, p.stderr)
                lines = p.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, p.stderr)
                self.assertIn("nothing was run; cause: ", lines[0])
                self.assertIn(cause, lines[0])
                self.assertIn(fix, lines[0])
                self.assertFalse(os.path.exists(marker))

    def test_a_machine_without_restrictions_passes_the_platform_check(self):
        p = self.run_as(["doctor", "--json"])
        report = json.loads(p.stdout)
        platform = [c for c in report["checks"] if c["name"] == "platform"][0]
        self.assertTrue(platform["ok"], platform)
        self.assertIn("seccomp", platform["detail"])
        # A failure the platform does not explain keeps its own message, with no invented cause.
        p = self.run_as(["exec", "--", "/bin/true"], "mounts", cwd=self.ws)
        self.assertEqual(p.returncode, 125)
        self.assertNotIn("cause:", p.stderr)


class PlatformCausesAsNobody(PlatformCauses):
    user = 65534


class AppArmorProfile(unittest.TestCase):
    def test_profile_for_this_binary_and_its_syntax(self):
        p = subprocess.run([SLUICE, "doctor", "--apparmor-profile"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0)
        text = p.stdout
        binary = os.path.realpath(SLUICE)
        self.assertIn("profile sluice %s flags=(unconfined) {" % binary, text)
        # The two lines that need AppArmor 4 (Ubuntu 24.04's parser): the 4.0 ABI and the userns rule.
        self.assertIn("abi <abi/4.0>,\n", text)
        self.assertIn("\n  userns,\n", text)
        parser = shutil.which("apparmor_parser")
        if not parser:
            raise AssertionError("apparmor_parser is not installed (apt-get install apparmor; "
                                 "scripts/install-deps.sh does)")
        version = subprocess.run([parser, "--version"], capture_output=True, text=True).stdout
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "sluice")
            with open(path, "w") as f:
                f.write(text)
            as_is = subprocess.run([parser, "-Q", "-K", path], capture_output=True, text=True)
            if "version 3." in version:
                # Debian 12's parser knows neither line: it must refuse exactly those, and take the
                # rest of the profile, which is checked here with them replaced by 3.0's equivalents.
                self.assertNotEqual(as_is.returncode, 0)
                self.assertIn("abi/4.0", as_is.stderr)
                with open(path, "w") as f:
                    f.write(text.replace("abi <abi/4.0>,", "abi <abi/3.0>,").replace("\n  userns,\n", "\n"))
                rest = subprocess.run([parser, "-Q", "-K", path], capture_output=True, text=True)
                self.assertEqual(rest.returncode, 0, rest.stderr)
                with open(path, "w") as f:
                    f.write(text.replace("abi <abi/4.0>,", "abi <abi/3.0>,"))
                userns = subprocess.run([parser, "-Q", "-K", path], capture_output=True, text=True)
                self.assertIn("line 9", userns.stderr)  # the userns rule, and nothing else
            else:
                self.assertEqual(as_is.returncode, 0, as_is.stderr)


if __name__ == "__main__":
    unittest.main()
