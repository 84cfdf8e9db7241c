#!/usr/bin/python3
"""HTTP/2 and WebSocket through sluice against the same origin directly, side by side in one run
(issue 37's benchmarks). Prints a table of medians and each row's ratio to direct.

- h2load (Debian nghttp2-client), multiplexed (`-c 10 -m 10`), against nginx (h2 and HTTP/1.1 over
  TLS) on a test host at 198.18.0.2: direct, and inside `sluice exec --sandbox-profile publish`
  (h2load knows no proxy; the capture takes its connections, sluice speaks h2 to it and HTTP/1.1,
  pooled, to nginx).
- WebSocket echo (python3-websockets, 4 connections, each sending messages and awaiting their
  echo, 64 in flight) against an echo origin on the test host: direct, and through `sluice serve`
  (publish) by CONNECT.

usage (root): tests/bench/protocols.py [--repeat 3] [--requests 20000] [--messages 20000] [--binary PATH]"""
import argparse
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

ORIGIN = "198.18.0.2"
NAME = "origin.test"
HOSTS_MARK = "# sluice-bench-protocols"
PYTHON = "/usr/bin/python3"

WS_CLIENT = r'''
import asyncio, os, ssl, socket, sys, time, urllib.parse
import websockets
url, total = sys.argv[1], int(sys.argv[2])
conns, window = 4, 16

def via_proxy(host, port):
    p = urllib.parse.urlparse(os.environ["HTTPS_PROXY"])
    s = socket.create_connection((p.hostname, p.port))
    s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(4096)
    assert head.startswith(b"HTTP/1.1 200"), head
    return s

async def one(n):
    u = urllib.parse.urlparse(url)
    kw = {"ssl": ssl.create_default_context(cafile=os.environ["WS_CA"]), "compression": None,
          "max_size": None, "ping_interval": None}
    if os.environ.get("HTTPS_PROXY"):
        kw.update(sock=via_proxy(u.hostname, u.port), server_hostname=u.hostname)
    async with websockets.connect(url, **kw) as ws:
        msg = b"x" * 100
        sent = got = 0
        while got < n:
            while sent < n and sent - got < window:
                await ws.send(msg)
                sent += 1
            back = await ws.recv()
            assert back == msg
            got += 1

async def main():
    t0 = time.monotonic()
    await asyncio.gather(*(one(total // conns) for _ in range(conns)))
    print("%.3f" % (time.monotonic() - t0))

asyncio.run(main())
'''

