"""[[limits.budget]]: rates, exchanges at once and byte budgets on the one judging step, through
`sluice serve` (root) and `sluice exec` (root and 65534); [limits.shared]: three replicas of serve
sharing their counters in a real redis-server, one client spread over all three getting its budget
once, and Redis stopped mid-run (fail_open false: 503 at once; true: served on local counters). A burst past a rate gets 429 with
Retry-After and passes after the wait; a run that drips data out through GET query strings is cut at
its byte budget, and the origin counts no more than the budget let through; each client of serve
has its own budget; h2 streams count as HTTP/1.1 requests do; the remaining budgets show in
/metrics, /api/stats and --json-summary; `sluice check` names the limits a request falls under."""
import hashlib
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
import unittest
import urllib.request

import test_exec as base
from harness import SLUICE, Gateway, Processes, curl, free_port, header, status_of, wait_port

M = base.M
setUpModule = base.setUpModule
tearDownModule = base.tearDownModule


def trust_and_upstream():
    """The [tls] and [upstream] tables of the exec suite's policy (the origin's CA, the pins)."""
    with open(M["policy"]) as f:
        policy = f.read()
    return policy[policy.index("[tls]"):]


def arrived(tag):
    """What the origin received on /drip/TAG, straight from it (not through sluice)."""
    ctx = ssl._create_unverified_context()  # the test's own origin, asked directly
    with urllib.request.urlopen(urllib.request.Request("https://198.18.0.2:8443/arrived/" + tag,
                                                       headers={"Host": "origin.test:8443"}),
                                context=ctx, timeout=10) as r:
        return int(r.read().decode().strip())


def digest(token):
    return hashlib.sha256(token.encode()).hexdigest()


