"""Unix sockets granted one at a time (`--allow-unix-socket`, `--allow-root-equivalent-socket`,
[skills.NAME] unix_sockets; docs/policy.md, "Unix sockets"): a real server's socket granted is usable
inside while its neighbour in the same directory is absent; a path that is not a socket is refused
with nothing run; a socket named as Docker's (or a symlink to one) is refused unless the entry says it
knows, and then every run says so on stderr; a repository's .sluice/ cannot grant one; `sluice check
unix:PATH` answers as exec does. As root and as 65534."""
import json
import os
import shutil
import socketserver
import subprocess
import tempfile
import threading
import unittest

from harness import PYTHON, SLUICE

M = {}  # module fixtures

# Inside the sandbox: what the directory holds, then a line sent to each path and the answer.
CLIENT = r"""
import os, socket, sys
d = sys.argv[1]
print("listing", sorted(os.listdir(d)) if os.path.isdir(d) else None)
for p in sys.argv[2:]:
    try:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        s.connect(p)
        s.sendall(b"ping\n")
        print(os.path.basename(p), s.makefile().readline().strip())
    except OSError as e:
        print(os.path.basename(p), type(e).__name__)
"""


class Echo(socketserver.StreamRequestHandler):
    def handle(self):
        line = self.rfile.readline().strip()
        self.wfile.write(b"pong:" + self.server.name + b":" + line + b"\n")


def load(path):
    with open(path) as f:
        return json.load(f)


def serve(path, name):
    srv = socketserver.ThreadingUnixStreamServer(path, Echo)
    srv.name = name.encode()
    srv.daemon_threads = True
    os.chmod(path, 0o666)  # connect() needs write permission, also for 65534
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    M.setdefault("servers", []).append(srv)


def setUpModule():
    if os.geteuid() != 0:
        raise unittest.SkipTest("the suite runs sluice as root and as 65534 (setpriv) and needs root")
    d = M["tmp"] = tempfile.mkdtemp(prefix="sluice-unix-test-")
    os.chmod(d, 0o755)
    for sub in ("svc", "engine"):
        os.makedirs(os.path.join(d, sub), mode=0o755)
        os.chmod(os.path.join(d, sub), 0o755)
    M["app"], M["other"] = os.path.join(d, "svc", "app.sock"), os.path.join(d, "svc", "other.sock")
    serve(M["app"], "app")
    serve(M["other"], "other")
    M["plain"] = os.path.join(d, "svc", "plain.txt")
    with open(M["plain"], "w") as f:
        f.write("not a socket\n")
    os.chmod(M["plain"], 0o644)
    # A socket named as Docker's, and an innocent-looking symlink to it.
    M["docker"] = os.path.join(d, "engine", "docker.sock")
    serve(M["docker"], "engine")
    M["innocent"] = os.path.join(d, "svc", "innocent.sock")
    os.symlink(M["docker"], M["innocent"])
    M["policy"] = os.path.join(d, "policy.toml")
    with open(M["policy"], "w") as f:
        f.write(f"""
[skills.default]
default_profile = "offline"
unix_sockets = ["{M['app']}"]

[skills.engine]
default_profile = "offline"
unix_sockets = [{{ path = "{M['innocent']}", root_equivalent = true }}]

[skills.careless]
default_profile = "offline"
unix_sockets = ["{M['innocent']}"]

[skills.none]
default_profile = "offline"
""")
    os.chmod(M["policy"], 0o644)


def tearDownModule():
    for srv in M.get("servers", []):
        srv.shutdown()
        srv.server_close()
    if "tmp" in M:
        shutil.rmtree(M["tmp"], ignore_errors=True)


