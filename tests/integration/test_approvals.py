"""Approvals while the agent runs ([approvals]): a request to an askable host that the allowlist
refuses is held until a person decides on the admin listener, by `sluice approvals` / `approve` /
`deny` or the API the live page uses. Real curl through `sluice serve` to the test host's origin
(origin.test, 198.18.0.2 in its network namespace); the hostile rows call the API as a cross-site
page or a guesser would."""
import asyncio
import hashlib
import hmac
import http.server
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

import test_exec as base
from harness import SLUICE, Gateway, Processes, curl, make_leaf, status_of
from page_driver import CHROMIUM, drive_page, start_chromium

M = base.M
setUpModule = base.setUpModule
tearDownModule = base.tearDownModule

URL = "https://origin.test:8443/hello"


class Approvals(unittest.TestCase):

    def start(self, approvals, resolve="", addresses=""):
        self.procs = Processes()
        self.addCleanup(self.procs.stop_all)
        self.dir = tempfile.mkdtemp(dir=M["tmp"])
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.token = os.urandom(16).hex()
        self.token_file = os.path.join(self.dir, "token")
        with open(self.token_file, "w") as f:
            f.write(self.token + "\n")
        with open(M["policy"]) as f:
            policy = f.read()
        cfg = ('profile = "network-read"\n[policy]\nallow = ["other.test:8443"]\n'
               '[approvals]\nhosts = ["origin.test:8443"]\ntoken_file = "%s"\n' % self.token_file + approvals
               + policy[policy.index("[tls]"):])
        if resolve:
            cfg = cfg.replace("[upstream.resolve]\n", "[upstream.resolve]\n" + resolve, 1)
        if addresses:
            cfg = cfg.replace('allow_addresses = ["198.18.0.0/15"', 'allow_addresses = ["198.18.0.0/15"' + addresses, 1)
        self.gw = Gateway(self.procs, self.dir, cfg, "approvals")
        self.admin = "127.0.0.1:%d" % self.gw.admin

    def cli(self, *args):
        return subprocess.run([SLUICE, *args, "--admin", self.admin, "--token-file", self.token_file],
                              capture_output=True, timeout=30)

    def pending(self):
        req = urllib.request.Request("http://%s/api/approvals" % self.admin,
                                     headers={"Authorization": "Bearer " + self.token})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.load(r)["pending"]

    def wait_pending(self, n=1):
        deadline = time.time() + 5
        while time.time() < deadline:
            p = self.pending()
            if len(p) >= n:
                return p
            time.sleep(0.05)
        self.fail("no request was held within 5 s")

    def curl_in_background(self):
        result = {}

        def go():
            result["p"] = curl(self.gw, URL)
        t = threading.Thread(target=go)
        t.start()
        return t, result

    def test_once_deny_and_for_the_run_from_the_command_line(self):
        self.start("")
        t, r = self.curl_in_background()
        held = self.wait_pending()
        self.assertEqual((held[0]["host"], held[0]["port"], held[0]["method"], held[0]["kind"]),
                         ("origin.test", 8443, "CONNECT", "connect"))
        listed = self.cli("approvals")
        self.assertEqual(listed.returncode, 0, listed.stderr)
        self.assertIn("origin.test:8443", listed.stdout.decode())
        p = self.cli("approve", str(held[0]["id"]))
        self.assertEqual(p.returncode, 0, p.stderr)
        t.join(30)
        self.assertEqual(status_of(r["p"].stderr.decode()), 200, r["p"].stderr)
        # Once: the next request is held again; denied, it gets 403 with the reason.
        t, r = self.curl_in_background()
        held = self.wait_pending()
        self.assertEqual(self.cli("deny", str(held[0]["id"])).returncode, 0)
        t.join(30)
        self.assertEqual(status_of(r["p"].stderr.decode()), 403)
        self.assertIn(b"approval_denied", r["p"].stderr + r["p"].stdout)
        # A decision for a request no longer waiting says so.
        again = self.cli("approve", str(held[0]["id"]))
        self.assertEqual(again.returncode, 1)
        self.assertIn(b"no longer waiting", again.stderr)
        # For the run: this one and the next ones pass without waiting.
        t, r = self.curl_in_background()
        held = self.wait_pending()
        self.assertEqual(self.cli("approve", "--run", str(held[0]["id"])).returncode, 0)
        t.join(30)
        self.assertEqual(status_of(r["p"].stderr.decode()), 200)
        self.assertEqual(status_of(curl(self.gw, URL).stderr.decode()), 200)
        self.assertEqual(self.pending(), [])
        lines = self.gw.lines_where(lambda l: l.get("approval"), 3)
        self.assertEqual([(l["approval"], l.get("decided_by"), l["decision"]) for l in lines],
                         [("once", "cli", "allow"), ("deny", "cli", "deny"), ("run", "cli", "allow")], lines)
        self.assertEqual(lines[1]["reason"], "approval_denied")
        for outcome in ("once", "deny", "run"):
            self.assertEqual(self.gw.metric("sluice_approvals_total", outcome=outcome), 1)
        # A host outside [approvals] is refused at once, as without approvals.
        p = curl(self.gw, "https://elsewhere.test:8443/hello")
        self.assertEqual(status_of(p.stderr.decode()), 403)
        self.assertEqual(self.pending(), [])

    def test_the_command_line_finds_serve_by_its_config(self):
        """--config FILE: `sluice approvals`, `approve` and `deny` take the admin address and the token
        file from the config `sluice serve --config` reads; an option given wins over the file; a file
        that cannot say where is named with the fix."""
        self.start("")
        env = {k: v for k, v in os.environ.items() if k not in ("SLUICE_ADMIN", "SLUICE_APPROVALS_TOKEN")}
        env["HOME"] = self.dir   # no exec run's approvals file to fall back on

        def cli(*args):
            return subprocess.run([SLUICE, *args], capture_output=True, timeout=30, env=env)
        t, r = self.curl_in_background()
        held = self.wait_pending()
        listed = cli("approvals", "--config", self.gw.config)
        self.assertEqual(listed.returncode, 0, listed.stderr)
        self.assertIn("origin.test:8443", listed.stdout.decode())
        wrong = cli("approve", "--config", self.gw.config, "--admin", "127.0.0.1:1", str(held[0]["id"]))
        self.assertEqual(wrong.returncode, 125, wrong.stderr)
        self.assertIn(b"127.0.0.1:1 cannot be reached", wrong.stderr)
        p = cli("approve", "--config", self.gw.config, str(held[0]["id"]))
        self.assertEqual(p.returncode, 0, p.stderr)
        t.join(30)
        self.assertEqual(status_of(r["p"].stderr.decode()), 200, r["p"].stderr)
        t, r = self.curl_in_background()
        held = self.wait_pending()
        p = cli("deny", str(held[0]["id"]), "--config", self.gw.config)
        self.assertEqual(p.returncode, 0, p.stderr)
        t.join(30)
        self.assertEqual(status_of(r["p"].stderr.decode()), 403)
        self.assertEqual([(l["approval"], l.get("decided_by")) for l in self.gw.lines_where(lambda l: l.get("approval"), 2)],
                         [("once", "cli"), ("deny", "cli")])
        # Files that cannot say where: each named, with the fix.
        missing = os.path.join(self.dir, "missing.toml")
        no_admin = os.path.join(self.dir, "no-admin.toml")
        no_token = os.path.join(self.dir, "no-token.toml")
        with open(no_admin, "w") as f:
            f.write('[listen]\nproxy = "127.0.0.1:3128"\n[approvals]\nhosts = ["a.test"]\ntoken_file = "%s"\n'
                    % self.token_file)
        with open(no_token, "w") as f:
            f.write('[listen]\nadmin = "%s"\n[approvals]\nhosts = ["a.test"]\n' % self.admin)
        for config, expect in ((missing, b"missing.toml: cannot open the config file; check the path"),
                               (no_admin, b"no-admin.toml has no [listen] admin"),
                               (no_token, b"no-token.toml has no [approvals] token_file")):
            p = cli("approvals", "--config", config)
            self.assertEqual(p.returncode, 125, p.stderr)
            self.assertIn(expect, p.stderr)
        self.assertIn(b"--admin HOST:PORT", cli("approvals", "--config", no_admin).stderr)
        p = cli("approvals", "--config", no_token, "--token-file", self.token_file)
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_timeout_and_a_bounded_queue(self):
        self.start('timeout = "2s"\nmax_pending = 2\n')
        threads = [self.curl_in_background() for _ in range(2)]
        self.wait_pending(2)
        # A third while two wait: refused at once, not queued.
        started = time.time()
        p = curl(self.gw, URL)
        self.assertLess(time.time() - started, 1.5)
        self.assertEqual(status_of(p.stderr.decode()), 403)
        self.assertIn(b"approval_queue_full", p.stderr + p.stdout)
        for t, r in threads:
            t.join(30)
            self.assertEqual(status_of(r["p"].stderr.decode()), 403)
            self.assertIn(b"approval_timeout", r["p"].stderr + r["p"].stdout)
        self.assertEqual(self.pending(), [])
        self.assertEqual(self.gw.metric("sluice_approvals_total", outcome="timeout"), 2)
        self.assertEqual(self.gw.metric("sluice_approvals_total", outcome="refused"), 1)

    def test_a_client_that_hangs_up_while_held_is_forgotten(self):
        self.start("")
        p = subprocess.Popen(["curl", "-sS", "--proxy", self.gw.proxy, "--cacert", self.gw.ca, URL],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.wait_pending()
        p.kill()
        p.wait()
        deadline = time.time() + 5
        while self.pending() and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.pending(), [])
        self.assertTrue(self.gw.logged(lambda l: l.get("approval") == "gone"))
        self.assertEqual(self.gw.metric("sluice_approvals_total", outcome="gone"), 1)

    def test_the_api_refuses_guessers_and_other_sites(self):
        self.start("")
        t, r = self.curl_in_background()
        held = self.wait_pending()
        url = "http://%s/api/approvals/%d" % (self.admin, held[0]["id"])

        def post(headers, body=b'{"decision":"once"}'):
            req = urllib.request.Request(url, data=body, method="POST", headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    return resp.status
            except urllib.error.HTTPError as e:
                return e.code
        auth = {"Authorization": "Bearer " + self.token}
        self.assertEqual(post({"Content-Type": "application/json"}), 401)                       # no token
        self.assertEqual(post({"Content-Type": "application/json", "Authorization": "Bearer " + "0" * 32}), 401)
        self.assertEqual(post({**auth, "Content-Type": "text/plain"}), 415)                       # a form post
        self.assertEqual(post({**auth, "Content-Type": "application/json", "Origin": "http://evil.test"}), 403)
        self.assertEqual(post({**auth, "Content-Type": "application/json"}, b'{"decision":"forever"}'), 400)
        req = urllib.request.Request(url.rsplit("/", 1)[0], headers={})
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        self.assertEqual(e.exception.code, 401)
        self.assertEqual(len(self.pending()), 1)  # nothing above decided it
        self.assertEqual(post({**auth, "Content-Type": "application/json",
                               "Origin": "http://" + self.admin}, b'{"decision":"once","by":"page"}'), 200)
        t.join(30)
        self.assertEqual(status_of(r["p"].stderr.decode()), 200)
        self.assertTrue(self.gw.logged(lambda l: l.get("decided_by") == "page"))

    def test_the_page_inbox_in_headless_chromium(self):
        """The live page opened with #token=...: a held request appears in its inbox; "allow once"
        lets it through and the next one waits again, "deny" answers 403 approval_denied, "allow
        for this run" lets it and the next ones through (decided_by "page"), each button clicked
        in Chromium over the DevTools protocol."""
        if not os.path.exists(CHROMIUM):
            self.skipTest("chromium is not installed")
        self.start("")
        port = self.chromium()
        page = "http://%s/#token=%s" % (self.admin, self.token)
        for decision, status in (("once", 200), ("deny", 403), ("run", 200)):
            t, r = self.curl_in_background()
            held = self.wait_pending()
            clicked = asyncio.run(drive_page(port, page, held[0]["id"], decision))
            self.assertTrue(clicked, "the inbox never showed request %d with its buttons" % held[0]["id"])
            t.join(30)
            self.assertEqual(status_of(r["p"].stderr.decode()), status, (decision, r["p"].stderr))
        self.assertEqual(status_of(curl(self.gw, URL).stderr.decode()), 200)   # for the run: no wait
        self.assertEqual(self.pending(), [])
        lines = self.gw.lines_where(lambda l: l.get("approval"), 3)
        self.assertEqual([(l["approval"], l.get("decided_by"), l["reason"]) for l in lines],
                         [("once", "page", "allowed"), ("deny", "page", "approval_denied"), ("run", "page", "allowed")],
                         lines)

    def test_allow_always_from_the_command_line_asks_then_writes_the_policy_file(self):
        """"Allow always" shows the block it adds to the config file and writes it only on a yes:
        refused without a terminal and without --yes (nothing written, the request still waits);
        with --yes the block is appended, the request passes, the host passes from then on, and
        the file, loaded anew, allows it."""
        self.start("")
        with open(self.gw.config) as f:
            before = f.read()
        t, r = self.curl_in_background()
        held = self.wait_pending()[0]
        self.assertEqual(held["always_file"], self.gw.config)
        self.assertIn('[[approvals.allowed]]\nhost = "origin.test:8443"\n', held["always_text"])
        self.assertEqual(held["rule"], "[approvals] hosts origin.test:8443")
        p = subprocess.run([SLUICE, "approve", "--always", str(held["id"]), "--admin", self.admin,
                            "--token-file", self.token_file], capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 1, p)
        self.assertIn(b"--yes", p.stderr)
        self.assertIn(held["always_text"].encode(), p.stdout)    # shown before anything is written
        with open(self.gw.config) as f:
            self.assertEqual(f.read(), before)
        self.assertEqual([x["id"] for x in self.pending()], [held["id"]])
        p = self.cli("approve", "--always", "--yes", str(held["id"]))
        self.assertEqual(p.returncode, 0, p.stderr)
        t.join(30)
        self.assertEqual(status_of(r["p"].stderr.decode()), 200, r["p"].stderr)
        with open(self.gw.config) as f:
            after = f.read()
        self.assertTrue(after.startswith(before) and after.endswith(held["always_text"]), after)
        # From now on without asking; and the file, read anew, allows the host.
        self.assertEqual(status_of(curl(self.gw, URL).stderr.decode()), 200)
        self.assertEqual(self.pending(), [])
        check = subprocess.run([SLUICE, "check", "--config", self.gw.config, "GET", URL], capture_output=True, timeout=30)
        self.assertEqual(check.returncode, 0, check)
        self.assertIn(b"ALLOW", check.stdout)
        self.assertTrue(self.gw.logged(lambda l: l.get("approval") == "always" and l.get("decided_by") == "cli"))
        self.assertEqual(self.gw.metric("sluice_approvals_total", outcome="always"), 1)

    def test_roles_of_serve_ask_about_their_own_hosts(self):
        """[roles.NAME] approvals: a role without the key asks about [approvals] hosts; one with
        approvals = [] is refused at once (host_not_allowlisted), as without approvals; the held
        request shows its client."""
        tok = {"dev-a": os.urandom(8).hex(), "ci-b": os.urandom(8).hex()}
        roles = ('[roles.dev]\n[roles.ci]\napprovals = []\n'
                 '[clients.dev-a]\ntoken_sha256 = "%s"\nrole = "dev"\n'
                 '[clients.ci-b]\ntoken_sha256 = "%s"\nrole = "ci"\n'
                 % (hashlib.sha256(tok["dev-a"].encode()).hexdigest(), hashlib.sha256(tok["ci-b"].encode()).hexdigest()))
        self.start(roles)
        p = curl(self.gw, URL, "--proxy-user", "ci-b:" + tok["ci-b"])
        self.assertEqual(status_of(p.stderr.decode()), 403, p.stderr)
        self.assertIn(b"host_not_allowlisted", p.stderr + p.stdout)
        self.assertEqual(self.pending(), [])
        result = {}
        t = threading.Thread(target=lambda: result.update(p=curl(self.gw, URL, "--proxy-user", "dev-a:" + tok["dev-a"])))
        t.start()
        held = self.wait_pending()[0]
        self.assertEqual((held["client"], held["rule"]), ("dev-a", "[approvals] hosts origin.test:8443"))
        self.assertEqual(self.cli("approve", str(held["id"])).returncode, 0)
        t.join(30)
        self.assertEqual(status_of(result["p"].stderr.decode()), 200)

    def test_allow_always_on_the_page_after_reading_the_block(self):
        """The page's "allow always…" shows the block and the file; "write them" appends it."""
        if not os.path.exists(CHROMIUM):
            self.skipTest("chromium is not installed")
        self.start("")
        t, r = self.curl_in_background()
        held = self.wait_pending()[0]
        shown = asyncio.run(drive_page(self.chromium(), "http://%s/#token=%s" % (self.admin, self.token),
                                       held["id"], "always"))
        self.assertEqual(shown, held["always_text"])
        t.join(30)
        self.assertEqual(status_of(r["p"].stderr.decode()), 200)
        with open(self.gw.config) as f:
            self.assertTrue(f.read().endswith("\n\n" + held["always_text"]))
        self.assertTrue(self.gw.logged(lambda l: l.get("approval") == "always" and l.get("decided_by") == "page"))

    def chromium(self):
        """Headless Chromium with DevTools on a free loopback port (stopped with the test); the port."""
        return start_chromium(self.procs.procs, self)

    def test_a_webhook_hears_of_it_and_answers_signed(self):
        """[approvals] webhook: the held request is POSTed, signed, to a chat tool's receiver
        (HTTPS on loopback, trusted through [tls]), which answers on the callback URL with a signed
        decision. A forged signature, and a signed answer replayed for another request, decide nothing."""
        secret = os.urandom(16).hex()
        hooks = tempfile.mkdtemp(dir=M["tmp"])
        self.addCleanup(shutil.rmtree, hooks, True)
        with open(os.path.join(hooks, "secret"), "w") as f:
            f.write(secret + "\n")
        ca = (os.path.join(M["tmp"], "origin-ca.pem"), os.path.join(M["tmp"], "origin-ca.key"))
        cert, key = make_leaf(hooks, ca, "hooks", "DNS:hooks.test")
        received, answers = [], []

        class Receiver(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                good = hmac.compare_digest(self.headers.get("X-Sluice-Signature", ""),
                                           "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest())
                received.append((json.loads(body), good))
                self.send_response(204)
                self.end_headers()
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        hook_port = server.server_address[1]
        self.start('webhook = "https://hooks.test:%d/sluice"\nwebhook_secret = "file:%s/secret"\n' % (hook_port, hooks),
                   resolve='"hooks.test" = "127.0.0.1"\n', addresses=', "127.0.0.1/32"')
        t, r = self.curl_in_background()
        deadline = time.time() + 10
        while not received and time.time() < deadline:
            time.sleep(0.05)
        self.assertTrue(received, "the webhook heard of nothing")
        note, good = received[0]
        self.assertTrue(good, "sluice's post was not signed with the shared secret")
        self.assertEqual((note["host"], note["port"], note["method"]), ("origin.test", 8443, "CONNECT"))

        def answer(url, body, key=secret):
            data = json.dumps(body).encode()
            sig = "sha256=" + hmac.new(key.encode(), data, hashlib.sha256).hexdigest()
            req = urllib.request.Request(url, data=data, method="POST",
                                         headers={"Content-Type": "application/json", "X-Sluice-Signature": sig})
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    return resp.status
            except urllib.error.HTTPError as e:
                return e.code
        callback = note["callback"]
        self.assertEqual(answer(callback, {"id": note["id"], "decision": "once"}, key="forged"), 401)
        other = callback.rsplit("/", 1)[0] + "/%d" % (note["id"] + 1000)
        self.assertEqual(answer(other, {"id": note["id"], "decision": "once"}), 400)   # replayed elsewhere
        self.assertEqual(len(self.pending()), 1)
        self.assertEqual(answer(callback, {"id": note["id"], "decision": "once"}), 200)
        t.join(30)
        self.assertEqual(status_of(r["p"].stderr.decode()), 200)
        self.assertTrue(self.gw.logged(lambda l: l.get("decided_by") == "webhook"))


class ExecApprovalsAsRoot(base.ExecCase):
    """Inside `sluice exec`: a held curl is decided with `sluice approvals` / `approve` / `deny` from
    outside, which find the run's admin listener and token in the caller's state directory; the
    token is never printed without a terminal and never inside the view."""

    def askable_policy(self):
        """The suite's policy with origin.test off the skill's allowlist and in [approvals]: only a
        person can let it through. The file is the test user's; its path."""
        with open(M["policy"]) as f:
            text = f.read()
        d = tempfile.mkdtemp(dir=M["tmp"])
        os.chmod(d, 0o755)
        policy = os.path.join(d, "policy.toml")
        with open(policy, "w") as f:
            text = text.replace('allow_domains = ["origin.test:8443"]\ngrants', 'allow_domains = []\ngrants', 1)
            f.write(text + '\n[approvals]\nhosts = ["origin.test:8443"]\ntimeout = "20s"\n')
        os.chown(policy, self.user or 0, self.user or 0)
        os.chmod(policy, 0o644)
        return policy

    def cli(self, *args):
        return subprocess.run(self.prefix() + [SLUICE, *args], capture_output=True, env=self.env(), timeout=30)

    def next_id(self, listing="approvals"):
        """The id of the first request to origin.test:8443 that `sluice approvals` (or `pending`)
        lists, within 20 s."""
        deadline = time.time() + 20
        while time.time() < deadline:
            p = self.cli(listing)
            rows = [l.split() for l in p.stdout.decode().splitlines()[1:] if "origin.test:8443" in l]
            if rows:
                return rows[0][0]
            time.sleep(0.1)
        self.fail("no held request listed within 20 s: %s" % p.stderr.decode())

    def test_a_held_request_inside_exec(self):
        policy = self.askable_policy()
        # Through the proxy variables: a refused CONNECT's status is curl's http_connect.
        script = ("curl -sS https://origin.test:8443/hello; "
                  "curl -sS -o /dev/null -w '%{http_connect}\\n' https://origin.test:8443/hello; "
                  "ls -a $HOME/.local/state/sluice 2>&1 | head -3; grep -rs . /root/.local/state/sluice 2>&1 | head -3")
        proc = subprocess.Popen(self.prefix() + [SLUICE, "exec", "--policy", policy, "--sandbox-profile", "network-read",
                                                 "--", "sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=self.env(), cwd=self.work)
        try:
            state = os.path.join(self.home, ".local/state/sluice/approvals")

            cli, next_id = self.cli, self.next_id
            first = next_id()
            files = os.listdir(state)
            self.assertEqual(len(files), 1)
            with open(os.path.join(state, files[0])) as f:
                token = f.read().split()[1]
            self.assertEqual(cli("approve", first).returncode, 0)
            second = next_id()
            self.assertNotEqual(first, second)
            self.assertEqual(cli("deny", second).returncode, 0)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        self.assertEqual(proc.returncode, 0, err.decode())
        lines = out.decode().splitlines()
        self.assertEqual(lines[1], "403", out)
        self.assertIn("sluice approvals", err.decode())
        self.assertNotIn(token, out.decode() + err.decode())
        self.assertIn("No such file or directory", out.decode())  # the state directory is not in the view
        self.assertEqual(os.listdir(state), [])  # the run's file goes with the run


    def test_allow_always_inside_exec_writes_the_callers_policy(self):
        """`sluice approve --always --yes` for a run of `sluice exec`: the caller's policy file gets
        the block (appended by sluice outside the sandbox, as the caller), the rest of the run and
        the next run pass without asking."""
        policy = self.askable_policy()
        with open(policy) as f:
            before = f.read()
        script = "curl -sS https://origin.test:8443/hello; curl -sS https://origin.test:8443/hello"
        run = self.prefix() + [SLUICE, "exec", "--policy", policy, "--sandbox-profile", "network-read", "--", "sh", "-c"]
        proc = subprocess.Popen(run + [script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env(), cwd=self.work)
        try:
            p = self.cli("approve", "--always", "--yes", self.next_id("pending"))
            self.assertEqual(p.returncode, 0, p.stderr.decode())
            self.assertIn(policy.encode(), p.stdout)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        self.assertEqual(proc.returncode, 0, err.decode())
        self.assertEqual(out.decode().count("hello from origin"), 2, out)
        with open(policy) as f:
            after = f.read()
        self.assertTrue(after.startswith(before))
        self.assertIn('[[approvals.allowed]]\nhost = "origin.test:8443"\n', after[len(before):])
        # The next run reads it: nothing waits.
        p = subprocess.run(run + ["curl -sS https://origin.test:8443/hello"], capture_output=True, env=self.env(),
                           cwd=self.work, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertIn(b"hello", p.stdout)
        self.assertNotIn(b"waiting for a decision", p.stderr)


class ExecApprovalsAsNobody(ExecApprovalsAsRoot):
    user = 65534


if __name__ == "__main__":
    unittest.main()
