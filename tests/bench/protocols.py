#!/usr/bin/python3
"""HTTP/2 and WebSocket through sluice against the same origin directly, side by side in one run
(issue 37's benchmarks). Prints a table of medians and each row's ratio to direct.

- h2load (Debian nghttp2-client), multiplexed (`-c 10 -m 10`), against nginx (h2 and HTTP/1.1 over
  TLS) on a test host at 198.18.0.2: direct, and inside `sluice exec --sandbox-profile publish`
  (h2load knows no proxy; the capture takes its connections, and sluice speaks h2 to it and to
  nginx, which offers h2).
- h2load the same way through nghttpx (Debian nghttp2-proxy, one worker, TLS and h2 on both legs,
  an access log as sluice exec writes one): the reference for h2 (issue #56, item 2), with each
  proxy's CPU per request (h2load runs under /usr/bin/time, so that in the row through sluice exec
  h2load's own CPU is told apart from sluice's).
- the same three rows with `-c 1 -m 100`, and with `h2load --h1` (HTTP/1.1 over TLS to nginx, to
  sluice and to nghttpx; 10 requests pipelined on each of 10 connections): both client protocols
  wherever sluice terminates (`--clients`).
- WebSocket echo, both ends in C++ (tests/bench/ws_echo_bench.cpp, Beast: neither end is the
  bottleneck, as the python client was): 4 connections, each sending 100-byte messages with 16
  awaiting their echo, against its echo origin on the test host: direct, and through `sluice serve`
  (publish) by CONNECT, with sluice's CPU per message.

usage (root): tests/bench/protocols.py [--repeat 3] [--requests 20000] [--messages 100000]
                  [--only h2load|websocket] [--clients h2,h2:1x100,h1] [--binary PATH] [--ws-bench PATH] [--perf FILE]"""
import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../integration"))
from harness import Gateway, Processes, make_ca, make_leaf, run, wait_port  # noqa: E402
from netns import TestHost  # noqa: E402
from compare import cpu_times  # noqa: E402

ORIGIN = "198.18.0.2"
NAME = "origin.test"
HOSTS_MARK = "# sluice-bench-protocols"
PYTHON = "/usr/bin/python3"


NGHTTPX_PORT = 3443


def start_nghttpx(procs, d, pem, key, ca):
    """nghttpx (Debian nghttp2-proxy), the reference for h2 on both legs: TLS and h2 to h2load on
    127.0.0.1, TLS (verified against the origin's CA) and h2 to nginx, one worker; an access log
    line per request, as sluice exec writes one (--access-log)."""
    if not shutil.which("nghttpx"):
        run(["apt-get", "install", "-y", "-qq", "nghttp2-proxy"])
    p = procs.start(["nghttpx", "-f", "127.0.0.1,%d" % NGHTTPX_PORT,
                          "-b", "%s,443;;tls;proto=h2;sni=%s" % (ORIGIN, NAME), "--cacert", ca, "--workers", "1",
                          "--no-ocsp", "--errorlog-file", os.path.join(d, "nghttpx.log"),
                          "--accesslog-file", os.path.join(d, "nghttpx-access.log"), key, pem])
    wait_port(NGHTTPX_PORT, p)
    return p


def h2load_flags(client):
    """h2load's options for one entry of --clients: PROTOCOL[:CxM], h2 or h1 (--h1: HTTP/1.1 over
    TLS, ALPN http/1.1, the M requests of a connection pipelined), C connections, M requests in
    flight on each (10x10 when not given)."""
    proto, _, setting = client.partition(":")
    if proto not in ("h2", "h1") or not re.fullmatch(r"(\d+x\d+)?", setting):
        raise SystemExit("--clients: %r is not PROTOCOL[:CxM] (h2 or h1, say h2:1x100)" % client)
    c, m = (setting or "10x10").split("x")
    return (["--h1"] if proto == "h1" else []) + ["-c", c, "-m", m]


NGINX_CONF = """worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/nginx-error.log;
daemon off;
events {{ worker_connections 20000; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  server {{
    listen {origin}:443 ssl http2;
    ssl_certificate {pem};
    ssl_certificate_key {key};
    root {www};
  }}
}}
"""


