"""A fleet: three `sluice serve` replicas with one persistent CA behind HAProxy (Debian's, TCP mode,
health checks on /readyz), two clients of different roles (one in report mode) sending requests
without pause while (a) the policy file of every replica changes (each applies it within 5 s, no
signal) and (b) the replicas are restarted one at a time. No client request fails, and every one is
in some replica's access log with its client. Unauthenticated and wrong-token clients, and an expired
client certificate on the HTTPS proxy listeners (passed through by HAProxy), are refused. Real
processes on loopback."""
import base64
import http.client
import os
import signal
import subprocess
import threading
import time

from harness import (SLUICE, LoopbackOrigins, Processes, free_port, loopback_upstream, make_ca, make_client,
                     make_leaf, run, start_dns, wait_port)
from harness import log_records

TOKENS = {"builder": "fleet-builder-token-1", "newcomer": "fleet-newcomer-token-2"}
RUNNER = "spiffe://fleet.test/ns/ci/sa/runner"


class Replica:
    def __init__(self, directory, index, body):
        self.index = index
        self.port, self.admin, self.tls_port = free_port(), free_port(), free_port()
        self.config = os.path.join(directory, "replica%d.toml" % index)
        self.log = os.path.join(directory, "replica%d-access.log" % index)
        self.stderr_path = os.path.join(directory, "replica%d.stderr" % index)
        self.write(body)
        self.proc = None

    def write(self, body):
        tmp = self.config + ".tmp"
        with open(tmp, "w") as f:
            f.write(body + '\n[listen]\nproxy = "127.0.0.1:%d"\nadmin = "127.0.0.1:%d"\nproxy_tls = "127.0.0.1:%d"\n'
                    '[log]\naccess_log = "%s"\n' % (self.port, self.admin, self.tls_port, self.log))
        os.rename(tmp, self.config)  # as a ConfigMap update: the file is replaced, never half written

    def start(self):
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen([SLUICE, "serve", "--config", self.config], stdout=subprocess.DEVNULL,
                                         stderr=err)
        try:
            wait_port(self.port, self.proc)
            wait_port(self.admin, self.proc)
        except RuntimeError as e:
            with open(self.stderr_path) as f:
                raise RuntimeError("%s: %s" % (e, f.read()[-2000:]))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)

    def lines(self):
        import json
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            return log_records(f)


class Load(threading.Thread):
    """One client sending GETs through the load balancer, keep-alive, one after another; a request
    that fails (no status, a reset, a 5xx, any exception) is recorded with why, and the client goes on."""

    def __init__(self, port, client, url_host, url_port):
        super().__init__(daemon=True)
        self.port, self.client = port, client
        self.host = "%s:%d" % (url_host, url_port)
        self.auth = "Basic " + base64.b64encode(("%s:%s" % (client, TOKENS[client])).encode()).decode()
        self.ok, self.failed, self.paths, self.retried = 0, [], [], 0
        # Each request that got its 200: its number and when it started and ended (monotonic), for
        # the slowest request during an event.
        self.done = []
        self.stopping = threading.Event()

    def send(self, conn, target):
        """One GET on `conn` (a new connection when None); the connection to go on with and the status."""
        if conn is None:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        conn.request("GET", target, headers={"Proxy-Authorization": self.auth})
        r = conn.getresponse()
        r.read()
        if r.getheader("Connection", "").lower() == "close" or r.will_close:
            conn.close()
            conn = None
        return conn, r.status

    def run(self):
        conn = None
        n = 0
        while not self.stopping.is_set():
            n += 1
            started = time.monotonic()
            path = "/bytes/%d" % (100 + n % 50)
            target = "http://%s%s?%s-%d" % (self.host, path, self.client, n)
            try:
                try:
                    conn, status = self.send(conn, target)
                except (http.client.RemoteDisconnected, http.client.IncompleteRead, ConnectionResetError,
                        BrokenPipeError):
                    # The connection broke before the whole answer came: a keep-alive connection the
                    # server closed between two requests, or a replica that died mid-answer. Every
                    # HTTP client sends an idempotent request again on a new connection then (RFC 9112
                    # section 9.3.1), and so does this one, once. Only a second failure counts.
                    if conn is not None:
                        conn.close()
                    conn = None
                    self.retried += 1
                    conn, status = self.send(None, target)
            except Exception as e:  # anything else, or the retry's failure: a failed request, never a dead client
                self.failed.append((n, repr(e)))
                if conn is not None:
                    conn.close()
                conn = None
            else:
                if status == 200:
                    self.ok += 1
                    self.done.append((n, started, time.monotonic()))
                else:
                    self.failed.append((n, status))
            self.paths.append(n)
        if conn is not None:
            conn.close()


