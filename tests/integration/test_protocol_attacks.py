"""The holes found by attacking the protocol paths, each sent with raw frames (h2_attacks.py) through
`sluice serve` and inside `sluice exec` as root and as 65534, and each checked against what the
origin received (origin.py's record, nginx's access log) and what sluice logged:
- a body on a read method under network-read over h2 (no content-length): refused, nothing reaches
  the origin, HTTP/1.1 or h2;
- MadeYouReset (CVE-2025-8671): streams the client makes sluice reset end the connection past a
  bound, and only a bounded number ever reach the origin;
- an HPACK bomb: a few 431s, then GOAWAY (ENHANCE_YOUR_CALM);
- a header block nghttp2 resets (a name in upper case): one access-log line with the reason;
- an exact deny route refuses its trailing-slash twin;
- a malformed Sec-WebSocket-Key is refused under publish."""
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

import h2_attacks
from harness import PYTHON, SLUICE, Gateway, Processes, curl, make_ca, make_leaf, netns_upstream
from harness import log_records
from netns import TestHost

HERE = os.path.dirname(os.path.abspath(__file__))
M = {}
ORIGIN = "origin.test:8443"   # origin.py: HTTP/1.1 only, records every request head
H2_ORIGIN = "origin.test:9444"  # nginx: selects h2, logs every request
DENY = f'deny = [{{ host = "{ORIGIN}", paths = ["/public/exact"] }}]'


def setUpModule():
    if os.geteuid() != 0:
        raise unittest.SkipTest("the attack suite sets up a network namespace and needs root")
    M["tmp"] = d = tempfile.mkdtemp(prefix="sluice-attacks-test-")
    os.chmod(d, 0o755)
    ca = M["ca"] = make_ca(d, "origin-ca")
    leaf = make_leaf(d, ca, "origin.test", "DNS:origin.test")
    for f in os.listdir(d):
        os.chmod(os.path.join(d, f), 0o644)
    M["record"] = os.path.join(d, "origin-requests.jsonl")
    host = M["host"] = TestHost()
    env = dict(os.environ, ORIGIN_HOST="198.18.0.2", ORIGIN_RECORD=M["record"])
    p = host.start(PYTHON, os.path.join(HERE, "origin.py"), "8443", *leaf, env=env)
    assert p.stdout.readline().strip() == b"ready"
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/nginx-error.log;
events {{ }}
http {{
  access_log {d}/nginx-access.log;
  client_body_temp_path {d}/nginx-body;
  server {{
    listen 198.18.0.2:9444 ssl http2;
    ssl_certificate {leaf[0]};
    ssl_certificate_key {leaf[1]};
    location / {{ default_type text/plain; return 200 "h2 origin $request_method $uri\\n"; }}
  }}
}}
""")
    host.start("nginx", "-c", conf, "-g", "daemon off;")
    M["upstream"] = netns_upstream(ca[0], ["origin.test"])
    M["procs"] = Processes()
    import socket
    for _ in range(100):
        try:
            socket.create_connection(("198.18.0.2", 9444), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        raise AssertionError("nginx did not listen on 198.18.0.2:9444")


def tearDownModule():
    if "procs" in M:
        M["procs"].stop_all()
    if "host" in M:
        M["host"].close()
    if "tmp" in M:
        shutil.rmtree(M["tmp"], ignore_errors=True)


def origin_received(prefix):
    """The request heads origin.py received whose path starts with `prefix`."""
    if not os.path.exists(M["record"]):
        return []
    with open(M["record"]) as f:
        return [r for r in map(json.loads, f) if r["path"].startswith(prefix)]


def nginx_received(prefix):
    path = os.path.join(M["tmp"], "nginx-access.log")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line for line in f if ' %s' % prefix in line]


class Checks:
    """What each row must show, whichever way the attack came (serve or exec)."""

    def check_read(self, out, log):
        for name in ("get_with_body", "head_with_body", "options_with_body"):
            r = out[name]
            self.assertEqual(r["status"], "403", (name, r))
            self.assertIn('details="body_on_read_method"', r["proxy_status"], (name, r))
        self.assertEqual(origin_received("/atk-body/"), [])
        self.assertEqual(sorted(l["reason"] for l in log if l["path"].startswith("/atk-body/")),
                         ["body_on_read_method"] * 3)
        # MadeYouReset: GOAWAY ENHANCE_YOUR_CALM long before the 20,000th stream, and only a
        # bounded number of its requests ever reached the origin.
        myr = out["made_you_reset"]
        self.assertEqual(myr["goaway"], 11, myr)
        self.assertLess(myr["resets"], 1000, myr)
        time.sleep(0.5)  # requests forwarded before the GOAWAY finish
        self.assertLess(len(origin_received("/atk-myr/")), 400, myr)
        # HPACK bomb: at most four 431s, then GOAWAY ENHANCE_YOUR_CALM.
        bomb = out["hpack_bomb"]
        self.assertEqual(bomb["goaway"], 11, bomb)
        self.assertTrue(1 <= len(bomb["statuses"]) <= 4 and set(bomb["statuses"]) == {"431"}, bomb)
        self.assertLess(bomb["blocks_sent"], 20, bomb)
        self.assertEqual(origin_received("/atk-bomb"), [])
        # A stream nghttp2 resets for a malformed field: reset, never forwarded, and logged.
        self.assertEqual(out["malformed_field"]["reset"], 1, out["malformed_field"])  # PROTOCOL_ERROR
        self.assertEqual(origin_received("/atk-malformed"), [])
        row = [l for l in log if l["path"] == "/atk-malformed"]
        self.assertEqual([(l["decision"], l["reason"], l["protocol"], l["method"]) for l in row],
                         [("deny", "h2_malformed_field", "h2", "GET")], row)
        # A HEADERS frame on a lower stream id than one used: GOAWAY PROTOCOL_ERROR, never forwarded.
        lower = out["lower_stream_id"]
        self.assertEqual((lower["goaway"], lower["stream_5_answered"]), (1, True), lower)
        self.assertEqual(origin_received("/atk-lower/3"), [])
        # The deny route's trailing-slash twin, over both protocols.
        for proto, r in out["deny_twin"].items():
            self.assertEqual(r["status"], "403", (proto, r))
            self.assertIn('details="route_denied"', r["proxy_status"], (proto, r))
        self.assertEqual(origin_received("/public/exact"), [])

    def check_publish(self, out):
        for name, r in out["websocket_bad_key"].items():
            self.assertEqual(r["status"], "403", (name, r))
            self.assertIn('details="upgrade_refused"', r["proxy_status"], (name, r))
        self.assertEqual(origin_received("/atk-ws/"), [])


class AttacksThroughServe(Checks, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        d = M["tmp"]
        cls.read = Gateway(M["procs"], d, f"""profile = "network-read"
