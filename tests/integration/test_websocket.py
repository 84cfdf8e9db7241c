"""WebSocket and long streams through the judged path, with real clients (python3-websockets,
Node's WebSocket, curl) against a wss/ws echo origin and an event-stream origin on a test host at
198.18.0.2 (a network namespace of its own): through `sluice serve`, and inside `sluice exec` as
root and as 65534.

What passes: an upgrade whose GET passes, under publish; under network-read only through a trusted
route with websocket = true (the credential added on the upgrade). What is refused: every other
upgrade under network-read, with 426 (Codex then falls back to HTTP at once) and no frame reaching
the origin; a message over limits.max_websocket_message_bytes, closed with 1009 before it leaves.
Server-sent events last as long as the origin keeps sending, past timeouts.request; a stalled one
is cut by the idle deadline (timeouts.io)."""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from harness import (PYTHON, SLUICE, Gateway, Processes, curl, make_ca, make_leaf, netns_upstream, raw_exchange,
                     status_of)
from harness import log_records
from netns import TestHost

HERE = os.path.dirname(os.path.abspath(__file__))
M = {}
SECRET = "ws-secret-%s" % os.urandom(6).hex()


def setUpModule():
    if os.geteuid() != 0:
        raise unittest.SkipTest("the WebSocket suite sets up a network namespace and needs root")
    M["tmp"] = d = tempfile.mkdtemp(prefix="sluice-ws-test-")
    os.chmod(d, 0o755)
    ca = M["ca"] = make_ca(d, "origin-ca")
    leaf = make_leaf(d, ca, "ws.test", "DNS:ws.test")
    for f in os.listdir(d):
        os.chmod(os.path.join(d, f), 0o644)
    M["events"] = os.path.join(d, "ws-events.log")
    host = M["host"] = TestHost()
    env = dict(os.environ, ORIGIN_HOST="198.18.0.2", WS_LOG=M["events"])
    for args in (("8443",) + leaf, ("8080",)):
        p = host.start(PYTHON, os.path.join(HERE, "ws_origin.py"), *args, env=env)
        assert p.stdout.readline().strip() == b"ready"
    p = host.start(PYTHON, os.path.join(HERE, "origin.py"), "8444", *leaf, env=env)
    assert p.stdout.readline().strip() == b"ready"
    M["upstream"] = netns_upstream(ca[0], ["ws.test"])
    M["procs"] = Processes()
    os.environ["WS_TOKEN"] = SECRET  # the read gateway's [credentials.ws] source


def tearDownModule():
    if "procs" in M:
        M["procs"].stop_all()
    if "host" in M:
        M["host"].close()
    if "tmp" in M:
        shutil.rmtree(M["tmp"], ignore_errors=True)


def events():
    """The origin's events so far: (kind, path, rest)."""
    if not os.path.exists(M["events"]):
        return []
    with open(M["events"]) as f:
        return [tuple(l.split(" ", 2)) for l in f.read().splitlines()]


def ws_client(url, count, big=0, env=None, prefix=(), cwd=None, timeout=60):
    p = subprocess.run(list(prefix) + [PYTHON, os.path.join(cwd or HERE, "ws_client.py"), url, str(count)] +
                       ([str(big)] if big else []), capture_output=True, env=env, cwd=cwd, timeout=timeout)
    lines = p.stdout.decode().strip().splitlines()
    if not lines:
        raise AssertionError("ws_client printed nothing: %s" % p.stderr.decode()[-2000:])
    return json.loads(lines[-1])


