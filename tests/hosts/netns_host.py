"""What the Codex, OpenCode and Pi suites share: the host runs, with the fake model server and a
loopback service, in a network namespace the test creates with loopback only (these hosts contact
the network when they start); each test case gets its own home and project under /var/tmp (Codex's
helpers break under /tmp), owned by the case's user (root, or 65534)."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from test_claude import PYTHON, SLUICE, free_port, server_cert, skill_in_requests, sluice_on_path

HERE = os.path.dirname(os.path.abspath(__file__))


class Netns:
    """A network namespace with only loopback, for the host and everything it talks to."""

    def __init__(self):
        self.name = "sluice-host-%d" % os.getpid()
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        subprocess.run(["ip", "netns", "exec", self.name, "ip", "link", "set", "lo", "up"], check=True)

    def prefix(self):
        return ["ip", "netns", "exec", self.name]

    def close(self):
        subprocess.run(["ip", "netns", "delete", self.name])


def npm_install(prefix, package):
    os.makedirs(prefix, exist_ok=True)
    p = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", prefix, package],
                       capture_output=True, timeout=600)
    if p.returncode != 0:
        raise AssertionError("npm could not install %s: %s" % (package, p.stderr.decode()[-2000:]))


class NetnsHostCase(unittest.TestCase):
    """Subclasses set `host`, `version`, `user` and define install(version) -> bindir,
    configure(self) (the host's files in self.home) and host_env(self)."""
    host = ""
    version = ""
    user = None
    model_tls = False

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("the %s suite creates a network namespace and needs root" % cls.host)
        cls.bindir = cls.install(cls.version)
        cls.ns = Netns()
        cls.tmp = tempfile.mkdtemp(prefix="sluice-%s-" % cls.host, dir="/var/tmp")
        os.chmod(cls.tmp, 0o777)
        cls.sluice_dir = sluice_on_path(cls.tmp)
        cls.model_port = free_port()
        cls.results = os.path.join(cls.tmp, "results.jsonl")
        cls.requests = os.path.join(cls.tmp, "requests.jsonl")  # every request the model got
        tls = []
        if cls.model_tls:  # HTTPS as model.test, from a CA of the test's (cls.model_ca)
            cert, key, cls.model_ca = server_cert(cls.tmp, "model.test")
            tls = [cert, key]
        cls.model = subprocess.Popen(cls.ns.prefix() + [PYTHON, os.path.join(HERE, "fake_model.py"),
                                                        str(cls.model_port), cls.results] + tls,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=dict(os.environ, FAKE_MODEL_LOG=cls.requests))
        assert cls.model.stdout.readline().strip() == b"ready"
        # A service on the namespace's loopback: reachable from the host's shell, not from sluice's.
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
        self.proj = os.path.join(self.work, "proj")
        for d in (self.home, self.proj):
            os.makedirs(d)
        self.configure()
        if self.user is not None:
            subprocess.run(["chown", "-R", "%d:%d" % (self.user, self.user), self.work], check=True)
        os.chmod(self.work, 0o777)
        for f in (self.results, self.requests):
            if os.path.exists(f):
                os.unlink(f)

    def ask_policy_file(self):
        """A policy whose skill `asker` lets a person approve names under ask.test on the service's
        port (both resolve to the namespace's loopback, where the service listens)."""
        path = os.path.join(self.work, "ask-policy.toml")
        with open(path, "w") as f:
            f.write('[skills.asker]\ndefault_profile = "network-read"\nask_domains = ["*.ask.test:%d"]\n'
                    '[upstream]\nallow_addresses = ["127.0.0.1/32"]\n[upstream.resolve]\n'
                    '"api.ask.test" = "127.0.0.1"\n"other.ask.test" = "127.0.0.1"\n' % self.service_port)
        os.chmod(path, 0o644)
        return path

    def skill_advertised(self):
        """Whether a request the model got lists sluice's agent skill (its name and description)."""
        return skill_in_requests(self.requests)

    def prefix(self):
        p = self.ns.prefix()
        if self.user is not None:
            p += ["setpriv", "--reuid=%d" % self.user, "--regid=%d" % self.user, "--clear-groups"]
        return p

    def env(self, extra=None):
        e = {"PATH": self.bindir + ":" + self.sluice_dir + ":/usr/local/bin:/usr/bin:/bin", "HOME": self.home, "LANG": "C.UTF-8",
             "TMPDIR": "/var/tmp"}
        e.update(self.host_env())
        e.update(extra or {})
        return e

    def sluice(self, *args, binary=SLUICE, check=True):
        p = subprocess.run(self.prefix() + [binary] + list(args), capture_output=True, env=self.env(),
                           cwd=self.proj, timeout=120)
        if check:
            self.assertEqual(p.returncode, 0, p.stderr.decode())
        return p

    def run_host(self, argv, env=None):
        """Runs the host headlessly; returns (tool results the model saw, the host's process)."""
        p = subprocess.run(self.prefix() + argv, stdin=subprocess.DEVNULL, capture_output=True,
                           env=self.env(env), cwd=self.proj, timeout=240)
        results = []
        if os.path.exists(self.results):
            with open(self.results) as f:
                results = [json.loads(l) for l in f if l.strip()]
            os.unlink(self.results)
        return results, p

    def namespace_of_host(self):
        return subprocess.run(self.ns.prefix() + ["readlink", "/proc/self/ns/net"],
                              capture_output=True).stdout.decode().strip()

    def assert_inside_sluice(self, out):
        inner = [l for l in out.splitlines() if l.startswith("net:[")]
        self.assertTrue(inner, out)
        self.assertNotEqual(inner[0], self.namespace_of_host())

    def assert_service_out_of_reach(self, out):
        self.assertNotIn("HOSTREPLY", out)
        self.assertNotIn("curl=0", out)
        outside = subprocess.run(self.ns.prefix() + ["curl", "-sS", "--max-time", "5",
                                                     "http://127.0.0.1:%d/" % self.service_port], capture_output=True)
        self.assertEqual(outside.stdout, b"HOSTREPLY")  # the test can fail: the service is there

