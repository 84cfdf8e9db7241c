"""Conformance of the Claude Code adapter: the real host (installed from the npm registry into a
cache outside the repository, at the version this project follows and at the minimum version whose
rewrite holds), driven headlessly against a fake model server on 127.0.0.1, with `sluice adapter
install claude` as its only configuration. Run as root and as 65534."""
import base64
import fcntl
import functools
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SLUICE = os.path.abspath(os.environ.get("SLUICE_BIN") or os.path.join(HERE, "../../build/default/sluice"))
PYTHON = "/usr/bin/python3"
CACHE = os.environ.get("SLUICE_HOSTS_CACHE", "/var/cache/sluice-test-hosts")
CURRENT, MINIMUM = "2.1.332", "2.0.10"
ARGS_CMD = "printf '[%s]' \"a b\" 'c\"d' '$HOME' \"it's\" '*'"


# The minimum version of each host runs as 65534 in CI, and as root too with SLUICE_HOSTS_FULL=1:
# root against 65534 is compared at the current version, where sluice's own difference lies (its
# view is built another way for root); what differs between versions is the host's.
full_matrix = unittest.skipUnless(os.environ.get("SLUICE_HOSTS_FULL"),
                                  "the minimum version as root runs with SLUICE_HOSTS_FULL=1")


def prompt_for(tool, tool_input):
    """The prompt that makes fake_model.py ask for exactly this tool call."""
    call = json.dumps({"tool": tool, "input": tool_input})
    return "SLUICE-CALL:" + base64.b64encode(call.encode()).decode()


def sluice_on_path(directory):
    """A directory with `sluice` (the binary under test) for the hosts' PATH, as an installed sluice
    is: the hook asks a person only about commands whose first word is this sluice."""
    d = os.path.join(directory, "bin")
    os.makedirs(d, exist_ok=True)
    os.chmod(d, 0o755)
    if not os.path.islink(os.path.join(d, "sluice")):
        os.symlink(SLUICE, os.path.join(d, "sluice"))
    return d


def server_cert(directory, name):
    """A CA of the test's and a certificate for `name` from it: (cert, key, ca), readable by all."""
    d = os.path.join(directory, "tls-" + name)
    os.makedirs(d, exist_ok=True)
    run = lambda *c: subprocess.run(list(c), check=True, capture_output=True)
    run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", d + "/ca.key", "-out", d + "/ca.pem", "-days", "2", "-subj", "/CN=test CA for " + name)
    run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", d + "/server.key", "-out", d + "/server.csr", "-subj", "/CN=" + name)
    with open(d + "/ext", "w") as f:
        f.write("subjectAltName=DNS:%s\n" % name)
    run("openssl", "x509", "-req", "-in", d + "/server.csr", "-CA", d + "/ca.pem", "-CAkey", d + "/ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", d + "/ext", "-out", d + "/server.pem")
    subprocess.run(["chmod", "-R", "a+rX", d], check=True)
    return d + "/server.pem", d + "/server.key", d + "/ca.pem"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def install_lock(install):
    """Runs an install into the shared cache one process at a time: suites running side by side may
    want the same host version, and two npm installs into one prefix break each other. With the
    cache filled it only checks and returns."""
    @functools.wraps(install)
    def locked(*args):
        os.makedirs(CACHE, exist_ok=True)
        with open(os.path.join(CACHE, ".install.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return install(*args)
    return locked


@install_lock
def install_claude(version):
    """The host from the npm registry, once per version, into the cache. npm leaves the launcher a
    placeholder when install scripts do not run; the platform package's binary works directly."""
    prefix = os.path.join(CACHE, "claude-" + version)
    mods = os.path.join(prefix, "node_modules", "@anthropic-ai")
    native = os.path.join(mods, "claude-code-linux-x64", "claude")
    script = os.path.join(mods, "claude-code", "cli.js")
    if not (os.path.exists(native) or os.path.exists(script)):
        os.makedirs(prefix, exist_ok=True)
        p = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", prefix,
                            "@anthropic-ai/claude-code@" + version], capture_output=True, timeout=600)
        if p.returncode != 0:
            raise AssertionError("npm could not install Claude Code %s: %s" % (version, p.stderr.decode()[-2000:]))
        subprocess.run(["chmod", "-R", "a+rX", CACHE], check=True)
    path = native if os.path.exists(native) else script
    bindir = os.path.join(prefix, "sluice-bin")
    os.makedirs(bindir, exist_ok=True)
    link = os.path.join(bindir, "claude")
    if not os.path.islink(link):
        os.symlink(path, link)
    subprocess.run(["chmod", "-R", "a+rX", prefix], check=True)
    return bindir


# The description in deploy/hosts/skill/SKILL.md, as the hosts list it to the model.
SKILL_DESCRIPTION = "Your shell commands run inside the sluice sandbox"


