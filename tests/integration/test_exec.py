"""End-to-end tests of `sluice exec`, run as root and again as an unprivileged user (65534).
Real namespaces, a real HTTPS origin in a network namespace at 198.18.0.2 (veth), real clients
(curl, python3 urllib, git over dumb HTTP). Every escape is tried from inside and, where it makes
sense, also from outside to prove that the target exists and the test could fail."""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from harness import HERE, PYTHON, SLUICE, make_ca, make_leaf, run
from harness import log_records
from netns import TestHost

PROBE_SRC = os.path.join(HERE, "probe.py")
M = {}  # module fixtures


def setUpModule():
    if os.geteuid() != 0:
        raise unittest.SkipTest("the exec suite sets up a network namespace and needs root")
    M["tmp"] = tempfile.mkdtemp(prefix="sluice-exec-test-")
    d = M["tmp"]
    os.chmod(d, 0o755)
    ca = make_ca(d, "origin-ca")
    leaf = make_leaf(d, ca, "origin.test", "DNS:origin.test")
    for f in os.listdir(d):
        os.chmod(os.path.join(d, f), 0o644)
    # A bare git repository served over dumb HTTP.
    src = os.path.join(d, "src")
    os.makedirs(src)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    run(git + ["init", "-q", src])
    with open(os.path.join(src, "README"), "w") as f:
        f.write("hello from a repository\n")
    run(git + ["-C", src, "add", "README"])
    run(git + ["-C", src, "commit", "-qm", "first"])
    root = os.path.join(d, "www")
    os.makedirs(root)
    run(["git", "clone", "-q", "--bare", src, os.path.join(root, "repo.git")])
    run(["git", "-C", os.path.join(root, "repo.git"), "update-server-info"])
    # Smart HTTP (origin.py /git/): partial clones allowed; a second repository takes pushes.
    run(["git", "-C", os.path.join(root, "repo.git"), "config", "uploadpack.allowFilter", "true"])
    run(["git", "clone", "-q", "--bare", src, os.path.join(root, "push.git")])
    run(["git", "-C", os.path.join(root, "push.git"), "config", "http.receivepack", "true"])
    subprocess.run(["chmod", "-R", "a+rX", d], check=True)

    host = M["host"] = TestHost()
    # A secret the private paths want; sluice injects it (test_credentials), the sandbox never sees it.
    M["secret"] = "s3cr3t-%s" % os.urandom(8).hex()
    M["secret_file"] = os.path.join(d, "git-token")
    with open(M["secret_file"], "w") as f:
        f.write(M["secret"] + "\n")
    os.chmod(M["secret_file"], 0o644)
    import base64
    basic = "Basic " + base64.b64encode(("git:" + M["secret"]).encode()).decode()
    env = dict(os.environ, ORIGIN_HOST="198.18.0.2", ORIGIN_ROOT=root,
               ORIGIN_AUTH="Bearer %s|%s" % (M["secret"], basic))
    p = host.start(PYTHON, os.path.join(HERE, "origin.py"), "8443", leaf[0], leaf[1], env=env)
    assert p.stdout.readline().strip() == b"ready"
    p = host.start(PYTHON, "-c", "import socket\ns=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                   "s.bind(('198.18.0.2', 9000)); s.listen(16); print('ready', flush=True)\n"
                   "while True: c,_=s.accept(); c.close()")
    assert p.stdout.readline().strip() == b"ready"
    p = host.start(PYTHON, "-c", "import socket\ns=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                   "s.bind(('198.18.0.2', 9001)); print('ready', flush=True)\n"
                   "while True: d,a=s.recvfrom(100); s.sendto(b'pong', a)")
    assert p.stdout.readline().strip() == b"ready"
    p = host.start(PYTHON, os.path.join(HERE, "dns_server.py"), "53", "origin.test=198.18.0.2",
                   env=dict(os.environ, DNS_HOST="198.18.0.2"))
    assert p.stdout.readline().strip() == b"ready"

    # A service on the host's loopback and an abstract Unix socket: both must be out of reach.
    M["loop_srv"] = socket.socket()
    M["loop_srv"].bind(("127.0.0.1", 0))
    M["loop_srv"].listen(16)
    M["loop_port"] = M["loop_srv"].getsockname()[1]
    M["loop6_srv"] = socket.socket(socket.AF_INET6)
    M["loop6_srv"].bind(("::1", 0))
    M["loop6_srv"].listen(16)
    M["loop6_port"] = M["loop6_srv"].getsockname()[1]
    M["abstract"] = "sluice-test-%d" % os.getpid()
    M["abs_srv"] = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    M["abs_srv"].bind("\0" + M["abstract"])
    M["abs_srv"].listen(16)
    M["stop"] = False

    def accept_loop(s):
        s.settimeout(0.2)
        while not M["stop"]:
            try:
                c, _ = s.accept()
                c.close()
            except OSError:
                pass
    for s in (M["loop_srv"], M["loop6_srv"], M["abs_srv"]):
        threading.Thread(target=accept_loop, args=(s,), daemon=True).start()

    M["policy"] = os.path.join(d, "policy.toml")
    with open(M["policy"], "w") as f:
        secret_file = M["secret_file"]
        f.write(f"""
[skills.default]
default_profile = "offline"
escalations = ["network-read", "publish", "allowlist"]
allow_domains = ["origin.test:8443"]
grants = ["GITHUB_TOKEN"]
credentials = ["api", "gitpriv"]

[credentials.api]
source = "env:ORIGIN_TOKEN"
hosts = ["origin.test:8443"]
format = "Bearer {{}}"

[credentials.gitpriv]
source = "file:{secret_file}"
hosts = ["origin.test:8443"]
format = "basic:git"
env = "GIT_TOKEN"

[skills.reviewer]
default_profile = "network-read"
allow_domains = ["origin.test:8443"]

[tls]
upstream_ca_bundle = "{ca[0]}"
system_trust = false

[upstream]
allow_addresses = ["198.18.0.0/15"]

[upstream.resolve]
"origin.test" = "198.18.0.2"
"other.test" = "198.18.0.2"
"hostsfile.test" = "198.18.0.2"
""")
    os.chmod(M["policy"], 0o644)


