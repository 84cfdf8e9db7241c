#!/usr/bin/python3
"""Instructions a keep-alive request costs `sluice serve`, counted by callgrind (which counts
instructions, not seconds: the same for the same binary and inputs whatever else the machine does,
so two binaries compare exactly). Each binary serves the same plain-HTTP proxy requests for 1 KiB
from the test origin on loopback (tests/integration/origin.py) over one keep-alive connection, with
the access log on (a file); the counters are zeroed after a warm-up and dumped after the measured
requests, so start-up and the warm-up's allocations are left out. Prints instructions per request
for each binary, and for two binaries the second's ratio to the first.

usage: tests/bench/request_instructions.py [--requests 400] [--warmup 100] BINARY [BINARY...]
(callgrind from valgrind, on every machine of this kind)."""
import argparse
import glob
import http.client
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../integration"))
from harness import free_port, wait_port  # noqa: E402


def requests(port, origin_port, n):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for _ in range(n):
        c.request("GET", "http://origin.test:%d/bytes/1024" % origin_port)
        r = c.getresponse()
        body = r.read()
        if r.status != 200 or len(body) != 1024:
            raise SystemExit("the request through sluice failed: %d, %d bytes" % (r.status, len(body)))
    c.close()


def measure(binary, tmp, origin_port, args, index):
    port = free_port()
    conf = os.path.join(tmp, "sluice-%d.toml" % index)
    with open(conf, "w") as f:
        f.write(f"""profile = "network-read"
[listen]
proxy = "127.0.0.1:{port}"
[policy]
allow = ["origin.test:{origin_port}"]
[upstream]
allow_addresses = ["127.0.0.1/32"]
[upstream.resolve]
"origin.test" = "127.0.0.1"
[log]
access_log = "{tmp}/access-{index}.log"
""")
    out = os.path.join(tmp, "callgrind-%d.out" % index)
    p = subprocess.Popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out, binary, "serve",
                          "--config", conf], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_port(port, p, timeout=120)
        requests(port, origin_port, args.warmup)
        subprocess.run(["callgrind_control", "-z", str(p.pid)], check=True, capture_output=True)
        requests(port, origin_port, args.requests)
        subprocess.run(["callgrind_control", "-d", str(p.pid)], check=True, capture_output=True)
        time.sleep(0.5)
    finally:
        p.terminate()
        p.wait(timeout=120)
    total = 0
    for dump in glob.glob(out + ".*"):  # the dump after the measured requests (one file per dump)
        with open(dump) as f:
            for line in f:
                m = re.match(r"(?:summary|totals): (\d+)", line)
                if m:
                    total = max(total, int(m.group(1)))
                    break
    if not total:
        raise SystemExit("no callgrind dump for %s in %s" % (binary, tmp))
    return total / args.requests


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--warmup", type=int, default=100)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        origin_port = free_port()
        origin = subprocess.Popen(["/usr/bin/python3", os.path.join(HERE, "../integration/origin.py"),
                                   str(origin_port)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            if origin.stdout.readline().strip() != "ready":
                raise SystemExit("the test origin did not start")
            results = [(b, measure(b, tmp, origin_port, args, i)) for i, b in enumerate(args.binaries)]
        finally:
            origin.kill()
    for b, per in results:
        print("%-50s %10.0f instructions/request" % (b, per))
    if len(results) == 2:
        print("ratio second/first: %.3f" % (results[1][1] / results[0][1]))


if __name__ == "__main__":
    main()
