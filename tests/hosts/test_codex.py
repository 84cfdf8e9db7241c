"""Conformance of the Codex adapter: the real host from the npm registry (the version this project
follows and the minimum whose rewrite holds), driven by `codex exec` against the fake model server,
configured only by `sluice adapter install codex` (hooks.json, the hook's trust by the hash Codex
reports, Codex's shell out of its own sandbox). Codex contacts the network when it starts, so host,
fake model and adapter run in a network namespace of the test's own with loopback only. Run as root
and as 65534."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from test_claude import ARGS_CMD, prompt_for, PYTHON, SLUICE, CACHE, FakeModel, free_port

CURRENT, MINIMUM = "0.171.0", "0.131.0"
HERE = os.path.dirname(os.path.abspath(__file__))


def install_codex(version):
    prefix = os.path.join(CACHE, "codex-" + version)
    vendor = os.path.join(prefix, "node_modules", "@openai", "codex-linux-x64", "vendor", "x86_64-unknown-linux-musl")
    def find():
        for cand in (os.path.join(vendor, "bin", "codex"), os.path.join(vendor, "codex", "codex")):
            if os.path.exists(cand):
                return cand
        return None
    if not find():
        os.makedirs(prefix, exist_ok=True)
        p = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", prefix, "@openai/codex@" + version],
                           capture_output=True, timeout=600)
        if p.returncode != 0 or not find():
            raise AssertionError("npm could not install Codex %s: %s" % (version, p.stderr.decode()[-2000:]))
    bindir = os.path.join(prefix, "sluice-bin")
    os.makedirs(bindir, exist_ok=True)
    link = os.path.join(bindir, "codex")
    if not os.path.islink(link):
        os.symlink(find(), link)
    subprocess.run(["chmod", "-R", "a+rX", prefix], check=True)
    return bindir


class Netns:
    """A network namespace with only loopback, for the host and everything it talks to."""

    def __init__(self):
        self.name = "sluice-codex-%d" % os.getpid()
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        subprocess.run(["ip", "netns", "exec", self.name, "ip", "link", "set", "lo", "up"], check=True)

    def prefix(self):
        return ["ip", "netns", "exec", self.name]

    def close(self):
        subprocess.run(["ip", "netns", "delete", self.name])


class CodexCase(unittest.TestCase):
    version = CURRENT
    user = None

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("the Codex suite creates a network namespace and needs root")
        cls.bindir = install_codex(cls.version)
        cls.ns = Netns()
        # Codex's helpers break with a CODEX_HOME under /tmp: everything lives under /var/tmp.
        cls.tmp = tempfile.mkdtemp(prefix="sluice-codex-", dir="/var/tmp")
        os.chmod(cls.tmp, 0o755)
        cls.model_port = free_port()
        cls.results = os.path.join(cls.tmp, "results.jsonl")
        cls.model = subprocess.Popen(cls.ns.prefix() + [PYTHON, os.path.join(HERE, "fake_model.py"),
                                                        str(cls.model_port), cls.results],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert cls.model.stdout.readline().strip() == b"ready"
        os.chmod(cls.tmp, 0o777)
        cls.service_port = free_port()
        cls.service = subprocess.Popen(cls.ns.prefix() + [PYTHON, "-c",
            "import socket\ns=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            "s.bind(('127.0.0.1', %d)); s.listen(8); print('ready', flush=True)\n"
            "while True:\n c,_=s.accept(); c.sendall(b'HTTP/1.0 200 OK\\r\\nContent-Length: 9\\r\\n\\r\\nHOSTREPLY'); c.close()"
            % cls.service_port], stdout=subprocess.PIPE)
        assert cls.service.stdout.readline().strip() == b"ready"

    @classmethod
    def tearDownClass(cls):
        for p in (cls.model, cls.service):
            p.kill()
            p.wait()
            p.stdout.close()
        cls.ns.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="case-", dir=self.tmp)
        self.home = os.path.join(self.work, "home")
        self.codex_home = os.path.join(self.home, ".codex")
        self.proj = os.path.join(self.work, "proj")
        for d in (self.home, self.codex_home, self.proj):
            os.makedirs(d)
        with open(os.path.join(self.codex_home, "config.toml"), "w") as f:
            f.write('model_provider = "fake"\nmodel = "fake-model"\n\n[model_providers.fake]\nname = "fake"\n'
                    'base_url = "http://127.0.0.1:%d/v1"\nwire_api = "responses"\nenv_key = "FAKE_KEY"\n'
                    # No telemetry: its export waits 5 s for the network at every exit.
                    '\n[analytics]\nenabled = false\n\n[otel]\nmetrics_exporter = "none"\n'
                    % self.model_port)
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
             "CODEX_HOME": self.codex_home, "FAKE_KEY": "x", "TMPDIR": "/var/tmp"}
        e.update(extra or {})
        return e

    def sluice(self, *args, binary=SLUICE, check=True):
        p = subprocess.run(self.prefix() + [binary] + list(args), capture_output=True, env=self.env(),
                           cwd=self.proj, timeout=120)
        if check:
            self.assertEqual(p.returncode, 0, p.stderr.decode())
        return p

    def codex(self, command, env=None):
        call = prompt_for("exec_command", {"cmd": command})
        p = subprocess.run(self.prefix() + ["codex", "exec", "--skip-git-repo-check", "--json", call],
                           stdin=subprocess.DEVNULL, capture_output=True, env=self.env(env), cwd=self.proj,
                           timeout=180)
        results = []
        if os.path.exists(self.results):
            with open(self.results) as f:
                results = [json.loads(l) for l in f if l.strip()]
            os.unlink(self.results)
        events = [json.loads(l) for l in p.stdout.decode().splitlines() if l.startswith("{")]
        return results, events, p

    def test_shell_runs_inside_sluice_with_arguments_and_status(self):
        self.sluice("adapter", "install", "codex", "--skill", "default")
        results, events, p = self.codex("readlink /proc/self/ns/net; %s; exit 7" % ARGS_CMD)
        self.assertEqual(len(results), 1, p.stdout.decode()[-3000:] + p.stderr.decode()[-2000:])
        out = results[0]["content"]
        self.assertIn("exited with code 7", out)
        self.assertIn("""[a b][c"d][$HOME][it's][*]""", out)
        inner = [l for l in out.splitlines() if l.startswith("net:[")][0]
        host = subprocess.run(self.ns.prefix() + ["readlink", "/proc/self/ns/net"], capture_output=True).stdout.decode().strip()
        self.assertNotEqual(inner, host)
        commands = [e["item"]["command"] for e in events if e.get("type") == "item.completed"
                    and e.get("item", {}).get("type") == "command_execution"]
        self.assertTrue(commands and SLUICE + " exec --skill default -- " in commands[0], commands)

    def test_boundaries_through_the_host(self):
        self.sluice("adapter", "install", "codex", "--skill", "default")
        escape = os.path.join(self.home, "escape.txt")
        results, _, p = self.codex("echo inside > written.txt; echo x > %s; cat %s/config.toml; "
                                   "curl -sS --max-time 5 http://127.0.0.1:%d/; echo curl=$?"
                                   % (escape, self.codex_home, self.service_port))
        out = results[0]["content"]
        with open(os.path.join(self.proj, "written.txt")) as f:
            self.assertEqual(f.read(), "inside\n")
        self.assertFalse(os.path.exists(escape))
        self.assertNotIn("model_provider", out)  # the host's own configuration stays out of reach
        self.assertNotIn("HOSTREPLY", out)
        self.assertNotIn("curl=0", out)
        outside = subprocess.run(self.ns.prefix() + ["curl", "-sS", "--max-time", "5",
                                                     "http://127.0.0.1:%d/" % self.service_port], capture_output=True)
        self.assertEqual(outside.stdout, b"HOSTREPLY")

    def test_escalation_is_the_policys_decision(self):
        self.sluice("adapter", "install", "codex", "--skill", "default")
        results, _, _ = self.codex("sluice exec --sandbox-profile network-read -- echo proxy=$HTTPS_PROXY")
        self.assertIn("proxy=http://", results[0]["content"])
        marker = os.path.join(self.proj, "ran")
        results, _, _ = self.codex("sluice exec --sandbox-profile publish -- touch %s" % marker)
        self.assertFalse(os.path.exists(marker))

    def test_not_ready_or_missing_sluice_refuses(self):
        copy = os.path.join(self.work, "sluice-copy")
        shutil.copy(SLUICE, copy)
        os.chmod(copy, 0o755)
        self.sluice("adapter", "install", "codex", "--skill", "default", binary=copy)
        marker = os.path.join(self.proj, "ran")
        self.codex("touch %s" % marker, env={"SLUICE_FAULT": "namespaces"})
        self.assertFalse(os.path.exists(marker))
        os.unlink(copy)
        self.codex("touch %s" % marker)
        self.assertFalse(os.path.exists(marker))
        # The same call with a working sluice does run: the test can fail.
        shutil.copy(SLUICE, copy)
        os.chmod(copy, 0o755)
        self.codex("touch %s" % marker)
        self.assertTrue(os.path.exists(marker))

    def test_trust_status_and_exact_removal(self):
        config = os.path.join(self.codex_home, "config.toml")
        with open(config) as f:
            before = f.read()
        self.sluice("adapter", "install", "codex", "--skill", "default")
        st = json.loads(self.sluice("adapter", "status", "codex", "--json").stdout)["adapters"][0]
        self.assertTrue(st["installed"] and st["hookVerified"] and st["atLeastMinimum"], st)
        self.assertEqual(st["version"], self.version)
        with open(config) as f:
            text = f.read()
        self.assertIn('sandbox_mode = "danger-full-access"', text)
        self.assertIn("trusted_hash = \"sha256:", text)
        self.sluice("adapter", "remove", "codex")
        with open(config) as f:
            self.assertEqual(f.read(), before)
        self.assertFalse(os.path.exists(os.path.join(self.codex_home, "hooks.json")))


class CodexCurrentAsRoot(CodexCase):
    pass


class CodexCurrentAsNobody(CodexCase):
    user = 65534


class CodexMinimumAsRoot(CodexCase):
    version = MINIMUM


class CodexMinimumAsNobody(CodexCase):
    version = MINIMUM
    user = 65534


if __name__ == "__main__":
    unittest.main()
