"""sluice on Docker Engine itself (Debian's docker.io, dockerd started by the test: docker_engine.py).

The image is built with `docker build` from deploy/container/Containerfile and the Debian package,
on the offline base (scripts/container-base.sh). Then, on a Docker network in 198.19.0.0/16 with
the test origin on its gateway:
- `sluice exec` inside `docker run` with Docker's own defaults (its seccomp profile, its masked
  /proc): doctor and exec name Docker's filter and the fix, exit 125, nothing run;
- with deploy/container/seccomp.json as shipped and systempaths=unconfined: exit status kept,
  read-only system, writable workspace, hidden home, network-read GET passed and POST refused,
  offline reaching nothing; as the image's user and as root;
- `sluice serve` in a restricted container (non-root, no capabilities, no new privileges,
  read-only root, Docker's default seccomp): ready, a client allowed, one refused, its log.
Where AppArmor is on, Docker also applies docker-default; this machine's kernel has none, so the
AppArmor row stays with tests/package/test_deb.py (fault injection)."""
import json
import os
import shutil
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from container_fixtures import one_client_policy, package, run, write_exec_files
from docker_engine import Engine, HostOrigin

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "../.."))
BUILD = os.environ.get("SLUICE_BUILD_DIR") or os.path.join(ROOT, "build/default")
SLUICE = os.environ.get("SLUICE_BIN") or os.path.join(BUILD, "sluice")
sys.path.insert(0, os.path.join(ROOT, "tests/integration"))
from origin import payload  # noqa: E402

IMAGE = "localhost/sluice:docker-test"
NETWORK = "sluice-docker-test"
SUBNET, GATEWAY, SERVE_IP = "198.19.1.0/24", "198.19.1.1", "198.19.1.10"
ORIGIN_PORT = 18081
TOKEN = "docker-agent-token-0123456789"
SHIPPED_PROFILE = os.path.join(ROOT, "deploy/container/seccomp.json")
M = {}


def setUpModule():
    if os.geteuid() != 0:
        raise unittest.SkipTest("dockerd needs root")
    for tool in ("mmdebstrap", "cpack"):
        if not shutil.which(tool):
            raise AssertionError("%s is not installed (scripts/install-deps.sh installs it)" % tool)
    M["tmp"] = tempfile.mkdtemp(prefix="sluice-docker-test-")
    os.chmod(M["tmp"], 0o755)
    M["engine"] = e = Engine(M["tmp"])
    try:
        e.build_image(IMAGE, package(BUILD), os.path.join(ROOT, "deploy/container/Containerfile"))
        e.docker(["network", "rm", NETWORK], check=False)
        e.docker(["network", "create", "--subnet", SUBNET, "--gateway", GATEWAY, NETWORK])
        M["origin"] = HostOrigin(GATEWAY, ORIGIN_PORT)
    except BaseException:
        tearDownModule()
        raise


def tearDownModule():
    if "origin" in M:
        M["origin"].stop()
    if "engine" in M:
        M["engine"].docker(["network", "rm", NETWORK], check=False)
        M["engine"].stop()
    shutil.rmtree(M["tmp"], ignore_errors=True)


