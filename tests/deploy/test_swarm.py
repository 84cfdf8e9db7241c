"""deploy/swarm/stack.yml on a real orchestrator: Docker swarm mode on Debian's docker.io (a dockerd
of the test's own, docker_engine.py; swarm networks in 198.19.128.0/17). The stack as shipped, with
the test's images (sluice built by `docker build`, HAProxy from Debian on the offline base), a CA
as Docker secrets and a policy as a Docker config naming two clients of two roles (one in report
mode). The test origin listens on this machine, on Docker's bridge address.

Two clients send requests without pause through HAProxy's published port (host mode: this
kernel has no IPVS for the routing mesh) while (a) the service rolls to a new image tag, (b) one
replica is killed (SIGKILL), (c) the policy config is replaced under a new name and the service
updated. No request fails (a GET whose connection breaks before its whole answer came, between two
requests or with the killed replica mid-answer, is sent again once on a new connection, as HTTP
clients do for idempotent requests), both clients keep sending through every event, every request
is in some replica's log with its client, and the requests, failures and the slowest request during each event are printed (the
figures in docs/benchmarks.md). The tasks run as the stack says: non-root, no capabilities, no new
privileges, read-only root, Docker's default seccomp, healthy by their /readyz check. Last, a
policy that does not load, deployed as the next config, is rolled back: the old config serves on
and the failed task's log names the file and the fault. Then the budgets the replicas share in the
stack's Redis ([limits.shared]): one client spread over the replicas gets its budget once; Redis
scaled to zero mid-run refuses requests under a budget at once (503, fail_open = false) while the
rest pass, and a new Redis serves again."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from container_fixtures import package, run
from docker_engine import BRIDGE_IP, Engine, HostOrigin

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "../.."))
BUILD = os.environ.get("SLUICE_BUILD_DIR") or os.path.join(ROOT, "build/default")
SLUICE = os.environ.get("SLUICE_BIN") or os.path.join(BUILD, "sluice")
sys.path.insert(0, os.path.join(ROOT, "tests/integration"))
from test_fleet import TOKENS, Load  # noqa: E402  (clients that send GETs without pause)
from harness import free_port  # noqa: E402

STACK = "sl"
SERVICE = STACK + "_sluice"
IMAGE = "localhost/sluice:swarm-%d"
HAPROXY_IMAGE = "localhost/sluice-haproxy:swarm"
ORIGIN_PORT = 18082
M = {}


def policy(extra_allow=""):
    """deploy/swarm/sluice.toml with the test's origin, its two clients and an unredacted query (the
    test finds each request by it)."""
    with open(os.path.join(ROOT, "deploy/swarm/sluice.toml")) as f:
        shipped = f.read()
    digest = {n: hashlib.sha256(t.encode()).hexdigest() for n, t in TOKENS.items()}
    return shipped.split("[policy]")[0].replace('access_log = "-"', 'access_log = "-"\nredact_query = false') + f"""
