"""Conformance of the Pi adapter: the real host from the npm registry (the version this project
follows and the minimum whose rewrite holds), `pi -p` against the fake model server (Chat
Completions), configured only by `sluice adapter install pi` (sluice's extension, which asks
`sluice hook pi` about every bash call). Everything runs in a network namespace of the test's own
with loopback only. Run as root and as 65534."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from test_claude import ARGS_CMD, prompt_for, CACHE, PYTHON, SLUICE, free_port
from test_codex import Netns

CURRENT, MINIMUM = "0.73.1", "0.51.0"
HERE = os.path.dirname(os.path.abspath(__file__))


def install_pi(version):
    prefix = os.path.join(CACHE, "pi-" + version)
    binary = os.path.join(prefix, "node_modules", ".bin", "pi")
    if not os.path.exists(binary):
        os.makedirs(prefix, exist_ok=True)
        p = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", prefix,
                            "@mariozechner/pi-coding-agent@" + version], capture_output=True, timeout=600)
        if p.returncode != 0 or not os.path.exists(binary):
            raise AssertionError("npm could not install Pi %s: %s" % (version, p.stderr.decode()[-2000:]))
    subprocess.run(["chmod", "-R", "a+rX", prefix], check=True)
    return os.path.dirname(binary)


class PiCase(unittest.TestCase):
    version = CURRENT
    user = None

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("the Pi suite creates a network namespace and needs root")
        cls.bindir = install_pi(cls.version)
        cls.ns = Netns()
        cls.tmp = tempfile.mkdtemp(prefix="sluice-pi-", dir="/var/tmp")
        os.chmod(cls.tmp, 0o777)
        cls.model_port = free_port()
        cls.results = os.path.join(cls.tmp, "results.jsonl")
        cls.model = subprocess.Popen(cls.ns.prefix() + [PYTHON, os.path.join(HERE, "fake_model.py"),
                                                        str(cls.model_port), cls.results],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert cls.model.stdout.readline().strip() == b"ready"

    @classmethod
    def tearDownClass(cls):
        cls.model.kill()
        cls.model.wait()
        cls.model.stdout.close()
        cls.ns.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="case-", dir=self.tmp)
        self.home = os.path.join(self.work, "home")
        self.agent = os.path.join(self.home, ".pi", "agent")
        self.proj = os.path.join(self.work, "proj")
        for d in (self.agent, self.proj):
            os.makedirs(d)
        with open(os.path.join(self.agent, "models.json"), "w") as f:
            json.dump({"providers": {"fake": {
                "baseUrl": "http://127.0.0.1:%d/v1" % self.model_port, "api": "openai-completions", "apiKey": "x",
                "models": [{"id": "fake-model", "name": "fake", "contextWindow": 100000, "maxTokens": 4096,
                            "input": ["text"], "reasoning": False,
                            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}}]}}}, f)
        if self.user is not None:
            subprocess.run(["chown", "-R", "%d:%d" % (self.user, self.user), self.work], check=True)
        os.chmod(self.work, 0o777)
        if os.path.exists(self.results):
            os.unlink(self.results)

    def prefix(self):
        p = self.ns.prefix()
        if self.user is not None:
            p += ["setpriv", "--reuid=%d" % self.user, "--regid=%d" % self.user, "--clear-groups"]
        return p

    def env(self, extra=None):
        e = {"PATH": self.bindir + ":/usr/local/bin:/usr/bin:/bin", "HOME": self.home, "LANG": "C.UTF-8",
             "PI_OFFLINE": "1", "PI_TELEMETRY": "0"}
        e.update(extra or {})
        return e

    def sluice(self, *args, binary=SLUICE):
        p = subprocess.run(self.prefix() + [binary] + list(args), capture_output=True, env=self.env(),
                           cwd=self.proj, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        return p

    def pi(self, command, env=None):
        call = prompt_for("bash", {"command": command})
        p = subprocess.run(self.prefix() + ["pi", "-p", "--provider", "fake", "--model", "fake-model", "--mode",
                                            "json", call],
                           stdin=subprocess.DEVNULL, capture_output=True, env=self.env(env), cwd=self.proj, timeout=180)
        results = []
        if os.path.exists(self.results):
            with open(self.results) as f:
                results = [json.loads(l) for l in f if l.strip()]
            os.unlink(self.results)
        self.assertEqual(len(results), 1, p.stdout.decode()[-3000:] + p.stderr.decode()[-2000:])
        return results[0]["content"]

    def test_shell_runs_inside_sluice_with_arguments_and_status(self):
        self.sluice("adapter", "install", "pi", "--skill", "default")
        out = self.pi("readlink /proc/self/ns/net; %s; exit 7" % ARGS_CMD)
        self.assertIn("exited with code 7", out)
        self.assertIn("""[a b][c"d][$HOME][it's][*]""", out)
        inner = [l for l in out.splitlines() if l.startswith("net:[")][0]
        host = subprocess.run(self.ns.prefix() + ["readlink", "/proc/self/ns/net"], capture_output=True).stdout.decode().strip()
        self.assertNotEqual(inner, host)

    def test_boundaries_and_escalation(self):
        self.sluice("adapter", "install", "pi", "--skill", "default")
        escape = os.path.join(self.home, "escape.txt")
        out = self.pi("echo inside > written.txt; echo x > %s; cat %s/models.json; echo proxy=${HTTPS_PROXY:-none}"
                      % (escape, self.agent))
        with open(os.path.join(self.proj, "written.txt")) as f:
            self.assertEqual(f.read(), "inside\n")
        self.assertFalse(os.path.exists(escape))
        self.assertNotIn("baseUrl", out)
        self.assertIn("proxy=none", out)
        out = self.pi("sluice exec --sandbox-profile network-read -- echo proxy=$HTTPS_PROXY")
        self.assertIn("proxy=http://", out)
        marker = os.path.join(self.proj, "ran")
        out = self.pi("sluice exec --allow-domain evil.test -- touch %s" % marker)
        self.assertIn("cannot be chosen by the agent", out)
        self.assertFalse(os.path.exists(marker))

    def test_not_ready_or_missing_sluice_refuses(self):
        copy = os.path.join(self.work, "sluice-copy")
        shutil.copy(SLUICE, copy)
        os.chmod(copy, 0o755)
        self.sluice("adapter", "install", "pi", "--skill", "default", binary=copy)
        marker = os.path.join(self.proj, "ran")
        out = self.pi("touch %s" % marker, env={"SLUICE_FAULT": "namespaces"})
        self.assertIn("cannot sandbox", out)
        self.assertFalse(os.path.exists(marker))
        os.unlink(copy)
        out = self.pi("touch %s" % marker)
        self.assertIn("blocked", out)
        self.assertFalse(os.path.exists(marker))
        with open(copy, "w") as f:
            f.write("#!/bin/sh\nkill -SEGV $$\n")
        os.chmod(copy, 0o755)
        self.pi("touch %s" % marker)
        self.assertFalse(os.path.exists(marker))

    def test_status_and_removal(self):
        self.sluice("adapter", "install", "pi", "--skill", "default")
        st = json.loads(self.sluice("adapter", "status", "pi", "--json").stdout)["adapters"][0]
        self.assertTrue(st["installed"] and st["hookVerified"] and st["atLeastMinimum"], st)
        self.assertEqual(st["version"], self.version)
        self.sluice("adapter", "remove", "pi")
        self.assertTrue(os.path.exists(os.path.join(self.agent, "models.json")))  # the user's own file stays
        self.assertFalse(os.path.exists(os.path.join(self.agent, "extensions")))


class PiCurrentAsRoot(PiCase):
    pass


class PiCurrentAsNobody(PiCase):
    user = 65534


class PiMinimumAsRoot(PiCase):
    version = MINIMUM


class PiMinimumAsNobody(PiCase):
    version = MINIMUM
    user = 65534


if __name__ == "__main__":
    unittest.main()
