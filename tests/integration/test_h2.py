"""HTTP/2 on the terminated leg: sluice offers h2 in ALPN, and every stream is judged as an HTTP/1.1
request is (method, path, routes, credentials, :authority = CONNECT target = SNI, limits), one
access-log line each with protocol h2 (grpc for gRPC calls), forwarded to the origin over HTTP/1.1.
Real clients (curl --http2, nghttp, python3-h2, python3-grpcio) against an HTTPS origin on a test
host at 198.18.0.2 (a network namespace of its own), through `sluice serve` and inside `sluice
exec` as root and as 65534; the translation rules of RFC 9113 section 8 and the known HTTP/2
attacks, each a row."""
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

import h2_client as h2c
from harness import (PYTHON, SLUICE, Gateway, Processes, curl, make_ca, make_leaf, netns_upstream, payload,
                     status_of)
from harness import log_records
from netns import TestHost

HERE = os.path.dirname(os.path.abspath(__file__))
M = {}
SECRET = "h2-secret-%s" % os.urandom(6).hex()
ORIGIN = "origin.test:8443"


def setUpModule():
    if os.geteuid() != 0:
        raise unittest.SkipTest("the HTTP/2 suite sets up a network namespace and needs root")
    M["tmp"] = d = tempfile.mkdtemp(prefix="sluice-h2-test-")
    os.chmod(d, 0o755)
    ca = M["ca"] = make_ca(d, "origin-ca")
    leaf = make_leaf(d, ca, "origin.test", "DNS:origin.test")
    for f in os.listdir(d):
        os.chmod(os.path.join(d, f), 0o644)
    host = M["host"] = TestHost()
    env = dict(os.environ, ORIGIN_HOST="198.18.0.2", ORIGIN_AUTH="Bearer " + SECRET)
    p = host.start(PYTHON, os.path.join(HERE, "origin.py"), "8443", *leaf, env=env)
    assert p.stdout.readline().strip() == b"ready"
    M["upstream"] = netns_upstream(ca[0], ["origin.test"])
    M["procs"] = Processes()
    os.environ["H2_TOKEN"] = SECRET


def tearDownModule():
    if "procs" in M:
        M["procs"].stop_all()
    if "host" in M:
        M["host"].close()
    if "tmp" in M:
        shutil.rmtree(M["tmp"], ignore_errors=True)