def tearDownModule():
    if "host" in M:
        M["stop"] = True
        M["host"].close()
        M["loop_srv"].close()
        M["loop6_srv"].close()
        M["abs_srv"].close()
    if "tmp" in M:
        shutil.rmtree(M["tmp"], ignore_errors=True)


class ExecCase(unittest.TestCase):
    """What every exec suite's test case shares: a scratch workspace with its own home and TMPDIR,
    the probe copied into it, and helpers to run sluice exec (as root, or as `user`)."""
    user = None

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="sluice-exec-case-")
        os.chmod(self.work, 0o777)
        self.tmpdir = os.path.join(self.work, "tmp")
        self.home = os.path.join(self.work, "home")
        for d in (self.tmpdir, self.home):
            os.makedirs(d)
            os.chmod(d, 0o777)
        # The sandbox shows the workspace (the working directory), not the source tree: the probe
        # goes where the command can see it.
        global PROBE
        PROBE = os.path.join(self.work, "probe.py")
        shutil.copy(PROBE_SRC, PROBE)
        os.chmod(PROBE, 0o755)

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def prefix(self):
        if self.user is None:
            return []
        return ["setpriv", "--reuid=%d" % self.user, "--regid=%d" % self.user, "--clear-groups"]

    def env(self, extra=None):
        e = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": self.home, "TMPDIR": self.tmpdir,
             "LANG": "C.UTF-8"}
        e.update(extra or {})
        return e

    def sx(self, *args, env=None, policy=True, timeout=60, cwd=None):
        cmd = self.prefix() + [SLUICE, "exec"] + (["--policy", M["policy"]] if policy else []) + list(args)
        return subprocess.run(cmd, capture_output=True, env=self.env(env), timeout=timeout,
                              cwd=cwd or self.work)

    def probe(self, profile, *args, env=None):
        return self.sx("--sandbox-profile", profile, "--", PYTHON, PROBE, *args, env=env)

    def outside(self, *args):
        return subprocess.run(self.prefix() + [PYTHON, PROBE] + list(args), capture_output=True, timeout=30)

    def java_fetch(self):
        """The JVM and a one-file program (java Fetch.java URL) that prints what the URL returns;
        skips the test where there is no JVM."""
        java = shutil.which("java")
        if not java:
            self.skipTest("no JVM on this machine")
        src = os.path.join(self.work, "Fetch.java")
        with open(src, "w") as f:
            f.write("public class Fetch { public static void main(String[] a) throws Exception {"
                    " System.out.print(new String(new java.net.URL(a[0]).openStream().readAllBytes())); } }")
        os.chmod(src, 0o644)
        return java, src

    def assertNoLeftovers(self):
        self.assertEqual([n for n in os.listdir(self.tmpdir) if n.startswith("sluice-")], [])


