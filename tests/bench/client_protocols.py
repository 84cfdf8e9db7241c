#!/usr/bin/python3
"""The same curl client through sluice speaking h2 to it (curl's default) and HTTP/1.1
(`--http1.1`), side by side in one run, beside the same client direct (issue #56, item 1).

The origin is nginx over TLS speaking HTTP/1.1 only, on a test host at 198.18.0.2 (compare.py's
origin: a test CA's certificate, 1 KiB and 10 MiB files). Each sluice binary given runs as
`sluice serve` (network-read, one worker thread, as in compare.py), the client reaching it by
CONNECT; sluice terminates TLS, answers ALPN h2 or http/1.1 as the client asks, and speaks
HTTP/1.1, pooled, to nginx either way. Workloads, each with 8 transfers in parallel
(`curl -Z --parallel-max 8`; over h2 curl multiplexes them on one connection, over HTTP/1.1 it
opens 8): keep-alive, N GETs of 1 KiB; bulk, 16 GETs of 10 MiB. Every response is checked for
status 200 and its full length; a row with any error is FAILED, not fast. One more row, for
reference, is the same client direct to an h2 server of the same nginx (port 8443): what h2 costs
the client itself.

Every round runs every row once, in turn (so a slow minute of the machine touches every row
alike); the table shows the median of the rounds, their spread (min-max), the ratio to direct and,
for each binary, h2's ratio to HTTP/1.1 through the same binary; then sluice's CPU per unit of work.

usage (root): tests/bench/client_protocols.py [--repeat 3] [--requests 20000] [--perf DIR]
                  [--sluice NAME=PATH ...]   (default: one binary, build/release or build/default)"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../integration"))
sys.path.insert(0, HERE)
from harness import free_port  # noqa: E402
from compare import NAME, ORIGIN, Bench, cpu_times  # noqa: E402
from exec_startup import default_binary  # noqa: E402

PARALLEL = 8
H2_PORT = 8443  # the direct h2 control row: the same nginx, a server that also speaks h2
NGINX_H2 = """  server {{
    listen %s:%d ssl http2;
    ssl_certificate {pem};
    ssl_certificate_key {key};
    root {www};
  }}
""" % (ORIGIN, H2_PORT)
BULK_COUNT = 16
BULK_SIZE = 10 * 1024 * 1024


class ClientProtocols(Bench):
    def start_sluice(self, label, binary):
        """`sluice serve` of `binary` with a config and CA file of its own: {proxy, cafile, pid}."""
        port, d = free_port(), self.tmp
        conf = os.path.join(d, "sluice-%s.toml" % label)
        with open(conf, "w") as f:
            f.write(f"""profile = "network-read"
