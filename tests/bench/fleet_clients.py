#!/usr/bin/python3
"""What client identity costs a `sluice serve` replica: 1,000 concurrent keep-alive connections
(wrk, two threads) sending plain-HTTP proxy requests for 1 KiB from nginx, against one replica
(a) without [clients] and (b) with 1,000 clients in [clients]; every request carries
`Proxy-Authorization: Basic NAME:TOKEN` of one of them, in turn, in both (a replica without
[clients] ignores it), so that (b) differs only in identifying every request afresh (a SHA-256, a
constant-time compare, the role's policy, the client label and log fields). Runs alternate a, b, a, b... in one
process tree, so that the machine's swings hit both alike. Prints requests per second, p50 and p99
latency (wrk's), the replica's peak RSS and CPU microseconds per request, medians over the rounds.

The origin is nginx in a network namespace at 198.18.0.2 (tests/integration/netns.py); sluice and
wrk run on this side. usage (root): tests/bench/fleet_clients.py [--rounds 3] [--seconds 10]
[--connections 1000] [--threads 1]. Installs wrk and nginx-light with apt-get when missing."""
import argparse
import base64
import hashlib
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../integration"))
from harness import free_port, wait_port  # noqa: E402
from netns import TestHost  # noqa: E402
from exec_startup import default_binary as sluice_binary  # noqa: E402

ORIGIN = "198.18.0.2"


