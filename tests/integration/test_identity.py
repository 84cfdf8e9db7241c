"""`sluice serve` for many clients: who is asking (Proxy-Authorization Basic and Bearer, SOCKS5
username/password), a policy per client by its role, report mode, per-client limits, reloads that
rotate tokens (by the file changing, without a signal), `check --client`, `policy suggest` and
`policy token`, and /readyz turning false before the drain. Real curl, python and origins on
loopback."""
import hashlib
import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.request

from harness import (SLUICE, Gateway, LoopbackOrigins, curl, header, loopback_upstream, payload,
                     read_response, sha256, start_dns, status_of)

TOKENS = {"reader": "tok-reader-0123456789", "writer": "tok-writer-abcdefghij",
          "scout": "tok-scout-ZYXWVUTSRQ", "slow": "tok-slow-5555555555"}


def digest(token):
    return hashlib.sha256(token.encode()).hexdigest()


def clients_toml(tokens):
    return "".join('[clients.%s]\ntoken_sha256 = "%s"\nrole = "%s"\n' % (name, digest(tok), role)
                   for name, (tok, role) in tokens.items())


class IdentityTest(LoopbackOrigins):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.tmp.name
        dns = start_dns(cls.procs, {})
        cls.upstream = loopback_upstream(cls.ca[0], dns, {"origin.test": "127.0.0.1", "other.test": "127.0.0.1",
                                                          "private.test": "10.0.0.1"})
        cls.roles = f"""
profile = "network-read"
[policy]
allow = ["origin.test:{cls.https}", "origin.test:{cls.http}"]
deny = ["blocked.test"]
[roles.read]
[roles.write]
profile = "publish"
[roles.trial]
mode = "report"
allow = ["origin.test:{cls.https}"]
[roles.metered]
requests_per_second = 2
bytes_per_second = 262144
"""
        cls.tokens = {"reader": (TOKENS["reader"], "read"), "writer": (TOKENS["writer"], "write"),
                      "scout": (TOKENS["scout"], "trial"), "slow": (TOKENS["slow"], "metered")}
        cls.gw = Gateway(cls.procs, d, cls.body(cls.tokens), "identity")

    @classmethod
    def body(cls, tokens):
        return cls.roles + clients_toml(tokens) + cls.upstream + '[timeouts]\ndns = "2s"\n'

    def url(self, path, host="origin.test"):
        return f"https://{host}:{self.https}{path}"

    def as_client(self, name, url, *args, token=None):
        token = token or TOKENS[name]
        return curl(self.gw, url, "--proxy", "http://%s:%s@127.0.0.1:%d" % (name, token, self.gw.port), *args)

    # --- who is asking ------------------------------------------------------------------------
    def test_no_credentials_get_407_with_both_challenges(self):
        p = curl(self.gw, f"http://origin.test:{self.http}/bytes/10")
        head = p.stderr.decode()
        self.assertEqual(status_of(head), 407, head)
        challenges = [l.split(":", 1)[1].strip() for l in head.splitlines() if l.lower().startswith("proxy-authenticate:")]
        self.assertEqual(challenges, ['Basic realm="sluice"', 'Bearer realm="sluice"'])
        self.assertIn("proxy_auth_required", header(head, "Proxy-Status"))
        self.assertIn(b"Proxy-Authorization", p.stdout)
        # CONNECT without credentials: refused before any tunnel.
        p = curl(self.gw, self.url("/bytes/10"))
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("407", p.stderr.decode())
        self.assertTrue(self.gw.logged(lambda l: l["method"] == "CONNECT" and l["reason"] == "proxy_auth_required"
                                       and l["decision"] == "deny" and l["client"] == ""))
        self.assertGreaterEqual(self.gw.metric("sluice_requests_total", reason="proxy_auth_required"), 2)

    def test_wrong_token_and_unknown_name_are_refused_alike(self):
        for name, token in (("reader", "not-the-token"), ("nobody", TOKENS["reader"]), ("reader", "")):
            p = self.as_client(name, f"http://origin.test:{self.http}/bytes/10", token=token or "x")
            self.assertEqual(status_of(p.stderr.decode()), 407, (name, token))
        p = curl(self.gw, f"http://origin.test:{self.http}/bytes/10", "--proxy-header",
                 "Proxy-Authorization: Bearer wrong-token")
        self.assertEqual(status_of(p.stderr.decode()), 407)
        self.assertTrue(self.gw.logged(lambda l: l["reason"] == "proxy_auth_invalid"))
        # Neither the token sent nor its hash is written anywhere.
        with open(self.gw.log) as f:
            log = f.read()
        self.assertNotIn("not-the-token", log)
        self.assertNotIn(TOKENS["reader"], log)

    def test_basic_and_bearer_identify_the_client_in_log_and_metrics(self):
        p = self.as_client("reader", self.url("/bytes/2048"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sha256(p.stdout), sha256(payload(2048)))
        p = curl(self.gw, self.url("/bytes/100"), "--proxy-header", "Proxy-Authorization: Bearer " + TOKENS["writer"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(self.gw.logged(lambda l: l["path"] == "/bytes/2048" and l["client"] == "reader"
                                       and l["role"] == "read" and l["decision"] == "allow"))
        self.assertTrue(self.gw.logged(lambda l: l["path"] == "/bytes/100" and l["client"] == "writer"
                                       and l["role"] == "write"))
        self.assertGreaterEqual(self.gw.metric("sluice_requests_total", client="reader", decision="allow"), 1)
        # The origin never sees the proxy's credentials.
        p = self.as_client("reader", f"http://origin.test:{self.http}/headers")
        self.assertEqual(status_of(p.stderr.decode()), 200)
        self.assertNotIn(b"proxy-authorization", p.stdout.lower())

    def test_each_request_on_one_connection_is_judged_by_its_own_credentials(self):
        # A load balancer in HTTP mode may carry several clients' requests on one connection: a
        # repeated header is identified once, another client's header as that client, a wrong one
        # refused, without the connection keeping an earlier identity.
        import base64
        import http.client

        def auth(name, token):
            return "Basic " + base64.b64encode(("%s:%s" % (name, token)).encode()).decode()
        conn = http.client.HTTPConnection("127.0.0.1", self.gw.port, timeout=10)
        try:
            for i, (name, token, status) in enumerate((
                    ("reader", TOKENS["reader"], 200), ("reader", TOKENS["reader"], 200),
                    ("writer", TOKENS["writer"], 200), ("reader", "wrong-token", 407),
                    ("reader", TOKENS["reader"], 200))):
                conn.request("GET", f"http://origin.test:{self.http}/bytes/{20 + i}",
                             headers={"Proxy-Authorization": auth(name, token)})
                r = conn.getresponse()
                r.read()
                self.assertEqual(r.status, status, (i, name))
                self.assertFalse(r.will_close, i)
        finally:
            conn.close()
        self.assertTrue(self.gw.logged(lambda l: l["path"] == "/bytes/24"))
        # A refused request's path is its target as sent (absolute form): it was never parsed.
        who = {"/bytes/" + l["path"].rsplit("/bytes/", 1)[1]: (l["client"], l["decision"])
               for l in self.gw.access_log() if "/bytes/2" in l["path"] and l["method"] == "GET"}
        self.assertEqual(who["/bytes/20"], ("reader", "allow"))
        self.assertEqual(who["/bytes/21"], ("reader", "allow"))
        self.assertEqual(who["/bytes/22"], ("writer", "allow"))
        self.assertEqual(who["/bytes/23"], ("", "deny"))
        self.assertEqual(who["/bytes/24"], ("reader", "allow"))

    def test_python_client_with_credentials_in_the_proxy_url(self):
        proxy = "http://writer:%s@127.0.0.1:%d" % (TOKENS["writer"], self.gw.port)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
        with opener.open(f"http://origin.test:{self.http}/bytes/64", timeout=10) as r:
            self.assertEqual(r.read(), payload(64))

    def test_socks5_username_password(self):
        def socks(user, token):
            return curl(self.gw, self.url("/bytes/512"), "--proxy",
                        "socks5h://%s:%s@127.0.0.1:%d" % (user, token, self.gw.port))
        p = socks("reader", TOKENS["reader"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sha256(p.stdout), sha256(payload(512)))
        self.assertTrue(self.gw.logged(lambda l: l["path"] == "/bytes/512" and l["client"] == "reader"))
        p = socks("reader", "wrong")
        self.assertNotEqual(p.returncode, 0)
        self.assertTrue(self.gw.logged(lambda l: l["reason"] == "proxy_auth_invalid" and l["method"] == "-"))
        # A client offering only "no authentication" gets "no acceptable methods".
        with socket.create_connection(("127.0.0.1", self.gw.port), timeout=5) as s:
            s.sendall(b"\x05\x01\x00")
            self.assertEqual(s.recv(2), b"\x05\xff")
        # RFC 1929 framing: version 1, the user name, the token; status 0 on success.
        with socket.create_connection(("127.0.0.1", self.gw.port), timeout=5) as s:
            s.sendall(b"\x05\x01\x02")
            self.assertEqual(s.recv(2), b"\x05\x02")
            tok = TOKENS["writer"].encode()
            s.sendall(b"\x01" + bytes([6]) + b"writer" + bytes([len(tok)]) + tok)
            self.assertEqual(s.recv(2), b"\x01\x00")

    # --- a policy per client ----------------------------------------------------------------
    def test_each_role_gets_its_own_profile(self):
        post = ("-X", "POST", "-d", "x=1")
        p = self.as_client("reader", self.url("/echo"), *post)
        self.assertEqual(status_of(p.stderr.decode()), 403)
        self.assertIn("method_not_allowed", header(p.stderr.decode(), "Proxy-Status"))
        p = self.as_client("writer", self.url("/echo"), *post)
        self.assertEqual(status_of(p.stderr.decode()), 200, p.stderr)
        self.assertEqual(p.stdout, b"x=1")
        # The file's own deny list holds for every role.
        p = self.as_client("writer", "https://blocked.test/")
        self.assertNotEqual(p.returncode, 0)
        self.assertTrue(self.gw.logged(lambda l: l["host"] == "blocked.test" and l["client"] == "writer"
                                       and l["reason"] == "host_denied"))

    def test_report_mode_lets_through_and_logs_would_deny(self):
        # Not on the trial role's allowlist: let through, logged with the reason enforce would give.
        p = self.as_client("scout", f"http://other.test:{self.http}/bytes/300")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sha256(p.stdout), sha256(payload(300)))
        self.assertTrue(self.gw.logged(lambda l: l["client"] == "scout" and l["host"] == "other.test"
                                       and l["path"] == "/bytes/300" and l["decision"] == "would_deny"
                                       and l["reason"] == "host_not_allowlisted"))
        # A write in network-read: the same.
        p = self.as_client("scout", self.url("/echo"), "-X", "POST", "-d", "y=2")
        self.assertEqual(p.stdout, b"y=2")
        self.assertTrue(self.gw.logged(lambda l: l["client"] == "scout" and l["method"] == "POST"
                                       and l["decision"] == "would_deny" and l["reason"] == "method_not_allowed"))
        self.assertGreaterEqual(self.gw.metric("sluice_requests_total", client="scout", decision="would_deny"), 2)
        # Never an address class: a private address stays refused in report mode.
        p = self.as_client("scout", "https://private.test/")
        self.assertEqual(status_of(p.stderr.decode()), 403, p.stderr)
        self.assertTrue(self.gw.logged(lambda l: l["client"] == "scout" and l["host"] == "private.test"
                                       and l["decision"] == "deny" and l["reason"] == "destination_address_denied"))
        # An enforcing role is not affected.
        p = self.as_client("reader", f"http://other.test:{self.http}/bytes/300")
        self.assertEqual(status_of(p.stderr.decode()), 403)
        # A tunnel to a name off the role's list is opened (terminated, with a leaf the CA may sign).
        p = self.as_client("scout", self.url("/", host="other.test"))
        self.assertIn(b"200 Connection established", p.stderr)

    def test_requests_per_second_limit_answers_429(self):
        url = f"http://origin.test:{self.http}/bytes/10"
        # One curl, twelve requests on one keep-alive connection: the role allows 2 a second.
        args = ["curl", "-sS", "--max-time", "20", "--proxy",
                "http://slow:%s@127.0.0.1:%d" % (TOKENS["slow"], self.gw.port), "-o", "/dev/null",
                "-w", "%{http_code}\\n"] + [url] * 12
        codes = subprocess.run(args, capture_output=True, text=True).stdout.split()
        self.assertIn("200", codes)
        self.assertIn("429", codes)
        self.assertTrue(self.gw.logged(lambda l: l["client"] == "slow" and l["reason"] == "rate_limited"
                                       and l["status"] == 429))
        p = curl(self.gw, url, "--proxy", "http://slow:%s@127.0.0.1:%d" % (TOKENS["slow"], self.gw.port))
        # Another client is not limited by this one's budget.
        for _ in range(6):
            p = self.as_client("reader", url)
            self.assertEqual(status_of(p.stderr.decode()), 200)

    def test_bytes_per_second_limit_paces_the_transfer(self):
        time.sleep(1.5)  # the request budget of the test above refills
        t0 = time.monotonic()
        p = self.as_client("slow", self.url("/bytes/1048576"))
        took = time.monotonic() - t0
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sha256(p.stdout), sha256(payload(1048576)))
        # 256 KiB a second with one second's burst: 1 MiB cannot take less than 3 s. (A lower bound
        # only: the limit is what is tested, not this machine's speed.)
        self.assertGreater(took, 2.5)
        # A chunked response is relayed by another path; it is paced the same (the budget is spent:
        # 1 MiB more takes at least 4 s).
        t0 = time.monotonic()
        p = self.as_client("slow", self.url("/chunked/1048576"))
        took = time.monotonic() - t0
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(p.stdout), 1048576)
        self.assertGreater(took, 3.5)

    # --- tools --------------------------------------------------------------------------------
    def test_check_client_judges_by_the_role(self):
        def check(client, method, url):
            return subprocess.run([SLUICE, "check", "--config", self.gw.config, "--client", client, method, url],
                                  capture_output=True, text=True)
        p = check("reader", "POST", self.url("/x"))
        self.assertEqual((p.returncode, p.stdout.split()[0]), (1, "DENY"), p.stdout)
        p = check("writer", "POST", self.url("/x"))
        self.assertEqual((p.returncode, p.stdout.split()[0]), (0, "ALLOW"), p.stdout)
        p = check("scout", "GET", "https://elsewhere.test/")
        self.assertEqual(p.returncode, 0)
        self.assertTrue(p.stdout.startswith("WOULD_DENY reason=host_not_allowlisted"), p.stdout)
        p = check("ghost", "GET", self.url("/"))
        self.assertEqual(p.returncode, 125)
        self.assertIn("no [clients.ghost]", p.stderr)
        self.assertIn("reader", p.stderr)

    def test_policy_suggest_prints_the_narrowest_entries(self):
        self.as_client("reader", self.url("/echo"), "-X", "POST", "-d", "a")
        self.as_client("reader", self.url("/echo/two"), "-X", "PUT", "-d", "b")
        self.as_client("reader", "https://new.test/")
        self.assertTrue(self.gw.logged(lambda l: l["host"] == "new.test" and l["client"] == "reader"))
        p = subprocess.run([SLUICE, "policy", "suggest", "--access-log", self.gw.log, "--client", "reader"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        out = p.stdout
        self.assertIn("[roles.read] (client reader)", out)
        self.assertIn('{ host = "origin.test:%d", methods = ["POST", "PUT"], paths = ["/echo", "/echo/two"] }'
                      % self.https, out)
        self.assertIn('"new.test", # ', out)  # only the CONNECT was seen: the host entry
        self.assertNotIn("scout", out)
        # The entries it prints are valid policy: pasted into the role, check admits them.
        entries = [l.split(" # ")[0].strip().rstrip(",") for l in out.splitlines() if l.startswith("  ")]
        cfg = os.path.join(self.tmp.name, "suggested.toml")
        with open(cfg, "w") as f:
            f.write('profile = "network-read"\n[roles.read]\nallow = [%s]\n' % ", ".join(entries))
            f.write(clients_toml({"reader": (TOKENS["reader"], "read")}))
        p = subprocess.run([SLUICE, "check", "--config", cfg, "--client", "reader", "PUT", self.url("/echo/two")],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        p = subprocess.run([SLUICE, "check", "--config", cfg, "--client", "reader", "PUT", self.url("/elsewhere")],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        # A file that is not there: one line naming it.
        p = subprocess.run([SLUICE, "policy", "suggest", "--access-log", "/nonexistent.log"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 125)
        self.assertIn("/nonexistent.log", p.stderr)

    def test_policy_token_makes_a_working_client(self):
        p = subprocess.run([SLUICE, "policy", "token", "ci-bot", "--role", "read"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = [l for l in p.stdout.splitlines() if l and not l.startswith("#")]
        token = lines[0]
        self.assertGreaterEqual(len(token), 40)
        self.assertIn('token_sha256 = "%s"' % digest(token), p.stdout)
        self.assertIn("[clients.ci-bot]", p.stdout)

    def test_config_errors_name_the_fix(self):
        cases = [
            ('[roles.r]\n[clients.a]\ntoken_sha256 = "%s"\nrole = "missing"\n' % digest("t"), "no [roles.missing]"),
            ('[roles.r]\n[clients.a]\ntoken_sha256 = "abc"\nrole = "r"\n', "64 hex digits"),
            ('[roles.r]\n[clients.a]\nrole = "r"\n', "policy token"),
            ('[roles.r]\n[clients.a]\ntoken_sha256 = "%s"\nrole = "r"\n[clients.b]\ntoken_sha256 = "%s"\nrole = "r"\n'
             % (digest("t"), digest("t")), "same token as [clients.a]"),
            ('[roles.r]\nmode = "audit"\n', 'mode must be "enforce" or "report"'),
            ('[roles.r]\ncredentials = ["nope"]\n', "no [credentials.nope]"),
            ('[clients."a:b"]\ntoken_sha256 = "%s"\nrole = "r"\n[roles.r]\n' % digest("t"), "letters, digits"),
        ]
        for text, expected in cases:
            cfg = os.path.join(self.tmp.name, "bad.toml")
            with open(cfg, "w") as f:
                f.write(text)
            p = subprocess.run([SLUICE, "check", "--config", cfg, "GET", "https://x.test/"], capture_output=True, text=True)
            self.assertEqual(p.returncode, 125, text)
            self.assertIn(expected, p.stderr, text)
            self.assertIn("bad.toml:", p.stderr)


class RotationTest(LoopbackOrigins):
    """A changed file is applied without a signal (within a few seconds): a new token works, the old
    one is refused, and a tunnel opened with the old token serves no further request."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        dns = start_dns(cls.procs, {})
        cls.head = f'profile = "network-read"\n[policy]\nallow = ["origin.test:{cls.https}"]\n[roles.r]\n'
        cls.tail = loopback_upstream(cls.ca[0], dns, {"origin.test": "127.0.0.1"})
        cls.gw = Gateway(cls.procs, cls.tmp.name, cls.head + clients_toml({"agent": ("old-token-1", "r")}) + cls.tail,
                         "rotate")

    def tunnel(self, token):
        """A CONNECT opened with `token`, TLS inside it: returns a function that sends one GET."""
        raw = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        import base64
        cred = base64.b64encode(b"agent:" + token.encode()).decode()
        raw.sendall(f"CONNECT origin.test:{self.https} HTTP/1.1\r\nHost: origin.test:{self.https}\r\n"
                    f"Proxy-Authorization: Basic {cred}\r\n\r\n".encode())
        reply = raw.recv(4096)
        self.assertIn(b" 200 ", reply)
        ctx = ssl.create_default_context(cafile=self.gw.ca)
        tls = ctx.wrap_socket(raw, server_hostname="origin.test")

        def get(path):
            tls.sendall(f"GET {path} HTTP/1.1\r\nHost: origin.test:{self.https}\r\n\r\n".encode())
            return read_response(lambda: tls.recv(65536))[0]
        return tls, get

    def status(self, token):
        p = curl(self.gw, f"https://origin.test:{self.https}/bytes/10", "--proxy",
                 "http://agent:%s@127.0.0.1:%d" % (token, self.gw.port))
        return status_of(p.stderr.decode()) if p.returncode == 0 else p.returncode

    def test_file_change_rotates_the_token_without_a_signal(self):
        self.assertEqual(self.status("old-token-1"), 200)
        tls, get = self.tunnel("old-token-1")
        self.assertEqual(get("/bytes/10"), 200)
        # A ConfigMap update: the file is replaced by a rename (a new inode), no signal sent.
        new = self.gw.config + ".new"
        with open(self.gw.config) as f:
            text = f.read()
        with open(new, "w") as f:
            f.write(text.replace(digest("old-token-1"), digest("new-token-2")))
        os.rename(new, self.gw.config)
        deadline = time.monotonic() + 5
        while self.status("new-token-2") != 200:
            self.assertLess(time.monotonic(), deadline, "the changed file was not applied within 5 s")
            time.sleep(0.2)
        self.assertIn("reloaded policy", self.gw.stderr_text())
        self.assertIn("file changed", self.gw.stderr_text())
        self.assertNotEqual(self.status("old-token-1"), 200)
        # The tunnel opened with the old token: its next request is refused, and it closes.
        self.assertEqual(get("/bytes/10"), 403)
        tls.close()
        self.assertTrue(self.gw.logged(lambda l: l["reason"] == "client_revoked" and l["client"] == "agent"))
        # A file that does not load keeps the policy in force.
        with open(self.gw.config, "a") as f:
            f.write("[roles.broken\n")
        deadline = time.monotonic() + 5
        while "reload failed" not in self.gw.stderr_text():
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.2)
        self.assertEqual(self.status("new-token-2"), 200)


class ReadinessTest(LoopbackOrigins):
    """SIGTERM with drain_delay: /readyz fails first while the proxy still serves (each response
    closing its connection), then the drain, then exit 0."""

    def test_readyz_turns_false_before_the_drain(self):
        dns = start_dns(self.procs, {})
        body = (f'profile = "network-read"\n[policy]\nallow = ["origin.test:{self.http}"]\n' +
                loopback_upstream(self.ca[0], dns, {"origin.test": "127.0.0.1"}) + '[timeouts]\ndrain_delay = "3s"\n')
        gw = Gateway(self.procs, self.tmp.name, body, "ready")

        def ready():
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/readyz" % gw.admin, timeout=2) as r:
                    return r.status
            except urllib.error.HTTPError as e:
                return e.code
        import urllib.error
        self.assertEqual(ready(), 200)
        gw.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 2
        while ready() != 503:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        self.assertIsNone(gw.proc.poll())
        p = curl(gw, f"http://origin.test:{self.http}/bytes/10")
        self.assertEqual(status_of(p.stderr.decode()), 200)
        self.assertEqual((header(p.stderr.decode(), "Connection") or "").lower(), "close")
        self.assertEqual(gw.proc.wait(timeout=20), 0)
        self.assertIn("not ready", gw.stderr_text())