class LimitsServe(unittest.TestCase):

    def start(self, budgets, clients=False):
        self.procs = Processes()
        self.addCleanup(self.procs.stop_all)
        self.dir = tempfile.mkdtemp(dir=M["tmp"])
        self.addCleanup(shutil.rmtree, self.dir, True)
        cfg = 'profile = "network-read"\n[policy]\nallow = ["origin.test:8443"]\n'
        if clients:
            cfg += '[roles.dev]\n'
            for name in ("alice", "bob"):
                cfg += '[clients.%s]\ntoken_sha256 = "%s"\nrole = "dev"\n' % (name, digest(name + "-token"))
        cfg += budgets + trust_and_upstream()
        self.gw = Gateway(self.procs, self.dir, cfg, "limits")

    def statuses(self, *urls, args=()):
        """One curl, one connection: each URL's status in order, and the header dump."""
        cmd = ["curl", "-sS", "--max-time", "20", "--proxy", self.gw.proxy, "--cacert", self.gw.ca,
               "-o", "/dev/null", "-D", "/dev/stderr", "-w", "%{http_code}\\n"] + list(args)
        for u in urls:
            cmd += [u, "-o", "/dev/null"]
        p = subprocess.run(cmd, capture_output=True, timeout=60)
        return [int(x) for x in p.stdout.decode().split()], p.stderr.decode()

    def test_a_burst_past_the_rate_gets_429_with_retry_after_then_passes(self):
        self.start('[[limits.budget]]\nname = "api-rate"\nhosts = ["origin.test"]\n'
                   'requests_per_second = 0.5\nburst = 2\n')
        codes, heads = self.statuses(*["https://origin.test:8443/hello"] * 3)
        self.assertEqual(codes, [200, 200, 429], heads)
        self.assertIn(header(heads, "Retry-After"), ("1", "2"))  # a token in at most 2 s
        self.assertIn('rule="budget:api-rate"', header(heads, "Proxy-Status"))
        p = curl(self.gw, "https://origin.test:8443/hello")
        self.assertIn(b"budget api-rate", p.stdout)
        self.assertIn(b"0.5 requests a second, 2 at once", p.stdout)
        time.sleep(2.2)
        codes, heads = self.statuses("https://origin.test:8443/hello")
        self.assertEqual(codes, [200], heads)
        self.assertTrue(self.gw.logged(lambda l: l.get("path") == "/hello" and l.get("status") == 200
                                       and l.get("reason") == "allowed" and len([x for x in self.gw.access_log()
                                                                                   if x.get("path") == "/hello"]) >= 5))
        refused = [l for l in self.gw.access_log() if l.get("reason") == "rate_limited"]
        self.assertGreaterEqual(len(refused), 2)
        self.assertEqual(refused[0]["rule"], "budget:api-rate")
        self.assertEqual(refused[0]["status"], 429)
        self.assertGreaterEqual(self.gw.metric("sluice_budget_refused_total", budget="api-rate", client=""), 2)

    def test_h2_streams_count_as_http1_requests_do(self):
        self.start('[[limits.budget]]\nname = "streams"\nrequests_per_second = 0.2\nburst = 3\n')
        codes, heads = self.statuses(*["https://origin.test:8443/hello"] * 5, args=["--http2"])
        self.assertEqual(codes, [200, 200, 200, 429, 429], heads)
        self.assertIn("HTTP/2 429", heads)
        self.assertRegex(heads.lower(), r"retry-after: [1-5]\r?\n")
        self.assertTrue(self.gw.logged(lambda l: len([x for x in self.gw.access_log() if x.get("method") == "GET"]) >= 5))
        lines = [l for l in self.gw.access_log() if l.get("method") == "GET"]
        self.assertEqual(sorted(l["protocol"] for l in lines), ["h2"] * 5)

    def test_each_client_has_its_own_byte_budget(self):
        self.start('[[limits.budget]]\nname = "per-client"\nhosts = ["origin.test"]\nbytes_out = 3000\n', clients=True)
        query = "q=" + "x" * 400
        results = {}
        for name in ("alice", "bob"):
            proxy = self.gw.proxy.replace("http://", "http://%s:%s-token@" % (name, name))
            cmd = ["curl", "-sS", "--max-time", "20", "--proxy", proxy, "--cacert", self.gw.ca, "-w", "%{http_code}\\n"]
            for i in range(12):
                cmd += ["https://origin.test:8443/drip/serve-%s?%s" % (name, query), "-o", "/dev/null"]
            p = subprocess.run(cmd, capture_output=True, timeout=60)
            results[name] = [int(x) for x in p.stdout.decode().split()]
        for name in ("alice", "bob"):
            codes = results[name]
            self.assertIn(200, codes, results)
            self.assertEqual(codes[-1], 403, results)
            self.assertEqual(codes, sorted(codes), results)  # allowed until spent, refused after
            got = arrived("serve-" + name)
            self.assertGreater(got, 0)
            self.assertLessEqual(got, 3000)
        self.assertTrue(self.gw.logged(lambda l: l.get("reason") == "budget_exhausted" and l.get("client") == "bob"))
        refused = [l for l in self.gw.access_log() if l.get("reason") == "budget_exhausted"]
        self.assertEqual({l["client"] for l in refused}, {"alice", "bob"})
        for name in ("alice", "bob"):
            self.assertEqual(self.gw.metric("sluice_budget_remaining_bytes", budget="per-client", client=name,
                                            direction="out") < 500, True)
        with urllib.request.urlopen("http://127.0.0.1:%d/api/stats" % self.gw.admin, timeout=5) as r:
            stats = json.load(r)
        rows = {b["client"]: b for b in stats["budgets"]}
        self.assertEqual(set(rows), {"alice", "bob"})
        self.assertEqual(rows["alice"]["bytesOutLimit"], 3000)
        self.assertGreater(rows["alice"]["refused"], 0)

    def test_exchanges_at_once_are_limited(self):
        self.start('[[limits.budget]]\nname = "one-at-a-time"\nhosts = ["origin.test"]\nconnections = 1\n')
        slow = subprocess.Popen(["curl", "-sS", "--max-time", "20", "--proxy", self.gw.proxy, "--cacert", self.gw.ca,
                                 "-o", "/dev/null", "-w", "%{http_code}", "https://origin.test:8443/sse/4/0.5"],
                                stdout=subprocess.PIPE)
        try:
            deadline = time.time() + 10
            while time.time() < deadline and self.gw.metric("sluice_budget_open", budget="one-at-a-time", client="") != 1:
                time.sleep(0.05)
            codes, heads = self.statuses("https://origin.test:8443/hello")
            self.assertEqual(codes, [429], heads)
            self.assertEqual(header(heads, "Retry-After"), "1")
        finally:
            out, _ = slow.communicate(timeout=30)
        self.assertEqual(out, b"200")
        codes, heads = self.statuses("https://origin.test:8443/hello")
        self.assertEqual(codes, [200], heads)

    def test_check_names_the_limits(self):
        self.start('[[limits.budget]]\nname = "api"\nhosts = ["origin.test"]\nper = "day"\nbytes_out = 100\n'
                   '[[limits.budget]]\nname = "elsewhere"\nhosts = ["other.test"]\nconnections = 2\n')
        p = subprocess.run([SLUICE, "check", "--config", self.gw.config, "GET", "https://origin.test:8443/x"],
                           capture_output=True, text=True, timeout=30)
        self.assertIn("limit: api per=day bytes_out=100", p.stdout)
        self.assertNotIn("elsewhere", p.stdout)