class ExecAsRoot(ExecCase):
    # --- allowed traffic -----------------------------------------------------------------
    def test_curl_python_and_git_through_per_command_ca(self):
        script = ("set -e; curl -sS https://origin.test:8443/hello; "
                  f"{PYTHON} -c \"import urllib.request; print(urllib.request.urlopen('https://origin.test:8443/py').read().decode(), end='')\"; "
                  "git clone -q https://origin.test:8443/files/repo.git $TMPDIR/clone; cat $TMPDIR/clone/README")
        summary = os.path.join(self.work, "summary.json")
        p = self.sx("--sandbox-profile", "network-read", "--json-summary", summary, "--", "sh", "-c", script)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(p.stdout.decode(), "hello from origin /hello\nhello from origin /py\nhello from a repository\n")
        s = json.load(open(summary))
        self.assertEqual(s["exitStatus"], 0)
        self.assertEqual(s["profile"], "network-read")
        self.assertGreaterEqual(s["requestsAllowed"], 3)
        self.assertEqual(s["requestsDenied"], 0)
        self.assertNoLeftovers()

    def test_system_trust_is_the_per_command_ca(self):
        """Clients that read only the system store (wget with GnuTLS, OpenSSL's default paths) trust
        sluice's CA with no variable at all; under allowlist (no termination) the host's roots stay."""
        if not shutil.which("wget"):
            self.skipTest("no wget on this machine")
        script = ("unset SSL_CERT_FILE CURL_CA_BUNDLE REQUESTS_CA_BUNDLE; wget -qO- https://origin.test:8443/wget; "
                  f"{PYTHON} -c \"import ssl,urllib.request as u; "
                  "print(u.urlopen('https://origin.test:8443/py', context=ssl.create_default_context()).read().decode(), end='')\"; "
                  "ls /etc/ssl/certs | wc -l")
        p = self.sx("--sandbox-profile", "network-read", "--", "sh", "-c", script)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        out = p.stdout.decode().splitlines()
        self.assertEqual(out[:2], ["hello from origin /wget", "hello from origin /py"])
        self.assertLessEqual(int(out[2]), 4)  # the bundle, its hashed name, sluice-ca.pem, java/
        p = self.sx("--sandbox-profile", "allowlist", "--", "sh", "-c", "ls /etc/ssl/certs | wc -l")
        self.assertGreater(int(p.stdout), 10)

    def test_jvm_through_per_command_truststore(self):
        java, src = self.java_fetch()
        p = self.sx("--sandbox-profile", "network-read", "--", java, src, "https://origin.test:8443/jvm",
                    timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(p.stdout, b"hello from origin /jvm\n")

    def test_skill_route_allows_one_post_path_under_network_read(self):
        """A skill's allow_domains route ({ host, methods, paths }) from the trusted policy lets one
        POST path through network-read (an agent's model endpoint), and nothing else on that host;
        a repository cannot write routes."""
        pol = os.path.join(M["tmp"], "route-policy-%s.toml" % self.user)
        with open(pol, "w") as f:
            f.write(open(M["policy"]).read() + '\n[skills.agent]\ndefault_profile = "network-read"\n'
                    'allow_domains = [{ host = "origin.test:8443", methods = ["POST"], paths = ["/echo"] }]\n')
        os.chmod(pol, 0o644)
        summary = os.path.join(self.work, "summary.json")
        script = ("curl -sS -X POST -d hi https://origin.test:8443/echo; echo; "
                  "curl -s -o /dev/null -w '%{http_code}\\n' -X POST -d hi https://origin.test:8443/other; "
                  "curl -s -o /dev/null -w '%{http_code}\\n' https://origin.test:8443/hello")
        p = self.sx("--policy", pol, "--skill", "agent", "--json-summary", summary, "--", "sh", "-c", script,
                    policy=False)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(p.stdout.decode().split(), ["hi", "403", "403"])
        got = {(r["method"], r["decision"], r["reason"]) for r in json.load(open(summary))["requests"]}
        self.assertEqual(got, {("POST", "allow", "allowed"), ("POST", "deny", "method_not_allowed"),
                               ("GET", "deny", "route_not_allowed")})
        self.assertIn("route_not_allowed", p.stderr.decode())
        os.makedirs(os.path.join(self.work, ".sluice"))
        with open(os.path.join(self.work, ".sluice", "policy.toml"), "w") as f:
            f.write('[policy]\nallow = [{ host = "origin.test:8443", methods = ["POST"] }]\n')
        p = self.sx("--policy", pol, "--skill", "agent", "--", "true", policy=False)
        self.assertEqual(p.returncode, 125)
        self.assertIn("host patterns only", p.stderr.decode())
        os.unlink(pol)

    def test_denied_post_and_unlisted_host_reported(self):
        summary = os.path.join(self.work, "summary.json")
        log = os.path.join(self.work, "access.log")
        p = self.sx("--sandbox-profile", "network-read", "--json-summary", summary, "--access-log", log, "--",
                    "sh", "-c", "curl -s -o /dev/null -w '%{http_code} ' -X POST -d x=1 https://origin.test:8443/echo; "
                    "curl -s -o /dev/null -w '%{http_code}' https://unlisted.test/; exit 0")
        self.assertEqual(p.returncode, 0)
        self.assertEqual(p.stdout.decode(), "403 000")
        err = p.stderr.decode()
        self.assertIn("sluice: denied POST origin.test method_not_allowed (1 request); writes need --sandbox-profile publish", err)
        self.assertIn("sluice: denied CONNECT unlisted.test host_not_allowlisted (1 request); to allow it: --allow-domain unlisted.test", err)
        s = json.load(open(summary))
        denied = {(r["host"], r["reason"]) for r in s["requests"] if r["decision"] == "deny"}
        self.assertEqual(denied, {("origin.test", "method_not_allowed"), ("unlisted.test", "host_not_allowlisted")})
        lines = log_records(open(log))
        self.assertTrue(any(l["method"] == "POST" and l["status"] == 403 for l in lines))

    def test_denial_hint_names_a_non_default_port(self):
        summary = os.path.join(self.work, "summary.json")
        p = self.sx("--sandbox-profile", "network-read", "--json-summary", summary, "--", "sh", "-c",
                    "curl -s -o /dev/null https://origin.test:9443/; exit 0")
        self.assertIn("to allow it: --allow-domain origin.test:9443", p.stderr.decode())
        denied = [r for r in json.load(open(summary))["requests"] if r["decision"] == "deny"]
        self.assertEqual([(r["host"], r["port"]) for r in denied], [("origin.test", 9443)])

    def test_offline_has_no_network(self):
        p = self.probe("offline", "tcp", "198.18.0.2", "9000")
        self.assertEqual(p.returncode, 1, p.stdout)
        p = self.sx("--sandbox-profile", "offline", "--", "sh", "-c", "env | grep -i proxy; curl -sS https://origin.test:8443/ 2>&1; exit 0")
        self.assertNotIn(b"PROXY=", p.stdout)
        self.assertNotIn(b"hello", p.stdout)

    def test_publish_allows_writes_with_confirmation(self):
        p = self.sx("--sandbox-profile", "publish", "--", "true")
        self.assertEqual(p.returncode, 125)
        self.assertIn(b"--confirm-external-side-effects", p.stderr)
        p = self.sx("--sandbox-profile", "publish", "--confirm-external-side-effects", "--",
                    "curl", "-sS", "-X", "POST", "--data-binary", "payload", "https://origin.test:8443/echo")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, b"payload")

    # --- escapes ---------------------------------------------------------------------------
    def test_tcp_and_udp_to_test_host_blocked(self):
        self.assertEqual(self.outside("tcp", "198.18.0.2", "9000").returncode, 0)
        self.assertEqual(self.outside("udp", "198.18.0.2", "9001").returncode, 0)
        for profile in ("network-read", "offline", "allowlist"):
            self.assertEqual(self.probe(profile, "tcp", "198.18.0.2", "9000").returncode, 1, profile)
            self.assertEqual(self.probe(profile, "udp", "198.18.0.2", "9001").returncode, 1, profile)

    def test_dns_blocked(self):
        """No DNS server outside is reachable; names resolve only to sluice's capture addresses
        (198.19.0.0/16), never to what DNS outside says (198.18.0.2), and offline resolves nothing."""
        self.assertEqual(self.outside("dns", "198.18.0.2").returncode, 0)
        self.assertEqual(self.probe("network-read", "dns", "198.18.0.2").returncode, 1)
        p = self.sx("--sandbox-profile", "network-read", "--", "getent", "ahostsv4", "origin.test")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(p.stdout.startswith(b"198.19."), p.stdout)
        self.assertNotIn(b"198.18.0.2", p.stdout)
        self.assertEqual(self.probe("offline", "resolve", "origin.test").returncode, 1)

    def test_host_loopback_service_blocked(self):
        self.assertEqual(self.outside("tcp", "127.0.0.1", str(M["loop_port"])).returncode, 0)
        self.assertEqual(self.probe("network-read", "tcp", "127.0.0.1", str(M["loop_port"])).returncode, 1)

    def test_host_ipv6_loopback_service_blocked(self):
        self.assertEqual(self.outside("tcp", "::1", str(M["loop6_port"])).returncode, 0)
        self.assertEqual(self.probe("network-read", "tcp", "::1", str(M["loop6_port"])).returncode, 1)

    def test_abstract_unix_socket_blocked(self):
        self.assertEqual(self.outside("abstract", M["abstract"]).returncode, 0)
        self.assertEqual(self.probe("network-read", "abstract", M["abstract"]).returncode, 1)

    def test_ca_key_and_gateway_memory_unreachable(self):
        self.assertEqual(self.probe("network-read", "find-key").returncode, 1)
        p = self.probe("network-read", "readmem")
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertEqual(self.probe("network-read", "ptrace-init").returncode, 1)

    def test_raw_sockets_and_route_changes_refused(self):
        self.assertEqual(self.probe("network-read", "raw").returncode, 1)
        self.assertEqual(self.probe("network-read", "raw6").returncode, 1)
        for cmd in (["ip", "route", "add", "default", "dev", "lo"],
                    ["ip", "link", "add", "sl0", "type", "veth", "peer", "name", "sl1"],
                    ["ip", "tuntap", "add", "dev", "sltun", "mode", "tun"],
                    ["ip", "addr", "add", "198.18.0.9/24", "dev", "lo"]):
            p = self.sx("--sandbox-profile", "network-read", "--", *cmd)
            self.assertNotEqual(p.returncode, 0, cmd)

    def test_leaving_the_namespaces_gives_no_route(self):
        self.assertEqual(self.probe("network-read", "unshare", "198.18.0.2", "9000").returncode, 1)
        self.assertEqual(self.probe("network-read", "setns", "198.18.0.2", "9000").returncode, 1)

    def test_icmp_blocked(self):
        self.assertEqual(self.probe("network-read", "icmp", "198.18.0.2").returncode, 1)
        self.assertEqual(self.probe("offline", "icmp", "198.18.0.2").returncode, 1)

    def test_host_daemon_sockets_masked(self):
        path = "/run/docker.sock"
        if os.path.exists(path):
            self.skipTest(path + " exists on this machine; not replacing it")
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path)
        os.chmod(path, 0o666)
        srv.listen(4)
        try:
            self.assertEqual(self.outside("unix", path).returncode, 0)
            p = self.probe("network-read", "unix", path)
            self.assertEqual(p.returncode, 1, p.stdout)
        finally:
            srv.close()
            os.unlink(path)

    def test_processes_outside_invisible(self):
        p = self.probe("network-read", "pids")
        pids = json.loads(p.stdout)
        self.assertLessEqual(max(pids), 10)  # a fresh PID namespace: init, sh/python and little else
        self.assertEqual(self.probe("network-read", "kill-outside", str(os.getpid())).returncode, 1)

    # --- exit statuses and signals ---------------------------------------------------------
    def test_exit_statuses(self):
        cases = [(["true"], 0), (["false"], 1), (["sh", "-c", "exit 42"], 42),
                 (["sh", "-c", "kill -KILL $$"], 137), ([PYTHON, PROBE, "segv"], 139),
                 (["/nonexistent/command"], 127), (["no-such-command-sluice"], 127),
                 ([os.path.join(M["tmp"], "origin-ca.pem")], 126)]
        for argv, want in cases:
            for profile in ("offline", "network-read"):
                p = self.sx("--sandbox-profile", profile, "--", *argv)
                self.assertEqual(p.returncode, want, (argv, profile, p.stderr))
        p = self.sx("--sandbox-profile", "offline", "--", "no-such-command-sluice")
        self.assertIn(b"command not found", p.stderr)

    def test_refusals_are_125_with_one_line(self):
        cases = [
            (["--sandbox-profile", "bogus", "--", "true"], "unknown --sandbox-profile"),
            (["--skill", "nope", "--", "true"], "unknown skill 'nope'"),
            (["--skill", "reviewer", "--sandbox-profile", "allowlist", "--", "true"], "not allowed for skill 'reviewer'"),
            (["--sandbox-profile", "network-read", "--allow-domain", "re:([", "--", "true"], "bad regex"),
            (["--sandbox-profile", "network-read", "true"], "needs `--`"),
            (["--sandbox-profile", "network-read", "--"], "no command given"),
        ]
        for args, msg in cases:
            p = self.sx(*args)
            self.assertEqual(p.returncode, 125, args)
            self.assertIn(msg, p.stderr.decode(), args)
            self.assertEqual(len(p.stderr.decode().strip().splitlines()), 1, p.stderr)

    def test_argv_passed_untouched(self):
        argv = ["a b", "", "--flag", "-x", "quote\"d", "it's", "$HOME", "*", "--", "ünï"]
        p = self.sx("--sandbox-profile", "offline", "--", PYTHON, PROBE, "argv", *argv)
        self.assertEqual(json.loads(p.stdout), argv)

    def _signal_reaches_command(self, sig):
        out = os.path.join(self.work, "trap")
        cmd = self.prefix() + [SLUICE, "exec", "--policy", M["policy"], "--sandbox-profile", "network-read",
                               "--", PYTHON, PROBE, "trap", out]
        p = subprocess.Popen(cmd, env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=self.work)
        for _ in range(200):
            if os.path.exists(out + ".ready"):
                break
            time.sleep(0.02)
        p.send_signal(sig)
        _, err = p.communicate(timeout=20)
        self.assertEqual(p.returncode, 7, err)
        self.assertEqual(open(out).read(), str(int(sig)))
        self.assertNoLeftovers()

    def test_sigint_reaches_command(self):
        self._signal_reaches_command(signal.SIGINT)

    def test_sigterm_reaches_command(self):
        self._signal_reaches_command(signal.SIGTERM)

    def test_nothing_left_when_sluice_is_killed(self):
        marker = "sluice-marker-%d-%s" % (os.getpid(), self.user)
        cmd = self.prefix() + [SLUICE, "exec", "--policy", M["policy"], "--sandbox-profile", "network-read",
                               "--", "sh", "-c", "touch %s/ready; sleep 300 & sleep 300; : %s" % (self.work, marker)]
        p = subprocess.Popen(cmd, env=self.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(500):
            if os.path.exists(os.path.join(self.work, "ready")):
                break
            time.sleep(0.02)
        p.kill()
        p.wait()
        for _ in range(200):
            alive = subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0
            if not alive:
                break
            time.sleep(0.05)
        self.assertNotEqual(subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode, 0)
        self.assertNoLeftovers()

    # --- fail closed -----------------------------------------------------------------------
    def test_fail_closed_at_every_setup_step(self):
        marker = os.path.join(self.work, "ran")
        for step in ("policy", "namespaces", "loopback", "capture", "fd_handoff", "mounts", "ca", "private_dir",
                     "landlock", "seccomp", "setsid"):
            for profile in ("network-read", "offline"):
                if profile == "offline" and step in ("ca", "capture"):
                    continue  # offline makes no CA and has no network to capture
                p = self.sx("--sandbox-profile", profile, "--", "touch", marker, env={"SLUICE_FAULT": step})
                self.assertEqual(p.returncode, 125, (step, profile, p.stderr))
                self.assertFalse(os.path.exists(marker), (step, profile))
                self.assertIn(step if step != "policy" else "policy", p.stderr.decode())
        # An unusable TMPDIR no longer matters: sluice writes nothing on the host.
        p = self.sx("--sandbox-profile", "network-read", "--", "true", env={"TMPDIR": "/nonexistent/dir"})
        self.assertEqual(p.returncode, 0, p.stderr)
        # Real failure, no injection: a broken policy file.
        bad = os.path.join(self.work, "bad.toml")
        with open(bad, "w") as f:
            f.write("[skills.default\n")
        os.chmod(bad, 0o644)
        p = subprocess.run(self.prefix() + [SLUICE, "exec", "--policy", bad, "--", "touch", marker],
                           capture_output=True, env=self.env())
        self.assertEqual(p.returncode, 125)
        self.assertIn(bad + ":1:", p.stderr.decode())
        self.assertFalse(os.path.exists(marker))
        self.assertNoLeftovers()

    def test_doctor(self):
        p = subprocess.run(self.prefix() + [SLUICE, "doctor", "--json"], capture_output=True, env=self.env())
        self.assertEqual(p.returncode, 0, p.stdout)
        d = json.loads(p.stdout)
        self.assertTrue(d["runnerReady"])
        self.assertEqual({c["name"] for c in d["checks"]},
                         {"platform", "user_namespaces", "network_namespaces", "loopback", "capture", "fd_handoff", "mounts", "ca",
                          "private_dir", "landlock", "seccomp", "nested_userns", "setsid"})
        nested = [c for c in d["checks"] if c["name"] == "nested_userns"][0]
        self.assertTrue(nested["ok"])
        self.assertTrue(nested["detail"].startswith("nested user namespaces refused"), nested)
        p = subprocess.run(self.prefix() + [SLUICE, "doctor", "--json"], capture_output=True,
                           env=self.env({"SLUICE_FAULT": "loopback"}))
        self.assertNotEqual(p.returncode, 0)
        d = json.loads(p.stdout)
        self.assertFalse(d["runnerReady"])
        self.assertFalse([c for c in d["checks"] if c["name"] == "loopback"][0]["ok"])

    # --- environment -----------------------------------------------------------------------
    def test_credentials_scrubbed_and_granted(self):
        creds = {"GITHUB_TOKEN": "ghp_x", "MY_API_KEY": "k", "AWS_SECRET_ACCESS_KEY": "s",
                 "DB_PASSWORD": "p", "SSH_AUTH_SOCK": "/tmp/agent", "NPM_TOKEN": "n", "HTTPS_PROXY": "http://evil:1"}
        p = self.sx("--sandbox-profile", "network-read", "--", PYTHON, PROBE, "env", env=creds)
        env = json.loads(p.stdout)
        for name in creds:
            if name == "HTTPS_PROXY":
                self.assertEqual(env[name], "http://127.0.0.1:3128")
            else:
                self.assertNotIn(name, env)
        self.assertEqual(env["LANG"], "C.UTF-8")
        self.assertTrue(env["SSL_CERT_FILE"].endswith("/ca.pem"))
        self.assertNotIn("JAVA_TOOL_OPTIONS", env)  # the JVM is captured and trusts the view's cacerts
        p = self.sx("--sandbox-profile", "network-read", "--allow-env", "GITHUB_TOKEN", "--", PYTHON, PROBE, "env", env=creds)
        env = json.loads(p.stdout)
        self.assertEqual(env["GITHUB_TOKEN"], "ghp_x")
        self.assertNotIn("MY_API_KEY", env)
        p = self.sx("--sandbox-profile", "network-read", "--allow-env", "MY_API_KEY", "--", "true", env=creds)
        self.assertEqual(p.returncode, 125)
        self.assertIn("does not grant it", p.stderr.decode())
        p = self.sx("--sandbox-profile", "allowlist", "--allow-env", "GITHUB_TOKEN", "--", "true", env=creds)
        self.assertEqual(p.returncode, 125)
        self.assertIn("no credential grants", p.stderr.decode())

    def test_repository_policy_only_narrows(self):
        repo = os.path.join(self.work, "repo")
        os.makedirs(os.path.join(repo, ".sluice"))
        with open(os.path.join(repo, ".sluice", "policy.toml"), "w") as f:
            f.write('profile = "allowlist"\n')
        subprocess.run(["chmod", "-R", "a+rwX", repo])
        p = self.sx("--sandbox-profile", "network-read", "--", "true", cwd=repo)
        self.assertEqual(p.returncode, 125)
        self.assertIn("may only narrow", p.stderr.decode())
        with open(os.path.join(repo, ".sluice", "policy.toml"), "w") as f:
            f.write('[policy]\nallow = ["origin.test:8443", "evil.test"]\ndeny = ["origin.test:8443"]\n')
        p = self.sx("--sandbox-profile", "network-read", "--", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                    "https://origin.test:8443/", cwd=repo)
        self.assertEqual(p.stdout, b"000")  # denied at CONNECT by the repository's deny rule
        with open(os.path.join(repo, ".sluice", "policy.toml"), "w") as f:
            f.write('[upstream]\nallow_addresses = ["0.0.0.0/0"]\n')
        p = self.sx("--sandbox-profile", "network-read", "--", "true", cwd=repo)
        self.assertEqual(p.returncode, 125)
        self.assertIn("not allowed here", p.stderr.decode())


class ExecAsNobody(ExecAsRoot):
    """The same suite as an unprivileged user, through user namespaces."""
    user = 65534


if __name__ == "__main__":
    unittest.main()