class FleetTest(LoopbackOrigins):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.tmp.name
        if not os.path.exists("/usr/sbin/haproxy"):
            raise RuntimeError("HAProxy is not installed (apt-get install haproxy; scripts/install-deps.sh does)")
        ca_pem, ca_key = os.path.join(d, "fleet-ca.pem"), os.path.join(d, "fleet-ca.key")
        run([SLUICE, "ca", "init", "--cert", ca_pem, "--key", ca_key])
        dns = start_dns(cls.procs, {})
        cls.upstream = loopback_upstream(cls.ca[0], dns, {"origin.test": "127.0.0.1", "other.test": "127.0.0.1"})
        # One persistent CA for every replica, in the [tls] section the loopback upstream opens.
        cls.upstream = cls.upstream.replace("[tls]\n", '[tls]\nca_cert = "%s"\nca_key = "%s"\n' % (ca_pem, ca_key), 1)
        # The HTTPS proxy listener on every replica, with one listener certificate and client CA.
        cls.listener_ca = make_ca(d, "listener-ca")
        listener = make_leaf(d, cls.listener_ca, "sluice.test", "DNS:localhost,IP:127.0.0.1")
        clients_ca = make_ca(d, "clients-ca")
        cls.certs = {"runner": make_client(d, clients_ca, "runner", "URI:" + RUNNER),
                     "expired": make_client(d, clients_ca, "expired", "URI:" + RUNNER,
                                            days=("20200101000000Z", "20200201000000Z"))}
        cls.upstream = cls.upstream.replace("[tls]\n", '[tls]\nproxy_cert = "%s"\nproxy_key = "%s"\nclient_ca = "%s"\n'
                                            % (listener[0], listener[1], clients_ca[0]), 1)
        cls.fleet_ca = ca_pem
        cls.replicas = [Replica(d, i, cls.body("")) for i in range(3)]
        for r in cls.replicas:
            r.start()
        cls.lb = free_port()
        cfg = os.path.join(d, "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write("global\n  maxconn 2000\ndefaults\n  mode tcp\n  timeout connect 2s\n  timeout client 60s\n"
                    "  timeout server 60s\n  option redispatch\n  retries 3\n"
                    "frontend proxy\n  bind 127.0.0.1:%d\n  default_backend sluice\n"
                    "backend sluice\n  balance roundrobin\n  option httpchk GET /readyz\n"
                    "  default-server inter 300ms fall 1 rise 2\n" % cls.lb)
            for r in cls.replicas:
                f.write("  server r%d 127.0.0.1:%d check port %d\n" % (r.index, r.port, r.admin))
            # The HTTPS proxy listeners, passed through (TLS ends at sluice, which sees the certificate).
            cls.lb_tls = free_port()
            f.write("frontend proxy_tls\n  bind 127.0.0.1:%d\n  default_backend sluice_tls\n"
                    "backend sluice_tls\n  balance roundrobin\n  option httpchk GET /readyz\n"
                    "  default-server inter 300ms fall 1 rise 2\n" % cls.lb_tls)
            for r in cls.replicas:
                f.write("  server t%d 127.0.0.1:%d check port %d\n" % (r.index, r.tls_port, r.admin))
        cls.haproxy = cls.procs.start(["haproxy", "-db", "-f", cfg])
        wait_port(cls.lb, cls.haproxy)

    @classmethod
    def tearDownClass(cls):
        for r in cls.replicas:
            if r.proc and r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait()
        super().tearDownClass()

    @classmethod
    def body(cls, extra_allow):
        allow = '["origin.test:%d"%s]' % (cls.http, extra_allow)
        return ('profile = "network-read"\n[policy]\nallow = %s\n[roles.build]\n[roles.trial]\nmode = "report"\n'
                'allow = []\n[timeouts]\ndrain_delay = "1500ms"\n' % allow +
                "".join('[clients.%s]\ntoken_sha256 = "%s"\nrole = "%s"\n' % (n, __import__("hashlib").sha256(t.encode()).hexdigest(), role)
                        for (n, t), role in zip(TOKENS.items(), ("build", "trial"))) +
                '[clients.runner]\ncertificate = "%s"\nrole = "build"\n' % RUNNER +
                cls.upstream)

    def direct(self, replica, client, url):
        cmd = ["curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}", "--proxy",
               "http://%s:%s@127.0.0.1:%d" % (client, TOKENS[client], replica.port), url]
        return subprocess.run(cmd, capture_output=True, text=True).stdout

    def test_policy_change_and_rolling_restart_lose_no_request(self):
        loads = [Load(self.lb, c, "origin.test", self.http) for c in TOKENS]
        for l in loads:
            l.start()
        time.sleep(1)
        # (a) The policy changes on every replica: other.test is allowed for the build role.
        other = "http://other.test:%d/bytes/10" % self.http
        self.assertEqual([self.direct(r, "builder", other) for r in self.replicas], ["403"] * 3)
        t0 = time.monotonic()
        for r in self.replicas:
            r.write(self.body(', "other.test:%d"' % self.http))
        pending = list(self.replicas)
        while pending:
            pending = [r for r in pending if self.direct(r, "builder", other) != "200"]
            self.assertLess(time.monotonic() - t0, 5, "replicas %s did not apply the new policy within 5 s"
                            % [r.index for r in pending])
            time.sleep(0.1)
        # (b) Each replica restarted in turn, the next only once HAProxy sends to the new one.
        for r in self.replicas:
            self.assertEqual(r.stop(), 0)
            r.start()
            time.sleep(1.5)  # two health checks: HAProxy marks it up again
        time.sleep(0.5)
        for l in loads:
            l.stopping.set()
        for l in loads:
            l.join(timeout=30)
        for l in loads:
            self.assertEqual(l.failed, [], "client %s: %d requests failed" % (l.client, len(l.failed)))
            self.assertGreater(l.ok, 50, l.client)
        # Every request is in some replica's log, with its client (and the report role's as would_deny).
        def logged_by_client():
            logged = {}
            for r in self.replicas:
                for line in r.lines():
                    if line["method"] == "GET" and line["host"] == "origin.test" and line["client"]:
                        logged.setdefault(line["client"], []).append(line)
            return logged
        # A replica writes a request's line just after its response has gone: the last lines may
        # still be on their way when the clients stop. Waited for (bounded): a line that never
        # comes still fails below.
        deadline = time.monotonic() + 5
        logged = logged_by_client()
        while any(len(logged.get(l.client, [])) < l.ok for l in loads) and time.monotonic() < deadline:
            time.sleep(0.2)
            logged = logged_by_client()
        for l in loads:
            self.assertEqual(len(logged.get(l.client, [])), l.ok, l.client)
        self.assertTrue(all(x["decision"] == "allow" and x["role"] == "build" for x in logged["builder"]))
        self.assertTrue(all(x["decision"] == "would_deny" and x["role"] == "trial" for x in logged["newcomer"]))
        self.assertGreater(len({r.index for r in self.replicas for x in r.lines() if x["client"]}), 1)
        for r in self.replicas:
            with open(r.stderr_path) as f:
                self.assertIn("not ready", f.read())
        print("fleet: %s" % ", ".join("%s %d ok, %d retried on a closed keep-alive connection" % (l.client, l.ok, l.retried)
                                      for l in loads))

    def test_unauthenticated_and_wrong_token_refused_through_the_balancer(self):
        url = "http://origin.test:%d/bytes/10" % self.http
        base = ["curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}"]
        p = subprocess.run(base + ["--proxy", "http://127.0.0.1:%d" % self.lb, url], capture_output=True, text=True)
        self.assertEqual(p.stdout, "407")
        p = subprocess.run(base + ["--proxy", "http://builder:wrong@127.0.0.1:%d" % self.lb, url],
                           capture_output=True, text=True)
        self.assertEqual(p.stdout, "407")

    def test_certificates_through_the_balancer_valid_and_expired(self):
        url = "http://origin.test:%d/bytes/10" % self.http
        def via(cert):
            pem, key = self.certs[cert]
            return subprocess.run(["curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}",
                                   "--proxy", "https://127.0.0.1:%d" % self.lb_tls, "--proxy-cacert",
                                   self.listener_ca[0], "--proxy-cert", pem, "--proxy-key", key, url],
                                  capture_output=True, text=True)
        # Round robin: each of three connections may land on another replica; all say the same.
        for _ in range(3):
            self.assertEqual(via("runner").stdout, "200")
            self.assertEqual(via("expired").stdout, "407")
        def settled(lines):  # a line is written after its answer: wait for the six
            return (len([x for x in lines if x["client"] == "runner"]) >= 3
                    and len([x for x in lines if x["reason"] == "client_certificate_invalid"]) >= 3)
        deadline = time.monotonic() + 5
        lines = [x for r in self.replicas for x in r.lines()]
        while not settled(lines) and time.monotonic() < deadline:
            time.sleep(0.1)
            lines = [x for r in self.replicas for x in r.lines()]
        self.assertGreaterEqual(len([x for x in lines if x["client"] == "runner"]), 3)
        self.assertTrue(any(x["reason"] == "client_certificate_invalid" for x in lines))