class UnixSocketsAsRoot(unittest.TestCase):
    user = None

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="sluice-unix-case-")
        os.chmod(self.work, 0o777)
        self.home = os.path.join(self.work, "home")
        os.makedirs(self.home)
        os.chmod(self.home, 0o777)
        self.addCleanup(shutil.rmtree, self.work, True)

    def prefix(self):
        if self.user is None:
            return []
        return ["setpriv", "--reuid=%d" % self.user, "--regid=%d" % self.user, "--clear-groups"]

    def run_as(self, args, cwd=None):
        env = {"PATH": "/usr/bin:/bin", "HOME": self.home, "LANG": "C.UTF-8"}
        return subprocess.run(self.prefix() + args, capture_output=True, env=env, timeout=60, cwd=cwd or self.work)

    def sx(self, *args, skill="none", cwd=None):
        return self.run_as([SLUICE, "exec", "--policy", M["policy"], "--skill", skill] + list(args), cwd=cwd)

    def client(self, *args, skill="none", summary=None):
        """The client inside the sandbox, listing the service directory and asking every socket."""
        extra = ["--json-summary", summary] if summary else []
        paths = [M["app"], M["other"], M["innocent"], M["docker"]]
        return self.sx(*(list(args) + extra + ["--", PYTHON, "-c", CLIENT, os.path.dirname(M["app"])] + paths),
                       skill=skill)

    def answers(self, p):
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        return dict(line.split(" ", 1) for line in p.stdout.decode().splitlines())

    def check(self, path, skill=None):
        return self.run_as([SLUICE, "check", "--policy", M["policy"]] + (["--skill", skill] if skill else []) +
                           ["unix:" + path])

    # --- granted -------------------------------------------------------------------------------
    def test_granted_socket_is_usable_and_its_neighbours_absent(self):
        summary = os.path.join(self.work, "summary.json")
        a = self.answers(self.client("--allow-unix-socket", M["app"], summary=summary))
        self.assertEqual(a["app.sock"], "pong:app:ping")
        self.assertEqual(a["listing"], "['app.sock']")  # neither other.sock, plain.txt nor the symlink
        self.assertEqual(a["other.sock"], "FileNotFoundError")
        self.assertEqual(a["docker.sock"], "FileNotFoundError")
        s = load(summary)
        self.assertEqual(s["unixSockets"], [{"path": M["app"], "resolved": os.path.realpath(M["app"]),
                                             "rootEquivalent": False, "grantedBy": "--allow-unix-socket"}])
        # The neighbour is served (the test could fail): from outside, it answers.
        outside = self.answers(self.run_as([PYTHON, "-c", CLIENT, "/nonexistent", M["other"]]))
        self.assertEqual(outside["other.sock"], "pong:other:ping")

    def test_nothing_granted_nothing_shows(self):
        a = self.answers(self.client())
        self.assertEqual(a["listing"], "None")
        for n in ("app.sock", "other.sock", "innocent.sock", "docker.sock"):
            self.assertEqual(a[n], "FileNotFoundError")

    def test_skill_key_grants_its_socket(self):
        a = self.answers(self.client(skill="default"))
        self.assertEqual(a["app.sock"], "pong:app:ping")
        self.assertEqual(a["other.sock"], "FileNotFoundError")

    # --- refused -------------------------------------------------------------------------------
    def test_not_a_socket_is_refused_and_nothing_runs(self):
        marker = os.path.join(self.work, "ran")
        for path, why in ((M["plain"], "is a regular file, not a Unix socket"),
                          (os.path.dirname(M["app"]), "is a directory, not a Unix socket"),
                          (M["app"] + ".missing", "No such file or directory")):
            p = self.sx("--allow-unix-socket", path, "--", "touch", marker)
            err = p.stderr.decode()
            self.assertEqual(p.returncode, 125, err)
            self.assertIn(path, err)
            self.assertIn(why, err)
            self.assertFalse(os.path.exists(marker))

    def test_root_equivalent_needs_its_acknowledgement(self):
        for path in (M["docker"], M["innocent"]):  # by its name, and through a harmless-looking symlink
            p = self.sx("--allow-unix-socket", path, "--", "true")
            err = p.stderr.decode()
            self.assertEqual(p.returncode, 125, err)
            self.assertIn("docker.sock", err)
            self.assertIn("--allow-root-equivalent-socket " + path, err)
        p = self.sx("--", "true", skill="careless")
        self.assertEqual(p.returncode, 125)
        self.assertIn("root_equivalent = true", p.stderr.decode())
        summary = os.path.join(self.work, "summary.json")
        p = self.client("--allow-root-equivalent-socket", M["innocent"], summary=summary)
        a = self.answers(p)
        self.assertEqual(a["innocent.sock"], "pong:engine:ping")  # at the path granted,
        self.assertEqual(a["docker.sock"], "pong:engine:ping")    # and at its real path
        self.assertEqual(a["app.sock"], "FileNotFoundError")
        self.assertIn("holds a root-equivalent socket, " + M["innocent"], p.stderr.decode())
        s = load(summary)
        self.assertEqual([(u["path"], u["rootEquivalent"]) for u in s["unixSockets"]], [(M["innocent"], True)])
        # The skill's entry that knows: granted, and said on every run.
        p = self.client(skill="engine")
        self.assertEqual(self.answers(p)["innocent.sock"], "pong:engine:ping")
        self.assertIn("root-equivalent socket", p.stderr.decode())

    def test_repository_policy_cannot_grant(self):
        repo = os.path.join(self.work, "repo")
        os.makedirs(os.path.join(repo, ".sluice"))
        with open(os.path.join(repo, ".sluice", "policy.toml"), "w") as f:
            f.write(f'unix_sockets = ["{M["other"]}"]\n')
        subprocess.run(["chmod", "-R", "a+rwX", repo], check=True)
        p = self.sx("--", "true", cwd=repo)
        self.assertEqual(p.returncode, 125)
        self.assertIn("not allowed here", p.stderr.decode())
        self.assertIn("--allow-unix-socket", p.stderr.decode())

    # --- sluice check --------------------------------------------------------------------------
    def test_check_answers_as_exec(self):
        p = self.check(M["app"])
        self.assertEqual((p.returncode, p.stdout.decode().splitlines()[0]),
                         (0, "ALLOW rule=unix:%s skill=default root_equivalent=false" % M["app"]))
        p = self.check(M["other"])
        self.assertEqual(p.returncode, 1)
        self.assertIn("DENY reason=unix_socket_not_granted", p.stdout.decode())
        p = self.check(M["docker"], skill="careless")  # its real path, through the skill's symlink entry
        self.assertEqual(p.returncode, 1)
        self.assertIn("DENY reason=root_equivalent_socket rule=unix:" + M["innocent"], p.stdout.decode())
        p = self.check(M["innocent"], skill="engine")
        self.assertEqual(p.returncode, 0, p.stdout.decode())
        self.assertIn("root_equivalent=true", p.stdout.decode())


class UnixSocketsAsNobody(UnixSocketsAsRoot):
    """The same as an unprivileged user, through user namespaces."""
    user = 65534


if __name__ == "__main__":
    unittest.main()