def get(url, proxy=None):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy} if proxy else {}))
    try:
        with opener.open(urllib.request.Request(url), timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class ExecInDockerRun(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.request_script, cls.exec_policy = write_exec_files(M["tmp"], ORIGIN_PORT, GATEWAY)

    def in_container(self, script, *options, user="10001", network="none"):
        return M["engine"].docker(["run", "--rm", "--network", network, "--user", user, "--entrypoint", "/bin/sh"] +
                                  list(options) + [IMAGE, "-c", "mkdir -p /tmp/project /tmp/home && cd /tmp/project && "
                                                   + script], check=False, timeout=180)

    def test_dockers_own_defaults_are_named_with_the_fix(self):
        for user in ("10001", "0"):
            with self.subTest(user=user):
                p = self.in_container("sluice doctor --json; sluice exec -- /bin/sh -c 'echo ran'; echo rc=$?",
                                      user=user)
                report = json.loads(p.stdout.splitlines()[0])
                self.assertFalse(report["runnerReady"], p.stdout)
                platform = [c for c in report["checks"] if c["name"] == "platform"][0]
                self.assertIn("the docker container's seccomp filter refuses unshare(CLONE_NEWUSER)",
                              platform["detail"])
                self.assertIn("rc=125", p.stdout)
                self.assertNotIn("ran", p.stdout)
                self.assertIn("nothing was run", p.stderr)
                self.assertIn("--security-opt seccomp=/usr/share/sluice/container/seccomp.json", p.stderr)
                # The profile alone is not enough: Docker masks parts of /proc, and the kernel refuses
                # the sandbox a /proc of its own over it. That is named next, with its option.
                p = self.in_container("sluice exec -- /bin/true; echo rc=$?", "--security-opt",
                                      "seccomp=" + SHIPPED_PROFILE, user=user)
                self.assertIn("rc=125", p.stdout)
                self.assertIn("cause: the docker container's /proc has masked paths", p.stderr)
                self.assertIn("systempaths=unconfined", p.stderr)

    def test_the_shipped_profile_runs_the_sandbox(self):
        options = ["--security-opt", "seccomp=" + SHIPPED_PROFILE, "--security-opt", "systempaths=unconfined"]
        for user in ("10001", "0"):
            with self.subTest(user=user):
                p = self.in_container(
                    "sluice doctor >/dev/null && echo ready; sluice exec -- /bin/sh -c 'echo inside; exit 7'; "
                    "echo rc=$?; sluice exec -- /bin/sh -c 'touch /etc/x' 2>/dev/null; echo etc=$?; "
                    "echo secret > $HOME/.netrc 2>/dev/null; sluice exec -- /bin/sh -c 'echo w > out.txt; "
                    "test ! -e $HOME/.netrc'; echo ws=$? $(cat out.txt)",
                    *options, "-e", "HOME=/tmp/home", user=user)
                self.assertIn("ready", p.stdout, p.stderr)
                self.assertIn("inside\nrc=7", p.stdout, p.stderr)
                self.assertIn("etc=1", p.stdout)
                self.assertIn("ws=0 w", p.stdout, p.stderr)
                p = self.in_container(
                    "cp /tmp/req.sh . && sluice exec --policy /tmp/policy.toml -- /bin/bash -c "
                    "'bash req.sh GET http://origin.test:%d/bytes/5; bash req.sh POST http://origin.test:%d/post'"
                    % (ORIGIN_PORT, ORIGIN_PORT),
                    *options, "-v", "%s:/tmp/req.sh:ro" % self.request_script,
                    "-v", "%s:/tmp/policy.toml:ro" % self.exec_policy, user=user, network=NETWORK)
                self.assertIn("HTTP/1.1 200 OK", p.stdout, p.stderr)
                self.assertIn("HTTP/1.1 403 Forbidden", p.stdout, p.stderr)
                self.assertIn("method_not_allowed", p.stderr)
                p = self.in_container(
                    "sluice exec --sandbox-profile offline -- /bin/bash -c 'exec 3<>/dev/tcp/%s/%d' 2>/dev/null; "
                    "echo offline=$?; /bin/bash -c 'exec 3<>/dev/tcp/%s/%d' && echo outside=0"
                    % (GATEWAY, ORIGIN_PORT, GATEWAY, ORIGIN_PORT), *options, user=user, network=NETWORK)
                self.assertIn("offline=1", p.stdout, p.stderr)
                self.assertIn("outside=0", p.stdout, p.stderr)


class ServeInARestrictedContainer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        d = os.path.join(M["tmp"], "serve")
        os.makedirs(d)
        run([SLUICE, "ca", "init", "--cert", os.path.join(d, "ca.pem"), "--key", os.path.join(d, "ca.key")])
        with open(os.path.join(ROOT, "deploy/kubernetes/sluice.toml")) as f:
            shipped = f.read()
        with open(os.path.join(d, "sluice.toml"), "w") as f:
            f.write(one_client_policy(shipped, ORIGIN_PORT, GATEWAY, TOKEN))
        for name in os.listdir(d):
            os.chmod(os.path.join(d, name), 0o644)
        cls.name = "sluice-docker-serve"
        e = M["engine"]
        e.docker(["rm", "-f", cls.name], check=False)
        e.docker(["run", "-d", "--name", cls.name, "--network", NETWORK, "--ip", SERVE_IP,
                  "--user", "10001:10001", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
                  "--read-only", "-v", "%s/sluice.toml:/etc/sluice/policy/sluice.toml:ro" % d,
                  "-v", "%s/ca.pem:/etc/sluice/ca/ca.pem:ro" % d, "-v", "%s/ca.key:/etc/sluice/ca/ca.key:ro" % d,
                  IMAGE])
        deadline = time.monotonic() + 60
        while True:
            try:
                if get("http://%s:9090/readyz" % SERVE_IP)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                logs = e.docker(["logs", cls.name], check=False)
                e.docker(["rm", "-f", cls.name], check=False)
                raise AssertionError("sluice serve did not become ready within 60 s:\n" + logs.stdout + logs.stderr)
            time.sleep(0.3)

    @classmethod
    def tearDownClass(cls):
        M["engine"].docker(["rm", "-f", cls.name], check=False)

    def proxied(self, path, token=TOKEN, host="origin.test"):
        proxy = "http://agent-1:%s@%s:3128" % (token, SERVE_IP) if token else "http://%s:3128" % SERVE_IP
        return get("http://%s:%d%s" % (host, ORIGIN_PORT, path), proxy)

    def test_requests_and_the_log(self):
        self.assertEqual(self.proxied("/bytes/100"), (200, payload(100)))
        self.assertEqual(self.proxied("/bytes/100", token=None)[0], 407)
        self.assertEqual(self.proxied("/bytes/100", host="elsewhere.test")[0], 403)
        deadline = time.monotonic() + 10
        while True:
            logs = M["engine"].docker(["logs", self.name]).stderr
            lines = [x for x in (json.loads(l) for l in logs.splitlines() if l.startswith("{"))
                     if x.get("type") != "checkpoint"]  # the chain's checkpoint lines are no requests
            if any(l.get("client") == "agent-1" and l["path"] == "/bytes/100" and l["decision"] == "allow"
                   for l in lines):
                break
            self.assertLess(time.monotonic(), deadline, logs[-3000:])
            time.sleep(0.3)

    def test_the_container_is_restricted(self):
        e = M["engine"]
        info = json.loads(e.docker(["inspect", self.name]).stdout)[0]
        self.assertTrue(info["HostConfig"]["ReadonlyRootfs"])
        self.assertEqual(e.docker(["exec", self.name, "/usr/bin/id", "-u"]).stdout.strip(), "10001")
        status = e.docker(["exec", self.name, "/bin/cat", "/proc/1/status"]).stdout
        caps = {l.split(":")[0]: l.split(":")[1].strip() for l in status.splitlines() if l.startswith("Cap")}
        self.assertEqual(caps["CapEff"], "0000000000000000", caps)
        self.assertEqual(caps["CapBnd"], "0000000000000000", caps)
        self.assertIn("NoNewPrivs:\t1", status)
        self.assertIn("Seccomp:\t2", status)  # Docker's default profile
        p = e.docker(["exec", self.name, "/usr/bin/touch", "/usr/bin/x"], check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("Read-only file system", p.stderr + p.stdout)


if __name__ == "__main__":
    unittest.main()
