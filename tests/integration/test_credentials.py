"""Credentials that never enter the sandbox: the gateway adds them to requests for their own hosts.
A private repository behind HTTP Basic auth and a bearer-token API on the test host (198.18.0.2,
origin.py /private and /headers); real git, curl and python inside `sluice exec`, as root and as
65534; and `sluice serve` with a credential. The secret must show up nowhere but at the origin."""
import json
import os
import subprocess
import unittest

import test_exec as base
from harness import PYTHON, SLUICE, Gateway, Processes, curl, status_of

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
        lines = [json.loads(l) for l in open(log)]
        refused = [l for l in lines if l["reason"] == "credential_host_mismatch"]
        self.assertEqual(len(refused), 2, lines)
        self.assertEqual(refused[0]["rule"], "credential:api")
        self.assertIn("credential_host_mismatch", p.stderr.decode())
        self.assertNoSecret(p.stdout, p.stderr, open(log).read())

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


if __name__ == "__main__":
    unittest.main()
