#!/usr/bin/python3
"""What the access log's chain costs (docs/metrics.md, "The chain"): keep-alive requests per second
through `sluice serve` with the chain off ([log] chain = false) and on (seq, prev_hash, checkpoints
signed with an Ed25519 [log] signing_key every checkpoint_interval), side by side in one run.

One binary, two serve processes with the same policy, each logging to a file; an nginx origin on
loopback serving 1 KiB; curl (`-Z --parallel-max N`, keep-alive to the proxy) sends the same
requests through each in turn, alternating for --rounds rounds, every response checked for 200 and
its length. Prints each round, the medians and the ratio on/off. Afterwards `sluice audit verify`
must pass on the chained log: a benchmark of a broken chain measures nothing.

usage: tests/bench/audit_chain.py [--requests 20000] [--parallel 4] [--rounds 5] [--interval 60s] [BINARY]
(nginx and curl, as on every machine of this kind)."""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../integration"))
from harness import free_port, wait_port  # noqa: E402


def start_nginx(tmp):
    port = free_port()
    www = os.path.join(tmp, "www")
    os.makedirs(www)
    with open(os.path.join(www, "1k"), "wb") as f:
        f.write(b"x" * 1024)
    conf = os.path.join(tmp, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""daemon off; master_process off; worker_processes 1; pid {tmp}/nginx.pid;
error_log stderr error;
events {{ worker_connections 1024; }}
http {{ access_log off; client_body_temp_path {tmp}/b; proxy_temp_path {tmp}/p; fastcgi_temp_path {tmp}/f;
  uwsgi_temp_path {tmp}/u; scgi_temp_path {tmp}/s; keepalive_requests 1000000;
  server {{ listen 127.0.0.1:{port}; location / {{ root {www}; }} }} }}
""")
    p = subprocess.Popen(["nginx", "-c", conf, "-p", tmp], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, p)
    return p, port


def start_serve(binary, tmp, name, origin, chain, interval):
    port = free_port()
    conf = os.path.join(tmp, name + ".toml")
    log = os.path.join(tmp, name + ".log")
    with open(conf, "w") as f:
        f.write(f"""profile = "network-read"
[listen]
proxy = "127.0.0.1:{port}"
[policy]
allow = ["origin.test:{origin}"]
[upstream]
allow_addresses = ["127.0.0.1/32"]
[upstream.resolve]
"origin.test" = "127.0.0.1"
[log]
access_log = "{log}"
""")
        if chain:
            f.write(f'signing_key = "file:{tmp}/key.pem"\nwriter = "bench"\ncheckpoint_interval = "{interval}"\n')
        else:
            f.write("chain = false\n")
    p = subprocess.Popen([binary, "serve", "--config", conf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, p)
    return p, port, log


def rate(port, origin, n, parallel, tmp):
    """Requests per second for `n` keep-alive GETs through the proxy at `port`."""
    out = os.path.join(tmp, "curl.out")
    cmd = ["curl", "-s", "--no-progress-meter", "-Z", "--parallel-max", str(parallel), "--proxy", "http://127.0.0.1:%d" % port,
           "-o", "/dev/null", "-w", "%{http_code} %{size_download}\\n", "http://origin.test:%d/1k?[1-%d]" % (origin, n)]
    t0 = time.monotonic()
    with open(out, "w") as f:
        subprocess.run(cmd, stdout=f, stderr=subprocess.DEVNULL, check=True)
    seconds = time.monotonic() - t0
    with open(out) as f:
        results = f.read().split("\n")
    good = sum(1 for r in results if r == "200 1024")
    if good != n:
        raise SystemExit("%d of %d requests failed through port %d" % (n - good, n, port))
    return n / seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary", nargs="?", default=os.path.join(HERE, "../../build/default/sluice"))
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--interval", default="60s", help="[log] checkpoint_interval of the chained run")
    args = ap.parse_args()
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", tmp + "/key.pem"], check=True,
                           capture_output=True)
            nginx, origin = start_nginx(tmp)
            procs.append(nginx)
            off, off_port, _ = start_serve(args.binary, tmp, "off", origin, False, args.interval)
            on, on_port, on_log = start_serve(args.binary, tmp, "on", origin, True, args.interval)
            procs += [off, on]
            rate(off_port, origin, 1000, args.parallel, tmp)  # warm-up: pools, page cache
            rate(on_port, origin, 1000, args.parallel, tmp)
            results = {"off": [], "on": []}
            for r in range(args.rounds):
                for name, port in (("off", off_port), ("on", on_port)) if r % 2 == 0 else (("on", on_port), ("off", off_port)):
                    results[name].append(rate(port, origin, args.requests, args.parallel, tmp))
                print("round %d: chain off %8.0f req/s, chain on %8.0f req/s" % (r + 1, results["off"][-1],
                                                                               results["on"][-1]), flush=True)
            on.terminate()
            on.wait(timeout=30)
            subprocess.run(["openssl", "pkey", "-in", tmp + "/key.pem", "-pubout", "-out", tmp + "/key.pub"], check=True)
            v = subprocess.run([args.binary, "audit", "verify", on_log, "--key", tmp + "/key.pub"], capture_output=True,
                               text=True)
            print("audit verify of the chained log: exit %d, %s" % (v.returncode, v.stdout.strip().splitlines()[-1]))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
                p.wait()
    m_off, m_on = statistics.median(results["off"]), statistics.median(results["on"])
    print("median: chain off %.0f req/s, chain on %.0f req/s, ratio on/off %.3f" % (m_off, m_on, m_on / m_off))


if __name__ == "__main__":
    main()
