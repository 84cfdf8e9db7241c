"""An external decider ([decider]) asked by the gateway, through `sluice serve` (root) and `sluice
exec` (root and 65534): a program on a socket pair (decider_program.py) and an HTTPS endpoint in
the shape of OPA's data API, each allowing a host the allowlist does not name, refusing with its
reason (and its status), adding and removing a field, handing a request to a person, timing out
(refused), crashing (refused, then started again); a decider that lets an explicitly denied host
or a metadata address through is overruled; profile methods still hold; the cache holds; h2
streams are asked as HTTP/1.1 requests are; `sluice check` shows the decider's answer."""
import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request

import test_exec as base
from harness import PYTHON, SLUICE, Gateway, Processes, curl, free_port, status_of

M = base.M
setUpModule = base.setUpModule
tearDownModule = base.tearDownModule
HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "decider_program.py")


def trust_and_upstream():
    """The [tls] and [upstream] tables of the exec suite's policy (the origin's CA, the pins)."""
    with open(M["policy"]) as f:
        policy = f.read()
    return policy[policy.index("[tls]"):]


def copy_program(d):
    """The decider program where any user can run it (65534 cannot read the source tree under /root)."""
    dst = os.path.join(d, "decider_program.py")
    shutil.copy(PROGRAM, dst)
    os.chmod(dst, 0o755)
    return dst