class WebSocketThroughServe(unittest.TestCase):
    """`sluice serve`: publish carries WebSockets; network-read only through a websocket route."""

    @classmethod
    def setUpClass(cls):
        d = M["tmp"]
        cls.pub = Gateway(M["procs"], d, 'profile = "publish"\n[policy]\nallow = ["ws.test:8443"]\n' + M["upstream"],
                          "pub")
        cls.read = Gateway(M["procs"], d, f"""profile = "network-read"
[policy]
allow = ["ws.test:8443", "ws.test:8444",
         {{ host = "ws.test:8443", paths = ["/route/*"], websocket = true }}]
[limits]
max_websocket_message_bytes = 65536
[timeouts]
request = "60s"
io = "30s"
[credentials.ws]
source = "env:WS_TOKEN"
hosts = ["ws.test:8443"]
""" + M["upstream"], "read")

    @classmethod
    def tearDownClass(cls):
        for gw in (cls.pub, cls.read):
            gw.proc.terminate()
            gw.proc.wait()

    def env(self, gw):
        return dict(os.environ, HTTPS_PROXY=gw.proxy, WS_CA=gw.ca)

    def line(self, gw, path):
        self.assertTrue(gw.logged(lambda r: r["path"] == path), path)
        return [r for r in gw.access_log() if r["path"] == path][-1]

    def test_a_byte_budget_cuts_a_websocket_before_the_message_that_would_pass_it(self):
        # [[limits.budget]]: messages count against bytes_out as HTTP/1.1 bodies do; the piece that
        # would take the budget past its limit is not sent, and both sides get 1008.
        gw = Gateway(M["procs"], M["tmp"], 'profile = "publish"\n[policy]\nallow = ["ws.test:8443"]\n'
                     '[[limits.budget]]\nname = "ws-bytes"\nhosts = ["ws.test"]\nbytes_out = 60000\n' + M["upstream"],
                     "budget")
        self.addCleanup(gw.proc.wait)
        self.addCleanup(gw.proc.terminate)
        got = ws_client("wss://ws.test:8443/budget-echo", 3, 200_000, env=self.env(gw))
        self.assertEqual((got.get("error"), got.get("close_code")), ("closed", 1008), got)
        self.assertIn("budget_exhausted", got.get("reason", ""))
        arrived = [int(rest) for kind, path, rest in events() if kind == "message" and path == "/budget-echo"]
        self.assertEqual(len(arrived), 2, arrived)  # the two small ones; nothing of the big one was sent
        r = self.line(gw, "/budget-echo")
        self.assertEqual((r["protocol"], r["decision"], r["reason"]), ("websocket", "deny", "budget_exhausted"))
        self.assertLessEqual(r["bytes_in"], 60000)
        # The spent budget refuses the next upgrade before it leaves.
        got = ws_client("wss://ws.test:8443/budget-echo2", 1, env=self.env(gw))
        self.assertEqual((got.get("error"), got.get("status")), ("status", 403), got)

    def test_publish_carries_100_messages_and_a_1mib_one(self):
        got = ws_client("wss://ws.test:8443/pub-echo", 100, 1 << 20, env=self.env(self.pub))
        self.assertEqual(got, {"echoed": 100, "close_code": 1000})
        r = self.line(self.pub, "/pub-echo")
        self.assertEqual((r["protocol"], r["status"], r["decision"]), ("websocket", 101, "allow"))
        self.assertEqual((r["ws_messages_in"], r["ws_messages_out"], r["ws_close_code"]), (100, 100, 1000))
        self.assertGreater(r["bytes_in"], 1 << 20)
        self.assertGreater(r["bytes_out"], 1 << 20)
        self.assertGreaterEqual(self.pub.metric("sluice_websocket_messages_total", direction="in"), 100)
        self.assertGreaterEqual(self.pub.metric("sluice_websocket_payload_bytes_total", direction="out"), 1 << 20)
        self.assertGreaterEqual(self.pub.metric("sluice_websocket_connections_total", how="close"), 1)
        self.assertEqual(len([e for e in events() if e[:2] == ("message", "/pub-echo")]), 100)

    def test_network_read_refuses_with_426_and_no_frame_reaches_the_origin(self):
        got = ws_client("wss://ws.test:8443/read-echo", 3, env=self.env(self.read))
        self.assertEqual(got, {"error": "status", "status": 426})
        self.assertFalse([e for e in events() if e[1:2] == ("/read-echo",)])
        r = self.line(self.read, "/read-echo")
        self.assertEqual((r["decision"], r["reason"], r["status"]), ("deny", "websocket_refused", 426))
        # The same GET without the upgrade passes: the refusal is of the upgrade, and it says why.
        p = curl(self.read, "https://ws.test:8444/status/204")
        self.assertEqual(status_of(p.stderr.decode()), 204, p.stderr)

    def test_a_websocket_route_passes_under_network_read_with_the_credential(self):
        env = dict(self.env(self.read))
        got = ws_client("wss://ws.test:8443/route/chat", 5, env=env)
        self.assertEqual(got, {"echoed": 5, "close_code": 1000})
        opened = [e for e in events() if e[:2] == ("open", "/route/chat")]
        self.assertEqual(opened, [("open", "/route/chat", "Bearer " + SECRET)])
        r = self.line(self.read, "/route/chat")
        self.assertEqual((r["protocol"], r["rule"]), ("websocket", "ws.test:8443 * /route/* websocket"))

    def test_a_message_over_the_limit_is_closed_1009_before_it_leaves(self):
        got = ws_client("wss://ws.test:8443/route/big", 2, 100_000, env=self.env(self.read))
        self.assertEqual((got.get("error"), got.get("close_code")), ("closed", 1009), got)
        self.assertIn("websocket_message_too_large", got.get("reason", ""))
        sizes = [e[2] for e in events() if e[:2] == ("message", "/route/big")]
        self.assertEqual(sizes, ["8"])  # the first, small message only ("m0-hello")
        closes = [e[2] for e in events() if e[:2] == ("close", "/route/big")]
        self.assertEqual(closes, ["1009"])  # the origin was told too
        r = self.line(self.read, "/route/big")
        self.assertEqual((r["decision"], r["reason"]), ("deny", "websocket_message_too_large"))

    def test_the_origins_close_code_is_logged(self):
        got = ws_client("wss://ws.test:8443/close-4001", 1, env=self.env(self.pub))
        self.assertEqual((got.get("error"), got.get("close_code")), ("closed", 4001), got)
        self.assertEqual(self.line(self.pub, "/close-4001")["ws_close_code"], 4001)

    def test_malformed_and_other_upgrades_refused(self):
        h = "Host: ws.test:8443\r\n"
        for gw in (self.pub, self.read):
            for head, reason in (
                    ("Connection: Upgrade\r\nUpgrade: websocket\r\n", b"upgrade_refused"),  # no key
                    ("Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n",
                     b"h2c_refused"),
                    ("Connection: Upgrade\r\nUpgrade: TLS/1.2\r\n", b"upgrade_refused")):
                out = raw_exchange(gw.port, ("GET http://ws.test:8443/x HTTP/1.1\r\n" + h + head + "\r\n").encode())
                self.assertTrue(out.startswith(b"HTTP/1.1 403"), out[:100])
                self.assertIn(reason, out)
        # Prior knowledge: the HTTP/2 preface on the proxy port.
        out = raw_exchange(self.pub.port, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        self.assertIn(b"h2c_refused", out)


class LongStreams(unittest.TestCase):
    """Server-sent events: the idle deadline runs between bytes, not over the whole response."""

    @classmethod
    def setUpClass(cls):
        cls.gw = Gateway(M["procs"], M["tmp"], """profile = "network-read"
[policy]
allow = ["ws.test:8444"]
[timeouts]
request = "9s"
io = "5s"
""" + M["upstream"], "sse")

    def test_an_event_stream_outlives_the_request_deadline_and_a_stalled_one_is_cut(self):
        results = {}

        def stalled():
            t0 = time.monotonic()
            p = curl(self.gw, "https://ws.test:8444/sse-stall/2/1", "--max-time", "60", "-N")
            results["stall"] = (p, time.monotonic() - t0)
        t = threading.Thread(target=stalled)
        t.start()
        # Ten events, 3 s apart: 27 s, three times the request deadline, each gap well inside the
        # I/O deadline (the ratios of a 3-minute stream with request = 60 s and io = 30 s).
        t0 = time.monotonic()
        p = curl(self.gw, "https://ws.test:8444/sse/10/3", "--max-time", "120", "-N")
        elapsed = time.monotonic() - t0
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.decode().count("data: event"), 10)
        self.assertGreater(elapsed, 26)
        t.join()
        sp, stall_time = results["stall"]
        self.assertNotEqual(sp.returncode, 0)  # cut: the chunked body never ended
        self.assertIn(b"data: event 0", sp.stdout)
        self.assertLess(stall_time, 30)  # by the 5 s idle deadline, not curl's 60 s
        lines = self.gw.lines_where(lambda r: r["path"] in ("/sse/10/3", "/sse-stall/2/1"), 2)
        reasons = {r["path"]: r["reason"] for r in lines}
        self.assertEqual(reasons.get("/sse/10/3"), "allowed", lines)
        self.assertEqual(reasons["/sse-stall/2/1"], "response_timeout")