class LimitsShared(unittest.TestCase):
    """[limits.shared]: the counters in Debian's redis-server, on this suite's loopback."""

    def setUp(self):
        self.procs = Processes()
        self.addCleanup(self.procs.stop_all)
        self.dir = tempfile.mkdtemp(dir=M["tmp"])
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.redis_port = free_port()
        self.start_redis()

    def start_redis(self):
        self.redis = self.procs.start(["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
                                       "--save", "", "--appendonly", "no", "--dir", self.dir])
        wait_port(self.redis_port, self.redis)

    def stop_redis(self):
        self.redis.terminate()
        self.redis.wait(timeout=10)

    def replicas(self, budget, fail_open=False):
        cfg = ('profile = "network-read"\n[policy]\nallow = ["origin.test:8443"]\n[roles.dev]\n'
               '[clients.alice]\ntoken_sha256 = "%s"\nrole = "dev"\n' % digest("alice-token") + budget +
               '[limits.shared]\nredis = "127.0.0.1:%d"\nfail_open = %s\ntimeout = "300ms"\n'
               % (self.redis_port, "true" if fail_open else "false") + trust_and_upstream())
        self.gws = [Gateway(self.procs, self.dir, cfg, "replica%d" % i) for i in range(3)]

    def get(self, gw, url):
        proxy = gw.proxy.replace("http://", "http://alice:alice-token@")
        p = subprocess.run(["curl", "-sS", "--max-time", "20", "--proxy", proxy, "--cacert", gw.ca, "-o", "/dev/null",
                            "-D", "/dev/stderr", "-w", "%{http_code}", url], capture_output=True, timeout=60)
        return int(p.stdout.decode() or 0), p.stderr.decode()

    def test_one_client_through_three_replicas_gets_its_budget_once(self):
        self.replicas('[[limits.budget]]\nname = "fleet-rate"\nrequests_per_second = 0.001\nburst = 6\n'
                      '[[limits.budget]]\nname = "fleet-bytes"\nhosts = ["origin.test"]\nbytes_out = 6000\n')
        codes = [self.get(self.gws[i % 3], "https://origin.test:8443/hello")[0] for i in range(9)]
        self.assertEqual(codes, [200] * 6 + [429] * 3, codes)
        # Each replica sees the same counter: its own view after its last answer.
        total = sum(self.gws[i].metric("sluice_budget_requests_total", budget="fleet-rate", client="alice")
                    for i in range(3))
        self.assertEqual(total, 6)
        self.assertEqual(self.gws[0].metric("sluice_limits_shared_total", outcome="ok"), 3)

    def test_a_drip_spread_over_replicas_is_cut_at_one_budget(self):
        self.replicas('[[limits.budget]]\nname = "fleet-drip"\nhosts = ["origin.test"]\nbytes_out = 5000\n')
        tag = "shared-%d" % int(time.time() * 1000)
        codes = [self.get(self.gws[i % 3], "https://origin.test:8443/drip/%s?d=%s" % (tag, "B" * 400))[0]
                 for i in range(21)]
        self.assertIn(200, codes)
        self.assertEqual(codes, sorted(codes), codes)
        self.assertEqual(codes[-1], 403)
        got = arrived(tag)
        self.assertGreater(got, 2000)  # more than one replica's worth went, but no more than the one budget
        self.assertLessEqual(got, 5000)

    def test_redis_stopped_refuses_at_once_and_recovers(self):
        self.replicas('[[limits.budget]]\nname = "fleet"\nrequests_per_second = 100\n')
        self.assertEqual(self.get(self.gws[0], "https://origin.test:8443/hello")[0], 200)
        self.stop_redis()
        t0 = time.time()
        code, heads = self.get(self.gws[1], "https://origin.test:8443/hello")
        self.assertEqual(code, 503, heads)
        self.assertLess(time.time() - t0, 5)  # within the timeout, never a hang
        self.assertIn("limits_unavailable", header(heads, "Proxy-Status"))
        self.assertEqual(self.gws[1].metric("sluice_limits_shared_total", outcome="fail_closed"), 1)
        self.assertTrue(self.gws[1].logged(lambda l: l.get("reason") == "limits_unavailable"))
        self.start_redis()
        deadline = time.time() + 10
        while time.time() < deadline:
            code, heads = self.get(self.gws[1], "https://origin.test:8443/hello")
            if code == 200:
                break
            time.sleep(0.3)
        self.assertEqual(code, 200, heads)
        self.assertEqual(self.gws[1].metric("sluice_limits_shared_up"), 1)

    def test_redis_stopped_with_fail_open_serves_on_local_counters(self):
        self.replicas('[[limits.budget]]\nname = "fleet"\nrequests_per_second = 0.001\nburst = 2\n',
                      fail_open=True)
        self.stop_redis()
        codes = [self.get(self.gws[0], "https://origin.test:8443/hello")[0] for _ in range(3)]
        self.assertEqual(codes, [200, 200, 429])  # this replica's own bucket
        self.assertEqual(self.gws[0].metric("sluice_limits_shared_total", outcome="fail_open"), 3)
        self.assertEqual(self.gws[0].metric("sluice_limits_shared_up"), 0)