def cpu_seconds(pid):
    """CPU seconds of `pid` and every process below it (nginx's and nghttpx's master and worker)."""
    return sum(cpu_times(pid))


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def h2load_rows(client):
    """The three rows of one --clients entry: direct, through sluice exec, through nghttpx."""
    flags = h2load_flags(client)
    tag = " ".join(["h2load"] + [f for f in flags if f == "--h1"] +
                   ([] if flags[-4:] == ["-c", "10", "-m", "10"] else flags[-4:]))
    return tag + " direct", tag + " through sluice exec", tag + " through nghttpx"


class Rig:
    """The origin (nginx and the WebSocket echo server on a test host), sluice serve for the
    WebSocket rows, sluice exec's policy for the h2load rows, and nghttpx; the rows' results."""

    def __init__(self, args, d, procs):
        self.args, self.d, self.procs = args, d, procs
        self.sluice = os.path.abspath(args.binary)
        self.ws_bench = os.path.abspath(args.ws_bench or os.path.join(os.path.dirname(self.sluice), "tests",
                                                                      "ws_echo_bench"))
        self.host = None
        self.clients = args.clients.split(",") if args.only != "websocket" else []
        self.cpu = {(c, r): [] for c in self.clients for r in ("direct", "sluice", "nghttpx")}
        self.ws_cpu = {False: [], True: []}
        self.rows = {}

    def set_up(self):
        d = self.d
        self.ca = make_ca(d, "origin-ca")  # not "bench-ca": the gateway named "bench" writes its own CA there
        self.pem, self.key = make_leaf(d, self.ca, NAME, "DNS:" + NAME)
        www = os.path.join(d, "www")
        os.makedirs(www)
        with open(os.path.join(www, "1k"), "wb") as f:
            f.write(b"x" * 1024)
        subprocess.run(["chmod", "-R", "a+rX", d], check=True)
        conf = os.path.join(d, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF.format(d=d, origin=ORIGIN, pem=self.pem, key=self.key, www=www))
        with open("/etc/hosts", "a") as f:
            f.write("%s %s %s\n" % (ORIGIN, NAME, HOSTS_MARK))
        self.host = TestHost("sluice-bench-proto")
        self.nginx = self.host.start("nginx", "-c", conf)  # `ip netns exec` execs: this is nginx's master
        p = self.host.start(self.ws_bench, "server", ORIGIN, "9443", self.pem, self.key)
        assert p.stdout.readline().strip() == b"ready"
        time.sleep(0.5)
        upstream = f"""{self.args.extra_config}
[tls]
upstream_ca_bundle = "{self.ca[0]}"
system_trust = false
[upstream]
allow_addresses = ["198.18.0.0/15"]
[upstream.resolve]
"{NAME}" = "{ORIGIN}"
"""
        policy = os.path.join(d, "policy.toml")
        with open(policy, "w") as f:
            f.write('[skills.default]\ndefault_profile = "publish"\nallow_domains = ["%s", "%s:9443"]\n'
                    % (NAME, NAME) + upstream)
        os.environ["SLUICE_BIN"] = self.sluice
        import harness
        harness.SLUICE = self.sluice
        self.gw = Gateway(self.procs, d, 'profile = "publish"\n[policy]\nallow = ["%s:9443"]\n' % NAME + upstream,
                          "bench")
        self.exec_log = os.path.join(d, "exec-access.log")
        self.exec_prefix = [self.sluice, "exec", "--policy", policy, "--sandbox-profile", "publish",
                            "--confirm-external-side-effects", "--access-log", self.exec_log, "--"]
        if self.clients:
            self.nghttpx = start_nghttpx(self.procs, d, self.pem, self.key, self.ca[0])

    def h2load(self, prefix, row, url="https://%s/1k" % NAME, proxy_pid=None, client="h2"):
        n = self.args.requests
        c0, n0 = children_cpu(), cpu_seconds(self.nginx.pid)
        p0 = cpu_seconds(proxy_pid) if proxy_pid else 0
        # /usr/bin/time says what h2load itself spent (inside the sandbox too): the rest of what this
        # process's children spent in the row through sluice is sluice exec's own
        run = subprocess.run(prefix + ["/usr/bin/time", "-f", "h2load-cpu %U %S", "h2load"] + h2load_flags(client) +
                             ["-n", str(n), url], capture_output=True, text=True)
        out = run.stdout
        t = re.search(r"h2load-cpu ([\d.]+) ([\d.]+)", run.stderr)
        client_cpu = float(t.group(1)) + float(t.group(2)) if t else 0.0
        # CPU per request: h2load, sluice exec (what the children spent less h2load), nginx, and a
        # proxy of its own (nghttpx). On a machine of few cores the rows share, this is what bounds
        # the ratio.
        self.cpu[(client, row)].append((client_cpu * 1e6 / n, (children_cpu() - c0 - client_cpu) * 1e6 / n,
                                        (cpu_seconds(self.nginx.pid) - n0) * 1e6 / n,
                                        ((cpu_seconds(proxy_pid) - p0) * 1e6 / n) if proxy_pid else 0.0))
        m = re.search(r"finished in ([\d.]+)(m?s), ([\d.]+) req/s", out)
        ok = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded", out)
        if not m or not ok or int(ok.group(1)) != n:
            errors = open(os.path.join(self.d, "nginx-error.log")).read()[-1500:]
            if prefix and os.path.exists(self.exec_log):
                errors += "\nsluice: " + open(self.exec_log).read()[-600:]
            raise RuntimeError("h2load %s failed (exit %d):\n%s\n%s\nnginx: %s" % (
                " ".join(prefix[:2]) or "direct", run.returncode, out[-1500:], run.stderr[-1500:], errors))
        return float(m.group(3))

    def ws(self, through):
        gw, args = self.gw, self.args
        cmd = [self.ws_bench, "client", "wss://%s:9443/" % NAME, "--messages", str(args.messages),
               "--connections", "4", "--window", "16", "--size", "100"]
        cmd += ["--ca", gw.ca, "--proxy", "127.0.0.1:%d" % gw.port] if through else ["--ca", self.ca[0]]
        s0 = cpu_seconds(gw.proc.pid)
        rec = None
        if through and args.perf:  # the last round's profile is kept
            rec = subprocess.Popen(["perf", "record", "-q", "-g", "-p", str(gw.proc.pid), "-o", args.perf],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.3)
        out = subprocess.run(cmd, capture_output=True, text=True)
        if rec:
            rec.send_signal(2)
            rec.wait(60)
        if out.returncode != 0:
            raise RuntimeError("websocket client failed:\n" + out.stderr[-2000:])
        r = json.loads(out.stdout)
        self.ws_cpu[through].append((r["client_cpu"] * 1e6 / r["messages"],
                                     (cpu_seconds(gw.proc.pid) - s0) * 1e6 / r["messages"]))
        return r["rate"]

    def run_rounds(self):
        rows, args = self.rows, self.args
        for c in self.clients:
            rows.update({name: [] for name in h2load_rows(c)})
        if args.only != "h2load":
            rows.update({"websocket direct": [], "websocket through sluice serve": []})
        for _ in range(args.repeat):  # rows in turn each round: the machine's swings hit all alike
            for c in self.clients:
                direct, through, peer = h2load_rows(c)
                rows[direct].append(self.h2load([], "direct", client=c))
                # -N: no hard link to the binary in perf's build-id cache (~/.debug), which the next
                # sluice exec here would refuse as a workspace file linked to outside the workspace
                perf = ["perf", "record", "-q", "-N", "-g", "-o", "%s.h2load-%s" % (args.perf, c.replace(":", "-")),
                        "--"] if args.perf else []
                rows[through].append(self.h2load(perf + self.exec_prefix, "sluice", client=c))
                rows[peer].append(self.h2load([], "nghttpx", "https://127.0.0.1:%d/1k" % NGHTTPX_PORT,
                                              self.nghttpx.pid, client=c))
            if args.only != "h2load":
                rows["websocket direct"].append(self.ws(False))
                rows["websocket through sluice serve"].append(self.ws(True))

    def report(self):
        rows = self.rows
        print("| workload | median per second | runs | ratio to direct |")
        print("|---|---|---|---|")
        for name, values in rows.items():
            med = statistics.median(values)
            base = statistics.median(rows[name.split(" through ")[0].replace(" direct", "") + " direct"])
            print("| %s | %.0f | %s | %.2f |" % (name, med, ", ".join("%.0f" % v for v in values), med / base))
        if self.ws_cpu[True]:
            ws = self.ws_cpu
            print("\nCPU per WebSocket message, in microseconds (medians): the client %.1f direct, %.1f through "
                  "sluice; sluice serve %.1f" % (statistics.median(c for c, _ in ws[False]),
                                                 statistics.median(c for c, _ in ws[True]),
                                                 statistics.median(g for _, g in ws[True])))
        for c in self.clients:
            med = {r: [statistics.median(x[i] for x in self.cpu[(c, r)]) for i in range(4)]
                   for r in ("direct", "sluice", "nghttpx")}
            direct, through, peer = h2load_rows(c)
            print("\nCPU per %s request, in microseconds (medians; this machine has %d cores):" % (
                direct.replace(" direct", ""), os.cpu_count()))
            print("| row | h2load | the proxy | nginx |\n|---|---|---|---|")
            print("| direct | %.1f | | %.1f |" % (med["direct"][0], med["direct"][2]))
            print("| through sluice exec | %.1f | %.1f | %.1f |" % tuple(med["sluice"][:3]))
            print("| through nghttpx | %.1f | %.1f | %.1f |" % (med["nghttpx"][0], med["nghttpx"][3],
                                                              med["nghttpx"][2]))
            print("| sluice against nghttpx: rate %.2f, CPU per request %.2f | | | |" % (
                statistics.median(rows[through]) / statistics.median(rows[peer]),
                med["sluice"][1] / med["nghttpx"][3]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--messages", type=int, default=100000)
    ap.add_argument("--only", choices=["h2load", "websocket"], help="run one workload's rows")
    ap.add_argument("--clients", default="h2,h2:1x100,h1", help="h2load's settings, each a set of rows: "
                    "PROTOCOL[:CxM], h2 or h1 (--h1: HTTP/1.1 over TLS, pipelined), C connections with M "
                    "requests in flight on each (default 10x10)")
    ap.add_argument("--perf", metavar="FILE", help="perf record -g sluice serve in the WebSocket row into FILE, "
                    "sluice exec in the h2load rows into FILE.h2load-SETTING")
    ap.add_argument("--ws-bench", help="the ws_echo_bench binary (default: beside the sluice binary's build)")
    ap.add_argument("--extra-config", default="", help="TOML put before the [tls] section of both policies")
    ap.add_argument("--binary", default=os.path.join(HERE, "../../build/default/sluice"))
    args = ap.parse_args()
    for c in args.clients.split(","):
        h2load_flags(c)  # a malformed entry stops here, before anything starts
    d = tempfile.mkdtemp(prefix="sluice-bench-proto-")
    os.chmod(d, 0o755)
    procs = Processes()
    rig = Rig(args, d, procs)
    if args.only != "h2load" and not os.path.exists(rig.ws_bench):
        raise SystemExit("%s missing: TARGET=ws_echo_bench scripts/build.sh" % rig.ws_bench)
    for tool, pkg in (("h2load", "nghttp2-client"), ("nginx", "nginx-light")):
        if not shutil.which(tool):
            run(["apt-get", "install", "-y", "-qq", pkg])
    try:
        rig.set_up()
        rig.run_rounds()
        rig.report()
    finally:
        procs.stop_all()
        if rig.host:
            rig.host.close()
        with open("/etc/hosts") as f:
            lines = [l for l in f if HOSTS_MARK not in l]
        with open("/etc/hosts", "w") as f:
            f.writelines(lines)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