class DeciderServe(unittest.TestCase):

    def start(self, decider_extra="", policy_extra="", approvals=False, profile="network-read", allow_extra=""):
        self.procs = Processes()
        self.addCleanup(self.procs.stop_all)
        self.dir = tempfile.mkdtemp(dir=M["tmp"])
        os.chmod(self.dir, 0o755)
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.asked = os.path.join(self.dir, "asked.jsonl")
        program = copy_program(self.dir)
        cfg = (f'profile = "{profile}"\n[policy]\nallow = ["other.test:8443"{allow_extra}]\ndeny = ["denied.test"]\n' +
               policy_extra +
               '[decider]\ncommand = "%s %s %s"\ntimeout = "1s"\n' % (PYTHON, program, self.asked) + decider_extra)
        if approvals:
            self.token_file = os.path.join(self.dir, "token")
            with open(self.token_file, "w") as f:
                f.write(os.urandom(16).hex() + "\n")
            cfg += '[approvals]\nhosts = ["nothing.test"]\ntoken_file = "%s"\n' % self.token_file
        cfg += trust_and_upstream().replace('"other.test" = "198.18.0.2"\n',
                                            '"other.test" = "198.18.0.2"\n"denied.test" = "198.18.0.2"\n'
                                            '"blocked.test" = "198.18.0.2"\n"blocked.tcp.test" = "198.18.0.2"\n'
                                            '"ok.tcp.test" = "198.18.0.2"\n')
        self.gw = Gateway(self.procs, self.dir, cfg, "decider")

    def questions(self):
        if not os.path.exists(self.asked):
            return []
        with open(self.asked) as f:
            return [json.loads(l) for l in f if l.strip()]

    def last_line(self, path):
        self.assertTrue(self.gw.logged(lambda l: l.get("path", "").startswith(path)), self.gw.access_log())
        return [l for l in self.gw.access_log() if l.get("path", "").startswith(path)][-1]

    def test_allow_deny_with_reason_and_status_and_fields(self):
        self.start()
        p = curl(self.gw, "https://origin.test:8443/hello")
        self.assertEqual(status_of(p.stderr.decode()), 200, p.stderr)
        line = self.last_line("/hello")
        self.assertEqual((line["decision"], line.get("decided_by")), ("allow", "decider"))
        q = [x for x in self.questions() if x["path"] == "/hello"][0]
        self.assertEqual((q["method"], q["host"], q["port"], q["scheme"], q["profile"]),
                         ("GET", "origin.test", 8443, "https", "network-read"))
        self.assertEqual(q["file"], {"decision": "deny", "reason": "host_not_allowlisted"})
        # The tunnel was asked about first, as a CONNECT.
        self.assertIn(("CONNECT", "origin.test"), [(x["method"], x["host"]) for x in self.questions()])

        p = curl(self.gw, "https://origin.test:8443/deny/this")
        self.assertEqual(status_of(p.stderr.decode()), 403)
        self.assertIn(b"team rule 7: no /deny paths", p.stdout)
        self.assertIn(b"decider_denied", p.stderr)
        line = self.last_line("/deny/this")
        self.assertEqual((line["decision"], line["reason"], line.get("decided_by")), ("deny", "decider_denied", "decider"))
        p = curl(self.gw, "https://origin.test:8443/deny-451")
        self.assertEqual(status_of(p.stderr.decode()), 451)

        # Fields: one set, one taken off, and what the command sent otherwise intact.
        p = curl(self.gw, "https://origin.test:8443/headers", "-H", "X-Remove-Me: gone", "-H", "X-Keep: kept")
        self.assertEqual(status_of(p.stderr.decode()), 200, p.stderr)
        echoed = p.stdout.decode().lower()
        self.assertIn("x-decided: by-the-decider", echoed)
        self.assertIn("x-keep: kept", echoed)
        self.assertNotIn("x-remove-me", echoed)
        # Authorization and Cookie never reach the decider.
        curl(self.gw, "https://origin.test:8443/hello2", "-H", "Authorization: Bearer sekrit", "-H", "Cookie: a=sekrit")
        q = [x for x in self.questions() if x["path"] == "/hello2"][0]
        self.assertNotIn("sekrit", json.dumps(q))
        self.assertGreaterEqual(self.gw.metric("sluice_decider_calls_total", outcome="allow"), 3)
        self.assertEqual(self.gw.metric("sluice_decider_calls_total", outcome="deny"), 2)

    def test_the_file_overrules_the_decider(self):
        self.start()
        # An explicit deny entry: the decider is not even asked.
        p = curl(self.gw, "https://denied.test:8443/hello")
        self.assertEqual(status_of(p.stderr.decode()), 403)
        self.assertIn(b"host_denied", p.stderr)
        self.assertNotIn("denied.test", [x["host"] for x in self.questions()])
        # A metadata address: the decider's allow does not open it.
        p = curl(self.gw, "http://169.254.169.254/latest/meta-data/")
        self.assertEqual(status_of(p.stderr.decode()), 403)
        self.assertIn(b"destination_address_denied", p.stderr)
        # network-read's methods: an allowed miss is still read-only.
        p = curl(self.gw, "https://origin.test:8443/hello", "-X", "POST", "-d", "x")
        self.assertEqual(status_of(p.stderr.decode()), 403)
        self.assertIn(b"method_not_allowed", p.stderr)

    def test_timeout_crash_and_restart(self):
        self.start()
        t0 = time.monotonic()
        p = curl(self.gw, "https://origin.test:8443/slow")
        self.assertEqual(status_of(p.stderr.decode()), 403)
        self.assertIn(b"decider_timeout", p.stderr)
        self.assertLess(time.monotonic() - t0, 4.5)  # the deadline (1 s), not the decider's 5 s
        self.assertEqual(self.last_line("/slow")["reason"], "decider_timeout")
        p = curl(self.gw, "https://origin.test:8443/crash")
        self.assertEqual(status_of(p.stderr.decode()), 403)
        self.assertIn(b"decider_unavailable", p.stderr)
        # Started again within a few seconds; requests pass again.
        deadline = time.monotonic() + 15
        while True:
            p = curl(self.gw, "https://origin.test:8443/back")
            if status_of(p.stderr.decode()) == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        self.assertEqual(status_of(p.stderr.decode()), 200, p.stderr)
        with open(self.gw.stderr_path) as f:
            self.assertIn("[decider] program", f.read())
        self.assertGreaterEqual(self.gw.metric("sluice_decider_calls_total", outcome="timeout"), 1)

    def test_the_cache_holds_for_what_the_decider_said(self):
        self.start()
        for _ in range(3):
            p = curl(self.gw, "https://origin.test:8443/cached/a")
            self.assertEqual(status_of(p.stderr.decode()), 200, p.stderr)
        self.assertEqual(len([x for x in self.questions() if x["path"] == "/cached/a"]), 1)
        self.assertEqual(self.gw.metric("sluice_decider_calls_total", outcome="cached"), 2)
        curl(self.gw, "https://origin.test:8443/cached/b")
        self.assertEqual(len([x for x in self.questions() if x["path"] == "/cached/b"]), 1)

    def test_ask_goes_to_a_person(self):
        self.start(approvals=True)
        result = {}
        t = threading.Thread(target=lambda: result.update(p=curl(self.gw, "https://origin.test:8443/ask", "--http1.1")))
        t.start()
        admin = "127.0.0.1:%d" % self.gw.admin
        deadline = time.monotonic() + 10
        held = []
        token = open(self.token_file).read().strip()
        while not held and time.monotonic() < deadline:
            req = urllib.request.Request("http://%s/api/approvals" % admin, headers={"Authorization": "Bearer " + token})
            with urllib.request.urlopen(req, timeout=10) as r:
                held = json.load(r)["pending"]
            time.sleep(0.1)
        self.assertTrue(held, "the request the decider handed on was not held")
        p = subprocess.run([SLUICE, "approve", str(held[0]["id"]), "--admin", admin, "--token-file", self.token_file],
                           capture_output=True, timeout=10)
        self.assertEqual(p.returncode, 0, p.stderr)
        t.join(30)
        self.assertEqual(status_of(result["p"].stderr.decode()), 200, result["p"].stderr)

    def test_the_decider_reads_the_body_when_it_asks(self):
        """{"decision": "body"}: the body is read whole (at most max_body_bytes) and the decider asked
        again with it before anything leaves; over HTTP/1.1 and h2, text and binary bodies."""
        self.start(decider_extra="max_body_bytes = 4096\n", profile="publish")
        binary = os.path.join(self.dir, "binary.bin")
        with open(binary, "wb") as f:
            f.write(b"\xff\xfe binary forbidden \x00")
        big = os.path.join(self.dir, "big.txt")
        with open(big, "w") as f:
            f.write("x" * 5000)
        for proto in ("--http1.1", "--http2"):
            tag = proto.strip("-").replace(".", "")
            with self.subTest(proto=proto):
                p = curl(self.gw, "https://origin.test:8443/echo/inspect-ok-" + tag, proto, "--data-binary",
                         "hello body")
                self.assertEqual(status_of(p.stderr.decode()), 200, p.stderr)
                self.assertEqual(p.stdout, b"hello body")  # the body went on as it was read
                asked = [q for q in self.questions() if q["path"] == "/echo/inspect-ok-" + tag]
                self.assertEqual([(q.get("body"), q.get("body_bytes")) for q in asked],
                                 [(None, None), ("hello body", 10)])
                self.assertEqual(asked[1]["file"], {"decision": "deny", "reason": "host_not_allowlisted"})

                p = curl(self.gw, "https://origin.test:8443/echo/inspect-no-" + tag, proto, "--data-binary",
                         "this is forbidden")
                self.assertEqual(status_of(p.stderr.decode()), 403, p.stderr)
                self.assertIn(b"decider_denied", p.stderr)
                self.assertIn(b"the body says forbidden (17 bytes)", p.stdout)
                line = self.last_line("/echo/inspect-no-" + tag)
                self.assertEqual((line["decision"], line["reason"], line["decided_by"]),
                                 ("deny", "decider_denied", "decider"))

                p = curl(self.gw, "https://origin.test:8443/echo/inspect-bin-" + tag, proto, "--data-binary",
                         "@" + binary)
                self.assertEqual(status_of(p.stderr.decode()), 403, p.stderr)
                q = [q for q in self.questions() if q["path"] == "/echo/inspect-bin-" + tag][-1]
                self.assertNotIn("body", q)
                self.assertEqual(base64.b64decode(q["body_base64"]), b"\xff\xfe binary forbidden \x00")

                p = curl(self.gw, "https://origin.test:8443/echo/inspect-big-" + tag, proto, "--data-binary",
                         "@" + big)
                self.assertIn(status_of(p.stderr.decode()), (400, 403), p.stderr)
                self.assertIn(b"body_too_large", p.stderr)
                self.assertEqual(len([q for q in self.questions() if q["path"] == "/echo/inspect-big-" + tag]), 1)

                # A request without a body: asked again with an empty one, then on its way as any other.
                p = curl(self.gw, "https://origin.test:8443/inspect-get-" + tag, proto)
                self.assertEqual(status_of(p.stderr.decode()), 200, p.stderr)
                asked = [q for q in self.questions() if q["path"] == "/inspect-get-" + tag]
                self.assertEqual([(q.get("body"), q.get("body_bytes")) for q in asked], [(None, None), ("", 0)])

                p = curl(self.gw, "https://origin.test:8443/echo/greedy-" + tag, proto, "--data-binary", "x")
                self.assertEqual(status_of(p.stderr.decode()), 403, p.stderr)
                self.assertIn(b"decider_unavailable", p.stderr)
        self.assertGreaterEqual(self.gw.metric("sluice_decider_calls_total", outcome="body"), 8)
        # sluice check asks again with --body, as the gateway does.
        sample = os.path.join(self.dir, "sample.txt")
        with open(sample, "w") as f:
            f.write("forbidden words")
        c = subprocess.run([SLUICE, "check", "--config", self.gw.config, "--body", sample, "POST",
                            "https://origin.test:8443/echo/inspect-check"], capture_output=True, text=True)
        self.assertEqual(c.returncode, 1, c.stdout + c.stderr)
        self.assertIn("decider: body", c.stdout)
        self.assertIn("decider: deny (the body says forbidden (15 bytes))", c.stdout)

    def test_when_all_asks_about_tunnels_and_tcp_whose_bytes_are_not_read(self):
        # allowlist: a tunnel is passed through unopened, and relayed TCP is never read: with
        # when = "all" each connection the file allows is put to the decider, which may refuse it.
        self.start(decider_extra='when = "all"\n', profile="allowlist", allow_extra=', "blocked.test:8443"',
                   policy_extra='tcp = [{ host = "blocked.tcp.test", port = 8443 }, { host = "ok.tcp.test", port = 8443 }]\n')
        p = curl(self.gw, "https://other.test:8443/tunnel-ok")
        self.assertEqual(status_of(p.stderr.decode()), 200, p.stderr)
        p = curl(self.gw, "https://blocked.test:8443/tunnel-refused")
        self.assertIn(b"CONNECT tunnel failed, response 403", p.stderr)
        asked = [(q["host"], q["port"], q["protocol"], q["file"]) for q in self.questions()]
        self.assertIn(("other.test", 8443, "connect", {"decision": "allow", "rule": "other.test:8443"}), asked)
        self.assertIn(("blocked.test", 8443, "connect", {"decision": "allow", "rule": "blocked.test:8443"}), asked)
        self.assertTrue(self.gw.logged(lambda l: l["host"] == "blocked.test"), self.gw.access_log())
        line = [l for l in self.gw.access_log() if l["host"] == "blocked.test"][-1]
        self.assertEqual((line["decision"], line["reason"], line["rule"], line.get("decided_by")),
                         ("deny", "decider_denied", "decider", "decider"))
        # Relayed TCP, asked for by CONNECT: refused for blocked.tcp.test, relayed for ok.tcp.test.
        for host, code in (("blocked.tcp.test", b"403"), ("ok.tcp.test", b"200")):
            with socket.create_connection(("127.0.0.1", self.gw.port), timeout=10) as s:
                s.sendall(b"CONNECT %s:8443 HTTP/1.1\r\nHost: %s:8443\r\n\r\n" % (host.encode(), host.encode()))
                self.assertEqual(s.recv(4096).split(b"\r\n")[0].split(b" ")[1], code, host)
        self.assertIn(("blocked.tcp.test", 8443, "tcp", {"decision": "allow", "rule": "tcp://blocked.tcp.test:8443"}),
                      [(q["host"], q["port"], q["protocol"], q["file"]) for q in self.questions()])
        self.assertTrue(self.gw.logged(lambda l: l["host"] == "blocked.tcp.test" and l["reason"] == "decider_denied"),
                        self.gw.access_log())

    def test_h2_streams_are_asked_too(self):
        self.start()
        p = curl(self.gw, "https://origin.test:8443/hello-h2", "--http2")
        self.assertEqual(status_of(p.stderr.decode()), 200, p.stderr)
        self.assertIn("HTTP/2", p.stderr.decode())
        p = curl(self.gw, "https://origin.test:8443/deny-h2", "--http2")
        self.assertEqual(status_of(p.stderr.decode()), 403)
        self.assertIn(b"team rule 7", p.stdout)
        line = self.last_line("/deny-h2")
        self.assertEqual((line["protocol"], line["reason"]), ("h2", "decider_denied"))

    def test_check_shows_the_deciders_answer(self):
        self.start()
        p = subprocess.run([SLUICE, "check", "--config", self.gw.config, "GET", "https://origin.test:8443/deny"],
                           capture_output=True, timeout=30)
        self.assertEqual(p.returncode, 1, p.stderr)
        out = p.stdout.decode()
        self.assertIn("decider: deny (team rule 7: no /deny paths)", out)
        self.assertIn("DENY reason=decider_denied", out)
        p = subprocess.run([SLUICE, "check", "--config", self.gw.config, "GET", "https://origin.test:8443/fine"],
                           capture_output=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("decider: allow", p.stdout.decode())

    def test_a_program_that_cannot_start_stops_serve_with_its_name(self):
        d = tempfile.mkdtemp(dir=M["tmp"])
        self.addCleanup(shutil.rmtree, d, True)
        cfg = os.path.join(d, "bad.toml")
        with open(cfg, "w") as f:
            f.write('[decider]\ncommand = "/nonexistent/decider --x"\n[listen]\nproxy = "127.0.0.1:%d"\n' % free_port())
        p = subprocess.run([SLUICE, "serve", "--config", cfg], capture_output=True, timeout=30)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"/nonexistent/decider", p.stderr)