class LimitsExecAsRoot(base.ExecCase):

    def policy(self, budgets):
        path = os.path.join(self.work, "policy.toml")
        with open(path, "w") as f:
            f.write('[skills.default]\ndefault_profile = "network-read"\nallow_domains = ["origin.test:8443"]\n' +
                    budgets + trust_and_upstream())
        os.chmod(path, 0o644)
        return path

    def run_exec(self, policy, script, summary=None):
        log = os.path.join(self.work, "access.log")
        cmd = [SLUICE, "exec", "--policy", policy, "--access-log", log]
        if summary:
            cmd += ["--json-summary", summary]
        p = subprocess.run(self.prefix() + cmd + ["--", "sh", "-c", script], capture_output=True,
                           env=self.env(), timeout=120, cwd=self.work)
        return p

    def test_a_drip_through_query_strings_is_cut_at_the_budget(self):
        policy = self.policy('[[limits.budget]]\nname = "drip"\nhosts = ["origin.test"]\nper = "run"\nbytes_out = 4000\n')
        tag = "exec-%d-%d" % (os.getuid() if self.user is None else self.user, int(time.time() * 1000))
        summary = os.path.join(self.work, "summary.json")
        script = ("for i in $(seq 1 20); do curl -s -o /dev/null -w '%%{http_code}\\n' "
                  "'https://origin.test:8443/drip/%s?d=%s'; done" % (tag, "A" * 300))
        p = self.run_exec(policy, script, summary)
        codes = [int(x) for x in p.stdout.decode().split()]
        self.assertEqual(len(codes), 20, p.stderr.decode())
        self.assertIn(200, codes)
        self.assertEqual(codes, sorted(codes), codes)  # allowed until spent, then refused
        self.assertEqual(codes[-1], 403)
        got = arrived(tag)
        self.assertGreater(got, 0)
        self.assertLessEqual(got, 4000)  # the target alone; the heads sluice counted are larger
        self.assertIn("budget_exhausted", p.stderr.decode())
        with open(summary) as f:
            s = json.load(f)
        [row] = s["budgets"]
        self.assertEqual((row["budget"], row["per"], row["bytesOutLimit"]), ("drip", "run", 4000))
        self.assertLessEqual(row["bytesOut"], 4000)
        self.assertGreater(row["refused"], 0)

    def test_a_rate_in_a_run(self):
        policy = self.policy('[[limits.budget]]\nname = "run-rate"\nrequests_per_second = 0.25\nburst = 2\n')
        script = ("for i in 1 2 3; do curl -s -o /dev/null -D - 'https://origin.test:8443/hello' | "
                  "grep -i -E '^(HTTP|retry-after)'; done; sleep 4.2; "
                  "curl -s -o /dev/null -w '%{http_code}\\n' https://origin.test:8443/hello")
        p = self.run_exec(policy, script)
        out = p.stdout.decode()
        self.assertEqual([l.split()[1] for l in out.splitlines() if l.startswith("HTTP/") and "established" not in l],
                         ["200", "200", "429"], out)
        self.assertRegex(out.lower(), r"retry-after: [1-4]\r?\n")
        self.assertEqual(out.split()[-1], "200", out)


class LimitsExecAsNobody(LimitsExecAsRoot):
    user = 65534


if __name__ == "__main__":
    unittest.main()
