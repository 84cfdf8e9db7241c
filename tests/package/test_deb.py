"""The packed installation: `cpack -G DEB` from the build directory, `apt-get install ./sluice_*.deb`
on this machine, then the installed /usr/bin/sluice is used from a directory outside the checkout:
the doctor, one exec, and the Claude Code conformance suite (copied out of the source tree) with the
adapter installed by the packaged binary, and the CI recipe's runner job (deploy/ci/github-actions.yml)
as a non-root user. The package is purged at the end."""
import glob
import json
import os
import shutil
import socket
import subprocess
import tempfile
import unittest

import ci_job

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("SLUICE_BUILD_DIR") or os.path.join(ROOT, "build", "default")


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, timeout=900, **kw)


class DebianPackage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("installing a package needs root")
        if os.path.exists("/usr/bin/sluice") and run(["dpkg", "-S", "/usr/bin/sluice"]).returncode != 0:
            raise AssertionError("/usr/bin/sluice exists and belongs to no package; move it away first")
        for old in glob.glob(os.path.join(BUILD, "sluice_*.deb")):
            os.unlink(old)
        p = run(["cpack", "-G", "DEB"], cwd=BUILD)
        assert p.returncode == 0, p.stdout.decode()[-3000:] + p.stderr.decode()[-3000:]
        debs = glob.glob(os.path.join(BUILD, "sluice_*.deb"))
        assert len(debs) == 1, debs
        cls.deb = debs[0]
        cls.outside = tempfile.mkdtemp(prefix="sluice-package-")
        os.chmod(cls.outside, 0o755)
        shutil.copy(cls.deb, cls.outside)
        p = run(["apt-get", "install", "-y", "--no-install-recommends", "./" + os.path.basename(cls.deb)],
                cwd=cls.outside, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        assert p.returncode == 0, p.stdout.decode()[-3000:] + p.stderr.decode()[-3000:]

    @classmethod
    def tearDownClass(cls):
        run(["dpkg", "--purge", "sluice"])
        shutil.rmtree(cls.outside, ignore_errors=True)

    def test_files_are_where_the_package_says(self):
        listed = run(["dpkg", "-L", "sluice"]).stdout.decode().split()
        for path in ("/usr/bin/sluice", "/etc/sluice/sluice.toml", "/etc/sluice/policy.toml.example",
                     "/lib/systemd/system/sluice.service", "/usr/share/sluice/hosts/pi/index.ts",
                     "/usr/share/sluice/hosts/opencode/sluice.js", "/usr/share/sluice/grafana/sluice.json",
                     "/usr/share/sluice/prometheus/alerts.yml", "/usr/share/doc/sluice/adapters.md",
                     "/etc/apparmor.d/sluice", "/usr/share/sluice/container/seccomp.json",
                     "/usr/share/sluice/container/seccomp-profile.py"):
            self.assertIn(path, listed)
            self.assertTrue(os.path.exists(path), path)
        conffiles = run(["dpkg-query", "-W", "-f=${Conffiles}", "sluice"]).stdout.decode()
        self.assertIn("/etc/sluice/sluice.toml", conffiles)
        self.assertIn("/etc/apparmor.d/sluice", conffiles)
        # The packaged AppArmor profile is the one the packaged binary prints for itself.
        with open("/etc/apparmor.d/sluice") as f:
            self.assertEqual(f.read(), run(["/usr/bin/sluice", "doctor", "--apparmor-profile"]).stdout.decode())
        # The seccomp profile for containers (the one doctor's container_seccomp fix names).
        with open("/usr/share/sluice/container/seccomp.json") as f, \
                open(os.path.join(ROOT, "deploy/container/seccomp.json")) as g:
            self.assertEqual(json.load(f), json.load(g))
        with open("/lib/systemd/system/sluice.service") as f:
            self.assertIn("ExecStart=/usr/bin/sluice serve", f.read())

    def test_doctor_and_exec_from_outside_the_checkout(self):
        p = run(["/usr/bin/sluice", "doctor", "--json"], cwd=self.outside)
        self.assertEqual(p.returncode, 0, p.stdout)
        self.assertTrue(json.loads(p.stdout)["runnerReady"])
        work = tempfile.mkdtemp(prefix="work-", dir=self.outside)
        home = tempfile.mkdtemp(prefix="home-", dir=self.outside)
        p = run(["/usr/bin/sluice", "exec", "--", "sh", "-c", "readlink /proc/self/ns/net; exit 3"], cwd=work,
                env={"PATH": "/usr/bin:/bin", "HOME": home})
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertNotEqual(p.stdout.decode().strip(), os.readlink("/proc/self/ns/net"))
        # The installed serve config is valid as shipped.
        p = run(["/usr/bin/sluice", "check", "--config", "/etc/sluice/sluice.toml", "GET", "https://api.github.com/"])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn(b"ALLOW", p.stdout)

    def test_the_ci_recipe_runs_the_agent_on_a_runner_as_its_user(self):
        """deploy/ci/github-actions.yml's `runner` job, its steps as a hosted runner runs them, as a
        non-root user (65534): the package installed with sudo, doctor, the agent's command under
        sluice exec with the checkout's policy (network-read: a GET to the allowed test origin
        passes, a POST is refused; the checkout writable, the home hidden; its exit status kept).
        Then the AppArmor case of Ubuntu 24.04 without the profile (fault injection): the job stops
        at doctor with the cause and the fix, and the agent's command never runs."""
        checkout = tempfile.mkdtemp(prefix="checkout-", dir=self.outside)
        home = tempfile.mkdtemp(prefix="runner-home-", dir=self.outside)
        os.makedirs(os.path.join(checkout, ".github"))
        os.makedirs(os.path.join(checkout, "ci"))
        os.makedirs(os.path.join(home, ".ssh"))
        with open(os.path.join(home, ".ssh", "id_ed25519"), "w") as f:
            f.write("RUNNER-SECRET\n")
        shutil.copy(self.deb, os.path.join(checkout, "sluice_amd64.deb"))
        with socket.socket() as probe:  # a free port on loopback for the test origin
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        origin = subprocess.Popen(["/usr/bin/python3", os.path.join(ROOT, "tests/integration/origin.py"), str(port)],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.addCleanup(origin.kill)
        self.assertEqual(origin.stdout.readline().strip(), "ready")
        with open(os.path.join(checkout, ".github", "sluice.toml"), "w") as f:
            f.write('[skills.default]\ndefault_profile = "network-read"\nallow_domains = ["origin.test:%d"]\n'
                    '[upstream]\nallow_addresses = ["127.0.0.1/32"]\n[upstream.resolve]\n"origin.test" = "127.0.0.1"\n'
                    % port)
        task = os.path.join(checkout, "ci", "agent-task.sh")
        with open(task, "w") as f:
            f.write("#!/bin/sh\n"
                    "curl -s -o /dev/null -w 'get=%%{http_code}\\n' http://origin.test:%d/bytes/5\n"
                    "curl -s -o /dev/null -w 'post=%%{http_code}\\n' -X POST -d x http://origin.test:%d/echo\n"
                    "echo written > agent-output.txt\n"
                    "test -e \"$HOME/.ssh/id_ed25519\" && echo home=visible || echo home=hidden\n"
                    "exit 0\n" % (port, port))
        os.chmod(task, 0o755)
        subprocess.run(["chown", "-R", "65534:65534", checkout, home], check=True)
        recipe = os.path.join(ROOT, "deploy", "ci", "github-actions.yml")
        steps = ci_job.run_job(recipe, "runner", checkout, user=65534, env={"HOME": home})
        self.assertEqual([s[1] for s in steps], [0, 0, 0], steps)
        out = steps[-1][2]
        self.assertIn("get=200", out, steps[-1])
        self.assertIn("post=403", out)
        self.assertIn("home=hidden", out)
        with open(os.path.join(checkout, "agent-output.txt")) as f:
            self.assertEqual(f.read(), "written\n")
        os.unlink(os.path.join(checkout, "agent-output.txt"))
        # Ubuntu 24.04's restriction without the profile loaded: the job stops at doctor.
        steps = ci_job.run_job(recipe, "runner", checkout, user=65534,
                               env={"HOME": home, "SLUICE_FAULT": "apparmor_userns"})
        self.assertEqual([s[1] for s in steps], [0, 1], steps)
        said = steps[-1][2] + steps[-1][3]
        self.assertIn("kernel.apparmor_restrict_unprivileged_userns = 1", said)
        self.assertIn("sluice doctor --apparmor-profile", said)
        self.assertFalse(os.path.exists(os.path.join(checkout, "agent-output.txt")))

    def test_claude_conformance_against_the_installed_binary(self):
        suite = tempfile.mkdtemp(prefix="hosts-", dir=self.outside)
        # The hosts run as 65534 too and start the approver MCP server from here: readable by all.
        os.chmod(suite, 0o755)
        for name in ("test_claude.py", "fake_model.py", "approver_mcp.py", "mcp_stdio.py"):
            shutil.copy(os.path.join(ROOT, "tests", "hosts", name), suite)
            os.chmod(os.path.join(suite, name), 0o644)
        files = ["test_claude.AdapterFiles." + t for t in (
            "test_merge_and_exact_restore", "test_restore_of_an_absent_file_removes_what_was_created",
            "test_edits_after_install_are_kept_on_remove", "test_unreadable_or_hook_disabling_settings_are_refused",
            "test_install_refuses_when_it_could_only_refuse", "test_project_scope")]
        p = run(["/usr/bin/python3", "-m", "unittest", "-v", "test_claude.ClaudeCurrentAsRoot",
                 "test_claude.ClaudeCurrentAsNobody"] + files, cwd=suite,
                env=dict(os.environ, SLUICE_BIN="/usr/bin/sluice"))
        self.assertEqual(p.returncode, 0, p.stdout.decode()[-4000:] + p.stderr.decode()[-4000:])
        self.assertIn("OK", p.stderr.decode())


if __name__ == "__main__":
    unittest.main()
