#!/usr/bin/python3
"""What an external decider ([decider]) costs a `sluice serve` replica: keep-alive plain-HTTP proxy
requests for 1 KiB from nginx (wrk), side by side in one run, against
  (a) none: the host on the allowlist, no decider;
  (b) program: the host not on the allowlist, a decider program (python, one JSON line each way)
      asked about every request, answering allow without letting it be cached;
  (c) cached: the same program answering allow with cache {seconds: 600, keys: [host]}, so that
      after the first question the answers come from sluice's cache.
Runs alternate (a, b, c, then c, b, a) so that the machine's swings hit all alike. Prints requests
per second, p50 and p99 latency, CPU microseconds per request of sluice (the decider's own CPU
beside it for (b)), medians over the rounds.

usage (root): tests/bench/decider_bench.py [--rounds 3] [--seconds 10] [--connections 50]
Installs wrk and nginx-light with apt-get when missing."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "../integration"))
import fleet_clients  # noqa: E402

DECIDER = r"""
import json, sys
cache = sys.argv[1] == "cached"
for line in sys.stdin:
    m = json.loads(line)
    r = {"decision": "allow"}
    if cache:
        r["cache"] = {"seconds": 600, "keys": ["host"]}
    sys.stdout.write(json.dumps({"id": m["id"], "result": r}) + "\n")
    sys.stdout.flush()
"""


class Bench(fleet_clients.Bench):

    def decider_config(self, kind):
        program = os.path.join(self.tmp, "decider.py")
        with open(program, "w") as f:
            f.write(DECIDER)
        extra = ""
        if kind != "none":
            extra = f'[decider]\ncommand = "/usr/bin/python3 {program} {kind}"\nmax_in_flight = 4096\n'
        return self.single_listener_config(kind, '"origin.test:80"' if kind == "none" else '"nothing.test"',
                                           extra=extra)

    def one_kind(self, kind):
        conf, port = self.decider_config(kind)
        return self.serve_wrk(conf, port)  # the decider program is sluice's child: counted beside

    def run(self):
        self.setup_origin()
        med = self.side_by_side(("none", "program", "cached"), "decider", "decider")
        for kind in ("program", "cached"):
            print("ratio %s/none: req/s %.3f" % (kind, med[kind]["rps"] / med["none"]["rps"]))


def main():
    fleet_clients.single_listener_main(Bench, __doc__)


if __name__ == "__main__":
    main()