class H2ThroughServe(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        d = M["tmp"]
        limits = """[timeouts]
io = "2s"
[limits]
max_header_bytes = 16384
"""
        cls.read = Gateway(M["procs"], d, f"""profile = "network-read"
[policy]
allow = ["{ORIGIN}", {{ host = "{ORIGIN}", methods = ["POST"], paths = ["/pkg.Allowed/*"] }}]
[credentials.h2]
source = "env:H2_TOKEN"
hosts = ["{ORIGIN}"]
""" + limits + M["upstream"], "h2read")
        cls.pub = Gateway(M["procs"], d, f'profile = "publish"\n[policy]\nallow = ["{ORIGIN}"]\n' + limits +
                          M["upstream"], "h2pub")

    def client(self, gw):
        return h2c.Client(h2c.tunnel(gw.port, "origin.test", 8443, gw.ca), ORIGIN)

    def lines(self, gw, path):
        return [r for r in gw.access_log() if r["path"] == path]

    def still_serving(self, gw):
        p = curl(gw, "https://origin.test:8443/alive", "--http2")
        self.assertEqual(p.stdout, b"hello from origin /alive\n", p.stderr)

    def test_curl_speaks_h2_and_each_request_is_logged(self):
        p = curl(self.read, "https://origin.test:8443/bytes/70000", "--http2", "-w", "%{http_version}")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout[:-1], payload(70000))
        self.assertEqual(p.stdout[-1:], b"2")  # HTTP/2 negotiated
        self.assertTrue(self.read.logged(lambda r: r["path"] == "/bytes/70000"))
        r = self.lines(self.read, "/bytes/70000")[-1]
        self.assertEqual((r["protocol"], r["status"], r["decision"], r["bytes_out"]), ("h2", 200, "allow", 70000))
        # Without h2 in its offer, the same client speaks HTTP/1.1 as before.
        p = curl(self.read, "https://origin.test:8443/bytes/10", "--http1.1", "-w", "%{http_version}")
        self.assertEqual(p.stdout[-3:], b"1.1")

    def test_multiplexed_streams_each_judged(self):
        c = self.client(self.read)
        ok = [c.headers("/bytes/%d" % (1000 + i)) for i in range(20)]
        post = c.headers("/echo", method="POST", end=False)
        c.data(post, b"x=1")
        self.assertTrue(c.wait(ok + [post]))
        for i, sid in enumerate(ok):
            s = c.streams[sid]
            self.assertEqual(s["headers"][":status"], "200")
            self.assertEqual(s["data"], payload(1000 + i))
        s = c.streams[post]
        self.assertEqual(s["headers"][":status"], "403")
        self.assertIn('details="method_not_allowed"', s["headers"]["proxy-status"])
        self.assertIn(b"read-only", s["data"])
        c.close()
        def streams(lines):
            return [r for r in lines if r["protocol"] == "h2" and r["path"].startswith("/bytes/10")]
        self.assertEqual(len(streams(self.read.wait_log(lambda lines: len(streams(lines)) >= 20))), 20)

    def test_publish_streams_a_large_body_both_ways(self):
        c = self.client(self.pub)
        body = os.urandom(3 * 1024 * 1024 + 7)
        sid = c.headers("/echo", method="POST", end=False, extra=[("content-type", "application/octet-stream")])
        c.data(sid, body)
        self.assertTrue(c.wait([sid], 30))
        s = c.streams[sid]
        self.assertEqual(s["headers"][":status"], "200")
        self.assertEqual(hashlib.sha256(s["data"]).hexdigest(), hashlib.sha256(body).hexdigest())
        c.close()

    def test_large_responses_on_many_streams_arrive_whole_through_odd_windows(self):
        # sluice writes a response's DATA frames from the buffers it read the origin's bytes into,
        # each frame's header put just before its payload: several large bodies at once, known-length
        # and chunked, random and patterned, through a window that opens in odd steps (so frames of
        # every size, some spanning two buffers), each must arrive byte for byte.
        c = h2c.Client(h2c.tunnel(self.pub.port, "origin.test", 8443, self.pub.ca), ORIGIN,
                       settings={h2c.h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 70001})
        echoed = {}
        for n in (3 * 1024 * 1024 + 11, 1024 * 1024 - 3):
            body = os.urandom(n)
            sid = c.headers("/echo", method="POST", end=False, extra=[("content-type", "application/octet-stream"),
                                                                      ("content-length", str(n))])
            c.data(sid, body)
            echoed[sid] = body
        sizes = {c.headers("/bytes/%d" % n): n for n in (4000037, 65500, 16375, 16376, 131000)}
        chunked = {c.headers("/chunked/%d" % n): n for n in (2500001, 70000)}
        self.assertTrue(c.wait(list(echoed) + list(sizes) + list(chunked), 60))
        for sid, body in echoed.items():
            s = c.streams[sid]
            self.assertEqual(s["headers"][":status"], "200")
            self.assertEqual(len(s["data"]), len(body))
            self.assertTrue(s["data"] == body, "echoed body %d differs" % sid)
        for sid, n in list(sizes.items()) + list(chunked.items()):
            s = c.streams[sid]
            self.assertEqual(s["headers"][":status"], "200")
            self.assertTrue(s["data"] == payload(n), "body of %d bytes differs (%d arrived)" % (n, len(s["data"])))
        c.close()

    def test_credentials_added_and_authority_must_be_the_tunnels(self):
        c = self.client(self.read)
        good = c.headers("/private/x", extra=[("authorization", "Bearer sluice-credential-h2")])
        other = c.headers("/", pseudo=[(":method", "GET"), (":scheme", "https"), (":authority", "other.test:8443"),
                                      (":path", "/other")])
        port = c.headers("/", pseudo=[(":method", "GET"), (":scheme", "https"), (":authority", "origin.test:9999"),
                                     (":path", "/port")])
        host = c.headers("/hostfield", extra=[("host", "other.test")])
        self.assertTrue(c.wait([good, other, port, host]))
        self.assertEqual(c.streams[good]["headers"][":status"], "200")  # the origin got the secret (else 401)
        self.assertIn("host_mismatch", c.streams[other]["headers"]["proxy-status"])
        self.assertIn("host_mismatch", c.streams[port]["headers"]["proxy-status"])
        self.assertEqual(c.streams[host]["headers"][":status"], "400")
        self.assertIn("bad_host_header", c.streams[host]["headers"]["proxy-status"])
        c.close()

    def test_translation_rules_of_rfc_9113(self):
        """What HTTP/1.1 would read differently: each refused, nothing reaches the origin."""
        c = self.client(self.pub)
        rows = {
            "connection": [("connection", "keep-alive")],
            "transfer-encoding": [("transfer-encoding", "chunked")],
            "upgrade": [("upgrade", "websocket")],
            "te": [("te", "gzip")],
            "uppercase": [("X-Upper", "1")],
            "crlf": [("x-a", "a\r\nx-b: b")],
            "nul": [("x-a", "a\x00b")],
        }
        sids = {name: c.headers("/t-" + name, extra=extra) for name, extra in rows.items()}
        dup = c.headers("/", pseudo=[(":method", "GET"), (":scheme", "https"), (":authority", ORIGIN),
                                     (":path", "/dup"), (":path", "/dup2")])
        late = c.headers("/", pseudo=[(":method", "GET"), (":scheme", "https"), ("x-a", "1"),
                                      (":authority", ORIGIN), (":path", "/late")])
        connect = c.headers("/", pseudo=[(":method", "CONNECT"), (":authority", "other.test:22")])
        cl = c.headers("/cl", method="POST", end=False, extra=[("content-length", "10")])
        c.data(cl, b"12345")
        self.assertTrue(c.wait(list(sids.values()) + [dup, late, connect, cl]))
        for name, sid in list(sids.items()) + [("dup", dup), ("late", late), ("connect", connect), ("cl", cl)]:
            s = c.streams[sid]
            refused = s["reset"] is not None or (s["headers"] and s["headers"][":status"] in ("400", "403"))
            self.assertTrue(refused, (name, s))
        c.close()
        time.sleep(0.3)
        allowed = [r["path"] for r in self.pub.access_log() if r["decision"] == "allow"]
        self.assertFalse([p for p in allowed if p.startswith(("/t-", "/dup", "/late", "/cl"))], allowed)
        self.still_serving(self.pub)

    def test_grpc_call_refused_with_a_grpc_status_and_the_reason(self):
        script = f"""
import grpc, sys
creds = grpc.ssl_channel_credentials(open({self.read.ca!r}, 'rb').read())
ch = grpc.secure_channel('origin.test:8443', creds)
call = ch.unary_unary('/pkg.Service/Delete')
try:
    call(b'\\x00', timeout=10)
    print('OK')
except grpc.RpcError as e:
    print(e.code().name, e.details())
"""
        env = dict(os.environ, https_proxy=self.read.proxy, grpc_proxy=self.read.proxy, no_grpc_proxy="")
        p = subprocess.run([PYTHON, "-c", script], capture_output=True, env=env, timeout=30)
        out = p.stdout.decode()
        self.assertTrue(out.startswith("PERMISSION_DENIED"), out + p.stderr.decode()[-1500:])
        self.assertIn("method_not_allowed", out)
        self.assertTrue(self.read.logged(lambda r: r["path"] == "/pkg.Service/Delete"))
        r = self.lines(self.read, "/pkg.Service/Delete")[-1]
        self.assertEqual((r["protocol"], r["decision"], r["reason"], r["grpc_status"]),
                         ("grpc", "deny", "method_not_allowed", 7))

    # --- the known HTTP/2 attacks ------------------------------------------------------------------
    def test_header_lists_past_the_limit_are_431(self):
        c = self.client(self.pub)
        many = c.headers("/many", extra=[("x-h%d" % i, "v" * 200) for i in range(100)])  # 20 KiB > 16 KiB
        self.assertTrue(c.wait([many]))
        self.assertEqual(c.streams[many]["headers"][":status"], "431")
        c.close()
        # HPACK bomb: one 4000-byte field indexed once, then referenced 2000 times (8 MB decoded
        # from a few KiB on the wire).
        s = h2c.raw_connection(self.pub.port, "origin.test", 8443, self.pub.ca)
        enc = h2c.hpack.Encoder()
        base = [(":method", "GET"), (":scheme", "https"), (":authority", ORIGIN), (":path", "/bomb")]
        block = enc.encode(base + [("x-bomb", "b" * 4000)] + [("x-bomb", "b" * 4000)] * 2000)
        frames = [block[i:i + 16000] for i in range(0, len(block), 16000)]
        data = h2c.headers_frame(1, frames[0], end_headers=len(frames) == 1)
        for i, f in enumerate(frames[1:]):
            data += h2c.continuation_frame(1, f, end=i == len(frames) - 2)
        s.sendall(data)
        got = h2c.read_frames(s, 10, until=lambda f: f[0] in (1, 3, 7) and f[2] in (0, 1))
        heads = [dict(h2c.hpack.Decoder().decode(f[3])) for f in got if f[0] == 1 and f[2] == 1]
        self.assertEqual([h.get(":status") for h in heads], ["431"], got[:5])
        s.close()
        self.assertFalse([r for r in self.pub.access_log() if r["path"] == "/bomb" and r["decision"] == "allow"])
        self.still_serving(self.pub)

    def test_rapid_reset_is_bounded(self):
        s = h2c.raw_connection(self.pub.port, "origin.test", 8443, self.pub.ca)
        enc = h2c.hpack.Encoder()
        burst = b""
        for i in range(2000):
            sid = 1 + 2 * i
            burst += h2c.headers_frame(sid, enc.encode([(":method", "GET"), (":scheme", "https"),
                                                         (":authority", ORIGIN), (":path", "/reset/%d" % i)]))
            burst += (4).to_bytes(3, "big") + bytes([3, 0]) + sid.to_bytes(4, "big") + (8).to_bytes(4, "big")
        try:
            s.sendall(burst)
        except OSError:
            pass
        got = h2c.read_frames(s, 10, until=lambda f: f[0] == 7)
        self.assertIsNotNone(h2c.goaway_code(got), "no GOAWAY after 2000 HEADERS+RST_STREAM pairs")
        s.close()
        time.sleep(0.5)
        reached = [r for r in self.pub.access_log() if r["path"].startswith("/reset/") and r["status"] == 200]
        self.assertLess(len(reached), 1000)
        self.still_serving(self.pub)

    def test_continuation_flood_ends_the_connection(self):
        s = h2c.raw_connection(self.pub.port, "origin.test", 8443, self.pub.ca)
        enc = h2c.hpack.Encoder()
        data = h2c.headers_frame(1, enc.encode([(":method", "GET"), (":scheme", "https"), (":authority", ORIGIN),
                                                 (":path", "/cont")]), end_headers=False)
        for i in range(200):
            data += h2c.continuation_frame(1, enc.encode([("x-c%d" % i, "c")]))
        try:
            s.sendall(data)
        except OSError:
            pass
        got = h2c.read_frames(s, 10)
        self.assertFalse([f for f in got if f[0] == 1], "a response to a CONTINUATION flood")
        s.close()
        self.still_serving(self.pub)

    def test_ping_settings_and_empty_frame_floods_end_the_connection(self):
        for name, flood in (("ping", b"".join(h2c.ping_frame(i) for i in range(3000))),
                            ("settings", b"".join(h2c.settings_frame() for _ in range(3000)))):
            s = h2c.raw_connection(self.pub.port, "origin.test", 8443, self.pub.ca)
            try:
                s.sendall(flood)
            except OSError:
                pass
            got = h2c.read_frames(s, 10, until=lambda f: f[0] == 7)
            self.assertEqual(h2c.goaway_code(got), 11, (name, got[-3:]))  # ENHANCE_YOUR_CALM
            s.close()
        s = h2c.raw_connection(self.pub.port, "origin.test", 8443, self.pub.ca)
        enc = h2c.hpack.Encoder()
        data = h2c.headers_frame(1, enc.encode([(":method", "POST"), (":scheme", "https"), (":authority", ORIGIN),
                                                 (":path", "/echo")]), end_stream=False)
        data += b"".join(h2c.data_frame(1) for _ in range(500))
        s.sendall(data)
        got = h2c.read_frames(s, 10, until=lambda f: f[0] == 7)
        self.assertEqual(h2c.goaway_code(got), 11)
        s.close()
        self.still_serving(self.pub)

    def test_too_many_streams_and_a_window_that_never_opens(self):
        c = self.client(self.pub)
        pending = [c.headers("/echo", method="POST", end=False) for _ in range(150)]
        c.pump(1)
        for _ in range(10):
            c.pump(0.2)
        refused = [sid for sid in pending if c.streams[sid]["reset"] is not None]
        self.assertTrue(refused or c.goaway is not None or c.closed, "150 open streams all accepted")
        c.close()
        # A client whose window stays shut: the stream is given up after the I/O deadline (2 s),
        # the connection after tunnel_idle; the gateway serves others meanwhile.
        c = h2c.Client(h2c.tunnel(self.pub.port, "origin.test", 8443, self.pub.ca), ORIGIN,
                       settings={h2c.h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        sid = c.headers("/bytes/2000000")
        c.pump(1)
        self.still_serving(self.pub)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and c.streams[sid]["reset"] is None and not c.closed:
            c.pump(0.5)
        self.assertTrue(c.streams[sid]["reset"] is not None or c.closed)
        c.close()


class H2Drain(unittest.TestCase):
    """SIGTERM: each h2 client connection gets GOAWAY at once (an idle one closes instead of
    holding the drain), and a stream in flight finishes before the gateway exits."""

    def test_goaway_on_sigterm_and_the_open_stream_finishes(self):
        gw = Gateway(M["procs"], M["tmp"], f'profile = "publish"\n[policy]\nallow = ["{ORIGIN}"]\n'
                     '[timeouts]\ndrain = "20s"\n' + M["upstream"], "h2drain")
        idle = h2c.Client(h2c.tunnel(gw.port, "origin.test", 8443, gw.ca), ORIGIN)
        first = idle.headers("/alive")
        self.assertTrue(idle.wait([first]))
        # Three events 3 s apart: still streaming when the signal comes.
        busy = subprocess.Popen(["curl", "-sSN", "--max-time", "30", "--http2", "--proxy", gw.proxy, "--cacert",
                                 gw.ca, "https://origin.test:8443/sse/3/3"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        self.assertEqual(busy.stdout.readline(), b"data: event 0\n")  # the stream is open
        gw.proc.send_signal(15)
        self.assertTrue(idle.wait_closed(timeout=10), "no GOAWAY on the idle connection after SIGTERM")
        self.assertEqual(idle.goaway, 0, "the connection closed without GOAWAY (NO_ERROR)")
        self.assertIsNone(busy.poll(), "GOAWAY came only once the stream in flight had ended")
        out, err = busy.communicate(timeout=30)
        self.assertEqual(busy.returncode, 0, err)
        self.assertTrue(out.endswith(b"data: event 1\n\ndata: event 2\n\n"), out)
        self.assertEqual(gw.proc.wait(timeout=20), 0)


def start_h2_origins():
    """The gRPC origin (198.18.0.2:9443) and an nginx speaking h2 (9444), once for the module."""
    if "grpc" in M:
        return
    d = M["tmp"]
    leaf = make_leaf(d, M["ca"], "origin.test.h2", "DNS:origin.test")
    for f in leaf:
        os.chmod(f, 0o644)
    env = dict(os.environ, ORIGIN_AUTH="Bearer " + SECRET)
    p = M["host"].start("/usr/bin/python3", os.path.join(HERE, "grpc_origin.py"), "198.18.0.2", "9443", *leaf,
                        env=env)
    line = p.stdout.readline().strip()
    assert line == b"ready", p.stderr.read1(4096) if line == b"" else line
    M["grpc"] = p
    with open(os.path.join(d, "big.bin"), "wb") as f:
        f.write(payload(1 << 20))
    os.chmod(os.path.join(d, "big.bin"), 0o644)
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/nginx-error.log;
events {{ }}
http {{
  log_format withconn '$connection "$request" $status';
  access_log {d}/nginx-access.log withconn;
  client_body_temp_path {d}/nginx-body;
  server {{
    listen 198.18.0.2:9444 ssl http2;
    ssl_certificate {leaf[0]};
    ssl_certificate_key {leaf[1]};
    location = /big.bin {{ root {d}; }}
    location / {{ default_type text/plain; return 200 "h2 origin $server_protocol $request_method $uri $http_authorization_seen\n"; }}
  }}
  map $http_authorization $http_authorization_seen {{ "Bearer {SECRET}" "auth=yes"; default "auth=no"; }}
}}
""")
    M["nginx"] = M["host"].start("nginx", "-c", conf, "-g", "daemon off;")
    import socket
    for _ in range(100):
        try:
            socket.create_connection(("198.18.0.2", 9444), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("nginx did not listen on 198.18.0.2:9444: " + open(os.path.join(d, "nginx-error.log")).read())


GRPC_ORIGIN = "origin.test:9443"
NGINX_ORIGIN = "origin.test:9444"


class H2ToTheOrigin(unittest.TestCase):
    """Origins that select h2 get the streams on one multiplexed h2 connection: gRPC calls of every
    kind (unary, server-streaming, client-streaming, bidirectional), each judged by method and
    path, credentials added, grpc-status and trailers relayed; plain h2 to nginx."""

    @classmethod
    def setUpClass(cls):
        start_h2_origins()
        d = M["tmp"]
        cls.gw = Gateway(M["procs"], d, f"""profile = "network-read"
[policy]
allow = ["{NGINX_ORIGIN}", {{ host = "{GRPC_ORIGIN}", methods = ["POST"], paths = ["/pkg.Allowed/*"] }}]
[credentials.h2]
source = "env:H2_TOKEN"
hosts = ["{GRPC_ORIGIN}", "{NGINX_ORIGIN}"]
""" + M["upstream"], "h2origin", args=("--threads", "1"))  # one worker: one origin connection

    def test_grpc_calls_of_every_kind(self):
        env = dict(os.environ, https_proxy=self.gw.proxy, grpc_proxy=self.gw.proxy, no_grpc_proxy="")
        p = subprocess.run([PYTHON, os.path.join(HERE, "grpc_client.py"), GRPC_ORIGIN, self.gw.ca],
                           capture_output=True, env=env, timeout=180)
        self.assertEqual(p.returncode, 0, p.stderr.decode()[-2000:])
        out = json.loads(p.stdout)
        check_grpc_results(self, out)
        calls = {"/pkg.Allowed/Echo", "/pkg.Allowed/Stream", "/pkg.Allowed/Big", "/pkg.Allowed/Sum",
                 "/pkg.Allowed/Chat", "/pkg.Allowed/Missing", "/pkg.Service/Delete"}
        log = self.gw.wait_log(lambda lines: calls <= {r["path"] for r in lines})
        by_path = {}
        for r in log:
            by_path.setdefault(r["path"], []).append(r)
        for path, code in (("/pkg.Allowed/Echo", 0), ("/pkg.Allowed/Stream", 0), ("/pkg.Allowed/Big", 0),
                           ("/pkg.Allowed/Sum", 0), ("/pkg.Allowed/Chat", 0), ("/pkg.Allowed/Missing", 5)):
            r = by_path[path][-1]
            self.assertEqual((r["protocol"], r["decision"], r["status"], r["grpc_status"]),
                             ("grpc", "allow", 200, code), r)
        self.assertGreater(by_path["/pkg.Allowed/Big"][-1]["bytes_out"], 6 << 20)
        self.assertGreater(by_path["/pkg.Allowed/Sum"][-1]["bytes_in"], 5 << 20)
        r = by_path["/pkg.Service/Delete"][-1]
        self.assertEqual((r["decision"], r["reason"], r["grpc_status"]), ("deny", "method_not_allowed", 7))
        self.assertNotIn(SECRET.encode(), p.stdout + p.stderr)

    def test_curl_and_nghttp_to_an_h2_origin(self):
        p = curl(self.gw, "https://%s/hello" % NGINX_ORIGIN, "--http2", "-w", "%{http_version}")
        self.assertEqual(p.stdout, b"h2 origin HTTP/2.0 GET /hello auth=yes\n2", p.stderr)
        p = curl(self.gw, "https://%s/big.bin" % NGINX_ORIGIN, "--http2")
        self.assertEqual(hashlib.sha256(p.stdout).hexdigest(), hashlib.sha256(payload(1 << 20)).hexdigest())
        # Multiplexed: one client connection, ten streams, answered on the origin's one h2 connection.
        c = h2c.Client(h2c.tunnel(self.gw.port, "origin.test", 9444, self.gw.ca), NGINX_ORIGIN)
        ids = [c.headers("/m%d" % i) for i in range(10)]
        self.assertTrue(c.wait(ids))
        for i, sid in enumerate(ids):
            self.assertEqual(c.streams[sid]["headers"][":status"], "200")
            self.assertEqual(bytes(c.streams[sid]["data"]), b"h2 origin HTTP/2.0 GET /m%d auth=yes\n" % i)
        # A POST is refused before the origin (network-read), as over HTTP/1.1.
        post = c.headers("/form", method="POST", end=True)
        self.assertTrue(c.wait([post]))
        self.assertEqual(c.streams[post]["headers"][":status"], "403")
        with open(os.path.join(M["tmp"], "nginx-access.log")) as f:
            access = f.read()
        self.assertIn('"GET /m9 HTTP/2.0"', access)
        self.assertNotIn("/form", access)


    def test_one_origin_connection_shared_and_a_shut_window_holds_only_its_streams(self):
        # Client A asks for 4 MiB and never opens its window: its streams stall at 256 KiB each on
        # the origin connection they share with client B, whose requests all finish meanwhile.
        a = h2c.Client(h2c.tunnel(self.gw.port, "origin.test", 9444, self.gw.ca), NGINX_ORIGIN,
                       settings={h2c.h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        stalled = [a.headers("/big.bin") for _ in range(4)]
        a.pump(0.5)
        b = h2c.Client(h2c.tunnel(self.gw.port, "origin.test", 9444, self.gw.ca), NGINX_ORIGIN)
        ids = [b.headers("/shared%d" % i) for i in range(5)] + [b.headers("/big.bin")]
        self.assertTrue(b.wait(ids, timeout=20))
        self.assertEqual([b.streams[i]["headers"][":status"] for i in ids], ["200"] * 6)
        self.assertEqual(hashlib.sha256(b.streams[ids[-1]]["data"]).hexdigest(),
                         hashlib.sha256(payload(1 << 20)).hexdigest())
        self.assertFalse(any(a.streams[s]["ended"] for s in stalled))
        with open(os.path.join(M["tmp"], "nginx-access.log")) as f:
            conns = {line.split()[0] for line in f if "/shared" in line}
        self.assertEqual(len(conns), 1, conns)  # B's streams multiplexed on one origin connection
        a.close()
        b.close()


def check_grpc_results(test, out, auth="yes"):
    test.assertEqual(out["unary"], ["hello", auth], out)
    test.assertEqual(out["stream"], [["m0", "m1", "m2", "m3", "m4"], auth], out)
    test.assertEqual(out["big"], [6, auth], out)
    test.assertEqual(out["sum"], [str(5 << 20), auth], out)
    test.assertEqual(out["chat"], [["cba", "olleh", "zyx"], auth], out)
    test.assertEqual(out["missing"], ["NOT_FOUND", "no such thing here"], out)
    test.assertEqual(out["delete"][0], "PERMISSION_DENIED", out)
    test.assertIn("method_not_allowed", out["delete"][1], out)


class H2InsideTheHttpsProxyListener(unittest.TestCase):
    """serve's HTTPS proxy listener: the tunnel's TLS (and its h2) carried inside the client's TLS
    to sluice, reads and writes side by side on both layers."""

    @classmethod
    def setUpClass(cls):
        from harness import free_port
        d = M["tmp"]
        listener = make_leaf(d, M["ca"], "proxy.test", "IP:127.0.0.1")
        cls.tls_port = free_port()
        cls.gw = Gateway(M["procs"], d, f'profile = "publish"\n[policy]\nallow = ["{ORIGIN}"]\n' +
                         M["upstream"].replace("[tls]\n", f'[tls]\nproxy_cert = "{listener[0]}"\n'
                                                          f'proxy_key = "{listener[1]}"\n'),
                         "h2tls", listen_extra='proxy_tls = "127.0.0.1:%d"\n' % cls.tls_port)

    def test_curl_h2_through_the_https_proxy(self):
        for path in ("/bytes/300000", "/chunked/70000"):
            p = subprocess.run(["curl", "-sS", "--max-time", "20", "--http2", "-o", "-", "-w", "%{http_version}",
                                "--proxy", "https://127.0.0.1:%d" % self.tls_port, "--proxy-cacert", M["ca"][0],
                                "--cacert", self.gw.ca, "https://origin.test:8443" + path], capture_output=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            n = int(path.rsplit("/", 1)[1])
            self.assertEqual(p.stdout[:-1], payload(n))
            self.assertEqual(p.stdout[-1:], b"2")
        body = os.urandom(1 << 20)
        path = os.path.join(M["tmp"], "upload.bin")
        with open(path, "wb") as f:
            f.write(body)
        p = subprocess.run(["curl", "-sS", "--max-time", "20", "--http2", "-o", "-", "--data-binary", "@" + path,
                            "--proxy", "https://127.0.0.1:%d" % self.tls_port, "--proxy-cacert", M["ca"][0],
                            "--cacert", self.gw.ca, "https://origin.test:8443/echo"], capture_output=True)
        self.assertEqual(hashlib.sha256(p.stdout).hexdigest(), hashlib.sha256(body).hexdigest(), p.stderr)


class H2InsideExecAsRoot(unittest.TestCase):
    """`sluice exec`: curl --http2 through the proxy, nghttp by the capture (it knows no proxy)."""
    user = None

    @classmethod
    def setUpClass(cls):
        cls.policy = os.path.join(M["tmp"], "exec-policy.toml")
        with open(cls.policy, "w") as f:
            f.write(f"""[skills.default]
default_profile = "network-read"
escalations = ["publish"]
allow_domains = ["{ORIGIN}", {{ host = "{GRPC_ORIGIN}", methods = ["POST"], paths = ["/pkg.Allowed/*"] }}]
""" + M["upstream"])
        os.chmod(cls.policy, 0o644)

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="sluice-h2-case-")
        os.chmod(self.work, 0o777)
        self.home = os.path.join(self.work, "home")
        os.makedirs(self.home)
        os.chmod(self.home, 0o777)

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def sx(self, profile, *cmd):
        prefix = [] if self.user is None else ["setpriv", "--reuid=%d" % self.user, "--regid=%d" % self.user,
                                               "--clear-groups"]
        log = os.path.join(self.work, "access.log")
        if os.path.exists(log):
            os.unlink(log)
        args = [SLUICE, "exec", "--policy", self.policy, "--sandbox-profile", profile, "--access-log", log]
        if profile == "publish":
            args.append("--confirm-external-side-effects")
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": self.home, "LANG": "C.UTF-8"}
        p = subprocess.run(prefix + args + ["--"] + list(cmd), capture_output=True, env=env, cwd=self.work,
                           timeout=120)
        lines = []
        if os.path.exists(log):
            with open(log) as f:
                lines = log_records(f)
        return p, lines

    def test_curl_and_nghttp_speak_h2_and_are_judged(self):
        p, log = self.sx("network-read", "sh", "-c",
                         "curl -sS --http2 -o /dev/null -w '%{http_version} %{http_code}\\n' https://origin.test:8443/bytes/5000; "
                         "curl -sS --http2 -o /dev/null -w '%{http_version} %{http_code}\\n' -X POST -d x https://origin.test:8443/echo")
        self.assertEqual(p.stdout.decode().split("\n")[:2], ["2 200", "2 403"], p.stderr.decode())
        self.assertEqual(sorted((l["protocol"], l["path"], l["decision"]) for l in log),
                         [("h2", "/bytes/5000", "allow"), ("h2", "/echo", "deny")])
        if shutil.which("nghttp"):
            p, log = self.sx("network-read", "nghttp", "-n", "-s", "https://origin.test:8443/bytes/4096",
                             "https://origin.test:8443/bytes/8192")
            self.assertEqual(p.returncode, 0, p.stdout.decode()[-1000:] + p.stderr.decode()[-1000:])
            self.assertEqual(sorted((l["protocol"], l["path"], l["status"], l["entry"]) for l in log),
                             [("h2", "/bytes/4096", 200, "capture"), ("h2", "/bytes/8192", 200, "capture")])


    def test_grpc_calls_to_an_h2_origin(self):
        start_h2_origins()
        shutil.copy(os.path.join(HERE, "grpc_client.py"), self.work)  # the sandbox sees its work tree only
        p, log = self.sx("network-read", "/usr/bin/python3", "grpc_client.py", GRPC_ORIGIN)
        self.assertEqual(p.returncode, 0, p.stderr.decode()[-2000:])
        check_grpc_results(self, json.loads(p.stdout), auth="no")
        calls = sorted((l["path"], l["protocol"], l["decision"], l["grpc_status"]) for l in log)
        self.assertIn(("/pkg.Allowed/Chat", "grpc", "allow", 0), calls)
        self.assertIn(("/pkg.Allowed/Missing", "grpc", "allow", 5), calls)
        self.assertIn(("/pkg.Service/Delete", "grpc", "deny", 7), calls)


class H2InsideExecAsNobody(H2InsideExecAsRoot):
    user = 65534


if __name__ == "__main__":
    unittest.main()