def skill_in_requests(path):
    """Whether a request logged by fake_model.py (FAKE_MODEL_LOG) names the sluice skill and
    carries its description."""
    if not os.path.exists(path):
        return False
    with open(path) as f:
        for line in f:
            text = json.dumps(json.loads(line)["request"])
            if SKILL_DESCRIPTION in text and "sluice" in text.replace(SKILL_DESCRIPTION, ""):
                return True
    return False


class FakeModel:
    def __init__(self, directory, tls=()):
        self.results = os.path.join(directory, "results.jsonl")
        self.requests = os.path.join(directory, "requests.jsonl")  # every request the model got
        self.port = free_port()
        self.proc = subprocess.Popen([PYTHON, os.path.join(HERE, "fake_model.py"), str(self.port), self.results] + list(tls),
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=dict(os.environ, FAKE_MODEL_LOG=self.requests))
        assert self.proc.stdout.readline().strip() == b"ready"

    def take(self):
        if not os.path.exists(self.results):
            return []
        with open(self.results) as f:
            out = [json.loads(l) for l in f if l.strip()]
        os.unlink(self.results)
        return out

    def close(self):
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()


class HostLoopback:
    """A service on the host's loopback: a command inside sluice must not reach it. Each connection
    is served on a thread of its own and answered only after its request head has arrived (so that
    one slow or idle connection holds up no other, and no answer races an unread request into a
    reset); `hits` counts connections, `requests` the request lines that arrived."""

    def __init__(self, tls=()):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.hits = 0
        self.requests = []
        self.lock = threading.Lock()
        self.tls = None
        if tls:  # HTTPS with (cert, key)
            self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.tls.load_cert_chain(*tls)
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.hits += 1
            threading.Thread(target=self.answer, args=(c,), daemon=True).start()

    def answer(self, c):
        try:
            c.settimeout(20)
            if self.tls:
                c = self.tls.wrap_socket(c, server_side=True)
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = c.recv(65536)
                if not chunk:
                    break
                head += chunk
            with self.lock:
                self.requests.append(head.split(b"\r\n", 1)[0].decode(errors="replace"))
            c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nHOSTREPLY")
        except (OSError, ValueError):
            pass
        finally:
            c.close()

    def close(self):
        self.sock.close()


POLICY = """
[skills.agent]
default_profile = "offline"
escalations = ["network-read"]
allow_domains = ["origin.test"]

[skills.locked]
default_profile = "offline"
"""


