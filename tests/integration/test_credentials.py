"""Credentials that never enter the sandbox: the gateway adds them to requests for their own hosts.
A private repository behind HTTP Basic auth and a bearer-token API on the test host (198.18.0.2,
origin.py /private and /headers); real git, curl and python inside `sluice exec`, as root and as
65534; and `sluice serve` with a credential. The secret must show up nowhere but at the origin."""
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

import test_exec as base
from harness import HERE, PYTHON, SLUICE, Gateway, Processes, curl, free_port, make_leaf, status_of
from harness import log_records

M = base.M
setUpModule = base.setUpModule
tearDownModule = base.tearDownModule


class CredentialsAsRoot(base.ExecCase):

    def assertNoSecret(self, *texts):
        for t in texts:
            if isinstance(t, bytes):
                t = t.decode(errors="replace")
            self.assertNotIn(M["secret"], t)

    def test_private_git_clone_with_injected_basic_auth(self):
        summary = os.path.join(self.work, "summary.json")
        log = os.path.join(self.work, "access.log")
        # Everything the sandbox can see is dumped next to the clone: environment, every process's
        # environment and command line it may read, sluice's files, the private /tmp.
        # Smart HTTP (git http-backend behind Basic auth) in network-read: the fetch's POST carries
        # the injected credential too.
        script = ("set -e; git clone -q https://origin.test:8443/private-git/repo.git /tmp/clone; cat /tmp/clone/README; "
                  "git -C /tmp/clone fetch -q; git ls-remote https://origin.test:8443/private-git/repo.git >/dev/null; "
                  "env; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat $f 2>/dev/null || true; done; "
                  "grep -r . /.sluice /tmp 2>/dev/null || true; echo \"GIT_TOKEN=$GIT_TOKEN\"")
        p = self.sx("--sandbox-profile", "network-read", "--credential", "gitpriv", "--json-summary", summary,
                    "--access-log", log, "--", "sh", "-c", script)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        out = p.stdout.decode()
        self.assertIn("hello from a repository", out)
        self.assertIn("GIT_TOKEN=sluice-credential-gitpriv", out)
        self.assertNoSecret(p.stdout, p.stderr, open(summary).read(), open(log).read())
        # Without the credential the repository is closed: the test could fail.
        p = self.sx("--sandbox-profile", "network-read", "--", "sh", "-c",
                    "GIT_TERMINAL_PROMPT=0 git clone -q https://origin.test:8443/private-git/repo.git /tmp/c")
        self.assertNotEqual(p.returncode, 0)

    def test_bearer_token_for_curl_and_python(self):
        env = {"ORIGIN_TOKEN": M["secret"]}
        script = ('curl -sS -H "Authorization: Bearer $ORIGIN_TOKEN" https://origin.test:8443/private/repo.git/HEAD; '
                  "curl -sS -o /dev/null -w '%{http_code}\\n' https://origin.test:8443/private/repo.git/HEAD; "
                  + PYTHON + " -c \"import os,urllib.request as u; r=u.Request('https://origin.test:8443/private/repo.git/HEAD', "
                  "headers={'Authorization': 'Bearer ' + os.environ['ORIGIN_TOKEN']}); print(u.urlopen(r).read().decode())\"; "
                  "echo TOKEN=$ORIGIN_TOKEN")
        p = self.sx("--sandbox-profile", "network-read", "--credential", "api", "--", "sh", "-c", script, env=env)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        out = p.stdout.decode()
        self.assertEqual(out.count("ref: refs/heads/main"), 2, out)  # placeholder replaced, twice
        self.assertIn("200", out)                                    # header added when absent
        self.assertIn("TOKEN=sluice-credential-api", out)
        self.assertNoSecret(p.stdout, p.stderr)

    def test_placeholder_to_another_host_refused(self):
        log = os.path.join(self.work, "access.log")
        env = {"ORIGIN_TOKEN": M["secret"]}
        script = ('curl -sS -o /dev/null -w "%{http_code} " -H "Authorization: Bearer $ORIGIN_TOKEN" '
                  "https://other.test:8443/headers; "
                  'curl -sS -o /dev/null -w "%{http_code} " "https://other.test:8443/headers?t=$ORIGIN_TOKEN"; '
                  'curl -sS https://other.test:8443/headers | grep -ci authorization; exit 0')
        p = self.sx("--sandbox-profile", "network-read", "--allow-domain", "other.test:8443", "--credential", "api",
                    "--access-log", log, "--", "sh", "-c", script, env=env)
        self.assertEqual(p.stdout.decode().split(), ["403", "403", "0"], p.stderr)
        lines = log_records(open(log))
        refused = [l for l in lines if l["reason"] == "credential_host_mismatch"]
        self.assertEqual(len(refused), 2, lines)
        self.assertEqual(refused[0]["rule"], "credential:api")
        self.assertIn("credential_host_mismatch", p.stderr.decode())
        self.assertNoSecret(p.stdout, p.stderr, open(log).read())

    def command_policy(self, *sections):
        """The suite's policy with more [credentials.NAME] sections (the skill may grant them), in a
        directory outside the workspace with a counter file the sources write to."""
        self.outside = tempfile.mkdtemp(dir=M["tmp"])
        os.chmod(self.outside, 0o777)
        with open(M["policy"]) as f:
            text = f.read().replace('credentials = ["api", "gitpriv"]', 'credentials = ["api", "gitpriv", "cmd"]', 1)
        path = os.path.join(self.outside, "policy.toml")
        with open(path, "w") as f:
            f.write(text + "".join(sections))
        os.chmod(path, 0o644)
        self.addCleanup(shutil.rmtree, self.outside, True)
        return path

    def script(self, name, body):
        path = os.path.join(self.outside, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n" + body)
        os.chmod(path, 0o755)
        return path

    def sx_policy(self, policy, *args, env=None):
        cmd = self.prefix() + [SLUICE, "exec", "--policy", policy] + list(args)
        return subprocess.run(cmd, capture_output=True, env=self.env(env), timeout=90, cwd=self.work)

    def test_command_source_read_again_after_its_ttl(self):
        policy = self.command_policy()
        count = os.path.join(self.outside, "runs")
        # Reads give a token the origin refuses (an expired one) until the command has sent its
        # first request (it leaves a mark in the workspace), the good one after: the second
        # request passes only if the value read again is the one in use. (Not "the first read":
        # a gateway that starts slower than the ttl, as an ASan build compiling the scanner does,
        # has read it again before the first request.)
        mark = os.path.join(self.work, "first-sent")
        token = self.script("token.sh", f"echo run >> {count}\n"
                                        f"if [ -e {mark} ]; then echo {M['secret']}; "
                                        f"else echo expired-token; fi\n")
        with open(policy, "a") as f:
            f.write(f'\n[credentials.cmd]\nsource = "command:{token}"\nhosts = ["origin.test:8443"]\nttl = "1s"\n')
        url = "https://origin.test:8443/private/repo.git/HEAD"
        p = self.sx_policy(policy, "--sandbox-profile", "network-read", "--credential", "cmd", "--", "sh", "-c",
                           f"curl -sS -o /dev/null -w 'first=%{{http_code}} ' {url}; touch first-sent; sleep 3.5; "
                           f"curl -sS {url}")
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        out = p.stdout.decode()
        self.assertNotIn("first=200", out)
        self.assertIn("ref: refs/heads/main", out)
        with open(count) as f:
            runs = len(f.readlines())
        self.assertGreaterEqual(runs, 3, "read once at the start and again after each ttl")
        self.assertNoSecret(p.stdout, p.stderr)

    def test_command_source_failures_stop_the_start(self):
        policy = self.command_policy()
        rows = {
            "fails": ("echo 'no token for you' >&2; exit 3\n", "exited with status 3 (no token for you)"),
            "silent": ("exit 0\n", "printed nothing"),
            "hangs": ("exec sleep 60\n", "did not finish within 10 s"),
        }
        for name, (body, why) in rows.items():
            with self.subTest(name):
                token = self.script(name + ".sh", body)
                with open(policy) as f:
                    text = f.read().split("\n[credentials.cmd]")[0]
                with open(policy, "w") as f:
                    f.write(text + f'\n[credentials.cmd]\nsource = "command:{token}"\nhosts = ["origin.test:8443"]\n')
                p = self.sx_policy(policy, "--sandbox-profile", "network-read", "--credential", "cmd", "--", "true")
                self.assertEqual(p.returncode, 125, p.stderr.decode())
                self.assertIn("credential 'cmd'", p.stderr.decode())
                self.assertIn(why, p.stderr.decode())

    def test_a_placeholder_shaped_like_the_token(self):
        secret = os.path.join(M["tmp"], "shaped-secret")
        with open(secret, "w") as f:
            f.write(M["secret"] + "\n")
        os.chmod(secret, 0o644)
        policy = self.command_policy(f'\n[credentials.cmd]\nsource = "file:{secret}"\nhosts = ["origin.test:8443"]\n'
                                     'env = "GH_TOKEN"\nplaceholder = "github"\n')
        url = "https://origin.test:8443/private/repo.git/HEAD"
        seen = []
        for _ in range(2):
            p = self.sx_policy(policy, "--sandbox-profile", "network-read", "--credential", "cmd", "--", "sh", "-c",
                               f'echo "$GH_TOKEN"; curl -sS -H "Authorization: Bearer $GH_TOKEN" {url}')
            self.assertEqual(p.returncode, 0, p.stderr.decode())
            token, rest = p.stdout.decode().split("\n", 1)
            self.assertRegex(token, r"^ghp_[A-Za-z0-9]{36}$")
            self.assertIn("ref: refs/heads/main", rest)  # the shaped placeholder was replaced
            seen.append(token)
            self.assertNoSecret(p.stdout, p.stderr)
        self.assertNotEqual(seen[0], seen[1])  # a new one for every command

    def test_gh_auth_token_as_the_source(self):
        if not shutil.which("gh"):
            self.skipTest("needs gh (Debian's gh)")
        policy = self.command_policy('\n[credentials.cmd]\nsource = "command:gh auth token"\n'
                                     'hosts = ["origin.test:8443"]\nttl = "50m"\n')
        gh = os.path.join(self.outside, "gh")
        os.makedirs(gh)
        with open(os.path.join(gh, "hosts.yml"), "w") as f:
            f.write(f"github.com:\n    oauth_token: {M['secret']}\n    user: t\n    git_protocol: https\n")
        subprocess.run(["chmod", "-R", "a+rX", gh], check=True)
        if self.user is not None:
            subprocess.run(["chown", "-R", str(self.user), gh], check=True)
        url = "https://origin.test:8443/private/repo.git/HEAD"
        p = self.sx_policy(policy, "--sandbox-profile", "network-read", "--credential", "cmd", "--", "sh", "-c",
                           f"curl -sS {url}; echo GH=${{GH_CONFIG_DIR:-none}}",
                           env={"GH_CONFIG_DIR": gh})
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertIn("ref: refs/heads/main", p.stdout.decode())
        self.assertNoSecret(p.stdout, p.stderr)

    def test_grants_and_refusals(self):
        env = {"ORIGIN_TOKEN": M["secret"]}
        cases = [
            (["--sandbox-profile", "network-read", "--credential", "nope"], "no [credentials.nope]"),
            (["--skill", "reviewer", "--credential", "api"], "does not grant it"),
            (["--sandbox-profile", "allowlist", "--credential", "api"], "use network-read or publish"),
            (["--sandbox-profile", "network-read", "--credential", "gitpriv", "--allow-env", "GITHUB_TOKEN"], None),
        ]
        for args, msg in cases:
            p = self.sx(*args, "--", "true", env=env)
            if msg is None:
                self.assertEqual(p.returncode, 0, p.stderr)
                continue
            self.assertEqual(p.returncode, 125, args)
            self.assertIn(msg, p.stderr.decode(), args)
        p = self.sx("--sandbox-profile", "network-read", "--credential", "api", "--", "true")  # no ORIGIN_TOKEN
        self.assertEqual(p.returncode, 125)
        self.assertIn("ORIGIN_TOKEN", p.stderr.decode())
        # A credential whose host the allowlist lacks is refused.
        pol = os.path.join(M["tmp"], "cred-host-%s.toml" % self.user)
        with open(pol, "w") as f:
            f.write(open(M["policy"]).read().replace('hosts = ["origin.test:8443"]\nformat = "Bearer {}"',
                                                      'hosts = ["elsewhere.test"]\nformat = "Bearer {}"'))
        os.chmod(pol, 0o644)
        p = self.sx("--policy", pol, "--sandbox-profile", "network-read", "--credential", "api", "--", "true",
                    env=env, policy=False)
        os.unlink(pol)
        self.assertEqual(p.returncode, 125)
        self.assertIn("elsewhere.test is not on the allowlist", p.stderr.decode())


class CredentialsAsNobody(CredentialsAsRoot):
    user = 65534


class ServeCredentials(unittest.TestCase):
    """`sluice serve` injects its credentials the same way."""

    def test_serve_injects_and_refuses(self):
        procs = Processes()
        d = M["tmp"]
        policy = open(M["policy"]).read()
        tls_and_upstream = policy[policy.index("[tls]"):]
        creds = policy[policy.index("[credentials.api]"):policy.index("[skills.reviewer]")]
        cfg = ('profile = "network-read"\n[policy]\nallow = ["origin.test:8443", "other.test:8443"]\n'
               + creds + tls_and_upstream)
        os.environ["ORIGIN_TOKEN"] = M["secret"]
        try:
            gw = Gateway(procs, d, cfg, "cred-serve")
            p = curl(gw, "https://origin.test:8443/private/repo.git/HEAD")
            self.assertEqual(status_of(p.stderr.decode()), 200, p.stderr)
            p = curl(gw, "https://other.test:8443/headers", "-H", "Authorization: Bearer sluice-credential-api")
            self.assertEqual(status_of(p.stderr.decode()), 403)
            self.assertIn(b"credential_host_mismatch", p.stderr + p.stdout)
            self.assertNotIn(M["secret"], open(gw.log).read() + gw.stderr_text())
        finally:
            del os.environ["ORIGIN_TOKEN"]
            procs.stop_all()


    def test_serve_reads_a_command_source_again(self):
        """serve: a command source with a ttl, refused by the origin at first (expired), good after
        it is read again; then the source fails and the last good value stays in use."""
        procs = Processes()
        self.outside = tempfile.mkdtemp(dir=M["tmp"])
        os.chmod(self.outside, 0o777)
        self.addCleanup(shutil.rmtree, self.outside, True)
        runs = os.path.join(self.outside, "runs")
        token = os.path.join(self.outside, "token.sh")
        with open(token, "w") as f:
            # Expired until the test has sent its first request (a mark; a gateway that starts
            # slower than the ttl has read it again by then), good for two reads, then failing.
            f.write(f"#!/bin/sh\n[ -e {runs}.mark ] || {{ echo expired-token; exit 0; }}\necho run >> {runs}\n"
                    f"n=$(wc -l < {runs}); if [ $n -ge 3 ]; then echo gone >&2; exit 1; fi\n"
                    f"echo {M['secret']}\n")
        os.chmod(token, 0o755)
        policy = open(M["policy"]).read()
        cfg = ('profile = "network-read"\n[policy]\nallow = ["origin.test:8443"]\n'
               f'[credentials.cmd]\nsource = "command:{token}"\nhosts = ["origin.test:8443"]\nttl = "1s"\n'
               + policy[policy.index("[tls]"):])
        try:
            gw = Gateway(procs, self.outside, cfg, "cred-ttl")
            url = "https://origin.test:8443/private/repo.git/HEAD"
            first = status_of(curl(gw, url).stderr.decode())
            open(runs + ".mark", "w").close()
            deadline = time.time() + 10
            while time.time() < deadline and status_of(curl(gw, url).stderr.decode()) != 200:
                time.sleep(0.2)
            self.assertNotEqual(first, 200)
            self.assertEqual(status_of(curl(gw, url).stderr.decode()), 200)
            # The source fails from its third run after the mark on: the good value stays, and it is counted.
            deadline = time.time() + 10
            while time.time() < deadline and gw.metric("sluice_credential_refresh_failures_total") < 1:
                time.sleep(0.2)
            self.assertGreaterEqual(gw.metric("sluice_credential_refresh_failures_total"), 1)
            self.assertEqual(status_of(curl(gw, url).stderr.decode()), 200)
            self.assertIn("credential 'cmd'", gw.stderr_text())
            self.assertIn("last value stays in use", gw.stderr_text())
            self.assertNotIn(M["secret"], open(gw.log).read() + gw.stderr_text())
        finally:
            procs.stop_all()


    def test_serve_reads_a_token_again_before_its_jwt_exp(self):
        """serve: a command source that prints a JSON Web Token is run again 80% of the way to the
        token's exp, without a ttl."""
        procs = Processes()
        self.outside = tempfile.mkdtemp(dir=M["tmp"])
        self.addCleanup(shutil.rmtree, self.outside, True)
        runs = os.path.join(self.outside, "runs")
        token = os.path.join(self.outside, "jwt.sh")
        with open(token, "w") as f:
            f.write("#!/bin/sh\necho run >> %s\nb64() { base64 -w0 | tr '+/' '-_' | tr -d '='; }\n"
                    "h=$(printf '{\"alg\":\"none\"}' | b64)\n"
                    "p=$(printf '{\"sub\":\"t\",\"exp\":%%d}' $(( $(date +%%s) + 3 )) | b64)\n"
                    "echo \"$h.$p.sig\"\n" % runs)
        os.chmod(token, 0o755)
        policy = open(M["policy"]).read()
        cfg = ('profile = "network-read"\n[policy]\nallow = ["origin.test:8443"]\n'
               f'[credentials.jwt]\nsource = "command:{token}"\nhosts = ["origin.test:8443"]\n'
               + policy[policy.index("[tls]"):])
        def count():
            with open(runs) as f:
                return len(f.read().split())
        try:
            Gateway(procs, self.outside, cfg, "cred-jwt")
            deadline = time.time() + 10
            while time.time() < deadline and count() < 3:
                time.sleep(0.2)
            self.assertGreaterEqual(count(), 3)  # at the start, then before each exp
        finally:
            procs.stop_all()

    def test_serve_reads_a_file_source_again_when_it_changes(self):
        """serve: a file source without a ttl is read again once the file changes (a token another
        tool rotates in place); a file that goes away keeps the last value, counted."""
        procs = Processes()
        self.outside = tempfile.mkdtemp(dir=M["tmp"])
        self.addCleanup(shutil.rmtree, self.outside, True)
        token = os.path.join(self.outside, "token")
        with open(token, "w") as f:
            f.write("expired-token\n")
        policy = open(M["policy"]).read()
        cfg = ('profile = "network-read"\n[policy]\nallow = ["origin.test:8443"]\n'
               f'[credentials.rotated]\nsource = "file:{token}"\nhosts = ["origin.test:8443"]\n'
               + policy[policy.index("[tls]"):])
        try:
            gw = Gateway(procs, self.outside, cfg, "cred-file")
            url = "https://origin.test:8443/private/repo.git/HEAD"
            self.assertNotEqual(status_of(curl(gw, url).stderr.decode()), 200)
            with open(token + ".new", "w") as f:
                f.write(M["secret"] + "\n")
            os.rename(token + ".new", token)  # as tools rotate a file: a new one moved in place
            deadline = time.time() + 10
            while time.time() < deadline and status_of(curl(gw, url).stderr.decode()) != 200:
                time.sleep(0.2)
            self.assertEqual(status_of(curl(gw, url).stderr.decode()), 200)
            os.unlink(token)
            deadline = time.time() + 10
            while time.time() < deadline and gw.metric("sluice_credential_refresh_failures_total") < 1:
                time.sleep(0.2)
            time.sleep(2.5)  # the file is looked at each second: still one failure, not one a second
            self.assertEqual(gw.metric("sluice_credential_refresh_failures_total"), 1)
            self.assertEqual(status_of(curl(gw, url).stderr.decode()), 200)
            self.assertNotIn(M["secret"], open(gw.log).read() + gw.stderr_text())
        finally:
            procs.stop_all()


class OAuth2AsRoot(base.ExecCase):
    """An OAuth2 client as a credential: sluice obtains the access token from the token endpoint
    (auth.test) with the refresh token, adds it to the API's requests (api.test) and obtains a new
    one before it expires (the server's tokens live 2 s); the server rotates the refresh token and
    sluice keeps the new one. Nothing of the client secret, the refresh token or the access token
    is inside."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(dir=M["tmp"])
        os.chmod(cls.dir, 0o755)
        ca = (os.path.join(M["tmp"], "origin-ca.pem"), os.path.join(M["tmp"], "origin-ca.key"))
        cert, key = make_leaf(cls.dir, ca, "oauth", "DNS:auth.test,DNS:api.test")
        for f in (cert, key):
            os.chmod(f, 0o644)
        cls.port = free_port()
        cls.grants = os.path.join(cls.dir, "grants.log")
        cls.client_secret = "cs-%s" % os.urandom(6).hex()
        cls.refresh = "rt-0-%s" % os.urandom(6).hex()
        env = dict(os.environ, OAUTH_CLIENT="sluice-test:" + cls.client_secret, OAUTH_REFRESH=cls.refresh,
                   OAUTH_TTL="2", OAUTH_LOG=cls.grants)
        cls.server = subprocess.Popen([PYTHON, os.path.join(HERE, "oauth_origin.py"), str(cls.port), cert, key],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        assert cls.server.stdout.readline().strip() == b"ready"
        for name, value in (("client-secret", cls.client_secret), ("refresh-token", cls.refresh)):
            with open(os.path.join(cls.dir, name), "w") as f:
                f.write(value + "\n")
            os.chmod(os.path.join(cls.dir, name), 0o644)

    @classmethod
    def tearDownClass(cls):
        cls.server.kill()
        cls.server.wait()
        cls.server.stdout.close()

    def policy(self, oauth):
        with open(M["policy"]) as f:
            text = f.read()
        text = text.replace('credentials = ["api", "gitpriv"]', 'credentials = ["api", "gitpriv", "oauth"]', 1)
        text = text.replace('allow_domains = ["origin.test:8443"]',
                            'allow_domains = ["origin.test:8443", "api.test:%d"]' % self.port, 1)
        text = text.replace('allow_addresses = ["198.18.0.0/15"]', 'allow_addresses = ["198.18.0.0/15", "127.0.0.1/32"]', 1)
        text = text.replace('[upstream.resolve]\n', '[upstream.resolve]\n"auth.test" = "127.0.0.1"\n"api.test" = "127.0.0.1"\n', 1)
        text += ('\n[credentials.oauth]\nhosts = ["api.test:%d"]\nenv = "API_TOKEN"\n\n[credentials.oauth.oauth2]\n'
                 'token_url = "https://auth.test:%d/oauth/token"\nclient_id = "sluice-test"\n' % (self.port, self.port) + oauth)
        d = tempfile.mkdtemp(dir=M["tmp"])  # outside the workspace, removed with the module's files
        os.chmod(d, 0o755)
        path = os.path.join(d, "policy.toml")
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o644)
        return path

    def run_policy(self, policy, script):
        cmd = self.prefix() + [SLUICE, "exec", "--policy", policy, "--sandbox-profile", "network-read",
                               "--credential", "oauth", "--", "sh", "-c", script]
        return subprocess.run(cmd, capture_output=True, env=self.env(), timeout=90, cwd=self.work)

    def test_refresh_token_grant_and_a_token_obtained_again(self):
        if os.path.exists(self.grants):
            os.unlink(self.grants)
        policy = self.policy('client_secret = "file:%s/client-secret"\nrefresh_token = "file:%s/refresh-token"\n'
                             'scopes = ["read", "write"]\n' % (self.dir, self.dir))
        url = "https://api.test:%d/api" % self.port
        p = self.run_policy(policy, f"curl -sS {url}; sleep 3.5; curl -sS {url}; echo token=$API_TOKEN; "
                                    "env | grep -c -e cs- -e rt- -e at- || true")
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        out = p.stdout.decode().split("\n")
        self.assertTrue(out[0].startswith("api ok "), out)
        self.assertTrue(out[1].startswith("api ok "), out)  # after the first token expired
        self.assertNotEqual(out[0], out[1])                 # with a token obtained again
        self.assertEqual(out[2], "token=sluice-credential-oauth")
        self.assertEqual(out[3], "0")
        with open(self.grants) as f:
            grants = [json.loads(l) for l in f]
        self.assertGreaterEqual(len(grants), 2)  # the rotated refresh token was used for the second
        self.assertEqual({(g["grant"], g["scope"]) for g in grants}, {("refresh_token", "read write")})
        for secret in (self.client_secret, self.refresh):
            self.assertNotIn(secret, p.stdout.decode() + p.stderr.decode())

    def test_tokens_expiring_every_two_seconds_are_invisible_to_the_command(self):
        """The server's tokens live 2 s; a command calls the API for 30 s without one failure."""
        policy = self.policy('client_secret = "file:%s/client-secret"\n' % self.dir)
        url = "https://api.test:%d/api" % self.port
        p = self.run_policy(policy, "end=$(( $(date +%%s) + 30 )); ok=0; bad=0; "
                                    "while [ $(date +%%s) -lt $end ]; do "
                                    "case $(curl -sS %s) in 'api ok'*) ok=$((ok+1));; *) bad=$((bad+1));; esac; "
                                    "sleep 0.1; done; echo ok=$ok bad=$bad" % url)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        counts = dict(kv.split("=") for kv in p.stdout.decode().split())
        self.assertEqual(counts["bad"], "0", p.stdout)
        self.assertGreater(int(counts["ok"]), 50)

    def test_a_token_endpoint_that_answers_garbage(self):
        policy = self.policy('client_secret = "file:%s/client-secret"\n' % self.dir)
        with open(policy) as f:
            text = f.read()
        with open(policy, "w") as f:
            f.write(text.replace("/oauth/token", "/oauth/garbage"))
        p = self.run_policy(policy, "true")
        self.assertEqual(p.returncode, 125)
        self.assertIn("credential 'oauth'", p.stderr.decode())
        self.assertIn("not a JSON token response", p.stderr.decode())

    def test_a_token_the_api_refuses_is_obtained_again(self):
        """A 401 from the API for a token sluice added (revoked before its expiry): sluice obtains a
        new token at once, and the next request carries it. Once per token: one more 401 for the
        same token does not ask the token endpoint again."""
        if os.path.exists(self.grants):
            os.unlink(self.grants)
        policy = self.policy('client_secret = "file:%s/client-secret"\nscopes = ["long"]\n' % self.dir)
        url = "https://api.test:%d/api" % self.port
        p = self.run_policy(policy, f"curl -sS {url}; curl -sS {url}/revoke; curl -sS {url}; curl -sS {url}; "
                                    f"for i in $(seq 50); do out=$(curl -sS {url}); case $out in 'api ok'*) break;; esac; "
                                    f"sleep 0.1; done; echo \"$out\"")
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        out = p.stdout.decode().split("\n")
        self.assertTrue(out[0].startswith("api ok "), out)
        self.assertEqual(out[1], "revoked")
        self.assertEqual(out[2], "token missing or expired")   # the client sees the 401 itself
        self.assertTrue(out[-2].startswith("api ok "), out)   # and then a new token
        self.assertNotEqual(out[0], out[-2])
        with open(self.grants) as f:
            self.assertEqual(len(f.readlines()), 2)  # the first token and one new one, not one per 401
        self.assertIn("the API answered 401", p.stderr.decode())

    def test_client_credentials_and_a_refused_client(self):
        url = "https://api.test:%d/api" % self.port
        policy = self.policy('client_secret = "file:%s/client-secret"\n' % self.dir)
        p = self.run_policy(policy, f"curl -sS {url}")
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertTrue(p.stdout.decode().startswith("api ok"), p.stdout)
        policy = self.policy('client_secret = "command:echo wrong-secret"\n')
        p = self.run_policy(policy, "true")
        self.assertEqual(p.returncode, 125)
        err = p.stderr.decode()
        self.assertIn("credential 'oauth'", err)
        self.assertIn("HTTP 401 invalid_client", err)


class OAuth2AsNobody(OAuth2AsRoot):
    user = 65534


class AwsAsRoot(base.ExecCase):
    """An AWS key pair as a credential: Debian's awscli inside holds a placeholder pair shaped like a
    real one, signs with it, and sluice checks that signature and signs again with the real pair
    and its session token. The origin (aws_origin.py, S3 and STS on loopback as aws.test) checks
    every signature with botocore's signer and the real pair, as AWS would. Nothing of the real
    pair is inside; a request signed with another key is refused and never reaches the origin."""

    @classmethod
    def setUpClass(cls):
        if not shutil.which("aws", path="/usr/bin"):
            raise unittest.SkipTest("Debian's awscli (/usr/bin/aws) is not installed")
        cls.dir = tempfile.mkdtemp(dir=M["tmp"])  # outside the workspace: the sandbox never sees it
        os.chmod(cls.dir, 0o755)
        ca = (os.path.join(M["tmp"], "origin-ca.pem"), os.path.join(M["tmp"], "origin-ca.key"))
        cert, key = make_leaf(cls.dir, ca, "aws", "DNS:aws.test")
        for f in (cert, key):
            os.chmod(f, 0o644)
        cls.port = free_port()
        cls.key_id = "AKIA" + os.urandom(8).hex().upper()
        cls.secret = "real/" + os.urandom(17).hex()
        cls.token = "FwoG" + os.urandom(24).hex()
        cls.log = os.path.join(cls.dir, "origin.jsonl")
        env = dict(os.environ, AWS_ORIGIN_KEY_ID=cls.key_id, AWS_ORIGIN_SECRET=cls.secret,
                   AWS_ORIGIN_TOKEN=cls.token, AWS_ORIGIN_LOG=cls.log)
        cls.server = subprocess.Popen([PYTHON, os.path.join(HERE, "aws_origin.py"), str(cls.port), cert, key],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        assert cls.server.stdout.readline().strip() == b"ready"
        for name, value in (("key-id", cls.key_id), ("secret", cls.secret), ("token", cls.token)):
            with open(os.path.join(cls.dir, name), "w") as f:
                f.write(value + "\n")
            os.chmod(os.path.join(cls.dir, name), 0o644)

    @classmethod
    def tearDownClass(cls):
        cls.server.kill()
        cls.server.wait()
        cls.server.stdout.close()

    def policy(self, aws):
        with open(M["policy"]) as f:
            text = f.read()
        text = text.replace('credentials = ["api", "gitpriv"]', 'credentials = ["api", "gitpriv", "aws"]', 1)
        text = text.replace('allow_domains = ["origin.test:8443"]',
                            'allow_domains = ["origin.test:8443", "aws.test:%d"]' % self.port, 1)
        text = text.replace('allow_addresses = ["198.18.0.0/15"]', 'allow_addresses = ["198.18.0.0/15", "127.0.0.1/32"]', 1)
        text = text.replace('[upstream.resolve]\n', '[upstream.resolve]\n"aws.test" = "127.0.0.1"\n', 1)
        text += '\n[credentials.aws]\nhosts = ["aws.test:%d"]\n\n[credentials.aws.aws]\n' % self.port + aws
        d = tempfile.mkdtemp(dir=M["tmp"])
        os.chmod(d, 0o755)
        path = os.path.join(d, "policy.toml")
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o644)
        return path

    def sources(self):
        return ('access_key_id = "file:{0}/key-id"\nsecret_access_key = "file:{0}/secret"\n'
                'session_token = "file:{0}/token"\n'.format(self.dir))

    def run_aws(self, policy, script, log=None):
        # Path-style S3 addressing (the origin is one host), the region, and the endpoint.
        with open(os.path.join(self.work, "aws-config"), "w") as f:
            f.write("[default]\nregion = us-east-1\ns3 =\n    addressing_style = path\n")
        os.chmod(os.path.join(self.work, "aws-config"), 0o644)
        script = ("export AWS_CONFIG_FILE=$PWD/aws-config; aws() { /usr/bin/aws --endpoint-url "
                  "https://aws.test:%d \"$@\"; }; " % self.port) + script
        cmd = self.prefix() + [SLUICE, "exec", "--policy", policy, "--sandbox-profile", "publish",
                               "--confirm-external-side-effects", "--credential", "aws"] + (["--access-log", log] if log else []) + ["--", "sh", "-c", script]
        return subprocess.run(cmd, capture_output=True, env=self.env(), timeout=180, cwd=self.work)

    def origin_lines(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            return log_records(f)

    def assertNothingReal(self, *texts):
        for t in texts:
            t = t.decode(errors="replace") if isinstance(t, bytes) else t
            for real in (self.key_id, self.secret, self.token):
                self.assertNotIn(real, t)

    def test_awscli_s3_and_sts_signed_again(self):
        before = len(self.origin_lines())
        log = os.path.join(self.work, "access.log")
        with open(os.path.join(self.work, "hello.txt"), "w") as f:
            f.write("hello from inside\n")
        p = self.run_aws(self.policy(self.sources()),
                         "set -e; aws s3 cp hello.txt s3://bucket/hello.txt; aws s3 ls s3://bucket/; "
                         "aws s3 cp s3://bucket/hello.txt -; aws sts get-caller-identity --output text; "
                         "echo \"id=$AWS_ACCESS_KEY_ID secret=$AWS_SECRET_ACCESS_KEY token=${AWS_SESSION_TOKEN:-none}\"; "
                         "env; grep -r . /.sluice $HOME 2>/dev/null || true", log=log)
        self.assertEqual(p.returncode, 0, p.stderr.decode()[-3000:])
        out = p.stdout.decode()
        self.assertIn("hello.txt", out)                       # listed
        self.assertIn("hello from inside", out)               # read back
        self.assertIn("arn:aws:iam::123456789012:user/sluice-test", out)
        placeholder = [l for l in out.splitlines() if l.startswith("id=")][0].split()
        self.assertRegex(placeholder[0], r"^id=AKIA[A-Z2-7]{16}$")   # shaped like a real key id
        self.assertEqual(len(placeholder[1]), len("secret=") + 40)
        self.assertEqual(placeholder[2], "token=none")
        with open(log) as f:
            self.assertNothingReal(p.stdout, p.stderr, f.read())
        # At the origin: every request signed with the real key and its token, and verified.
        seen = self.origin_lines()[before:]
        self.assertGreaterEqual(len(seen), 4, seen)
        self.assertEqual({(l["key"], l["verified"]) for l in seen}, {(self.key_id, True)}, seen)
        self.assertTrue(all("x-amz-security-token" in l["signed"] for l in seen))
        self.assertIn(("POST", "/"), {(l["method"], l["path"]) for l in seen})  # STS: its body hashed
        self.assertIn("PUT", {l["method"] for l in seen})

    def test_another_key_refused_and_nothing_sent(self):
        before = len(self.origin_lines())
        log = os.path.join(self.work, "access.log")
        p = self.run_aws(self.policy(self.sources()),
                         "AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE AWS_SECRET_ACCESS_KEY=x aws sts get-caller-identity; "
                         "echo status=$?; AWS_SECRET_ACCESS_KEY=not-the-placeholder aws s3 ls s3://bucket/; echo status=$?",
                         log=log)
        out = p.stdout.decode()
        self.assertEqual(out.count("status=0"), 0, out + p.stderr.decode())
        self.assertEqual(self.origin_lines()[before:], [])   # refused at the gateway, never re-signed
        with open(log) as f:
            reasons = {json.loads(l)["reason"] for l in f}
        self.assertIn("aws_signature_refused", reasons)
        self.assertIn("aws_signature_invalid", reasons)

    def test_credential_process_obtained_again_before_expiration(self):
        runs = os.path.join(self.dir, "runs-%d" % os.getpid())
        script = os.path.join(self.dir, "process-%s.sh" % (self.user or 0))
        with open(script, "w") as f:
            f.write("#!/bin/sh\necho run >> %s\nexp=$(date -u -d '+3 seconds' +%%Y-%%m-%%dT%%H:%%M:%%SZ)\n"
                    "printf '{\"Version\": 1, \"AccessKeyId\": \"%s\", \"SecretAccessKey\": \"%s\", "
                    "\"SessionToken\": \"%s\", \"Expiration\": \"%%s\"}\\n' \"$exp\"\n"
                    % (runs, self.key_id, self.secret, self.token))
        os.chmod(script, 0o755)
        if os.path.exists(runs):
            os.unlink(runs)
        open(runs, "w").close()
        os.chmod(runs, 0o666)
        p = self.run_aws(self.policy('process = "%s"\n' % script),
                         "aws sts get-caller-identity --output text; sleep 4; aws sts get-caller-identity --output text")
        self.assertEqual(p.returncode, 0, p.stderr.decode()[-3000:])
        self.assertEqual(p.stdout.decode().count("sluice-test"), 2)
        with open(runs) as f:
            self.assertGreaterEqual(len(f.read().split()), 2)  # run again before its keys expired
        # A process that prints no key pair stops the start, naming the credential.
        p = self.run_aws(self.policy('process = "echo {}"\n'), "true")
        self.assertEqual(p.returncode, 125)
        self.assertIn("credential 'aws'", p.stderr.decode())
        self.assertIn("AccessKeyId", p.stderr.decode())

    def test_serve_signs_again_for_its_clients(self):
        """serve: the placeholder pair is derived from the credential's name and printed at the
        start; awscli outside, through the proxy, signs with it and sluice signs again."""
        if self.user is not None:
            self.skipTest("serve runs as root here; its clients are the test's own processes")
        procs = Processes()
        with open(self.policy(self.sources())) as f:
            policy = f.read()
        cfg = ('profile = "publish"\n[policy]\nallow = ["aws.test:%d"]\n' % self.port
               + policy[policy.index("[credentials.aws]"):policy.index("[credentials.aws.aws]")]
               + policy[policy.index("[credentials.aws.aws]"):] + "\n" + policy[policy.index("[tls]"):policy.index("[credentials.aws]")])
        try:
            gw = Gateway(procs, self.dir, cfg, "aws-serve")
            line = [l for l in gw.stderr_text().splitlines() if "clients sign with" in l][0]
            pair = dict(kv.split("=", 1) for kv in line.split()[-2:])
            env = {"PATH": "/usr/bin:/bin", "HOME": self.home, "HTTPS_PROXY": gw.proxy, "AWS_CA_BUNDLE": gw.ca,
                   "AWS_DEFAULT_REGION": "us-east-1", **pair}
            before = len(self.origin_lines())
            p = subprocess.run(["/usr/bin/aws", "--endpoint-url", "https://aws.test:%d" % self.port, "sts",
                                "get-caller-identity", "--output", "text"], capture_output=True, env=env, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr.decode())
            self.assertIn("sluice-test", p.stdout.decode())
            self.assertEqual({(l["key"], l["verified"]) for l in self.origin_lines()[before:]}, {(self.key_id, True)})
            env["AWS_SECRET_ACCESS_KEY"] = "not-the-placeholder"
            p = subprocess.run(["/usr/bin/aws", "--endpoint-url", "https://aws.test:%d" % self.port, "sts",
                                "get-caller-identity"], capture_output=True, env=env, timeout=60)
            self.assertNotEqual(p.returncode, 0)
            self.assertTrue(gw.logged(lambda l: l.get("reason") == "aws_signature_invalid"))
            with open(gw.log) as f:
                self.assertNothingReal(f.read(), gw.stderr_text())
        finally:
            procs.stop_all()


class AwsAsNobody(AwsAsRoot):
    user = 65534


if __name__ == "__main__":
    unittest.main()
