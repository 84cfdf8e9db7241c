"""Conformance of the OpenCode adapter: the real host from the npm registry (the version this project
follows and the minimum whose rewrite holds), `opencode run` against the fake model server (Chat
Completions through @ai-sdk/openai-compatible), configured only by `sluice adapter install opencode`
(sluice's plugin, listed in opencode.json, which asks `sluice hook opencode` about every bash call).
OpenCode installs @opencode-ai/plugin for any configured plugin and waits for the registry when
offline: the test puts it in place beforehand, from the npm registry, as a user's online first start
would. Everything else runs in a network namespace with loopback only. Run as root and as 65534."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from test_claude import ARGS_CMD, prompt_for, CACHE, PYTHON, SLUICE, free_port
from test_codex import Netns

CURRENT, MINIMUM = "1.18.33", "1.3.2"
HERE = os.path.dirname(os.path.abspath(__file__))
QUIET = {"OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1",
         "OPENCODE_DISABLE_LSP_DOWNLOAD": "1"}


def npm_install(prefix, package):
    os.makedirs(prefix, exist_ok=True)
    p = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", prefix, package],
                       capture_output=True, timeout=600)
    if p.returncode != 0:
        raise AssertionError("npm could not install %s: %s" % (package, p.stderr.decode()[-2000:]))


def install_opencode(version):
    prefix = os.path.join(CACHE, "opencode-" + version)
    binary = os.path.join(prefix, "node_modules", "opencode-linux-x64", "bin", "opencode")
    if not os.path.exists(binary):
        npm_install(prefix, "opencode-ai@" + version)
    deps = os.path.join(CACHE, "opencode-plugin-" + version)
    if not os.path.exists(os.path.join(deps, "node_modules", "@opencode-ai", "plugin")):
        npm_install(deps, "@opencode-ai/plugin@" + version)
    bindir = os.path.join(prefix, "sluice-bin")
    os.makedirs(bindir, exist_ok=True)
    link = os.path.join(bindir, "opencode")
    if not os.path.islink(link):
        os.symlink(binary, link)
    subprocess.run(["chmod", "-R", "a+rX", prefix, deps], check=True)
    return bindir, deps


class OpenCodeCase(unittest.TestCase):
    version = CURRENT
    user = None

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("the OpenCode suite creates a network namespace and needs root")
        cls.bindir, cls.deps = install_opencode(cls.version)
        cls.ns = Netns()
        cls.tmp = tempfile.mkdtemp(prefix="sluice-opencode-", dir="/var/tmp")
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
        self.config = os.path.join(self.home, ".config", "opencode")
        self.proj = os.path.join(self.work, "proj")
        os.makedirs(self.proj)
        shutil.copytree(self.deps, self.config, symlinks=True)
        with open(os.path.join(self.proj, "opencode.json"), "w") as f:
            json.dump({"provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "fake",
                                             "options": {"baseURL": "http://127.0.0.1:%d/v1" % self.model_port,
                                                         "apiKey": "x"},
                                             "models": {"fake-model": {"name": "fake", "tool_call": True}}}},
                       "model": "fake/fake-model"}, f)
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
        e = dict({"PATH": self.bindir + ":/usr/local/bin:/usr/bin:/bin", "HOME": self.home, "LANG": "C.UTF-8"},
                 **QUIET)
        e.update(extra or {})
        return e

    def sluice(self, *args, binary=SLUICE):
        p = subprocess.run(self.prefix() + [binary] + list(args), capture_output=True, env=self.env(),
                           cwd=self.proj, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        return p

    def opencode(self, command, env=None, agent=None):
        call = prompt_for("bash", {"command": command, "description": "conformance"})
        cmd = ["opencode", "run", "--format", "json"] + (["--agent", agent] if agent else []) + [call]
        p = subprocess.run(self.prefix() + cmd, stdin=subprocess.DEVNULL, capture_output=True, env=self.env(env),
                           cwd=self.proj, timeout=240)
        results = []
        if os.path.exists(self.results):
            with open(self.results) as f:
                results = [json.loads(l) for l in f if l.strip()]
            os.unlink(self.results)
        exits = []
        for line in p.stdout.decode().splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            meta = ev.get("part", {}).get("state", {}).get("metadata", {}) if isinstance(ev.get("part"), dict) else {}
            if isinstance(meta, dict) and "exit" in meta:
                exits.append(meta["exit"])
        self.assertEqual(len(results), 1, p.stdout.decode()[-3000:] + p.stderr.decode()[-2000:])
        return results[0]["content"], exits

    def test_shell_runs_inside_sluice_with_arguments_and_status(self):
        self.sluice("adapter", "install", "opencode", "--skill", "default")
        out, exits = self.opencode("readlink /proc/self/ns/net; %s; exit 7" % ARGS_CMD)
        self.assertIn("""[a b][c"d][$HOME][it's][*]""", out)
        self.assertEqual(exits, [7])
        inner = [l for l in out.splitlines() if l.startswith("net:[")][0]
        host = subprocess.run(self.ns.prefix() + ["readlink", "/proc/self/ns/net"], capture_output=True).stdout.decode().strip()
        self.assertNotEqual(inner, host)

    def test_every_agent_is_routed(self):
        # A permission rule for one agent would leave the others with a plain shell; the plugin
        # sees every bash call whichever agent makes it.
        self.sluice("adapter", "install", "opencode", "--skill", "default")
        out, _ = self.opencode("readlink /proc/self/ns/net", agent="plan")
        host = subprocess.run(self.ns.prefix() + ["readlink", "/proc/self/ns/net"], capture_output=True).stdout.decode().strip()
        self.assertIn("net:[", out)
        self.assertNotIn(host, out)

    def test_boundaries_and_escalation(self):
        self.sluice("adapter", "install", "opencode", "--skill", "default")
        escape = os.path.join(self.home, "escape.txt")
        out, _ = self.opencode("echo inside > written.txt; echo x > %s; ls %s; echo proxy=${HTTPS_PROXY:-none}"
                               % (escape, self.config))
        with open(os.path.join(self.proj, "written.txt")) as f:
            self.assertEqual(f.read(), "inside\n")
        self.assertFalse(os.path.exists(escape))
        self.assertNotIn("node_modules", out)
        self.assertIn("proxy=none", out)
        out, _ = self.opencode("sluice exec --sandbox-profile network-read -- echo proxy=$HTTPS_PROXY")
        self.assertIn("proxy=http://", out)

    def test_not_ready_or_missing_sluice_refuses(self):
        copy = os.path.join(self.work, "sluice-copy")
        shutil.copy(SLUICE, copy)
        os.chmod(copy, 0o755)
        self.sluice("adapter", "install", "opencode", "--skill", "default", binary=copy)
        marker = os.path.join(self.proj, "ran")
        out, _ = self.opencode("touch %s" % marker, env={"SLUICE_FAULT": "namespaces"})
        self.assertIn("cannot sandbox", out)
        self.assertFalse(os.path.exists(marker))
        os.unlink(copy)
        out, _ = self.opencode("touch %s" % marker)
        self.assertIn("blocked", out)
        self.assertFalse(os.path.exists(marker))

    def test_status_and_removal(self):
        with open(os.path.join(self.config, "opencode.json"), "w") as f:
            f.write('{"theme": "system"}\n')
        if self.user is not None:
            os.chown(os.path.join(self.config, "opencode.json"), self.user, self.user)
        self.sluice("adapter", "install", "opencode", "--skill", "default")
        st = json.loads(self.sluice("adapter", "status", "opencode", "--json").stdout)["adapters"][0]
        self.assertTrue(st["installed"] and st["hookVerified"] and st["atLeastMinimum"], st)
        self.assertEqual(st["version"], self.version)
        self.sluice("adapter", "remove", "opencode")
        with open(os.path.join(self.config, "opencode.json")) as f:
            self.assertEqual(f.read(), '{"theme": "system"}\n')
        self.assertFalse(os.path.exists(os.path.join(self.config, "sluice")))


class OpenCodeCurrentAsRoot(OpenCodeCase):
    pass


class OpenCodeCurrentAsNobody(OpenCodeCase):
    user = 65534


class OpenCodeMinimumAsRoot(OpenCodeCase):
    version = MINIMUM


class OpenCodeMinimumAsNobody(OpenCodeCase):
    version = MINIMUM
    user = 65534


if __name__ == "__main__":
    unittest.main()