class ClaudeCase(unittest.TestCase):
    version = CURRENT
    user = None

    @classmethod
    def setUpClass(cls):
        cls.bindir = install_claude(cls.version)
        cls.tmp = tempfile.mkdtemp(prefix="sluice-claude-")
        os.chmod(cls.tmp, 0o755)
        cls.model = FakeModel(cls.tmp)
        cls.sluice_dir = sluice_on_path(cls.tmp)
        cls.policy = os.path.join(cls.tmp, "policy.toml")
        with open(cls.policy, "w") as f:
            f.write(POLICY)
        os.chmod(cls.policy, 0o644)
        cls.loopback = HostLoopback()

    @classmethod
    def tearDownClass(cls):
        cls.model.close()
        cls.loopback.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="case-", dir=self.tmp)
        self.home = os.path.join(self.work, "home")
        self.proj = os.path.join(self.work, "proj")
        for d in (self.work, self.home, self.proj):
            os.makedirs(d, exist_ok=True)
            os.chmod(d, 0o777)
        if self.user is not None:
            subprocess.run(["chown", "-R", "%d:%d" % (self.user, self.user), self.work], check=True)
        self.model.take()
        if os.path.exists(self.model.requests):
            os.unlink(self.model.requests)

    def prefix(self):
        if self.user is None:
            return []
        return ["setpriv", "--reuid=%d" % self.user, "--regid=%d" % self.user, "--clear-groups"]

    def env(self, extra=None):
        e = {"PATH": self.bindir + ":" + self.sluice_dir + ":/usr/local/bin:/usr/bin:/bin", "HOME": self.home,
             "LANG": "C.UTF-8", "ANTHROPIC_BASE_URL": "http://127.0.0.1:%d" % self.model.port, "ANTHROPIC_API_KEY": "x",
             "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}
        e.update(extra or {})
        return e

    def sluice(self, *args, binary=SLUICE, check=True):
        p = subprocess.run(self.prefix() + [binary] + list(args), capture_output=True, env=self.env(),
                           cwd=self.proj, timeout=60)
        if check:
            self.assertEqual(p.returncode, 0, p.stderr.decode())
        return p

    def install(self, skill="agent", binary=SLUICE):
        self.sluice("adapter", "install", "claude", "--skill", skill, "--policy", self.policy, binary=binary)

    def claude(self, tool, command, env=None, one_result=True, args=(), **extra_input):
        call = prompt_for(tool, dict({"command": command, "description": "conformance"}, **extra_input))
        p = subprocess.run(self.prefix() + ["claude", "-p", call, "--output-format", "stream-json",
                                            "--verbose"] + list(args), capture_output=True, env=self.env(env),
                           cwd=self.proj, timeout=180)
        results = self.model.take()
        if one_result:
            self.assertEqual(len(results), 1, "the model saw no tool result: %s %s" % (p.stdout[-3000:], p.stderr[-2000:]))
        return results[0] if results else None

    def host_netns(self):
        return os.readlink("/proc/self/ns/net")

    # --- the shell runs inside sluice -----------------------------------------------------------
    def test_shell_runs_inside_sluice_with_arguments_and_status(self):
        self.install()
        r = self.claude("Bash", "readlink /proc/self/ns/net; %s; exit 7" % ARGS_CMD)
        self.assertIn("net:[", r["content"])
        inner = [l for l in r["content"].splitlines() if l.startswith("net:[")][0]
        self.assertNotEqual(inner, self.host_netns())
        self.assertIn("""[a b][c"d][$HOME][it's][*]""", r["content"])
        self.assertTrue(r["is_error"])
        if self.version == CURRENT:
            self.assertIn("Exit code 7", r["content"])

    def test_agent_skill_is_advertised_and_removed(self):
        """The adapter installs sluice's agent skill where Claude finds skills: the model sees its
        name and description in the request (the Skill tool; a slash command on the minimum
        version), and remove takes it away."""
        self.install()
        skill = os.path.join(self.home, ".claude", "skills", "sluice", "SKILL.md")
        self.assertTrue(os.path.isfile(skill))
        self.claude("Bash", "true")
        self.assertTrue(skill_in_requests(self.model.requests), "no request to the model lists the sluice skill")
        self.sluice("adapter", "remove", "claude")
        self.assertFalse(os.path.exists(skill))

    def test_default_profile_and_declared_escalation(self):
        self.install()
        r = self.claude("Bash", "echo proxy=${HTTPS_PROXY:-none}")
        self.assertIn("proxy=none", r["content"])  # the skill's default: offline
        r = self.claude("Bash", "sluice exec --sandbox-profile network-read -- echo proxy=$HTTPS_PROXY")
        self.assertIn("proxy=http://", r["content"])  # a declared escalation
        self.install(skill="locked")
        marker = os.path.join(self.proj, "ran")
        r = self.claude("Bash", "sluice exec --sandbox-profile network-read -- touch %s" % marker)
        self.assertTrue(r["is_error"])
        self.assertIn("refused", r["content"])
        self.assertFalse(os.path.exists(marker))
        r = self.claude("Bash", "sluice exec --allow-domain evil.test -- touch %s" % marker)
        self.assertIn("cannot be chosen by the agent", r["content"])
        self.assertFalse(os.path.exists(marker))

    def test_workspace_and_home_boundaries(self):
        self.install()
        secret_dir = os.path.join(self.home, ".ssh")
        os.makedirs(secret_dir)
        with open(os.path.join(secret_dir, "id_ed25519"), "w") as f:
            f.write("SECRETKEY\n")
        if self.user is not None:
            subprocess.run(["chown", "-R", "%d:%d" % (self.user, self.user), self.home], check=True)
        escape = os.path.join(self.home, "escape.txt")
        r = self.claude("Bash", "cat %s/.ssh/id_ed25519; echo inside > written.txt; echo x > %s; ls ~" %
                        (self.home, escape))
        self.assertNotIn("SECRETKEY", r["content"])
        with open(os.path.join(self.proj, "written.txt")) as f:
            self.assertEqual(f.read(), "inside\n")
        self.assertFalse(os.path.exists(escape))

    def test_network_denied_through_the_host(self):
        self.install()
        before = self.loopback.hits
        r = self.claude("Bash", "curl -sS --max-time 5 http://127.0.0.1:%d/ ; echo rc=$?" % self.loopback.port)
        self.assertNotIn("HOSTREPLY", r["content"])
        self.assertNotIn("rc=0", r["content"])
        self.assertEqual(self.loopback.hits, before)
        # The same command outside sluice reaches it: the test can fail.
        out = subprocess.run(["curl", "-sS", "--max-time", "5", "http://127.0.0.1:%d/" % self.loopback.port],
                             capture_output=True)
        self.assertEqual(out.stdout, b"HOSTREPLY")

    # --- failing closed -------------------------------------------------------------------------
    def test_runner_not_ready_refuses(self):
        self.install()
        marker = os.path.join(self.proj, "ran")
        r = self.claude("Bash", "touch %s" % marker, env={"SLUICE_FAULT": "namespaces"})
        self.assertTrue(r["is_error"])
        self.assertIn("cannot sandbox", r["content"])
        self.assertFalse(os.path.exists(marker))

    def test_missing_or_crashing_sluice_refuses(self):
        copy = os.path.join(self.work, "sluice-copy")
        shutil.copy(SLUICE, copy)
        os.chmod(copy, 0o755)
        self.install(binary=copy)
        marker = os.path.join(self.proj, "ran")
        os.unlink(copy)  # sluice is gone
        r = self.claude("Bash", "touch %s" % marker)
        self.assertTrue(r["is_error"])
        self.assertFalse(os.path.exists(marker))
        with open(copy, "w") as f:  # sluice crashes
            f.write("#!/bin/sh\nkill -SEGV $$\n")
        os.chmod(copy, 0o755)
        r = self.claude("Bash", "touch %s" % marker)
        self.assertTrue(r["is_error"])
        self.assertFalse(os.path.exists(marker))


    # --- approvals: what the policy lets a person approve goes to Claude's own prompt ----------
    def install_asker(self):
        path = os.path.join(self.work, "ask-policy.toml")
        with open(path, "w") as f:
            f.write('[skills.asker]\ndefault_profile = "network-read"\nask_domains = ["*.ask.test:%d"]\n'
                    '[upstream]\nallow_addresses = ["127.0.0.1/32"]\n[upstream.resolve]\n'
                    '"api.ask.test" = "127.0.0.1"\n"other.ask.test" = "127.0.0.1"\n' % self.loopback.port)
        os.chmod(path, 0o644)
        self.sluice("adapter", "install", "claude", "--skill", "asker", "--policy", path)

    def with_person(self, answer):
        """Claude's permission prompt answered by a person: --permission-prompt-tool, the prompt of
        headless Claude, served by approver_mcp.py. Returns (the arguments, the log of questions)."""
        log = os.path.join(self.work, "asked-%s.jsonl" % answer)
        mcp = {"mcpServers": {"person": {"command": PYTHON, "args": [os.path.join(HERE, "approver_mcp.py")],
                                         "env": {"APPROVER_ANSWER": answer, "APPROVER_LOG": log}}}}
        return ["--mcp-config", json.dumps(mcp), "--permission-prompt-tool", "mcp__person__approve"], log

    def questions(self, log):
        if not os.path.exists(log):
            return []
        with open(log) as f:
            return [json.loads(l) for l in f if l.strip()]

    def test_an_approved_domain_holds_for_that_command_only(self):
        self.install_asker()
        port = self.loopback.port
        args, log = self.with_person("allow")
        command = ("sluice exec --allow-domain api.ask.test:%d -- sh -c 'curl -s -m 5 http://api.ask.test:%d/; "
                   "echo; curl -s -m 5 -o /dev/null -w other=%%{http_code} http://other.ask.test:%d/'" % (port, port, port))
        r = self.claude("Bash", command, args=args)
        asked = self.questions(log)
        if self.version == MINIMUM:
            # This Claude runs the original command when a hook asks: the hook refuses instead.
            self.assertEqual(asked, [])
            self.assertIn("update Claude Code", r["content"])
            self.assertNotIn("HOSTREPLY", r["content"])
            return
        self.assertEqual(len(asked), 1, r["content"])
        self.assertIn("--allow-domain api.ask.test:%d -- " % port, asked[0]["input"]["command"])  # the rewrite
        self.assertIn("HOSTREPLY", r["content"])  # the approved name, through sluice's gateway
        self.assertIn("other=403", r["content"])  # and nothing else
        r = self.claude("Bash", "curl -s -m 5 -o /dev/null -w again=%%{http_code} http://api.ask.test:%d/" % port,
                        args=args)
        self.assertIn("again=403", r["content"])  # not remembered
        self.assertEqual(len(self.questions(log)), 1)  # and nothing asked

    def test_a_declined_or_unattended_approval_runs_nothing(self):
        self.install_asker()
        marker = os.path.join(self.proj, "ran")
        command = "sluice exec --allow-domain api.ask.test:%d -- touch %s" % (self.loopback.port, marker)
        args, log = self.with_person("deny")
        r = self.claude("Bash", command, args=args)
        self.assertTrue(r["is_error"])
        self.assertFalse(os.path.exists(marker))
        self.assertEqual(len(self.questions(log)), 0 if self.version == MINIMUM else 1)
        r = self.claude("Bash", command)  # claude -p: no person
        self.assertTrue(r["is_error"])
        self.assertIn("update Claude Code" if self.version == MINIMUM else "for this one command", r["content"])
        self.assertFalse(os.path.exists(marker))
        # What ask_domains does not list is refused without a question.
        args, log = self.with_person("allow")
        r = self.claude("Bash", "sluice exec --allow-domain evil.test -- touch %s" % marker, args=args)
        self.assertIn("cannot be chosen by the agent", r["content"])
        self.assertEqual(self.questions(log), [])
        self.assertFalse(os.path.exists(marker))


class ClaudeCurrentAsRoot(ClaudeCase):
    def test_monitor_is_routed_too(self):
        self.install()
        out = os.path.join(self.proj, "monitor.txt")
        self.claude("Monitor", "readlink /proc/self/ns/net > %s" % out, one_result=False)  # + its notice
        deadline = time.time() + 20
        while time.time() < deadline and not (os.path.exists(out) and os.path.getsize(out)):
            time.sleep(0.2)
        with open(out) as f:
            ns = f.read().strip()
        self.assertTrue(ns.startswith("net:["), ns)
        self.assertNotEqual(ns, self.host_netns())

    def test_status_reports_version_and_verified_hook(self):
        self.install()
        p = self.sluice("adapter", "status", "claude", "--json")
        a = json.loads(p.stdout)["adapters"][0]
        self.assertTrue(a["installed"])
        self.assertEqual(a["version"], CURRENT)
        self.assertTrue(a["atLeastMinimum"])
        self.assertTrue(a["hookVerified"])
        p = self.sluice("adapter", "status", "claude", "--json", check=False)
        self.assertEqual(p.returncode, 0)
        # A runner that cannot sandbox shows as an unverified hook.
        env = self.env({"SLUICE_FAULT": "namespaces"})
        p = subprocess.run([SLUICE, "adapter", "status", "claude", "--json"], capture_output=True, env=env,
                           cwd=self.proj)
        self.assertEqual(p.returncode, 1)
        self.assertFalse(json.loads(p.stdout)["adapters"][0]["hookVerified"])


class ClaudeCurrentAsNobody(ClaudeCase):
    user = 65534


@full_matrix
class ClaudeMinimumAsRoot(ClaudeCase):
    version = MINIMUM


class ClaudeMinimumAsNobody(ClaudeCase):
    version = MINIMUM
    user = 65534


class ClaudeProxyMode(ClaudeCase):
    """The second way to wire sluice into Claude Code: Claude's own sandbox (bubblewrap) with
    `sluice serve` as its HTTP and SOCKS proxy, configured by `sluice adapter install claude --mode
    proxy`. An HTTPS origin on loopback stands for the internet; both profiles."""
    profile = "network-read"
    # The hook-mode checks of ClaudeCase do not apply here.
    test_shell_runs_inside_sluice_with_arguments_and_status = None
    test_default_profile_and_declared_escalation = None
    test_workspace_and_home_boundaries = None
    test_network_denied_through_the_host = None
    test_runner_not_ready_refuses = None
    test_missing_or_crashing_sluice_refuses = None
    test_an_approved_domain_holds_for_that_command_only = None
    test_a_declined_or_unattended_approval_runs_nothing = None

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        for tool in ("/usr/bin/bwrap", "/usr/bin/socat"):
            if not os.path.exists(tool):
                raise AssertionError("%s is missing: Claude Code's sandbox needs bubblewrap and socat "
                                     "(scripts/install-deps.sh installs them)" % tool)
        d = cls.tmp
        run = lambda *c: subprocess.run(list(c), check=True, capture_output=True)
        run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", d + "/origin-ca.key", "-out", d + "/origin-ca.pem", "-days", "2", "-subj", "/CN=origin CA")
        run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", d + "/origin.key", "-out", d + "/origin.csr", "-subj", "/CN=origin.test")
        with open(d + "/ext", "w") as f:
            f.write("subjectAltName=DNS:origin.test\n")
        run("openssl", "x509", "-req", "-in", d + "/origin.csr", "-CA", d + "/origin-ca.pem", "-CAkey",
            d + "/origin-ca.key", "-CAcreateserial", "-days", "2", "-extfile", d + "/ext", "-out", d + "/origin.pem")
        cls.origin_port = free_port()
        cls.origin = subprocess.Popen([PYTHON, os.path.join(HERE, "..", "integration", "origin.py"),
                                       str(cls.origin_port), d + "/origin.pem", d + "/origin.key"],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert cls.origin.stdout.readline().strip() == b"ready"

    @classmethod
    def tearDownClass(cls):
        cls.origin.kill()
        cls.origin.wait()
        cls.origin.stdout.close()
        super().tearDownClass()

    def setUp(self):
        super().setUp()
        self.proxy_port, self.admin_port, self.agent_port = free_port(), free_port(), free_port()
        self.log = os.path.join(self.work, "access.log")
        self.config = os.path.join(self.work, "serve.toml")
        self.bundle = os.path.join(self.work, "bundle.pem")
        with open(self.config, "w") as f:
            f.write('profile = "%s"\n[listen]\nproxy = "127.0.0.1:%d"\nadmin = "127.0.0.1:%d"\n'
                    '[policy]\nallow = ["origin.test:%d"]\n[tls]\nupstream_ca_bundle = "%s"\n'
                    '[upstream]\nallow_addresses = ["127.0.0.1/32"]\n[upstream.resolve]\n"origin.test" = "127.0.0.1"\n'
                    '[log]\naccess_log = "%s"\n' % (self.profile, self.proxy_port, self.admin_port,
                                                     self.origin_port, self.tmp + "/origin-ca.pem", self.log))
            # Claude's own listener: only the test's user may use it.
            f.write('[listen.agents.claude]\naddress = "127.0.0.1:%d"\nuids = [%d]\n'
                    % (self.agent_port, self.user if self.user is not None else 0))
        self.serve = subprocess.Popen([SLUICE, "serve", "--config", self.config, "--ca-bundle-out", self.bundle],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while not os.path.exists(self.bundle) and time.time() < deadline:
            time.sleep(0.05)
        if self.user is not None:
            subprocess.run(["chown", "-R", "%d:%d" % (self.user, self.user), self.work], check=True)

    def tearDown(self):
        self.serve.kill()
        self.serve.wait()
        super().tearDown()

    @staticmethod
    def bridged(cmd):
        """`cmd` (a curl) retried while Claude Code's sandbox bridge is not yet listening: its
        wrapper starts socat in the background and runs the command at once (`socat
        TCP-LISTEN:3128,... & eval CMD` in 2.0.10, the same with 1080 too in 2.1.332), so a
        command's first connection to localhost:3128 can be refused before socat binds (seen once
        in CI). Only a refused
        connection is retried (sluice's answers, 403 included, are not): the host's race, not
        sluice's."""
        assert cmd.startswith("curl ")
        return "curl --retry 5 --retry-connrefused --retry-delay 1 " + cmd[len("curl "):]

    def install_proxy(self):
        self.sluice("adapter", "install", "claude", "--mode", "proxy", "--config", self.config,
                    "--ca-bundle", self.bundle)

    def log_lines(self, ready, timeout=5):
        """The access log's records, without the chain's checkpoint lines (docs/metrics.md), once
        `ready(records)` holds or at the timeout: a line is written after the client has its answer."""
        deadline = time.monotonic() + timeout
        while True:
            with open(self.log) as f:  # a last line without its newline is still being written
                log = [r for r in (json.loads(l) for l in f if l.endswith("\n") and l.strip())
                       if r.get("type") != "checkpoint"]
            if ready(log) or time.monotonic() > deadline:
                return log
            time.sleep(0.05)

    def url(self, path):
        return "https://origin.test:%d%s" % (self.origin_port, path)

    def test_sandboxed_commands_go_through_sluice(self):
        self.install_proxy()
        r = self.claude("Bash", self.bridged("curl -sS -m 10 %s" % self.url("/hello")))
        self.assertIn("hello from origin /hello", r["content"])  # TLS terminated by sluice, trusted
        r = self.claude("Bash", self.bridged("curl -sS -m 10 -X DELETE %s" % self.url("/thing")))
        r2 = self.claude("Bash", self.bridged("curl -sS -m 10 --proxy socks5h://localhost:1080 -X DELETE %s"
                                              % self.url("/other")))
        r3 = self.claude("Bash", self.bridged("curl -sS -m 10 https://exfil.example.net/"))
        log = self.log_lines(lambda log: len([l for l in log if l["method"] == "DELETE"]) >= 2
                             and any(l["host"] == "exfil.example.net" for l in log))
        self.assertTrue(any(l["method"] == "GET" and l["path"] == "/hello" and l["decision"] == "allow" for l in log))
        self.assertTrue(any(l["host"] == "exfil.example.net" and l["decision"] == "deny" for l in log))
        deletes = {l["path"]: l for l in log if l["method"] == "DELETE"}
        self.assertEqual(set(deletes), {"/thing", "/other"})  # the SOCKS route reaches sluice too
        expected = "deny" if self.profile == "network-read" else "allow"
        for l in deletes.values():
            self.assertEqual(l["decision"], expected, l)
        if self.profile == "network-read":
            self.assertIn("method_not_allowed", r["content"])
            self.assertIn("method_not_allowed", r2["content"])

    def test_agent_listener_names_claude_and_refuses_other_users(self):
        self.sluice("adapter", "install", "claude", "--mode", "proxy", "--config", self.config,
                    "--ca-bundle", self.bundle, "--agent", "claude")
        with open(os.path.join(self.home, ".claude", "settings.json")) as f:
            net = json.load(f)["sandbox"]["network"]
        self.assertEqual((net["httpProxyPort"], net["socksProxyPort"]), (self.agent_port, self.agent_port))
        r = self.claude("Bash", self.bridged("curl -sS -m 10 %s" % self.url("/agent")))
        self.assertIn("hello from origin /agent", r["content"])
        # Another user's process on this machine cannot borrow the agent's listener.
        other = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if self.user is None else []
        p = subprocess.run(other + ["curl", "-sS", "-m", "10", "--proxy", "http://127.0.0.1:%d" % self.agent_port,
                                    "--cacert", self.bundle, self.url("/borrowed")], capture_output=True)
        self.assertNotEqual(p.returncode, 0)
        log = self.log_lines(lambda log: any(l["reason"] == "agent_peer_refused" for l in log)
                             and any(l["path"] == "/agent" for l in log))
        self.assertTrue(any(l["path"] == "/agent" and l["agent"] == "claude" and l["decision"] == "allow"
                            for l in log), log)
        self.assertFalse(any(l["path"] == "/borrowed" for l in log))
        self.assertTrue(any(l["reason"] == "agent_peer_refused" and l["agent"] == "claude" for l in log))

    def test_status_sees_a_stale_bundle_and_a_stopped_proxy(self):
        self.install_proxy()
        st = json.loads(self.sluice("adapter", "status", "claude", "--json").stdout)["adapters"][0]
        self.assertEqual(st["mode"], "proxy")
        self.assertTrue(st["hookVerified"], st)
        # A restart without --ca-bundle-out: a new ephemeral CA the bundle does not hold.
        self.serve.kill()
        self.serve.wait()
        self.serve = subprocess.Popen([SLUICE, "serve", "--config", self.config], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
        time.sleep(1)
        st = json.loads(self.sluice("adapter", "status", "claude", "--json", check=False).stdout)["adapters"][0]
        self.assertFalse(st["hookVerified"])
        self.assertTrue(any("stale" in w for w in st["warnings"]), st["warnings"])
        self.serve.kill()
        self.serve.wait()
        st = json.loads(self.sluice("adapter", "status", "claude", "--json", check=False).stdout)["adapters"][0]
        self.assertTrue(any("nothing answers" in w for w in st["warnings"]), st["warnings"])
        # doctor says it too (the runner itself stays ready: proxy mode does not use it).
        d = json.loads(self.sluice("doctor", "--json", check=False).stdout)
        self.assertTrue(d["runnerReady"])
        self.assertTrue(any("nothing answers" in w and "claude proxy mode" in w for w in d["warnings"]), d)

    def test_remove_restores_the_settings(self):
        settings = os.path.join(self.home, ".claude", "settings.json")
        os.makedirs(os.path.dirname(settings))
        original = '{"model": "opus", "sandbox": {"network": {"allowedDomains": ["origin.test"]}}}\n'
        with open(settings, "w") as f:
            f.write(original)
        if self.user is not None:
            subprocess.run(["chown", "-R", "%d:%d" % (self.user, self.user), self.home], check=True)
        self.install_proxy()
        with open(settings) as f:
            s = json.load(f)
        self.assertNotIn("allowedDomains", s["sandbox"]["network"])
        self.assertEqual(s["sandbox"]["network"]["socksProxyPort"], self.proxy_port)
        self.assertFalse(s["sandbox"]["allowUnsandboxedCommands"])
        self.assertEqual(s["env"]["CURL_CA_BUNDLE"], self.bundle)
        self.sluice("adapter", "remove", "claude")
        with open(settings) as f:
            self.assertEqual(f.read(), original)


class ClaudeProxyModePublish(ClaudeProxyMode):
    profile = "publish"

    # The same checks; only the DELETEs are allowed.
    test_status_sees_a_stale_bundle_and_a_stopped_proxy = None
    test_agent_listener_names_claude_and_refuses_other_users = None
    test_remove_restores_the_settings = None


class ClaudeProxyModeAsNobody(ClaudeProxyMode):
    user = 65534


class AdapterFiles(unittest.TestCase):
    """install merges, remove restores the exact previous bytes; bad files are never overwritten."""

    def setUp(self):
        self.home = tempfile.mkdtemp(prefix="sluice-adapter-home-")
        self.settings = os.path.join(self.home, ".claude", "settings.json")

    def tearDown(self):
        shutil.rmtree(self.home, ignore_errors=True)

    def run_sluice(self, *args):
        return subprocess.run([SLUICE] + list(args), capture_output=True, env={"HOME": self.home, "PATH": "/usr/bin:/bin"},
                              cwd=self.home, timeout=60)

    def test_merge_and_exact_restore(self):
        os.makedirs(os.path.dirname(self.settings))
        original = ('{"model": "opus",  "hooks": {"PreToolUse": [{"matcher": "Edit", "hooks": '
                    '[{"type": "command", "command": "my-check"}]}]},\n "env": {"A": "1"}}\n')
        with open(self.settings, "w") as f:
            f.write(original)
        p = self.run_sluice("adapter", "install", "claude", "--skill", "default")
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(self.settings) as f:
            s = json.load(f)
        self.assertEqual(s["model"], "opus")
        self.assertEqual(s["env"], {"A": "1"})
        matchers = [e["matcher"] for e in s["hooks"]["PreToolUse"]]
        self.assertEqual(matchers, ["Edit", "Bash|Monitor"])
        self.assertIn(SLUICE + " hook claude --skill default", s["hooks"]["PreToolUse"][1]["hooks"][0]["command"])
        self.assertEqual(s["sandbox"]["excludedCommands"], [SLUICE + " exec:*"])
        # Installing twice leaves one entry.
        self.assertEqual(self.run_sluice("adapter", "install", "claude", "--skill", "default").returncode, 0)
        with open(self.settings) as f:
            self.assertEqual(len(json.load(f)["hooks"]["PreToolUse"]), 2)
        p = self.run_sluice("adapter", "remove", "claude")
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(self.settings) as f:
            self.assertEqual(f.read(), original)

    def test_restore_of_an_absent_file_removes_what_was_created(self):
        self.assertEqual(self.run_sluice("adapter", "install", "claude").returncode, 0)
        self.assertTrue(os.path.exists(self.settings))
        self.assertEqual(self.run_sluice("adapter", "remove", "claude").returncode, 0)
        self.assertFalse(os.path.exists(os.path.join(self.home, ".claude")))

    def test_edits_after_install_are_kept_on_remove(self):
        self.assertEqual(self.run_sluice("adapter", "install", "claude").returncode, 0)
        with open(self.settings) as f:
            s = json.load(f)
        s["theme"] = "dark"
        with open(self.settings, "w") as f:
            json.dump(s, f)
        p = self.run_sluice("adapter", "remove", "claude")
        self.assertEqual(p.returncode, 0)
        self.assertIn(b"changed since", p.stderr)
        with open(self.settings) as f:
            self.assertEqual(json.load(f), {"theme": "dark"})

    def test_unreadable_or_hook_disabling_settings_are_refused(self):
        os.makedirs(os.path.dirname(self.settings))
        for body, message in (('{"model": ', b"not valid JSON"),
                              ('{"disableAllHooks": true}', b"disableAllHooks")):
            with open(self.settings, "w") as f:
                f.write(body)
            p = self.run_sluice("adapter", "install", "claude")
            self.assertEqual(p.returncode, 125)
            self.assertIn(message, p.stderr)
            with open(self.settings) as f:
                self.assertEqual(f.read(), body)

    def test_install_refuses_when_it_could_only_refuse(self):
        p = self.run_sluice("adapter", "install", "claude", "--skill", "no-such-skill")
        self.assertEqual(p.returncode, 125)
        self.assertIn(b"unknown skill 'no-such-skill'", p.stderr)
        p = subprocess.run([SLUICE, "adapter", "install", "claude"], capture_output=True, cwd=self.home,
                           env={"HOME": self.home, "PATH": "/usr/bin:/bin", "SLUICE_FAULT": "namespaces"})
        self.assertEqual(p.returncode, 125)
        self.assertIn(b"cannot sandbox", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.home, ".claude")))

    def test_host_packages_pack(self):
        # The OpenCode plugin and the Pi extension are npm packages of their own.
        for d in ("opencode", "pi"):
            p = subprocess.run(["npm", "pack", "--dry-run", "--json"], capture_output=True, timeout=120,
                               cwd=os.path.join(HERE, "..", "..", "deploy", "hosts", d))
            self.assertEqual(p.returncode, 0, p.stderr)
            files = [f["path"] for f in json.loads(p.stdout)[0]["files"]]
            self.assertIn({"opencode": "sluice.js", "pi": "index.ts"}[d], files)

    def test_project_scope(self):
        proj = os.path.join(self.home, "proj")
        os.makedirs(proj)
        p = self.run_sluice("adapter", "install", "claude", "--scope", "project", "--dir", proj)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(os.path.exists(os.path.join(proj, ".claude", "settings.json")))
        self.assertFalse(os.path.exists(self.settings))
        # The backup lives outside the project; the agent skill is in the project's skills folder.
        self.assertEqual(sorted(os.listdir(os.path.join(proj, ".claude"))), ["settings.json", "skills"])
        self.assertEqual(os.listdir(os.path.join(proj, ".claude", "skills", "sluice")), ["SKILL.md"])
        self.assertEqual(self.run_sluice("adapter", "remove", "claude", "--scope", "project", "--dir", proj).returncode, 0)
        self.assertEqual(os.listdir(proj), [])


def load_tests(loader, tests, pattern):
    # ClaudeCase is the shared body of the classes below, not a configuration of its own.
    suite = unittest.TestSuite()
    for group in tests:
        for test in group:
            if type(test) is not ClaudeCase:
                suite.addTest(test)
    return suite


if __name__ == "__main__":
    unittest.main()
