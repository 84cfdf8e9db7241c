"""Read-only Git over smart HTTP in network-read: real git (clone, fetch, ls-remote; protocol v0 and
v2; shallow and partial clones) against `git http-backend` on the test host, as root and as 65534.
Pushes stay refused with a message naming publish; only fetch negotiation reaches git-upload-pack."""
import gzip
import json
import os
import unittest

import test_exec as base
from harness import PYTHON

M = base.M
setUpModule = base.setUpModule
tearDownModule = base.tearDownModule
URL = "https://origin.test:8443/git/repo.git"


class GitAsRoot(base.ExecCase):

    def git(self, script, profile="network-read", *extra):
        summary = os.path.join(self.work, "summary.json")
        p = self.sx("--sandbox-profile", profile, *extra, "--json-summary", summary, "--", "sh", "-c",
                    "set -e; export GIT_TERMINAL_PROMPT=0; " + script)
        return p, json.load(open(summary)) if os.path.exists(summary) else {}

    def test_clone_fetch_ls_remote_v0_and_v2(self):
        for version in ("2", "0"):
            script = (f"git -c protocol.version={version} clone -q {URL} /tmp/c; cat /tmp/c/README; "
                      f"git -C /tmp/c -c protocol.version={version} fetch -q origin; "
                      f"git -c protocol.version={version} ls-remote {URL} | grep -c refs/heads/main")
            p, s = self.git(script)
            self.assertEqual(p.returncode, 0, (version, p.stderr.decode()))
            self.assertEqual(p.stdout.decode(), "hello from a repository\n1\n", version)
            posts = [r for r in s["requests"] if r["method"] == "POST"]
            self.assertTrue(posts and all(r["decision"] == "allow" for r in posts), s["requests"])

    def test_shallow_and_partial_clones(self):
        p, _ = self.git(f"git clone -q --depth 1 {URL} /tmp/s; git -C /tmp/s rev-list --count HEAD; "
                        f"git clone -q --filter=blob:none {URL} /tmp/p; cat /tmp/p/README")
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(p.stdout.decode(), "1\nhello from a repository\n")

    def test_push_refused_in_network_read_allowed_in_publish(self):
        push = "https://origin.test:8443/git/push.git"
        script = (f"git clone -q {push} /tmp/w; cd /tmp/w; echo more >> README; "
                  "git -c user.name=t -c user.email=t@t commit -qam more; git push -q origin HEAD:main")
        p, s = self.git(script)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("git_push_refused", p.stderr.decode())
        self.assertIn("publish", p.stderr.decode())
        p, s = self.git(script, "publish", "--confirm-external-side-effects")
        self.assertEqual(p.returncode, 0, p.stderr.decode())

    def test_only_negotiation_reaches_upload_pack(self):
        oid = "a" * 40
        good = b"0032want " + oid.encode() + b"\n" + b"00000009done\n"
        bad_bodies = {
            "unknown-command": b"0014command=push\n0000",
            "not-pkt-lines": b"hello world, not git",
            "smuggled-line": b"0032want " + oid.encode() + b"\n" + b"0011rm -rf / now\n0000",
            "gzip-of-garbage": gzip.compress(b"nonsense that is no pkt-line"),
        }
        d = self.work
        for name, body in list(bad_bodies.items()) + [("good-gzip", gzip.compress(good)), ("good", good)]:
            with open(os.path.join(d, name), "wb") as f:
                f.write(body)
        cmd = ("curl -s -o /dev/null -w '%{{http_code}} ' -X POST -H 'Content-Type: application/x-git-upload-pack-request' "
               "{enc} --data-binary @{file} " + URL + "/git-upload-pack")
        script = "; ".join(cmd.format(enc="-H 'Content-Encoding: gzip'" if "gzip" in n else "", file=n)
                           for n in list(bad_bodies) + ["good-gzip", "good"])
        p, s = self.git(script + "; exit 0")
        codes = p.stdout.decode().split()
        self.assertEqual(codes[:4], ["403"] * 4, p.stderr)
        self.assertNotEqual(codes[4], "403")  # well-formed: reaches git (which may dislike the oid)
        self.assertNotEqual(codes[5], "403")
        refused = [r for r in s["requests"] if r["reason"] == "git_request_refused"]
        self.assertEqual(sum(r["count"] for r in refused), 4)
        # A POST to anything else is still a write.
        p, s = self.git(f"curl -s -o /dev/null -w '%{{http_code}}' -X POST --data x=1 {URL}/other; exit 0")
        self.assertEqual(p.stdout, b"403")


class GitAsNobody(GitAsRoot):
    user = 65534


if __name__ == "__main__":
    unittest.main()