# HTTP/1.1 with keep-alive; each question's client port is appended to argv[3] (a connection is a
# port); a question for a path starting /bye is answered, then its connection closed without a word.
OPA = r"""
import http.server, json, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        q = json.loads(self.rfile.read(n))["input"]
        with open(sys.argv[3], "a") as f:
            f.write("%d %s\n" % (self.client_address[1], q["path"]))
        if self.path != "/v1/data/sluice/decision":
            body = {}
        elif q["path"].startswith("/deny"):
            body = {"result": {"decision": "deny", "reason": "opa says no"}}
        else:
            body = {"result": {"decision": "allow"}}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        if q["path"].startswith("/bye"):
            self.close_connection = True
s = http.server.ThreadingHTTPServer(("198.18.0.2", 8181), H)
c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); c.load_cert_chain(sys.argv[1], sys.argv[2])
s.socket = c.wrap_socket(s.socket, server_side=True)
print("ready", flush=True)
s.serve_forever()
"""


class DeciderEndpoint(unittest.TestCase):
    """An HTTPS decider in OPA's shape (POST /v1/data/PATH {"input"} -> {"result"}), on the test host."""

    @classmethod
    def setUpClass(cls):
        d = M["tmp"]
        cls.seen = os.path.join(d, "opa-seen.txt")
        cls.opa = M["host"].start(PYTHON, "-c", OPA, os.path.join(d, "origin.test.pem"), os.path.join(d, "origin.test.key"),
                                  cls.seen)
        assert cls.opa.stdout.readline().strip() == b"ready"

    @classmethod
    def tearDownClass(cls):
        cls.opa.kill()
        cls.opa.wait()

    def test_an_opa_shaped_endpoint_allows_and_denies(self):
        procs = Processes()
        self.addCleanup(procs.stop_all)
        d = tempfile.mkdtemp(dir=M["tmp"])
        self.addCleanup(shutil.rmtree, d, True)
        cfg = ('profile = "network-read"\n[policy]\nallow = ["other.test:8443"]\n'
               '[decider]\nurl = "https://origin.test:8181/v1/data/sluice/decision"\n' + trust_and_upstream())
        gw = Gateway(procs, d, cfg, "opa")
        p = curl(gw, "https://origin.test:8443/hello")
        self.assertEqual(status_of(p.stderr.decode()), 200, p.stderr)
        p = curl(gw, "https://origin.test:8443/deny")
        self.assertEqual(status_of(p.stderr.decode()), 403)
        self.assertIn(b"opa says no", p.stdout)
        # Questions go over kept connections (at most one per endpoint thread, four), and a connection
        # the endpoint closed without a word is dialled again, the question asked again on it.
        for i in range(8):
            path = "/bye-%d" % i if i in (2, 5) else "/keep-%d" % i
            p = curl(gw, "https://origin.test:8443" + path)
            self.assertEqual(status_of(p.stderr.decode()), 200, p.stderr)
        with open(self.seen) as f:
            seen = [l.split() for l in f if "/keep-" in l or "/bye-" in l]
        self.assertEqual(sorted(q for _, q in seen), sorted(["/bye-2", "/bye-5"] + ["/keep-%d" % i for i in range(8)
                                                                                   if i not in (2, 5)]))
        self.assertLessEqual(len({port for port, _ in seen}), 4 + 2, seen)
        # An undefined rule (OPA answers {}): refused, never let through.
        gw.write_config(cfg.replace("/v1/data/sluice/decision", "/v1/data/sluice/nothing"))
        gw.proc.send_signal(1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            p = curl(gw, "https://origin.test:8443/hello")
            if status_of(p.stderr.decode()) == 403:
                break
            time.sleep(0.2)
        self.assertIn(b"decider_unavailable", p.stderr)


class DeciderExecAsRoot(base.ExecCase):

    def policy(self):
        program = copy_program(self.work)
        self.asked = os.path.join(self.work, "asked.jsonl")
        path = os.path.join(self.work, "policy.toml")
        with open(path, "w") as f:
            f.write('[skills.default]\ndefault_profile = "network-read"\nallow_domains = ["other.test:8443"]\n'
                    '[decider]\ncommand = "%s %s %s"\ntimeout = "2s"\n' % (PYTHON, program, self.asked) + trust_and_upstream())
        os.chmod(path, 0o644)
        return path

    def test_exec_asks_the_decider(self):
        policy = self.policy()
        log = os.path.join(self.work, "access.log")
        script = ("curl -sS -o /dev/null -w '%{http_code}\\n' https://origin.test:8443/hello; "
                  "curl -sS -o /dev/null -w '%{http_code}\\n' https://origin.test:8443/deny")
        p = subprocess.run(self.prefix() + [SLUICE, "exec", "--policy", policy, "--access-log", log, "--", "sh", "-c", script],
                           capture_output=True, env=self.env(), timeout=120, cwd=self.work)
        self.assertEqual(p.stdout.decode().split(), ["200", "403"], p.stderr.decode())
        with open(log) as f:
            lines = [json.loads(l) for l in f if l.strip()]
        self.assertEqual([(l["path"], l["decision"], l.get("reason"), l.get("decided_by")) for l in lines
                          if l.get("method") == "GET"],
                         [("/hello", "allow", "allowed", "decider"), ("/deny", "deny", "decider_denied", "decider")])


class DeciderExecAsNobody(DeciderExecAsRoot):
    user = 65534


if __name__ == "__main__":
    unittest.main()
