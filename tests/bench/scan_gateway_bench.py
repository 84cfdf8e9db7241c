#!/usr/bin/python3
"""What the secret scanner ([scan], docs/policy.md "What leaves") costs a `sluice serve` replica,
side by side in one run: (off) `[scan] enabled = false` against (on) the scanner's defaults (the
built-in rules), each with
  - keep-alive plain-HTTP proxy requests for 1 KiB from nginx (wrk, 50 connections): requests per
    second, p50 and p99, sluice's CPU per request;
  - a 100 MiB upload (curl -T, one POST through the proxy; the text of this repository's sources
    and docs, over and over) to a sink in the test host that reads every byte and answers 204:
    MiB/s, the best of three uploads per round, and straight to the sink once for scale.
Runs alternate (off, on, then on, off) so that the machine's swings hit both alike; prints each
run, the medians, and the ratios on/off (the goals: 0.95 for requests, 0.9 for the upload).

usage (root): tests/bench/scan_gateway_bench.py [--rounds 3] [--seconds 10] [--connections 50]
[--upload-mib 100]. Installs wrk and nginx-light with apt-get when missing."""
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "../integration"))
import fleet_clients  # noqa: E402
from harness import wait_port  # noqa: E402

SINK_PORT = 81
# Reads each request's head and its Content-Length bytes, answers 204; keep-alive.
SINK = r'''
import socket, sys, threading
def serve(c):
    buf = bytearray(1 << 20)
    data = b""
    try:
        while True:
            while b"\r\n\r\n" not in data:
                got = c.recv(65536)
                if not got:
                    return
                data += got
            head, _, data = data.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"content-length":
                    length = int(v)
            left = length - len(data)
            data = b"" if left >= 0 else data[length:]
            while left > 0:
                n = c.recv_into(buf, min(len(buf), left))
                if not n:
                    return
                left -= n
            c.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")
    finally:
        c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(64)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
'''


def machine_jiffies():
    """(busy, total) clock ticks of all CPUs since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields) - idle, sum(fields)


class Bench(fleet_clients.Bench):

    def start_sink(self):
        path = os.path.join(self.tmp, "sink.py")
        with open(path, "w") as f:
            f.write(SINK)
        p = self.host.start("/usr/bin/python3", path, fleet_clients.ORIGIN, str(SINK_PORT))
        self.procs.append(p)
        assert p.stdout.readline().strip() == b"ready"
        self.upload = os.path.join(self.tmp, "upload.bin")
        # Text as an agent uploads it: this repository's own sources and docs, over and over.
        text = b""
        for top in ("gateway", "scan", "docs"):
            for root, _, files in sorted(os.walk(os.path.join(HERE, "../..", top))):
                for name in sorted(files):
                    if name.endswith((".cpp", ".hpp", ".md")):
                        with open(os.path.join(root, name), "rb") as src:
                            text += src.read()
        size = self.args.upload_mib * 1024 * 1024
        with open(self.upload, "wb") as f:
            f.write((text * (size // len(text) + 1))[:size])

    def config(self, kind):
        conf, port = self.single_listener_config(
            kind, '"origin.test:80", "origin.test:%d"' % SINK_PORT, "",
            "[scan]\nenabled = %s\n" % ("true" if kind == "on" else "false"))
        with open(conf) as f:  # an upload is a write: the publish profile
            text = f.read().replace('profile = "network-read"', 'profile = "publish"', 1)
        with open(conf, "w") as f:
            f.write(text)
        return conf, port

    def upload_rate(self, port, pid=None):
        """The best of three uploads through sluice on `port` (None: straight to the sink), MiB/s;
        with sluice's `pid`, also its CPU per MiB, its share of one core and how busy the machine's
        CPUs were (sluice, curl, the sink and the rest together) over the three."""
        best, cpu0, t_all = 0.0, fleet_clients.cpu_seconds(pid) if pid else 0.0, time.monotonic()
        busy0, total0 = machine_jiffies()
        proxy = ["-x", "http://127.0.0.1:%d" % port] if port else ["--connect-to", "origin.test:%d:%s:%d" % (
            SINK_PORT, fleet_clients.ORIGIN, SINK_PORT)]
        for _ in range(3):
            t0 = time.monotonic()
            p = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}"] + proxy + ["-H", "Expect:", "-H",
                                "Content-Type: application/octet-stream", "-X", "POST", "-T", self.upload,
                                "http://origin.test:%d/upload" % SINK_PORT], capture_output=True, text=True)
            took = time.monotonic() - t0
            if p.stdout != "204":
                raise SystemExit("the upload through sluice failed: %s %s" % (p.stdout, p.stderr))
            best = max(best, os.path.getsize(self.upload) / (1024 * 1024) / took)
        busy1, total1 = machine_jiffies()
        if pid:
            cpu = fleet_clients.cpu_seconds(pid) - cpu0
            self.upload_cpu.append((cpu / (3 * self.args.upload_mib) * 1e3, cpu / (time.monotonic() - t_all),
                                    (busy1 - busy0) / max(total1 - total0, 1)))
        return best

    def one_kind(self, kind):
        conf, port = self.config(kind)
        res = self.serve_wrk(conf, port)
        p = subprocess.Popen([self.args.sluice, "serve", "--config", conf], stdout=subprocess.DEVNULL,
                             stderr=open(os.path.join(self.tmp, "sluice.log"), "ab"))
        try:
            wait_port(port, p, timeout=20)
            perf = self.perf_start(p.pid, "upload-" + kind)
            self.uploads[kind].append(self.upload_rate(port, p.pid))
            self.perf_stop(perf)
        finally:
            p.kill()
            p.wait()
        ms, share, machine = self.upload_cpu[-1]
        res["note"] = "upload %.0f MiB/s, sluice %.2f ms of CPU a MiB, %.0f%% of a core; all CPUs %.0f%% busy" % (
            self.uploads[kind][-1], ms, share * 100, machine * 100)
        return res

    def run(self):
        self.setup_origin()
        self.start_sink()
        self.uploads, self.upload_cpu = {"off": [], "on": []}, []
        direct = self.upload_rate(None)
        print("upload straight to the sink: %.0f MiB/s" % direct, flush=True)
        med = self.side_by_side(("off", "on"), "scanner", "-")
        up = {k: statistics.median(v) for k, v in self.uploads.items()}
        print("| upload of %d MiB | direct %.0f MiB/s | off %.0f MiB/s | on %.0f MiB/s |" % (
            self.args.upload_mib, direct, up["off"], up["on"]))
        print("ratio on/off: req/s %.3f, sluice CPU per request %.3f, upload %.3f" % (
            med["on"]["rps"] / med["off"]["rps"], med["on"]["cpu_us"] / med["off"]["cpu_us"], up["on"] / up["off"]))


def main():
    fleet_clients.single_listener_main(
        Bench, __doc__, lambda ap: ap.add_argument("--upload-mib", type=int, default=100))


if __name__ == "__main__":
    main()