WS_ORIGIN = r'''
import asyncio, ssl, sys
import websockets
async def echo(ws, path):
    async for m in ws:
        await ws.send(m)
async def main():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[1], sys.argv[2])
    async with websockets.serve(echo, "198.18.0.2", 9443, ssl=ctx, max_size=None, compression=None,
                                ping_interval=None):
        print("ready", flush=True)
        await asyncio.Future()
asyncio.run(main())
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--extra-config", default="", help="TOML put before the [tls] section of both policies")
    ap.add_argument("--binary", default=os.path.join(HERE, "../../build/default/sluice"))
    args = ap.parse_args()
    sluice = os.path.abspath(args.binary)
    for tool, pkg in (("h2load", "nghttp2-client"), ("nginx", "nginx-light")):
        if not shutil.which(tool):
            run(["apt-get", "install", "-y", "-qq", pkg])
    d = tempfile.mkdtemp(prefix="sluice-bench-proto-")
    os.chmod(d, 0o755)
    procs = Processes()
    host = None
    try:
        ca = make_ca(d, "origin-ca")  # not "bench-ca": the gateway named "bench" writes its own CA there
        pem, key = make_leaf(d, ca, NAME, "DNS:" + NAME)
        www = os.path.join(d, "www")
        os.makedirs(www)
        with open(os.path.join(www, "1k"), "wb") as f:
            f.write(b"x" * 1024)
        subprocess.run(["chmod", "-R", "a+rX", d], check=True)
        conf = os.path.join(d, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"""worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/nginx-error.log;
daemon off;
events {{ worker_connections 20000; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  server {{
    listen {ORIGIN}:443 ssl http2;
    ssl_certificate {pem};
    ssl_certificate_key {key};
    root {www};
  }}
}}
""")
        with open("/etc/hosts", "a") as f:
            f.write("%s %s %s\n" % (ORIGIN, NAME, HOSTS_MARK))
        host = TestHost("sluice-bench-proto")
        nginx = host.start("nginx", "-c", conf)  # `ip netns exec` execs: this is nginx's master
        p = host.start(PYTHON, "-c", WS_ORIGIN, pem, key)
        assert p.stdout.readline().strip() == b"ready"
        time.sleep(0.5)
        upstream = f"""{args.extra_config}
[tls]
upstream_ca_bundle = "{ca[0]}"
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
        os.environ["SLUICE_BIN"] = sluice
        import harness
        harness.SLUICE = sluice
        gw = Gateway(procs, d, 'profile = "publish"\n[policy]\nallow = ["%s:9443"]\n' % NAME + upstream, "bench")

        def cpu_seconds(pid):
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        def nginx_cpu():
            with open("/proc/%d/task/%d/children" % (nginx.pid, nginx.pid)) as f:
                workers = [int(w) for w in f.read().split()]
            return cpu_seconds(nginx.pid) + sum(cpu_seconds(w) for w in workers)

        def children_cpu():
            r = resource.getrusage(resource.RUSAGE_CHILDREN)
            return r.ru_utime + r.ru_stime

        def h2load(prefix):
            c0, n0 = children_cpu(), nginx_cpu()
            out = subprocess.run(prefix + ["h2load", "-c", "10", "-m", "10", "-n", str(args.requests),
                                           "https://%s/1k" % NAME], capture_output=True, text=True).stdout
            # CPU per request: the client (with sluice exec, which waits for it, for the row through
            # sluice) and nginx. On a machine of few cores the rows share, this is what bounds the ratio.
            cpu[prefix != []].append(((children_cpu() - c0) * 1e6 / args.requests,
                                      (nginx_cpu() - n0) * 1e6 / args.requests))
            m = re.search(r"finished in ([\d.]+)(m?s), ([\d.]+) req/s", out)
            ok = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded", out)
            if not m or not ok or int(ok.group(1)) != args.requests:
                errors = open(os.path.join(d, "nginx-error.log")).read()[-1500:]
                if prefix and os.path.exists(exec_log):
                    errors += "\nsluice: " + open(exec_log).read()[-600:]
                raise RuntimeError("h2load %s failed:\n%s\nnginx: %s" % (" ".join(prefix[:2]) or "direct",
                                                                          out[-1500:], errors))
            return float(m.group(3))

        def ws(env):
            out = subprocess.run([PYTHON, "-c", WS_CLIENT, "wss://%s:9443/" % NAME, str(args.messages)],
                                 capture_output=True, text=True, env=env)
            if out.returncode != 0:
                raise RuntimeError("websocket client failed:\n" + out.stderr[-2000:])
            return args.messages / float(out.stdout.strip())

        exec_log = os.path.join(d, "exec-access.log")
        exec_prefix = [sluice, "exec", "--policy", policy, "--sandbox-profile", "publish",
                       "--confirm-external-side-effects", "--access-log", exec_log, "--"]
        cpu = {False: [], True: []}
        rows = {"h2load direct": [], "h2load through sluice exec": [],
                "websocket direct": [], "websocket through sluice serve": []}
        env_direct = dict(os.environ, WS_CA=ca[0])
        env_direct.pop("HTTPS_PROXY", None)
        env_gw = dict(os.environ, WS_CA=gw.ca, HTTPS_PROXY=gw.proxy)
        for _ in range(args.repeat):  # rows in turn each round: the machine's swings hit all alike
            rows["h2load direct"].append(h2load([]))
            rows["h2load through sluice exec"].append(h2load(exec_prefix))
            rows["websocket direct"].append(ws(env_direct))
            rows["websocket through sluice serve"].append(ws(env_gw))
        print("| workload | median per second | runs | ratio to direct |")
        print("|---|---|---|---|")
        for name, values in rows.items():
            med = statistics.median(values)
            base = statistics.median(rows[("h2load" if name.startswith("h2load") else "websocket") + " direct"])
            print("| %s | %.0f | %s | %.2f |" % (name, med, ", ".join("%.0f" % v for v in values), med / base))
        client = statistics.median(c for c, _ in cpu[False])
        through = statistics.median(c for c, _ in cpu[True])
        print("\nCPU per h2load request, in microseconds (medians; this machine has %d cores):" % os.cpu_count())
        print("| row | h2load (+ sluice exec) | nginx |\n|---|---|---|")
        print("| direct | %.1f | %.1f |" % (client, statistics.median(n for _, n in cpu[False])))
        print("| through sluice exec | %.1f | %.1f |" % (through, statistics.median(n for _, n in cpu[True])))
        print("| sluice's share (difference) | %.1f | |" % (through - client))
    finally:
        procs.stop_all()
        if host:
            host.close()
        with open("/etc/hosts") as f:
            lines = [l for l in f if HOSTS_MARK not in l]
        with open("/etc/hosts", "w") as f:
            f.writelines(lines)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
