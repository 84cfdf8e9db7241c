#!/usr/bin/python3
"""What budgets ([[limits.budget]]) and the access log's chain cost a `sluice serve` replica, and
what sharing the budgets in Redis ([limits.shared]) adds: keep-alive plain-HTTP proxy requests for
1 KiB from nginx (wrk), side by side in one run, against
  (a) off: no budget, the log's chain off;
  (b) on: a budget every request falls under (a rate far above the load, exchanges at once and
      bytes out and in that the run never spends), the log's chain on;
  (c) shared: as (b), the counters in a local redis-server ([limits.shared]).
Runs alternate (a, b, c, then c, b, a) so that the machine's swings hit all alike. Prints requests
per second, p50 and p99 latency and sluice's CPU per request, medians over the rounds, and the
ratios on/off and shared/on; the p50 difference shared - on is the shared budget's added latency.

usage (root): tests/bench/limits_bench.py [--rounds 3] [--seconds 10] [--connections 50]
Installs wrk and nginx-light with apt-get when missing."""
import argparse
import os
import signal
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "../integration"))
import fleet_clients  # noqa: E402
from fleet_clients import cpu_seconds, parse_wrk  # noqa: E402
from harness import free_port, wait_port  # noqa: E402
from exec_startup import default_binary as sluice_binary  # noqa: E402

BUDGET = """[[limits.budget]]
name = "bench"
hosts = ["origin.test"]
per = "run"
requests_per_second = 1000000
burst = 1000000
connections = 100000
bytes_out = 1000000000000
bytes_in = 1000000000000
"""


class Bench(fleet_clients.Bench):

    def start_redis(self):
        self.redis_port = free_port()
        self.redis = subprocess.Popen(["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
                                       "--save", "", "--appendonly", "no", "--dir", self.tmp],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.redis_port, self.redis)

    def config(self, kind):
        port = free_port()
        text = f"""profile = "network-read"
[listen]
proxy = "127.0.0.1:{port}"
[policy]
allow = ["origin.test:80"]
[upstream]
allow_addresses = ["{fleet_clients.ORIGIN}/32"]
[upstream.resolve]
"origin.test" = "{fleet_clients.ORIGIN}"
[limits]
pool_idle_per_host = {max(self.args.connections, 8)}
pool_idle_total = {max(2 * self.args.connections, 256)}
[log]
access_log = "{self.tmp}/access-{kind}.log"
chain = {"false" if kind == "off" else "true"}
"""
        if kind != "off":
            text += BUDGET
        if kind == "shared":
            text += f'[limits.shared]\nredis = "127.0.0.1:{self.redis_port}"\ntimeout = "2s"\n'
        path = os.path.join(self.tmp, "sluice-%s.toml" % kind)
        with open(path, "w") as f:
            f.write(text)
        return path, port

    def one_kind(self, kind):
        conf, port = self.config(kind)
        p = subprocess.Popen([self.args.sluice, "serve", "--config", conf], stdout=subprocess.DEVNULL,
                             stderr=open(os.path.join(self.tmp, "sluice.log"), "ab"))
        try:
            wait_port(port, p, timeout=20)
            lua = self.script([])
            wrk = ["wrk", "-t", "1", "-c", str(self.args.connections), "-d", "%ds" % self.args.seconds,
                   "--latency", "--timeout", "10s", "-s", lua, "http://127.0.0.1:%d" % port]
            subprocess.run(wrk[:5] + ["-d", "2s"] + wrk[7:], capture_output=True, check=True)  # warm-up
            cpu0 = cpu_seconds(p.pid)
            rcpu0 = cpu_seconds(self.redis.pid)
            out = subprocess.run(wrk, capture_output=True, text=True, check=True).stdout
            cpu = cpu_seconds(p.pid) - cpu0
            rcpu = cpu_seconds(self.redis.pid) - rcpu0
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait()
        rps, p50, p99, total, errors = parse_wrk(out)
        return {"rps": rps, "p50": p50, "p99": p99, "errors": errors, "cpu_us": cpu / max(total, 1) * 1e6,
                "redis_us": rcpu / max(total, 1) * 1e6 if kind == "shared" else 0.0}

    def run(self):
        self.setup_origin()
        self.start_redis()
        kinds = ("off", "on", "shared")
        results = {k: [] for k in kinds}
        for r in range(self.args.rounds):
            for kind in kinds if r % 2 == 0 else kinds[::-1]:
                res = self.one_kind(kind)
                results[kind].append(res)
                print("round %d %-7s %8.0f req/s  p50 %6.2f ms  p99 %7.2f ms  sluice %5.1f us/req  redis %5.1f us/req"
                      "  errors %d" % (r + 1, kind, res["rps"], res["p50"], res["p99"], res["cpu_us"], res["redis_us"],
                                       res["errors"]), flush=True)
        print()
        print("%d keep-alive connections, %d s per run, medians of %d rounds (sluice %s)" % (
            self.args.connections, self.args.seconds, self.args.rounds, self.args.sluice))
        print("| budgets and chain | req/s | p50 ms | p99 ms | sluice CPU us/req | redis CPU us/req | errors |")
        print("|---|---|---|---|---|---|---|")
        med = {}
        for kind in kinds:
            rs = results[kind]
            med[kind] = {k: statistics.median(x[k] for x in rs) for k in ("rps", "p50", "p99", "cpu_us", "redis_us")}
            m = med[kind]
            print("| %s | %.0f | %.2f | %.2f | %.1f | %.1f | %d |" % (kind, m["rps"], m["p50"], m["p99"], m["cpu_us"],
                                                                     m["redis_us"], sum(x["errors"] for x in rs)))
        print("ratio on/off: req/s %.3f" % (med["on"]["rps"] / med["off"]["rps"]))
        print("ratio shared/on: req/s %.3f; p50 added by Redis %.2f ms" % (
            med["shared"]["rps"] / med["on"]["rps"], med["shared"]["p50"] - med["on"]["p50"]))

    def close(self):
        if getattr(self, "redis", None):
            self.redis.kill()
            self.redis.wait()
        super().close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--sluice", default=None, help="the binary (default: build/release, else build/default)")
    args = ap.parse_args()
    args.wrk_threads = 1
    args.sluice = args.sluice or sluice_binary()
    args.sluice_threads = 0
    fleet_clients.install()
    b = Bench(args)
    try:
        b.run()
    finally:
        b.close()


if __name__ == "__main__":
    main()