[policy]
allow = ["{ORIGIN}", "{H2_ORIGIN}"]
{DENY}
""" + M["upstream"], "atkread")
        cls.pub = Gateway(M["procs"], d, f'profile = "publish"\n[policy]\nallow = ["{ORIGIN}"]\n' + M["upstream"],
                          "atkpub")

    def test_network_read_holds_against_every_row(self):
        out = h2_attacks.read_attacks(self.read.port, self.read.ca, ORIGIN)
        self.assertTrue(self.read.wait_log(lambda ls: {"/atk-malformed"} <= {l["path"] for l in ls}
                                           and len([l for l in ls if l["path"].startswith("/atk-body/")]) >= 3))
        self.check_read(out, self.read.access_log())
        p = curl(self.read, "https://%s/alive" % ORIGIN, "--http2")  # serves others meanwhile
        self.assertEqual(p.stdout, b"hello from origin /alive\n", p.stderr)
        # A GET with a body towards an origin that selects h2: refused the same way.
        r = h2_attacks.get_with_body(self.read.port, self.read.ca, H2_ORIGIN, "/atk-h2body")
        self.assertEqual(r["status"], "403", r)
        self.assertEqual(nginx_received("/atk-h2body"), [])
        # A GET whose stream ends with an empty DATA frame carries no body: it passes.
        c = h2_attacks.h2c.Client(h2_attacks.h2c.tunnel(self.read.port, "origin.test", 9444, self.read.ca), H2_ORIGIN)
        sid = c.headers("/atk-empty", end=False)
        c.conn.send_data(sid, b"", end_stream=True)
        c.flush()
        self.assertTrue(c.wait([sid]))
        self.assertEqual(c.streams[sid]["headers"][":status"], "200")
        # nginx writes its log line after the response leaves: the client may read it first.
        deadline = time.monotonic() + 5
        while not nginx_received("/atk-empty") and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(len(nginx_received("/atk-empty")), 1)
        c.close()

    def test_publish_refuses_a_malformed_websocket_key(self):
        self.check_publish(h2_attacks.publish_attacks(self.pub.port, self.pub.ca, ORIGIN))
        # A body on a GET is not a read-only matter under publish: it still reaches the origin.
        r = h2_attacks.get_with_body(self.pub.port, self.pub.ca, ORIGIN, "/pub-body/get")
        self.assertEqual(r["status"], "200", r)
        self.assertEqual(len(origin_received("/pub-body/get")), 1)


class AttacksInsideExecAsRoot(Checks, unittest.TestCase):
    user = None

    @classmethod
    def setUpClass(cls):
        cls.policy = os.path.join(M["tmp"], "exec-policy.toml")
        with open(cls.policy, "w") as f:
            f.write(f"""[skills.default]
default_profile = "network-read"
escalations = ["publish"]
allow_domains = ["{ORIGIN}"]
[policy]
{DENY}
""" + M["upstream"])
        os.chmod(cls.policy, 0o644)

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="sluice-attacks-case-")
        os.chmod(self.work, 0o777)
        for f in ("h2_attacks.py", "h2_client.py"):  # the sandbox sees its work tree only
            shutil.copy(os.path.join(HERE, f), self.work)
        with open(M["record"], "w"):
            pass  # each run reads the origin's record afresh

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def sx(self, profile, which):
        prefix = [] if self.user is None else ["setpriv", "--reuid=%d" % self.user, "--regid=%d" % self.user,
                                               "--clear-groups"]
        log = os.path.join(self.work, "access.log")
        args = [SLUICE, "exec", "--policy", self.policy, "--sandbox-profile", profile, "--access-log", log]
        if profile == "publish":
            args.append("--confirm-external-side-effects")
        home = os.path.join(self.work, "home")
        os.makedirs(home, mode=0o777, exist_ok=True)
        os.chmod(home, 0o777)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "LANG": "C.UTF-8"}
        p = subprocess.run(prefix + args + ["--", "/usr/bin/python3", "h2_attacks.py", which, ORIGIN],
                           capture_output=True, env=env, cwd=self.work, timeout=180)
        self.assertEqual(p.returncode, 0, p.stderr.decode()[-3000:])
        with open(log) as f:
            return json.loads(p.stdout), log_records(f)

    def test_network_read_holds_against_every_row(self):
        out, log = self.sx("network-read", "read")
        self.check_read(out, log)

    def test_publish_refuses_a_malformed_websocket_key(self):
        out, _ = self.sx("publish", "publish")
        self.check_publish(out)


class AttacksInsideExecAsNobody(AttacksInsideExecAsRoot):
    user = 65534


if __name__ == "__main__":
    unittest.main()
