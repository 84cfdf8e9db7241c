"""Egress you can see: per-rule series, the access log's fields, failures that never became a request,
the live page in headless Chromium, `sluice exec --metrics-textfile` read by a real node_exporter, and
the Grafana dashboard's every panel run against a real Prometheus that scraped sluice under traffic.
Everything listens on loopback; the exec cases also run as 65534."""
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request

import ocsf_schema
import test_exec as base
from harness import (PYTHON, SLUICE, Gateway, LoopbackOrigins, curl, free_port, loopback_upstream,
                     raw_exchange, start_dns, status_of, wait_port)
from harness import log_records

M = base.M
setUpModule = base.setUpModule
tearDownModule = base.tearDownModule

ROOT = os.path.abspath(os.path.join(base.HERE, "..", ".."))
DEPLOY = os.path.join(ROOT, "deploy")
CHROMIUM = "/usr/bin/chromium"
NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"
LOG_FIELDS = {"time", "command_id", "skill", "profile", "method", "scheme", "host", "port", "path", "rule",
              "decision", "reason", "status", "bytes_in", "bytes_out", "duration_seconds", "entry", "agent", "client", "role",
              "protocol", "source_ip", "source_port", "writer", "seq", "prev_hash"}


def need(path, package):
    if not os.path.exists(path):
        raise AssertionError("%s is missing: install the Debian package %s (scripts/install-deps.sh "
                             "does)" % (path, package))


def output_dir():
    """Where artefacts a person may want to look at (the page's screenshot) are kept."""
    d = os.environ.get("SLUICE_TEST_OUTPUT") or os.path.join(tempfile.gettempdir(), "sluice-test-output")
    os.makedirs(d, exist_ok=True)
    return d


def get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.headers, r.read().decode()


def serve_config(cls):
    """A serve policy with something of everything: an HTTPS and an HTTP origin, a host whose port
    is closed (upstream errors), a deny rule."""
    dns = start_dns(cls.procs, {})
    cls.closed = free_port()
    return f"""profile = "network-read"
[policy]
allow = ["origin.test:{cls.https}", "origin.test:{cls.http}", "down.test:{cls.closed}"]
deny = ["blocked.origin.test"]
""" + loopback_upstream(cls.ca[0], dns, {"origin.test": "127.0.0.1", "down.test": "127.0.0.1"})


TRAFFIC_LINES = 6  # a line a request of one round of traffic()


def traffic(cls, gw, rounds=1):
    for _ in range(rounds):
        curl(gw, f"https://origin.test:{cls.https}/bytes/20000")
        curl(gw, f"http://origin.test:{cls.http}/bytes/1000")
        curl(gw, f"https://origin.test:{cls.https}/upload", "-X", "POST", "-d", "x=1")
        curl(gw, "https://exfil.example.net/")
        curl(gw, f"http://down.test:{cls.closed}/")
        curl(gw, f"https://origin.test:{cls.https}/", cacert=False)  # rejects sluice's CA