[listen]
proxy = "127.0.0.1:{port}"
[policy]
allow = ["{NAME}"]
{self.origin_trust()}""")
        cafile = os.path.join(d, "sluice-ca-%s.pem" % label)
        p = self.start([binary, "serve", "--config", conf, "--ca-out", cafile, "--threads", "1"], port)
        return {"proxy": "http://127.0.0.1:%d" % port, "cafile": cafile, "pid": p.pid}

    def transfer(self, t, proto, url, count):
        """Seconds for `count` GETs of `url`, 8 at a time, and whether every one was whole."""
        cmd = ["curl", "-s", "-Z", "--parallel-max", str(PARALLEL), "-o", "/dev/null",
               "-w", "%{http_code} %{size_download}\\n", "--cacert", t.get("cafile", self.ca[0])]
        if proto == "h1":
            cmd.append("--http1.1")
        if t.get("proxy"):
            cmd += ["--proxy", t["proxy"]]
        elif proto == "h2":  # direct h2: nginx's h2 server (the client's own h2 cost, for reference)
            cmd += ["--resolve", "%s:%d:%s" % (NAME, H2_PORT, ORIGIN)]
            url = url.replace(NAME + "/", "%s:%d/" % (NAME, H2_PORT))
        else:
            cmd += ["--resolve", "%s:443:%s" % (NAME, ORIGIN)]
        cmd.append(url + "?[1-%d]" % count)
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, timeout=900)
        elapsed = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.client_cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        return elapsed, p.stdout.decode().split()

    def workload(self, t, proto, name):
        """(rate, or None when a response was wrong; the work done: requests or MiB)."""
        if name == "keep-alive":
            n = self.args.requests
            el, out = self.transfer(t, proto, "https://%s/1k.bin" % NAME, n)
            ok = out.count("200") == n and out.count("1024") == n
            return (n / el if ok else None), n
        el, out = self.transfer(t, proto, "https://%s/10m.bin" % NAME, BULK_COUNT)
        ok = out.count("200") == BULK_COUNT and out.count(str(BULK_SIZE)) == BULK_COUNT
        mib = BULK_COUNT * BULK_SIZE / (1024 * 1024)
        return (mib / el if ok else None), mib

    def run(self):
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(65536, hard), hard))
        for tool in ("nginx", "curl", "openssl"):
            if subprocess.run(["which", tool], capture_output=True).returncode != 0:
                raise SystemExit("%s missing: apt-get install nginx-light curl openssl" % tool)
        self.nginx_extra = NGINX_H2
        self.setup_origin()
        rows = [("direct", "h1", {}), ("direct h2 (nginx h2 server)", "h2", {})]
        for label, binary in self.binaries:
            t = self.start_sluice(label, binary)
            rows += [("sluice %s, h2" % label, "h2", t), ("sluice %s, http/1.1" % label, "h1", t)]
        workloads = ["keep-alive", "bulk"]
        rates = {(r[0], w): [] for r in rows for w in workloads}
        cpu = {(r[0], w): [] for r in rows for w in workloads}
        client = {(r[0], w): [] for r in rows for w in workloads}
        for w in workloads:
            for _ in range(self.args.repeat):
                for name, proto, t in rows:
                    before = cpu_times(t["pid"]) if "pid" in t else None
                    rec = self.perf_record(t, name, w)
                    v, work = self.workload(t, proto, w)
                    if rec:
                        rec.send_signal(2)
                        rec.wait(60)
                    rates[(name, w)].append(v)
                    client[(name, w)].append(self.client_cpu / work)
                    if before is not None and v is not None:
                        cpu[(name, w)].append((sum(cpu_times(t["pid"])) - sum(before)) / work)
        self.report(rows, workloads, rates, cpu, client)

    def perf_record(self, t, name, workload):
        """With --perf DIR: `perf record -g` on the sluice process for this row's workload (the
        last round's profile is kept, one file per row and workload)."""
        if not self.args.perf or "pid" not in t:
            return None
        os.makedirs(self.args.perf, exist_ok=True)
        out = os.path.join(self.args.perf, "%s-%s.data" % (name.replace(" ", "_").replace(",", "").replace("/", ""),
                                                          workload))
        p = subprocess.Popen(["perf", "record", "-q", "-g", "-p", str(t["pid"]), "-o", out],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3)  # attached before the first request
        return p

    def report(self, rows, workloads, rates, cpu, client):
        print("\n%s, %d cores, %d rounds, keep-alive %d x 1 KiB, bulk %d x 10 MiB, %d in parallel" % (
            time.strftime("%Y-%m-%d %H:%M"), os.cpu_count(), self.args.repeat, self.args.requests, BULK_COUNT,
            PARALLEL))
        units = {"keep-alive": "req/s", "bulk": "MiB/s"}
        med = {}
        for k, vals in rates.items():
            med[k] = None if None in vals else statistics.median(vals)
        print("| row | " + " | ".join("%s %s (spread) | x direct | h2 / http1.1" % (w, units[w])
                                       for w in workloads) + " |")
        print("|---|" + "---|---|---|" * len(workloads))
        for name, proto, _ in rows:
            cells = []
            for w in workloads:
                v, vals = med[(name, w)], rates[(name, w)]
                if v is None:
                    cells += ["FAILED", "", ""]
                    continue
                d = med[("direct", w)]
                ratio = "%.2f" % (v / d) if d else "-"
                pair = ""
                if proto == "h2" and name.startswith("sluice"):
                    h1 = med.get((name.replace(", h2", ", http/1.1"), w))
                    pair = "**%.2f**" % (v / h1) if h1 else "-"
                cells += ["%.0f (%.0f-%.0f)" % (v, min(vals), max(vals)), ratio, pair]
            print("| %s | " % name + " | ".join(cells) + " |")
        print("\nCPU per unit of work, median of the rounds: sluice (user+system of the serve process) and "
              "the curl client\n")
        print("| row | sluice keep-alive us/request | sluice bulk ms/MiB | curl keep-alive us/request | "
              "curl bulk ms/MiB |")
        print("|---|---|---|---|---|")

        def cell(vals, scale, fmt):
            return fmt % (statistics.median(vals) * scale) if vals else "-"
        for name, proto, t in rows:
            print("| %s | %s | %s | %s | %s |" % (
                name, cell(cpu[(name, "keep-alive")], 1e6, "%.1f"), cell(cpu[(name, "bulk")], 1e3, "%.2f"),
                cell(client[(name, "keep-alive")], 1e6, "%.1f"), cell(client[(name, "bulk")], 1e3, "%.2f")))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--requests", type=int, default=20000, help="keep-alive GETs of 1 KiB per round")
    ap.add_argument("--perf", metavar="DIR", help="record each sluice row with perf record -g into DIR")
    ap.add_argument("--sluice", action="append", default=[],
                    help="NAME=PATH of a sluice binary to measure (repeatable: before=..., after=...)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the harness creates a network namespace")
    binaries = []
    for spec in args.sluice or ["sluice=" + default_binary()]:
        label, _, path = spec.partition("=")
        binaries.append((label, os.path.realpath(path)))
    args.sluice, args.sluice_threads = None, 1
    b = ClientProtocols(args)
    b.binaries = binaries
    try:
        b.run()
    finally:
        b.close()


if __name__ == "__main__":
    main()
