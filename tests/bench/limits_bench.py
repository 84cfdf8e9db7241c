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
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "../integration"))
import fleet_clients  # noqa: E402
from harness import free_port, wait_port  # noqa: E402

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
        extra = BUDGET if kind != "off" else ""
        if kind == "shared":
            extra += f'[limits.shared]\nredis = "127.0.0.1:{self.redis_port}"\ntimeout = "2s"\n'
        return self.single_listener_config(kind, '"origin.test:80"',
                                           'chain = %s\n' % ("false" if kind == "off" else "true"), extra)

    def one_kind(self, kind):
        conf, port = self.config(kind)
        return self.serve_wrk(conf, port, beside=[self.redis.pid] if kind == "shared" else [])

    def run(self):
        self.setup_origin()
        self.start_redis()
        med = self.side_by_side(("off", "on", "shared"), "budgets and chain", "redis")
        print("ratio on/off: req/s %.3f" % (med["on"]["rps"] / med["off"]["rps"]))
        print("ratio shared/on: req/s %.3f; p50 added by Redis %.2f ms" % (
            med["shared"]["rps"] / med["on"]["rps"], med["shared"]["p50"] - med["on"]["p50"]))

    def close(self):
        if getattr(self, "redis", None):
            self.redis.kill()
            self.redis.wait()
        super().close()


def main():
    fleet_clients.single_listener_main(Bench, __doc__)


if __name__ == "__main__":
    main()