class ServeObservability(LoopbackOrigins):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.gw = Gateway(cls.procs, cls.tmp.name, serve_config(cls), "obs")
        traffic(cls, cls.gw)
        cls.gw.wait_log(lambda lines: len(lines) >= TRAFFIC_LINES)

    def log_lines(self, at_least=1, **match):
        """Log lines matching `match`, waiting up to 5 s for `at_least` of them: a line is written
        after the client has its answer, so reading at once may be early (seen under ASan)."""
        return self.gw.lines_where(lambda l: all(l.get(k) == v for k, v in match.items()), at_least)

    def test_every_log_line_has_the_documented_fields(self):
        lines = self.gw.access_log()
        self.assertGreater(len(lines), 5)
        for l in lines:
            self.assertEqual(set(l), LOG_FIELDS, l)
            self.assertEqual(l["command_id"], "serve")
            self.assertEqual(l["profile"], "network-read")
        allowed = self.log_lines(decision="allow", method="GET", host="origin.test", port=self.https)
        self.assertTrue(allowed)
        self.assertEqual(allowed[0]["rule"], "origin.test:%d" % self.https)

    def test_client_that_rejects_the_ca_is_logged(self):
        rejected = self.log_lines(reason="client_tls_rejected")
        self.assertTrue(rejected, self.gw.access_log())
        self.assertEqual(rejected[0]["decision"], "error")
        self.assertEqual(rejected[0]["host"], "origin.test")
        self.assertEqual(rejected[0]["port"], self.https)
        self.assertEqual(rejected[0]["method"], "CONNECT")
        self.assertGreater(self.gw.metric("sluice_requests_total", reason="client_tls_rejected"), 0)

    def test_socks_gets_an_immediate_refusal_and_a_log_line(self):
        # SOCKS5 asking only for username/password, and SOCKS4: refused. (SOCKS5 without
        # authentication is served like CONNECT: test_gateway.)
        for greeting, answer in ((b"\x05\x01\x02", b"\x05\xff"),
                                 (b"\x04\x01\x00\x50\x7f\x00\x00\x01\x00", b"\x00\x5b")):
            t0 = time.monotonic()
            got = raw_exchange(self.gw.port, greeting, read_timeout=10)
            self.assertLess(time.monotonic() - t0, 5, "the SOCKS client waited for a deadline")
            self.assertTrue(got.startswith(answer), got)
        self.assertGreaterEqual(len(self.log_lines(2, reason="socks_refused", decision="error")), 2)
        # curl, as a real SOCKS4 client, fails at once rather than after the header deadline.
        t0 = time.monotonic()
        p = subprocess.run(["curl", "-sS", "--max-time", "20", "--socks4",
                            "127.0.0.1:%d" % self.gw.port, "http://127.0.0.1:1/"], capture_output=True)
        self.assertNotEqual(p.returncode, 0)
        self.assertLess(time.monotonic() - t0, 5)

    def test_non_http_opening_is_logged(self):
        hello = bytes.fromhex("16030100") + b"\x00" * 8  # a TLS record sent without CONNECT
        raw_exchange(self.gw.port, hello, read_timeout=5)
        self.assertTrue(self.log_lines(reason="non_http_protocol", decision="error"))

    def test_per_rule_series(self):
        rule = "origin.test:%d" % self.https
        m = self.gw.metric
        self.assertGreater(m("sluice_rule_requests_total", rule=rule, decision="allow", reason="allowed"), 0)
        self.assertGreater(m("sluice_rule_requests_total", rule=rule, decision="deny",
                             reason="method_not_allowed"), 0)
        self.assertGreater(m("sluice_rule_requests_total", rule="none", decision="deny",
                             reason="host_not_allowlisted"), 0)
        self.assertGreater(m("sluice_rule_requests_total", rule="down.test:%d" % self.closed,
                             decision="error", reason="connection_refused"), 0)
        self.assertGreaterEqual(m("sluice_rule_bytes_total", rule=rule, direction="out"), 20000)
        self.assertGreater(m("sluice_rule_request_duration_seconds_count", rule=rule), 0)
        # Labels stay bounded by the policy: no raw host that is not a rule appears anywhere.
        self.assertNotIn("exfil.example.net", self.gw.metrics())

    def test_api_stats(self):
        status, headers, body = get("http://127.0.0.1:%d/api/stats" % self.gw.admin)
        self.assertEqual(status, 200)
        self.assertEqual(headers["Content-Type"], "application/json")
        s = json.loads(body)
        dest = {d["destination"]: d for d in s["destinations"]}
        self.assertGreater(dest["origin.test:%d" % self.https]["allowed"], 0)
        self.assertGreaterEqual(dest["origin.test:%d" % self.https]["bytes_out"], 20000)
        self.assertGreater(dest["exfil.example.net:443"]["denied"], 0)
        reasons = {d["reason"] for d in s["denials"]}
        self.assertTrue({"method_not_allowed", "host_not_allowlisted", "connection_refused"} <= reasons, reasons)
        self.assertEqual(s["policy"]["profile"], "network-read")
        self.assertIn("origin.test:%d" % self.https, s["policy"]["allow"])
        self.assertGreater(s["totals"]["allowed"], 0)

    def test_live_page_in_headless_chromium(self):
        need(CHROMIUM, "chromium")
        status, headers, body = get("http://127.0.0.1:%d/" % self.gw.admin)
        self.assertIn("text/html", headers["Content-Type"])
        # Self-contained: nothing is loaded from anywhere else.
        self.assertIsNone(re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", body))
        self.assertIn("default-src 'none'", headers["Content-Security-Policy"])
        profile = tempfile.mkdtemp(prefix="sluice-chromium-")
        shot = os.path.join(output_dir(), "live-page.png")
        flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--user-data-dir=" + profile, "--virtual-time-budget=5000", "--window-size=1280,1000"]
        url = "http://127.0.0.1:%d/" % self.gw.admin
        try:
            dom = subprocess.run(flags + ["--dump-dom", url], capture_output=True, timeout=120)
            subprocess.run(flags + ["--screenshot=" + shot, url], capture_output=True, timeout=120)
        finally:
            shutil.rmtree(profile, ignore_errors=True)
        html = dom.stdout.decode()
        self.assertEqual(dom.returncode, 0, dom.stderr[-2000:])
        dests = re.search(r'<table id="destinations">.*?</table>', html, re.S).group(0)
        denials = re.search(r'<table id="denials">.*?</table>', html, re.S).group(0)
        self.assertIn("origin.test:%d" % self.https, dests)
        self.assertIn("method_not_allowed", denials)
        self.assertIn("host_not_allowlisted", denials)
        self.assertIn("exfil.example.net:443", denials)
        self.assertIn("live, updated", html)
        self.assertTrue(os.path.getsize(shot) > 10000, "no screenshot at " + shot)
        print("\nlive page screenshot: " + shot)


def textfile_series(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


class AgentListeners(LoopbackOrigins):
    """serve's per-agent listeners: an agent host's traffic is named in the log and metrics, and
    processes of users not listed are refused (uid from the kernel's socket table)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.agent_port = free_port()
        body = serve_config(cls) + f"""
[listen.agents.claude]
address = "127.0.0.1:{cls.agent_port}"
uids = [0]
"""
        cls.gw = Gateway(cls.procs, cls.tmp.name, body, "agents")
        wait_port(cls.agent_port, cls.gw.proc)

    def via_agent(self, url, *prefix):
        return subprocess.run(list(prefix) + ["curl", "-sS", "--max-time", "20", "--proxy",
                                              f"http://127.0.0.1:{self.agent_port}", "--cacert", self.gw.ca,
                                              "-o", "-", url], capture_output=True)

    def test_agent_traffic_named_and_other_users_refused(self):
        p = self.via_agent(f"https://origin.test:{self.https}/bytes/100")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(p.stdout), 100)
        p = self.via_agent(f"https://origin.test:{self.https}/bytes/100",
                           "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
        self.assertNotEqual(p.returncode, 0)
        self.assertEqual(p.stdout, b"")
        # The same user through the ordinary proxy port: not an agent's traffic.
        self.assertEqual(curl(self.gw, f"https://origin.test:{self.https}/bytes/10").returncode, 0)
        lines = self.gw.wait_log(lambda ls: {("claude", "allowed"), ("claude", "agent_peer_refused"), ("", "allowed")}
                                 <= {(l["agent"], l["reason"]) for l in ls if l["path"] in ("/bytes/10", "/bytes/100")
                                     or l["reason"] == "agent_peer_refused"}) or self.gw.access_log()
        named = [(l["agent"], l["decision"], l["reason"]) for l in lines if l["agent"]]
        self.assertIn(("claude", "allow", "allowed"), named)
        self.assertIn(("claude", "deny", "agent_peer_refused"), named)
        self.assertIn("", [l["agent"] for l in lines if l["path"] == "/bytes/10"])
        self.assertEqual(self.gw.metric("sluice_agent_requests_total", agent="claude", decision="allow"), 1)
        self.assertEqual(self.gw.metric("sluice_agent_connections_refused_total", agent="claude"), 1)
        with open(self.gw.stderr_path) as f:
            err = f.read()
        self.assertIn("agent claude on 127.0.0.1:%d" % self.agent_port, err)
        self.assertIn("refused a connection from uid 65534", err)

    def test_agent_listener_config_errors(self):
        for section, wanted in (('[listen.agents.claude]\naddress = "0.0.0.0:3129"\nuids = [0]', "must be a loopback"),
                                ('[listen.agents.claude]\naddress = "127.0.0.1:3129"', "needs uids"),
                                ('[listen.agents.Bad]\naddress = "127.0.0.1:3129"\nuids = [0]', "agent name")):
            path = os.path.join(self.tmp.name, "bad-agent.toml")
            with open(path, "w") as f:
                f.write(section + "\n")
            p = subprocess.run([SLUICE, "check", "--config", path, "GET", "https://example.com/"],
                               capture_output=True, timeout=10)
            self.assertNotEqual(p.returncode, 0, section)
            self.assertIn(wanted, p.stderr.decode(), section)


class ExecTextfileAsRoot(base.ExecCase):
    def setUp(self):
        super().setUp()
        self.collect = os.path.join(self.work, "textfile")
        os.makedirs(self.collect)
        os.chmod(self.collect, 0o777)

    def test_runs_add_up_in_one_textfile_read_by_node_exporter(self):
        need(NODE_EXPORTER, "prometheus-node-exporter")
        url = "https://origin.test:8443/bytes/100"
        p = self.sx("--metrics-textfile", self.collect, "--sandbox-profile", "network-read", "--",
                    "curl", "-sS", "-o", "/dev/null", url)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = self.sx("--metrics-textfile", self.collect, "--sandbox-profile", "network-read", "--",
                    "curl", "-sS", "-o", "/dev/null", url)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = self.sx("--metrics-textfile", self.collect, "--", "sh", "-c", "exit 3")
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertEqual(sorted(os.listdir(self.collect)), [".sluice_exec.prom.lock", "sluice_exec.prom"])
        with open(os.path.join(self.collect, "sluice_exec.prom")) as f:
            s = textfile_series(f.read())
        commands = {k: v for k, v in s.items() if k.startswith("sluice_exec_commands_total")}
        self.assertEqual(commands, {
            'sluice_exec_commands_total{profile="network-read",result="exit_zero",skill="default"}': 2,
            'sluice_exec_commands_total{profile="offline",result="exit_nonzero",skill="default"}': 1})
        allowed = [v for k, v in s.items() if k.startswith("sluice_rule_requests_total{") and
                   'rule="origin.test:8443"' in k and 'decision="allow"' in k]
        self.assertEqual(allowed, [2])
        self.assertFalse(any(k.startswith("sluice_connections_active") for k in s))

        port = free_port()
        ne = subprocess.Popen([NODE_EXPORTER, "--collector.disable-defaults", "--collector.textfile",
                               "--collector.textfile.directory=" + self.collect,
                               "--web.listen-address=127.0.0.1:%d" % port],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_port(port, ne)
            _, _, text = get("http://127.0.0.1:%d/metrics" % port)
        finally:
            ne.kill()
            ne.wait()
            ne.stderr.close()
        self.assertIn('sluice_exec_commands_total{profile="network-read",result="exit_zero",skill="default"} 2',
                      text)
        self.assertIn('node_textfile_scrape_error 0', text)

    def test_refused_command_is_counted_and_bad_directory_refused(self):
        p = self.sx("--metrics-textfile", self.collect, "--sandbox-profile", "publish", "--", "true")
        self.assertEqual(p.returncode, 125)  # publish needs --confirm-external-side-effects
        with open(os.path.join(self.collect, "sluice_exec.prom")) as f:
            self.assertIn('result="refused"', f.read())
        marker = os.path.join(self.work, "ran")
        missing = os.path.join(self.work, "nope")
        p = self.sx("--metrics-textfile", missing, "--", "touch", marker)
        self.assertEqual(p.returncode, 125)
        self.assertIn(b"--metrics-textfile " + missing.encode() + b": not a directory", p.stderr)
        self.assertFalse(os.path.exists(marker))

    def test_foreign_file_is_not_clobbered(self):
        path = os.path.join(self.collect, "sluice_exec.prom")
        with open(path, "w") as f:
            f.write("something else entirely\n")
        p = self.sx("--metrics-textfile", self.collect, "--", "true")
        self.assertEqual(p.returncode, 0)  # the command's status is kept
        self.assertIn(b"move the file away", p.stderr)
        with open(path) as f:
            self.assertEqual(f.read(), "something else entirely\n")


class ExecTextfileAsNobody(ExecTextfileAsRoot):
    user = 65534


def ocsf_problems(events):
    return [(e.get("unmapped", {}).get("reason"), p) for e in events for p in ocsf_schema.validate(e)]


class OcsfAuditEvents(LoopbackOrigins):
    """[log] format = "ocsf": the same traffic through two gateways, one writing sluice's JSON line
    and one writing OCSF events; every event is valid against the OCSF 1.8.0 classes
    (ocsf_schema.py) and says what the JSON line says."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        body = serve_config(cls)
        cls.json_gw = Gateway(cls.procs, cls.tmp.name, body, "json")
        cls.ocsf_gw = Gateway(cls.procs, cls.tmp.name, body, "ocsf", log_format="ocsf")
        for gw in (cls.json_gw, cls.ocsf_gw):
            traffic(cls, gw)
            raw_exchange(gw.port, bytes.fromhex("16030100") + b"\x00" * 8, read_timeout=5)  # not HTTP
        for gw in (cls.json_gw, cls.ocsf_gw):  # each round's lines and the not-HTTP opening's
            gw.wait_log(lambda lines: len(lines) >= TRAFFIC_LINES + 1)

    def test_every_event_is_valid_ocsf(self):
        events = self.ocsf_gw.access_log()
        self.assertGreaterEqual(len(events), 7)
        self.assertEqual(ocsf_problems(events), [])
        self.assertEqual({e["class_uid"] for e in events}, {4001, 4002})

    def test_one_record_two_encodings(self):
        def key(method, host, port, decision, reason, status):
            return (method, host, port, decision, reason, status)
        from_json = sorted(key(l["method"], l["host"], l["port"], l["decision"], l["reason"], l["status"])
                           for l in self.json_gw.access_log())
        from_ocsf = []
        for e in self.ocsf_gw.access_log():
            u, dst = e["unmapped"], e["dst_endpoint"]
            method = e["http_request"]["http_method"] if e["class_uid"] == 4002 else u["method"]
            status = e["http_response"]["code"] if e["class_uid"] == 4002 else u["status"]
            from_ocsf.append(key(method, dst.get("hostname", ""), dst.get("port", 0), u["decision"], u["reason"], status))
            self.assertEqual(e["status_code"], u["reason"])
            self.assertEqual(e["traffic"]["bytes"], e["traffic"]["bytes_in"] + e["traffic"]["bytes_out"])
        self.assertEqual(sorted(from_ocsf), from_json)

    def test_the_verdicts_map_to_ocsf(self):
        events = self.ocsf_gw.access_log()

        def one(**match):
            found = [e for e in events if all(e["unmapped"].get(k) == v for k, v in match.items())]
            self.assertTrue(found, (match, events))
            return found[0]
        get = one(decision="allow", method="GET", path="/bytes/20000")
        self.assertEqual((get["class_uid"], get["activity_id"], get["type_uid"]), (4002, 3, 400203))
        self.assertEqual((get["action_id"], get["disposition_id"], get["status_id"], get["severity_id"]), (1, 1, 1, 1))
        self.assertEqual(get["http_response"]["code"], 200)
        self.assertEqual(get["traffic"]["bytes_in"], 20000)  # from the destination, to the client
        self.assertEqual(get["firewall_rule"]["name"], "origin.test:%d" % self.https)
        self.assertEqual(get["http_request"]["url"]["url_string"], "https://origin.test:%d/bytes/20000" % self.https)
        self.assertEqual(get["src_endpoint"]["ip"], "127.0.0.1")
        self.assertEqual(get["metadata"]["product"]["name"], "sluice")
        self.assertLessEqual(get["start_time"], get["time"])
        post = one(decision="deny", method="POST")
        self.assertEqual((post["activity_id"], post["action_id"], post["disposition_id"], post["status_id"]), (6, 2, 2, 2))
        self.assertEqual(post["status_code"], "method_not_allowed")
        self.assertEqual(post["http_response"]["code"], 403)
        denied = one(reason="host_not_allowlisted")
        self.assertEqual((denied["activity_id"], denied["dst_endpoint"]["hostname"]), (1, "exfil.example.net"))
        failed = one(decision="error", reason="client_tls_rejected")
        self.assertEqual((failed["action_id"], failed["disposition_id"]), (1, 27))
        opening = one(reason="non_http_protocol")
        self.assertEqual((opening["class_uid"], opening["activity_id"], opening["type_uid"]), (4001, 4, 400104))


class OcsfFromExecAsRoot(base.ExecCase):
    def test_an_exec_runs_events(self):
        log = os.path.join(self.work, "audit.log")
        p = self.sx("--sandbox-profile", "network-read", "--access-log", log, "--access-log-format", "ocsf", "--",
                    "sh", "-c", "curl -sS -o /dev/null https://origin.test:8443/bytes/100 && "
                    "curl -s -o /dev/null -X POST https://origin.test:8443/post; exit 0")
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(log) as f:
            events = log_records(f)
        self.assertEqual(ocsf_problems(events), [])
        verdicts = sorted((e["http_request"]["http_method"], e["action_id"], e["unmapped"]["skill"]) for e in events
                          if e["class_uid"] == 4002 and e["activity_id"] != 1)
        self.assertEqual(verdicts, [("GET", 1, "default"), ("POST", 2, "default")])
        ids = {e["metadata"]["correlation_uid"] for e in events}
        self.assertEqual(len(ids), 1)  # one run, one command id
        p = self.sx("--access-log", log, "--access-log-format", "xml", "--", "true")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"--access-log-format", p.stderr)


class OcsfFromExecAsNobody(OcsfFromExecAsRoot):
    user = 65534


def panel_queries():
    with open(os.path.join(DEPLOY, "grafana", "sluice.json")) as f:
        dash = json.load(f)
    out = []
    for panel in dash["panels"]:
        for t in panel["targets"]:
            out.append((panel["title"], t["expr"]))
    return dash, out


class PrometheusDashboard(LoopbackOrigins):
    """A real Prometheus scrapes a real `sluice serve` under traffic and a node_exporter that reads an
    exec run's textfile; the rules in deploy/prometheus are loaded; every panel's query must return
    data."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        for path, pkg in ((PROMETHEUS, "prometheus"), (NODE_EXPORTER, "prometheus-node-exporter")):
            need(path, pkg)
        d = cls.tmp.name
        cls.agent_port = free_port()  # an agent listener, for the dashboard's agent panels
        # A decider that refuses what the allowlist leaves open, for the decider's panel.
        decider = os.path.join(d, "decider.py")
        with open(decider, "w") as f:
            f.write("import json, sys\nfor l in sys.stdin:\n    m = json.loads(l)\n"
                    "    print(json.dumps({'id': m['id'], 'result': False}), flush=True)\n")
        cls.gw = Gateway(cls.procs, d, serve_config(cls) + '\n[listen.agents.claude]\naddress = "127.0.0.1:%d"\n'
                         'uids = [0]\n[decider]\ncommand = "/usr/bin/python3 %s"\n' % (cls.agent_port, decider), "prom")
        wait_port(cls.agent_port, cls.gw.proc)
        collect = os.path.join(d, "textfile")
        os.makedirs(collect)
        work, home = os.path.join(d, "work"), os.path.join(d, "home")
        os.makedirs(work)
        os.makedirs(home)
        p = subprocess.run([SLUICE, "exec", "--metrics-textfile", collect, "--", "true"], cwd=work,
                           capture_output=True, env={"PATH": "/usr/bin:/bin", "HOME": home})
        assert p.returncode == 0, p.stderr
        node = free_port()
        cls.procs.start([NODE_EXPORTER, "--collector.disable-defaults", "--collector.textfile",
                         "--collector.textfile.directory=" + collect,
                         "--web.listen-address=127.0.0.1:%d" % node])
        wait_port(node)
        cls.prom = free_port()
        rules = [os.path.join(DEPLOY, "prometheus", n) for n in ("alerts.yml", "rules.yml")]
        config = os.path.join(d, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "rule_files:\n" + "".join("  - %s\n" % r for r in rules) +
                    "scrape_configs:\n"
                    "  - job_name: sluice\n    static_configs:\n      - targets: ['127.0.0.1:%d']\n"
                    "  - job_name: node\n    static_configs:\n      - targets: ['127.0.0.1:%d']\n"
                    % (cls.gw.admin, node))
        cls.config = config
        cls.procs.start([PROMETHEUS, "--config.file=" + config, "--storage.tsdb.path=" + os.path.join(d, "tsdb"),
                         "--web.listen-address=127.0.0.1:%d" % cls.prom])
        wait_port(cls.prom, timeout=30)
        # Traffic while Prometheus scrapes, so that rates have two samples and something to show.
        deadline = time.time() + 8
        agent = ["curl", "-s", "-o", "/dev/null", "--max-time", "10", "--proxy",
                 "http://127.0.0.1:%d" % cls.agent_port, "--cacert", cls.gw.ca,
                 "https://origin.test:%d/agent" % cls.https]
        while time.time() < deadline:
            traffic(cls, cls.gw)
            # A GitHub-shaped token in a query, for the scanner's panel (refused, never sent).
            curl(cls.gw, "https://origin.test:%d/q?token=ghp_Zq7Xw2Lm9Pk4Rt6Yv8Nb3Hc5Jd1Fg0Sa2Ue4" % cls.https)
            subprocess.run(agent)
            subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + agent)  # refused
            time.sleep(0.3)
        cls.wait_for('sluice:rule_bytes:rate5m{job="sluice"} > 0')
        cls.wait_for('sluice_exec_commands_total{job="node"}')

    @classmethod
    def query(cls, expr):
        url = "http://127.0.0.1:%d/api/v1/query?%s" % (cls.prom, urllib.parse.urlencode({"query": expr}))
        _, _, body = get(url)
        r = json.loads(body)
        assert r["status"] == "success", r
        return r["data"]["result"]

    @classmethod
    def wait_for(cls, expr, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if cls.query(expr):
                return
            time.sleep(0.5)
        raise AssertionError("Prometheus never returned data for %s" % expr)

    def test_every_panel_has_data(self):
        dash, queries = panel_queries()
        self.assertGreaterEqual(len(queries), 14)
        names = {v["name"] for v in dash["templating"]["list"]}
        self.assertEqual(names, {"datasource", "job"})
        for title, expr in queries:
            concrete = (expr.replace("$__rate_interval", "1m").replace("$__range", "1h")
                        .replace("$job", ".*"))
            self.assertNotIn("$", concrete, "unknown variable in panel %r" % title)
            with self.subTest(panel=title, expr=concrete):
                self.assertTrue(self.query(concrete), "panel %r has no data: %s" % (title, concrete))

    def test_dashboard_uses_the_datasource_variable(self):
        dash, _ = panel_queries()
        for panel in dash["panels"]:
            self.assertEqual(panel["datasource"]["uid"], "${datasource}", panel["title"])

    def test_alert_rules_load_and_their_unit_tests_pass(self):
        need(PROMTOOL, "prometheus")
        d = os.path.join(DEPLOY, "prometheus")
        for cmd in (["check", "config", self.config],
                    ["check", "rules", "alerts.yml", "rules.yml"],
                    ["test", "rules", "alerts_test.yml"]):
            p = subprocess.run([PROMTOOL] + cmd, cwd=d, capture_output=True)
            self.assertEqual(p.returncode, 0, p.stdout.decode() + p.stderr.decode())
        _, _, body = get("http://127.0.0.1:%d/api/v1/rules" % self.prom)
        groups = json.loads(body)["data"]["groups"]
        health = {r["name"]: r["health"] for g in groups for r in g["rules"]}
        self.assertGreaterEqual(len(health), 13)
        self.assertEqual({h for h in health.values()} - {"unknown"}, {"ok"}, health)


if __name__ == "__main__":
    unittest.main()