class WebSocketInsideExecAsRoot(unittest.TestCase):
    """`sluice exec`: the same rules for clients that use the proxy and for those the capture takes."""
    user = None

    @classmethod
    def setUpClass(cls):
        cls.policy = os.path.join(M["tmp"], "exec-policy.toml")
        with open(cls.policy, "w") as f:
            f.write("""[skills.default]
default_profile = "network-read"
escalations = ["publish"]
allow_domains = ["ws.test:8443", "ws.test:8080",
                 { host = "ws.test:8443", paths = ["/route/*"], websocket = true }]
""" + M["upstream"])
        os.chmod(cls.policy, 0o644)

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="sluice-ws-case-")
        os.chmod(self.work, 0o777)
        for name in ("ws_client.py",):
            shutil.copy(os.path.join(HERE, name), self.work)
            os.chmod(os.path.join(self.work, name), 0o755)
        self.home = os.path.join(self.work, "home")
        os.makedirs(self.home)
        os.chmod(self.home, 0o777)

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def prefix(self):
        if self.user is None:
            return []
        return ["setpriv", "--reuid=%d" % self.user, "--regid=%d" % self.user, "--clear-groups"]

    def sx(self, profile, *cmd, log=None):
        args = [SLUICE, "exec", "--policy", self.policy, "--sandbox-profile", profile]
        if profile == "publish":
            args.append("--confirm-external-side-effects")
        if log:
            args += ["--access-log", log]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": self.home, "LANG": "C.UTF-8"}
        p = subprocess.run(self.prefix() + args + ["--"] + list(cmd), capture_output=True, env=env,
                           cwd=self.work, timeout=120)
        return p

    def result(self, p):
        lines = p.stdout.decode().strip().splitlines()
        self.assertTrue(lines, p.stderr.decode())
        return json.loads(lines[-1])

    def test_publish_carries_python_and_node_clients(self):
        log = os.path.join(self.work, "access.log")
        # python3-websockets through the proxy variables (CONNECT), 100 messages and a 1 MiB one
        p = self.sx("publish", PYTHON, "ws_client.py", "wss://ws.test:8443/exec-echo", "100", str(1 << 20), log=log)
        self.assertEqual(self.result(p), {"echoed": 100, "close_code": 1000}, p.stderr)
        # plain ws:// taken by the capture (the client ignores proxies for it)
        p = self.sx("publish", PYTHON, "ws_client.py", "ws://ws.test:8080/exec-plain", "10")
        self.assertEqual(self.result(p), {"echoed": 10, "close_code": 1000}, p.stderr)
        # Node's own WebSocket ignores proxy variables: the capture takes it, the CA comes from
        # NODE_EXTRA_CA_CERTS.
        node = shutil.which("node")
        if node:
            js = ("const ws = new WebSocket('wss://ws.test:8443/exec-node'); let n = 0;"
                  "ws.onopen = () => ws.send('m0');"
                  "ws.onmessage = (e) => { if (++n < 100) ws.send('m' + n); else ws.close(1000); };"
                  "ws.onclose = (e) => console.log(JSON.stringify({echoed: n, close_code: e.code}));"
                  "ws.onerror = (e) => console.log(JSON.stringify({error: String(e.message)}));")
            p = self.sx("publish", node, "--experimental-websocket", "--no-warnings", "-e", js)
            self.assertEqual(self.result(p), {"echoed": 100, "close_code": 1000}, p.stderr)
        with open(log) as f:
            lines = log_records(f)
        ws = [l for l in lines if l["path"] == "/exec-echo"]
        self.assertEqual([(l["protocol"], l["status"], l["ws_messages_in"]) for l in ws], [("websocket", 101, 100)])

    def test_network_read_refuses_except_through_a_websocket_route(self):
        before = len(events())
        p = self.sx("network-read", PYTHON, "ws_client.py", "wss://ws.test:8443/exec-read", "1")
        self.assertEqual(self.result(p), {"error": "status", "status": 426}, p.stderr)
        self.assertIn("websocket_refused", p.stderr.decode())  # the summary line names it
        self.assertFalse([e for e in events()[before:] if e[1] == "/exec-read"])
        p = self.sx("network-read", PYTHON, "ws_client.py", "wss://ws.test:8443/route/exec", "3")
        self.assertEqual(self.result(p), {"echoed": 3, "close_code": 1000}, p.stderr)


class WebSocketInsideExecAsNobody(WebSocketInsideExecAsRoot):
    user = 65534


if __name__ == "__main__":
    unittest.main()