def install():
    missing = [p for p in ("wrk", "nginx-light") if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode]
    if missing:
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends"] + missing, check=True,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def parse_wrk(out):
    """Requests/sec, p50 and p99 in ms, and the error count from `wrk --latency`."""
    def ms(text):
        value, unit = re.match(r"([\d.]+)(us|ms|s)", text).groups()
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    # The distribution's own lines ("     99%    4.31ms"), not a stdev column ending in "99%".
    p50 = ms(re.search(r"^\s*50%\s+(\S+)", out, re.M).group(1))
    p99 = ms(re.search(r"^\s*99%\s+(\S+)", out, re.M).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    errors = 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        errors += sum(int(x) for x in m.groups())
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m:
        errors += int(m.group(1))
    return rps, p50, p99, total, errors


class Bench:
    def __init__(self, args):
        self.args = args
        self.tmp = tempfile.mkdtemp(prefix="sluice-fleet-bench-")
        os.chmod(self.tmp, 0o755)
        self.host = None
        self.procs = []

    def setup_origin(self):
        www = os.path.join(self.tmp, "www")
        os.makedirs(www)
        with open(os.path.join(www, "1k.bin"), "wb") as f:
            f.write(os.urandom(1024))
        subprocess.run(["chmod", "-R", "a+rX", self.tmp], check=True)
        conf = os.path.join(self.tmp, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"""worker_processes 1;
pid {self.tmp}/nginx.pid;
error_log {self.tmp}/nginx-error.log;
daemon off;
worker_rlimit_nofile 20000;
events {{ worker_connections 20000; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  server {{ listen {ORIGIN}:80 backlog=4096; root {www}; }}
}}
""")
        self.host = TestHost("sluice-fleet-bench")
        self.procs.append(self.host.start("nginx", "-c", conf))
        deadline = time.time() + 10
        while subprocess.run(["curl", "-s", "-o", "/dev/null", "http://%s/1k.bin" % ORIGIN]).returncode:
            if time.time() > deadline:
                raise SystemExit("nginx did not start in the test host")
            time.sleep(0.1)

    def config(self, clients):
        port = free_port()
        text = f"""profile = "network-read"
[listen]
proxy = "127.0.0.1:{port}"
[policy]
allow = ["origin.test:80"]
[upstream]
allow_addresses = ["{ORIGIN}/32"]
[upstream.resolve]
"origin.test" = "{ORIGIN}"
[limits]
max_connections = 50000
# Idle origin connections kept for reuse: as many as there are clients, else most requests dial
# nginx afresh and the run measures TIME_WAIT (the default, 8 per host, is for one machine).
pool_idle_per_host = {max(self.args.connections, 8)}
pool_idle_total = {max(2 * self.args.connections, 256)}
[log]
access_log = "{self.tmp}/access-{clients}.log"
"""
        tokens = []
        if clients:
            text += "[roles.bench]\n"
            for i in range(clients):
                name, token = "agent-%04d" % i, "bench-token-%04d-%s" % (i, "x" * 24)
                tokens.append((name, token))
                text += '[clients.%s]\ntoken_sha256 = "%s"\nrole = "bench"\n' % (
                    name, hashlib.sha256(token.encode()).hexdigest())
        path = os.path.join(self.tmp, "sluice-%d.toml" % clients)
        with open(path, "w") as f:
            f.write(text)
        return path, port, tokens

    def script(self, tokens):
        """wrk's Lua: absolute-form requests for the origin, each with the next client's credentials."""
        path = os.path.join(self.tmp, "wrk-%d.lua" % len(tokens))
        auths = ['"Basic %s"' % base64.b64encode(("%s:%s" % t).encode()).decode() for t in tokens]
        with open(path, "w") as f:
            f.write('local auths = {%s}\n' % ", ".join(auths))
            f.write('local n = 0\n')
            f.write('request = function()\n')
            f.write('  n = n + 1\n')
            f.write('  local h = { ["Host"] = "origin.test" }\n')
            f.write('  if #auths > 0 then h["Proxy-Authorization"] = auths[(n % #auths) + 1] end\n')
            f.write('  return wrk.format("GET", "http://origin.test/1k.bin", h)\n')
            f.write('end\n')
        return path

    def one(self, clients):
        conf, port, tokens = self.config(clients)
        cmd = [sluice_binary(), "serve", "--config", conf]
        if self.args.sluice_threads:
            cmd += ["--threads", str(self.args.sluice_threads)]
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.tmp, "sluice.log"), "ab"))
        try:
            wait_port(port, p, timeout=20)
            # Both runs send the same bytes (the header, too, which a replica without [clients]
            # ignores): the difference is what identifying costs the replica, not wrk's work.
            lua = self.script(tokens or self.config(self.args.connections)[2])
            wrk = ["wrk", "-t", str(self.args.wrk_threads), "-c", str(self.args.connections), "-d",
                   "%ds" % self.args.seconds, "--latency", "--timeout", "10s", "-s", lua, "http://127.0.0.1:%d" % port]
            subprocess.run(wrk + ["-d", "2s"], capture_output=True, check=True)  # warm-up: connections, pages
            cpu0 = cpu_seconds(p.pid)
            out = subprocess.run(wrk, capture_output=True, text=True, check=True).stdout
            cpu = cpu_seconds(p.pid) - cpu0
            rss = peak_rss_mib(p.pid)
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait()
        rps, p50, p99, total, errors = parse_wrk(out)
        if errors:  # say why, from the access log's first refusal
            import json
            with open(os.path.join(self.tmp, "access-%d.log" % clients)) as f:
                for line in f:
                    rec = json.loads(line)
                    if rec.get("type") != "checkpoint" and rec["decision"] != "allow":
                        print("  %d errors; the first refusal: %s %s" % (errors, rec["reason"], rec["status"]))
                        break
        return {"rps": rps, "p50": p50, "p99": p99, "errors": errors, "rss": rss,
                "cpu_us": cpu / max(total, 1) * 1e6}

    def run(self):
        self.setup_origin()
        results = {"none": [], "tokens": []}
        for r in range(self.args.rounds):
            order = (("none", 0), ("tokens", self.args.connections))
            for kind, clients in order if r % 2 == 0 else order[::-1]:  # neither always goes first
                res = self.one(clients)
                results[kind].append(res)
                print("round %d %-6s %8.0f req/s  p50 %6.2f ms  p99 %7.2f ms  peak RSS %6.1f MiB  CPU %5.1f us/req"
                      "  errors %d" % (r + 1, kind, res["rps"], res["p50"], res["p99"], res["rss"], res["cpu_us"],
                                       res["errors"]), flush=True)
        print()
        print("%d keep-alive connections, %d s per run, medians of %d rounds (sluice %s)" % (
            self.args.connections, self.args.seconds, self.args.rounds, sluice_binary()))
        print("| [clients] | req/s | p50 ms | p99 ms | peak RSS MiB | CPU us/req | errors |")
        print("|---|---|---|---|---|---|---|")
        for kind, label in (("none", "none"), ("tokens", "%d, Basic per request" % self.args.connections)):
            rs = results[kind]
            med = {k: statistics.median(x[k] for x in rs) for k in ("rps", "p50", "p99", "rss", "cpu_us")}
            print("| %s | %.0f | %.2f | %.2f | %.1f | %.1f | %d |" % (label, med["rps"], med["p50"], med["p99"],
                                                                     med["rss"], med["cpu_us"],
                                                                     sum(x["errors"] for x in rs)))
        a, b = results["none"], results["tokens"]
        print("ratio (with/without): req/s %.3f, CPU per request %.3f" % (
            statistics.median(x["rps"] for x in b) / statistics.median(x["rps"] for x in a),
            statistics.median(x["cpu_us"] for x in b) / statistics.median(x["cpu_us"] for x in a)))

    def single_listener_config(self, kind, allow, log_extra="", extra=""):
        """The config of one run of the single-listener benches: a proxy listener, the origin pinned,
        idle origin connections for every client, the access log; `allow` the [policy] allow list's
        entries, `log_extra` more [log] keys, `extra` more tables. Returns its path and port."""
        port = free_port()
        text = f"""profile = "network-read"
[listen]
proxy = "127.0.0.1:{port}"
[policy]
allow = [{allow}]
[upstream]
allow_addresses = ["{ORIGIN}/32"]
[upstream.resolve]
"origin.test" = "{ORIGIN}"
[limits]
pool_idle_per_host = {max(self.args.connections, 8)}
pool_idle_total = {max(2 * self.args.connections, 256)}
[log]
access_log = "{self.tmp}/access-{kind}.log"
""" + log_extra + extra
        path = os.path.join(self.tmp, "sluice-%s.toml" % kind)
        with open(path, "w") as f:
            f.write(text)
        return path, port

    def serve_wrk(self, conf, port, beside=()):
        """One side-by-side run of the single-listener benches (decider_bench, limits_bench): `sluice
        serve --config CONF` on PORT, wrk's warm-up, then wrk with its CPU measured, sluice's and
        that of its children and the `beside` pids (a decider, Redis) per request."""
        p = subprocess.Popen([self.args.sluice, "serve", "--config", conf], stdout=subprocess.DEVNULL,
                             stderr=open(os.path.join(self.tmp, "sluice.log"), "ab"))
        try:
            wait_port(port, p, timeout=20)
            lua = self.script([])
            wrk = ["wrk", "-t", "1", "-c", str(self.args.connections), "-d", "%ds" % self.args.seconds,
                   "--latency", "--timeout", "10s", "-s", lua, "http://127.0.0.1:%d" % port]
            subprocess.run(wrk[:5] + ["-d", "2s"] + wrk[7:], capture_output=True, check=True)  # warm-up
            children = [int(c) for c in subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True,
                                                       text=True).stdout.split()]
            others = children + list(beside)
            cpu0 = cpu_seconds(p.pid)
            ocpu0 = sum(cpu_seconds(c) for c in others)
            perf = self.perf_start(p.pid, os.path.basename(conf).rsplit(".", 1)[0])
            out = subprocess.run(wrk, capture_output=True, text=True, check=True).stdout
            self.perf_stop(perf)
            cpu = cpu_seconds(p.pid) - cpu0
            ocpu = sum(cpu_seconds(c) for c in others) - ocpu0
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait()
        rps, p50, p99, total, errors = parse_wrk(out)
        return {"rps": rps, "p50": p50, "p99": p99, "errors": errors, "cpu_us": cpu / max(total, 1) * 1e6,
                "beside_us": ocpu / max(total, 1) * 1e6}

    def perf_start(self, pid, name):
        """With --perf DIR: `perf record` of `pid` into DIR/perf-NAME.data until perf_stop (where
        sluice spends a measured run, for `perf report`; perf's own cost shows in the numbers)."""
        if not getattr(self.args, "perf", None):
            return None
        os.makedirs(self.args.perf, exist_ok=True)
        return subprocess.Popen(["perf", "record", "-q", "-F", "499", "-g", "-p", str(pid), "-o",
                                 os.path.join(self.args.perf, "perf-%s.data" % name)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def perf_stop(self, perf):
        if perf:
            perf.send_signal(signal.SIGINT)
            perf.wait()

    def side_by_side(self, kinds, title, beside_name):
        """Runs one_kind(kind) for each kind, alternating the order from round to round so the
        machine's swings hit all alike; prints each run and the medians' table. Returns the medians."""
        results = {k: [] for k in kinds}
        for r in range(self.args.rounds):
            for kind in kinds if r % 2 == 0 else kinds[::-1]:
                res = self.one_kind(kind)
                results[kind].append(res)
                print("round %d %-8s %8.0f req/s  p50 %6.2f ms  p99 %7.2f ms  sluice %5.1f us/req  %s %5.1f us/req"
                      "  errors %d  %s" % (r + 1, kind, res["rps"], res["p50"], res["p99"], res["cpu_us"], beside_name,
                                           res["beside_us"], res["errors"], res.get("note", "")), flush=True)
        print()
        print("%d keep-alive connections, %d s per run, medians of %d rounds (sluice %s)" % (
            self.args.connections, self.args.seconds, self.args.rounds, self.args.sluice))
        print("| %s | req/s | p50 ms | p99 ms | sluice CPU us/req | %s CPU us/req | errors |" % (title, beside_name))
        print("|---|---|---|---|---|---|---|")
        med = {}
        for kind in kinds:
            rs = results[kind]
            med[kind] = {k: statistics.median(x[k] for x in rs) for k in ("rps", "p50", "p99", "cpu_us", "beside_us")}
            m = med[kind]
            print("| %s | %.0f | %.2f | %.2f | %.1f | %.1f | %d |" % (kind, m["rps"], m["p50"], m["p99"], m["cpu_us"],
                                                                     m["beside_us"], sum(x["errors"] for x in rs)))
        return med

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if self.host:
            self.host.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def single_listener_main(bench_class, doc, add_arguments=None):
    """main() of decider_bench, limits_bench and scan_gateway_bench: one listener, 50 connections,
    one wrk thread; `add_arguments(parser)` adds a bench's own options."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--sluice", default=None, help="the binary (default: build/release, else build/default)")
    ap.add_argument("--perf", metavar="DIR", help="record sluice's measured runs with perf record into DIR "
                    "(perf-sluice-KIND.data; perf's own cost shows in the numbers)")
    if add_arguments:
        add_arguments(ap)
    args = ap.parse_args()
    args.wrk_threads = 1
    from exec_startup import default_binary
    args.sluice = args.sluice or default_binary()
    args.sluice_threads = 0
    install()
    b = bench_class(args)
    try:
        b.run()
    finally:
        b.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--wrk-threads", type=int, default=1)
    ap.add_argument("--sluice-threads", type=int, default=1)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the origin lives in a network namespace")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 4 * args.connections + 1024  # wrk's sockets, and sluice's two per connection
    if hard != resource.RLIM_INFINITY and hard < want:
        raise SystemExit("the descriptor limit (ulimit -Hn %d) is below the %d this run needs" % (hard, want))
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    install()
    b = Bench(args)
    try:
        b.run()
    finally:
        b.close()


if __name__ == "__main__":
    main()