[policy]
allow = ["origin.test:{ORIGIN_PORT}", "budget.test:{ORIGIN_PORT}"{extra_allow}]
[upstream]
allow_addresses = ["{BRIDGE_IP}/32"]
[upstream.resolve]
"origin.test" = "{BRIDGE_IP}"
"other.test" = "{BRIDGE_IP}"
"budget.test" = "{BRIDGE_IP}"
[roles.build]
[roles.trial]
mode = "report"
allow = []
[clients.builder]
token_sha256 = "{digest['builder']}"
role = "build"
[clients.newcomer]
token_sha256 = "{digest['newcomer']}"
role = "trial"
[[limits.budget]]
name = "swarm-budget"
hosts = ["budget.test"]
requests_per_second = 0.001
burst = 9
"""


def setUpModule():
    if os.geteuid() != 0:
        raise unittest.SkipTest("dockerd needs root")
    M["tmp"] = d = tempfile.mkdtemp(prefix="sluice-swarm-test-")
    os.chmod(d, 0o755)
    M["engine"] = e = Engine(d)
    try:
        if e.docker(["info", "--format", "{{.Swarm.LocalNodeState}}"]).stdout.strip() != "inactive":
            e.docker(["swarm", "leave", "--force"])
        e.docker(["container", "prune", "-f"])  # an earlier run's task containers, and their logs
        e.docker(["swarm", "init", "--advertise-addr", BRIDGE_IP, "--default-addr-pool", "198.19.128.0/17",
                  "--default-addr-pool-mask-length", "24", "--task-history-limit", "20"])
        deb = package(BUILD)
        e.build_image(IMAGE % 1, deb, os.path.join(ROOT, "deploy/container/Containerfile"))
        # The second tag is another image (its own label), as a new release would be.
        e.docker(["build", "--network=none", "--label", "sluice.test.release=2", "-t", IMAGE % 2, "-"],
                 input="FROM %s\n" % (IMAGE % 1))
        # HAProxy and Redis from Debian's packages on the same offline base (the stack's defaults are
        # Docker Hub's haproxy:2.6 and redis:7, which this machine cannot pull).
        run(["bash", os.path.join(ROOT, "scripts/container-base.sh"), "", "haproxy,redis-server"],
            env=dict(e.env, SLUICE_ENGINE="/usr/bin/docker", SLUICE_BASE_NAME=HAPROXY_IMAGE), timeout=1500)
        M["stack_dir"] = s = os.path.join(d, "stack")
        shutil.copytree(os.path.join(ROOT, "deploy/swarm"), s)
        with open(os.path.join(s, "sluice.toml"), "w") as f:
            f.write(policy())
        run([SLUICE, "ca", "init", "--cert", os.path.join(d, "ca.pem"), "--key", os.path.join(d, "ca.key")])
        e.docker(["secret", "create", "sluice-ca-cert", os.path.join(d, "ca.pem")])
        e.docker(["secret", "create", "sluice-ca-key", os.path.join(d, "ca.key")])
        M["origin"] = HostOrigin(BRIDGE_IP, ORIGIN_PORT)
        M["lb_port"] = free_port()
        deploy(image=1, policy_version=1)
        wait_converged()
        wait_through_lb()
    except BaseException:
        tearDownModule()
        raise


def tearDownModule():
    if "origin" in M:
        M["origin"].stop()
    if "engine" in M:
        e = M["engine"]
        e.docker(["stack", "rm", STACK], check=False)
        # The stack's network goes once its tasks are gone: leaving the swarm before that leaves
        # its VXLAN device behind.
        deadline = time.monotonic() + 60
        while (e.docker(["network", "ls", "-q", "--filter", "label=com.docker.stack.namespace=" + STACK],
                        check=False).stdout.strip() and time.monotonic() < deadline):
            time.sleep(0.5)
        e.docker(["swarm", "leave", "--force"], check=False)
        e.stop()
    shutil.rmtree(M["tmp"], ignore_errors=True)


def deploy(image, policy_version):
    env = dict(M["engine"].env, SLUICE_IMAGE=IMAGE % image, HAPROXY_IMAGE=HAPROXY_IMAGE, REDIS_IMAGE=HAPROXY_IMAGE,
               SLUICE_PROXY_PORT=str(M["lb_port"]), SLUICE_POLICY_VERSION=str(policy_version))
    run(["/usr/bin/docker", "stack", "deploy", "-c", "stack.yml", STACK], env=env, cwd=M["stack_dir"])


def tasks():
    """The service's running tasks' containers with their health."""
    e = M["engine"]
    ids = e.docker(["ps", "-q", "--filter", "label=com.docker.swarm.service.name=" + SERVICE]).stdout.split()
    out = []
    for info in json.loads(e.docker(["inspect"] + ids).stdout) if ids else []:
        out.append((info["Id"], info["State"]["Health"]["Status"] if info["State"].get("Health") else None,
                    info["Config"]["Image"]))
    return out


def wait_converged(image=1, timeout=240, rolled_back=False):
    """Until the last update finished (or, `rolled_back`, was rolled back), three tasks of `image` run
    and each is healthy."""
    e = M["engine"]
    deadline = time.monotonic() + timeout
    while True:
        state = e.docker(["service", "inspect", "--format", "{{if .UpdateStatus}}{{.UpdateStatus.State}}{{end}}",
                          SERVICE]).stdout.strip()
        done = ("rollback_completed",) if rolled_back else ("", "completed")
        if state not in done and state not in ("updating", "rollback_started"):
            raise AssertionError("the update of %s ended in %s:\n%s" % (SERVICE, state, e.docker(
                ["service", "ps", "--no-trunc", SERVICE]).stdout))
        t = tasks()
        if state in done and len(t) == 3 and all(h == "healthy" and i == IMAGE % image for _, h, i in t):
            return
        if time.monotonic() > deadline:
            raise AssertionError("the service did not converge in %d s (update %r, tasks %s):\n%s" % (
                timeout, state, t, e.docker(["service", "ps", "--no-trunc", SERVICE]).stdout))
        time.sleep(0.5)


def busiest_task():
    """The task that logged the most client requests in the last two seconds, and how many."""
    def recent(cid):
        lines = M["engine"].docker(["logs", "--since", "2s", cid], timeout=60).stderr.splitlines()
        return sum(1 for l in lines if l.startswith("{") and '"client":"' in l)
    return max(((cid, recent(cid)) for cid, _, _ in tasks()), key=lambda t: t[1])


def via_lb(client, url):
    return subprocess.run(["curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}", "--proxy",
                           "http://%s:%s@127.0.0.1:%d" % (client, TOKENS[client], M["lb_port"]), url],
                          capture_output=True, text=True).stdout


def wait_through_lb(timeout=60):
    deadline = time.monotonic() + timeout
    url = "http://origin.test:%d/bytes/10" % ORIGIN_PORT
    while via_lb("builder", url) != "200":
        if time.monotonic() > deadline:
            raise AssertionError("no request passed HAProxy in %d s:\n%s" % (timeout, M["engine"].docker(
                ["service", "ps", "--no-trunc", STACK + "_lb"], check=False).stdout))
        time.sleep(0.5)


def lb_log():
    """HAProxy's own lines (servers up, down, in and out of DNS), the last 60: why a request found
    no replica."""
    e = M["engine"]
    lines = []
    for cid in e.docker(["ps", "-aq", "--filter", "label=com.docker.swarm.service.name=%s_lb" % STACK]).stdout.split():
        r = e.docker(["logs", "--timestamps", cid], timeout=60, check=False)
        lines += (r.stdout + r.stderr).splitlines()
    return "\n".join(sorted(lines)[-60:])


class SwarmStack(unittest.TestCase):
    def test_a_tasks_are_restricted(self):
        e = M["engine"]
        for cid, health, _ in tasks():
            info = json.loads(e.docker(["inspect", cid]).stdout)[0]
            self.assertTrue(info["HostConfig"]["ReadonlyRootfs"])
            self.assertEqual(health, "healthy")
            self.assertEqual(e.docker(["exec", cid, "/usr/bin/id", "-u"]).stdout.strip(), "10001")
            status = e.docker(["exec", cid, "/bin/cat", "/proc/1/status"]).stdout
            caps = {l.split(":")[0]: l.split(":")[1].strip() for l in status.splitlines() if l.startswith("Cap")}
            self.assertEqual(caps["CapEff"], "0000000000000000", caps)
            self.assertEqual(caps["CapBnd"], "0000000000000000", caps)
            self.assertIn("NoNewPrivs:\t1", status)
            self.assertIn("Seccomp:\t2", status)
            # The CA came as secrets, readable by sluice's user only where it must be.
            ls = e.docker(["exec", cid, "/bin/ls", "-ln", "/run/secrets"]).stdout
            self.assertRegex(ls, r"-r-------- +1 10001 +10001 .* sluice-ca.key")
        # The published port answers as sluice does: no token, 407.
        self.assertEqual(subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--proxy",
                                         "http://127.0.0.1:%d" % M["lb_port"], "http://origin.test:%d/" % ORIGIN_PORT],
                                        capture_output=True, text=True).stdout, "407")

    def test_b_three_events_lose_no_request(self):
        e = M["engine"]
        loads = [Load(M["lb_port"], c, "origin.test", ORIGIN_PORT) for c in TOKENS]
        for l in loads:
            l.start()
        events = []

        def event(name, action, image=1):
            time.sleep(2)
            t0 = time.monotonic()
            action()
            wait_converged(image)
            wait_through_lb()
            events.append((name, t0, time.monotonic()))

        other = "http://other.test:%d/bytes/10" % ORIGIN_PORT
        self.assertEqual(via_lb("builder", other), "403")
        try:
            # (a) A new image tag, rolled start-first one task at a time.
            event("new image", lambda: deploy(image=2, policy_version=1), image=2)
            # (b) One replica killed, the one serving a client's keep-alive connection now: swarm starts
            # another, HAProxy stops sending to the dead one, the client sends its GET again.
            victim, busy = busiest_task()
            event("replica killed", lambda: e.docker(["kill", victim]), image=2)
            # (c) The policy replaced: a config under a new name, the service updated.
            with open(os.path.join(M["stack_dir"], "sluice.toml"), "w") as f:
                f.write(policy(', "other.test:%d"' % ORIGIN_PORT))
            event("policy replaced", lambda: deploy(image=2, policy_version=2), image=2)
            time.sleep(2)
        finally:
            for l in loads:
                l.stopping.set()
            for l in loads:
                l.join(timeout=30)
        self.assertEqual(via_lb("builder", other), "200")  # the new policy is in force
        for l in loads:
            # A client still inside a request has not failed yet, and has not succeeded either.
            self.assertFalse(l.is_alive(), "client %s is stuck in request %d" % (l.client, l.paths[-1] + 1
                                                                                if l.paths else 1))
            self.assertEqual(l.failed, [], "client %s: %d requests failed; HAProxy's view of the replicas:\n%s" % (
                l.client, len(l.failed), lb_log()) if l.failed else "")
            self.assertGreater(l.ok, 100, l.client)
            for name, t0, t1 in events:  # and kept sending through every event
                self.assertGreater(sum(1 for _, s, e in l.done if s <= t1 and e >= t0), 10, (l.client, name))
        # Every request is in some replica's log (the tasks' stderr, old and killed ones included),
        # with its client and role.
        # (Each container's own log: `docker service logs` of 20.10 can hang on a killed task's.)
        logs = []
        for cid in e.docker(["ps", "-aq", "--filter", "label=com.docker.swarm.service.name=" + SERVICE]).stdout.split():
            logs += e.docker(["logs", cid], timeout=120).stderr.splitlines()
        logged = {}
        for line in logs:
            if not line.startswith("{"):
                continue
            x = json.loads(line)
            if x.get("type") == "checkpoint":  # the chain's signed checkpoints (docs/metrics.md)
                continue
            if x["method"] == "GET" and x["host"] == "origin.test" and x["client"] and "?" in x["path"]:
                logged.setdefault(x["client"], set()).add(x["path"].split("?", 1)[1])
                expect = ("allow", "build") if x["client"] == "builder" else ("would_deny", "trial")
                self.assertEqual((x["decision"], x["role"]), expect, x)
        for l in loads:
            missing = [n for n, _, _ in l.done if "%s-%d" % (l.client, n) not in logged.get(l.client, set())]
            self.assertEqual(missing, [], "client %s: requests not in any replica's log" % l.client)
        # The figures: requests, failures and the slowest request during each event.
        print()
        for name, t0, t1 in events:
            during = [(end - start) for l in loads for _, start, end in l.done if start <= t1 and end >= t0]
            each = ", ".join("%s %d" % (l.client, sum(1 for _, s, e in l.done if s <= t1 and e >= t0)) for l in loads)
            print("swarm: %-16s %5.1f s, %6d requests (%s), 0 failed, slowest %.3f s" % (
                name, t1 - t0, len(during), each, max(during)))
        print("swarm: the killed replica had logged %d requests in the 2 s before" % busy)
        print("swarm: in all %d requests, %d sent again once because their connection broke" % (
            sum(l.ok for l in loads), sum(l.retried for l in loads)))

    def test_c_a_policy_that_does_not_load_is_rolled_back(self):
        # Runs after the three events: the service is at image 2 and policy config 2.
        e = M["engine"]
        path = os.path.join(M["stack_dir"], "sluice.toml")
        with open(path) as f:
            good = f.read()
        with open(path, "w") as f:
            f.write(good.replace('profile = "network-read"', 'profile = "read-mostly"', 1))
        try:
            deploy(image=2, policy_version=3)
            deadline = time.monotonic() + 240
            while True:
                state = e.docker(["service", "inspect", "--format",
                                  "{{if .UpdateStatus}}{{.UpdateStatus.State}}{{end}}", SERVICE]).stdout.strip()
                if state == "rollback_completed":
                    break
                self.assertLess(time.monotonic(), deadline, "update state %r:\n%s" % (state, e.docker(
                    ["service", "ps", "--no-trunc", SERVICE]).stdout))
                time.sleep(1)
        finally:
            with open(path, "w") as f:
                f.write(good)
        configs = e.docker(["service", "inspect", "--format",
                            "{{range .Spec.TaskTemplate.ContainerSpec.Configs}}{{.ConfigName}}{{end}}", SERVICE]).stdout
        self.assertEqual(configs.strip(), "sluice-policy-2")
        wait_converged(image=2, rolled_back=True)
        self.assertEqual(via_lb("builder", "http://other.test:%d/bytes/10" % ORIGIN_PORT), "200")
        # The failed task said why.
        failed = e.docker(["ps", "-aq", "--filter", "label=com.docker.swarm.service.name=" + SERVICE,
                           "--filter", "status=exited"]).stdout.split()
        said = "".join(e.docker(["logs", cid], timeout=60).stderr for cid in failed)
        self.assertIn("sluice.toml:", said)
        self.assertIn("profile must be one of", said)

    def test_d_a_clients_budget_holds_across_replicas(self):
        # [limits.shared]: budget.test allows the builder 9 requests (a bucket of 9, refilled one
        # token per 1000 s) however HAProxy spreads them over the three replicas.
        e = M["engine"]
        url = "http://budget.test:%d/bytes/10" % ORIGIN_PORT
        codes = [via_lb("builder", url) for _ in range(15)]
        if codes != ["200"] * 9 + ["429"] * 6:
            said = "".join(l for cid, _, _ in tasks() for l in e.docker(["logs", cid], timeout=60).stderr.splitlines(True)
                           if "limits.shared" in l)
            self.fail("%s\nredis: %s\nreplicas said:\n%s" % (codes, e.docker(
                ["service", "ps", "--no-trunc", STACK + "_redis"], check=False).stdout, said[-3000:]))
        served = [cid for cid, _, _ in tasks()
                  if "budget.test" in e.docker(["logs", cid], timeout=60).stderr]
        self.assertGreater(len(served), 1, "HAProxy sent every request to one replica")
        # Redis stopped mid-run: fail_open = false refuses at once (503), nothing waits.
        e.docker(["service", "scale", "--detach=false", STACK + "_redis=0"], timeout=120)
        try:
            t0 = time.monotonic()
            code = via_lb("builder", "http://budget.test:%d/bytes/10" % ORIGIN_PORT)
            self.assertEqual(code, "503")
            self.assertLess(time.monotonic() - t0, 8)
            # Requests under no budget go on as before.
            self.assertEqual(via_lb("builder", "http://origin.test:%d/bytes/10" % ORIGIN_PORT), "200")
        finally:
            e.docker(["service", "scale", "--detach=false", STACK + "_redis=1"], timeout=120)
        # A new Redis holds no counters: the budget starts afresh once the replicas reach it.
        deadline = time.monotonic() + 60
        while via_lb("builder", url) != "200":
            self.assertLess(time.monotonic(), deadline, "no request under the budget passed after Redis came back")
            time.sleep(0.5)


if __name__ == "__main__":
    unittest.main()
