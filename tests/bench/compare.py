#!/usr/bin/python3
"""Side-by-side benchmark of sluice and its peers on one workload, in one run (issue 5).

An HTTPS origin (nginx) runs in a network namespace at 198.18.0.2 with a certificate from a test CA,
serving 1 KiB and 10 MiB files. The same curl clients (`-Z --parallel-max N`) go direct and through
each target; every response is checked for status 200 and full length, and a target with errors is
reported as failed, not as fast. Prints a table of medians with each target's ratio to direct.

Where sluice terminates TLS it offers h2 and HTTP/1.1 (ALPN): curl takes h2, multiplexing its
transfers on one connection, in the rows `sluice` and `sluice-exec`; the rows `sluice-http1.1` and
`sluice-exec-http1.1` are the same with `--http1.1` (a connection per transfer, as the origin and the
other proxies are reached). The origin speaks HTTP/1.1 only.

Sandbox targets (srt, srt-tls, sluice-exec) run the same curl inside the sandbox and time it there,
so their start-up is not counted; start-up is a table of its own: `true` in each sandbox, beside
bubblewrap's empty sandbox and a bare `unshare`, every row once a round in turn, with the page
faults of each run's whole process tree.

Idle terminated tunnels (`--idle N`, `--idle-curve N,...`) are measured for every target among them
that terminates a CONNECT tunnel's TLS (sluice serve, Squid ssl-bump, mitmproxy): each opens the
tunnels one after the other and reports its RSS, summed over the proxy's processes (Squid's
certificate helpers too). Squid bumps server-first, so each of its tunnels also holds a TLS
connection to the origin; sluice and mitmproxy reach the origin only for a request.

usage (root): tests/bench/compare.py [--repeat 3] [--requests 8000] [--idle 10000] [--targets direct,sluice,...]
Installs what it needs with apt-get and npm, builds the release preset (unless --no-build); tears
everything down at the end."""
import argparse
import os
import json
import resource
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../integration"))
from harness import free_port, make_ca, run, wait_port  # noqa: E402
from netns import TestHost  # noqa: E402
from exec_startup import BWRAP_TRUE, default_binary  # noqa: E402
from exec_startup import measure_all as measure_startup  # noqa: E402

# The targets that terminate an idle CONNECT tunnel's TLS, as sluice does: the idle measurements' rows.
IDLE_TARGETS = ("sluice", "squid-bump", "mitmproxy")


def process_tree(pid):
    """`pid` and every process below it, from /proc/PID/stat: {pid: the stat fields after the name}."""
    children, stats = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        stats[int(d)] = fields
        children.setdefault(int(fields[1]), []).append(int(d))
    out, todo = {}, [pid]
    while todo:
        p = todo.pop()
        if p in stats:
            out[p] = stats[p]
        todo.extend(children.get(p, []))
    return out


def tree_rss(pid):
    """(RSS, anonymous RSS) in MiB of `pid` and every process below it, from /proc."""
    rss = anon = 0
    for p in process_tree(pid):
        try:
            with open("/proc/%d/status" % p) as f:
                kib = {l.split(":")[0]: int(l.split()[1]) for l in f if l.startswith(("VmRSS", "RssAnon"))}
        except OSError:
            continue
        rss += kib.get("VmRSS", 0)
        anon += kib.get("RssAnon", 0)
    return rss / 1024.0, anon / 1024.0


ORIGIN = "198.18.0.2"
NAME = "origin.test"
HOSTS_MARK = "# sluice-bench"
PKGS = ["nginx-light", "squid-openssl", "mitmproxy", "tinyproxy", "curl", "openssl", "bubblewrap", "socat",
        "ripgrep", "util-linux"]
# Anthropic's sandbox runtime, pinned; kept between runs like the Debian packages.
SRT_PACKAGE = "@anthropic-ai/sandbox-runtime@0.0.83"
SRT_DIR = "/var/cache/sluice-bench/srt"
SRT_CLI = os.path.join(SRT_DIR, "node_modules/@anthropic-ai/sandbox-runtime/dist/cli.js")


def cpu_times(pid):
    """CPU time (user, system) of `pid` and every process below it, from /proc/PID/stat."""
    tick = os.sysconf("SC_CLK_TCK")
    tree = process_tree(pid).values()
    return sum(int(f[11]) for f in tree) / tick, sum(int(f[12]) for f in tree) / tick  # utime, stime


def install():
    pkgs = PKGS + ([] if shutil.which("npm") else ["npm"])
    missing = [p for p in pkgs if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode != 0]
    if missing:
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends"] + missing, check=True,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    if not os.path.exists(SRT_CLI):
        os.makedirs(SRT_DIR, exist_ok=True)
        subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", SRT_DIR, SRT_PACKAGE],
                       check=True)


class Bench:
    def __init__(self, args):
        self.args = args
        self.sluice = os.path.realpath(args.sluice) if args.sluice else default_binary()
        self.tmp = tempfile.mkdtemp(prefix="sluice-bench-")
        os.chmod(self.tmp, 0o755)
        self.procs = []
        self.host = None
        self.nginx_extra = ""  # more server blocks for nginx's http{} ({pem}, {key}, {www} filled in)

    # --- set-up --------------------------------------------------------------------------
    def setup_origin(self):
        d = self.tmp
        self.ca = make_ca(d, "bench-origin-ca")
        key, csr, pem, ext = (os.path.join(d, "origin" + x) for x in (".key", ".csr", ".pem", ".ext"))
        with open(ext, "w") as f:
            f.write("subjectAltName=DNS:origin.test,IP:%s\n" % ORIGIN)
        run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
             "-out", csr, "-subj", "/CN=origin.test"])
        run(["openssl", "x509", "-req", "-in", csr, "-CA", self.ca[0], "-CAkey", self.ca[1], "-CAcreateserial",
             "-out", pem, "-days", "2", "-extfile", ext])
        www = os.path.join(d, "www")
        os.makedirs(www)
        with open(os.path.join(www, "1k.bin"), "wb") as f:
            f.write(os.urandom(1024))
        with open(os.path.join(www, "10m.bin"), "wb") as f:
            f.write(os.urandom(10 * 1024 * 1024))
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
  sendfile on;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  server {{
    listen {ORIGIN}:443 ssl;
    ssl_certificate {pem};
    ssl_certificate_key {key};
    root {www};
  }}
{self.nginx_extra.format(pem=pem, key=key, www=www)}}}
""")
        # Peers resolve the origin's name themselves: a marked /etc/hosts line, removed at the end.
        with open("/etc/hosts", "a") as f:
            f.write("%s %s %s\n" % (ORIGIN, NAME, HOSTS_MARK))
        self.host = TestHost("sluice-bench")
        p = self.host.start("nginx", "-c", conf)
        self.procs.append(p)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                socket.create_connection((ORIGIN, 443), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit("nginx did not start")

    def start(self, cmd, port, env=None, cwd=None):
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.tmp, "target.log"), "ab"),
                             env=env, cwd=cwd)
        self.procs.append(p)
        wait_port(port, p, timeout=20)
        return p

    def origin_trust(self):
        """sluice config lines that let it reach and verify the test origin."""
        return f"""[tls]
upstream_ca_bundle = "{self.ca[0]}"
system_trust = false
[upstream]
allow_addresses = ["198.18.0.0/15"]
[upstream.resolve]
"{NAME}" = "{ORIGIN}"
"""

    def target_sluice(self, profile="network-read"):
        port, d = free_port(), self.tmp
        conf = os.path.join(d, "sluice.toml")
        with open(conf, "w") as f:
            f.write(f"""profile = "{profile}"
[listen]
proxy = "127.0.0.1:{port}"
[policy]
allow = ["{NAME}"]
{self.origin_trust()}[limits]
max_connections = 50000
{self.args.extra_config.replace(chr(92) + "n", chr(10))}
""")
        cafile = os.path.join(d, "sluice-ca.pem")
        cmd = [self.sluice, "serve", "--config", conf, "--ca-out", cafile]
        if self.args.sluice_threads:
            cmd += ["--threads", str(self.args.sluice_threads)]
        p = self.start(cmd, port)
        # allowlist passes TLS through: the client checks the origin's own certificate
        return {"proxy": "http://127.0.0.1:%d" % port, "cafile": cafile if profile != "allowlist" else self.ca[0],
                "pid": p.pid}

    def target_tinyproxy(self):
        port, d = free_port(), self.tmp
        conf = os.path.join(d, "tinyproxy.conf")
        with open(conf, "w") as f:
            f.write(f"Port {port}\nListen 127.0.0.1\nTimeout 60\nMaxClients 1000\nAllow 127.0.0.1\n"
                    f"ConnectPort 443\nLogLevel Critical\nPidFile \"{d}/tinyproxy.pid\"\n")
        p = self.start(["tinyproxy", "-d", "-c", conf], port)
        return {"proxy": "http://127.0.0.1:%d" % port, "cafile": self.ca[0], "pid": p.pid}

    def target_squid(self):
        port, d = free_port(), self.tmp
        sq = os.path.join(d, "squid")
        os.makedirs(sq, exist_ok=True)
        cakey, capem = os.path.join(sq, "ca.key"), os.path.join(sq, "ca.pem")
        run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", cakey, "-out", capem, "-days", "2", "-subj", "/CN=squid bench CA"])
        db = os.path.join(sq, "ssl_db")
        run(["/usr/lib/squid/security_file_certgen", "-c", "-s", db, "-M", "16MB"])
        subprocess.run(["chown", "-R", "proxy:proxy", sq], check=True)
        conf = os.path.join(sq, "squid.conf")
        with open(conf, "w") as f:
            f.write(f"""http_port 127.0.0.1:{port} ssl-bump generate-host-certificates=on dynamic_cert_mem_cache_size=16MB tls-cert={capem} tls-key={cakey}
sslcrtd_program /usr/lib/squid/security_file_certgen -s {db} -M 16MB
acl step1 at_step SslBump1
ssl_bump peek step1
ssl_bump bump all
tls_outgoing_options cafile={self.ca[0]}
http_access allow localhost
http_access deny all
cache deny all
dns_nameservers 127.0.0.1
pinger_enable off
netdb_filename none
access_log none
cache_log {sq}/cache.log
pid_filename {sq}/squid.pid
coredump_dir {sq}
max_filedescriptors 65536
""")
        p = self.start(["squid", "-N", "-f", conf], port)
        return {"proxy": "http://127.0.0.1:%d" % port, "cafile": capem, "pid": p.pid}

    def target_mitmproxy(self):
        port, d = free_port(), self.tmp
        confdir = os.path.join(d, "mitm")
        os.makedirs(confdir, exist_ok=True)
        p = self.start(["mitmdump", "-q", "--listen-host", "127.0.0.1", "--listen-port", str(port),
                        "--set", "confdir=" + confdir, "--set", "ssl_verify_upstream_trusted_ca=" + self.ca[0]],
                       port)
        for _ in range(100):
            if os.path.exists(os.path.join(confdir, "mitmproxy-ca-cert.pem")):
                break
            time.sleep(0.05)
        return {"proxy": "http://127.0.0.1:%d" % port, "cafile": os.path.join(confdir, "mitmproxy-ca-cert.pem"),
                "pid": p.pid}

    # Sandboxes: the workload's curl runs inside and is timed there; the sandbox sets the proxy (and,
    # where it terminates TLS, the trust) in the environment, in the scratch directory (the sandbox's
    # workspace: not /tmp, which sluice exec refuses). startup_table runs `true` inside.
    def target_srt(self, terminate=False):
        settings = os.path.join(self.tmp, "srt-%s.json" % ("tls" if terminate else "tunnel"))
        network = {"allowedDomains": [NAME], "deniedDomains": []}
        if terminate:
            network["tlsTerminate"] = {"extraCaCertPaths": [self.ca[0]]}
        with open(settings, "w") as f:
            json.dump({"network": network, "filesystem": {"denyRead": [], "allowRead": [], "allowWrite": [],
                                                          "denyWrite": []}}, f)
        # The proxy (in srt's own process) verifies the origin with Node's trust plus this CA.
        env = dict(os.environ, NODE_EXTRA_CA_CERTS=self.ca[0])

        def wrap(script):
            return ["node", SRT_CLI, "--settings", settings, "-c", script]
        probe = subprocess.run(wrap("curl -s -o /dev/null -w %%{http_code} %s https://%s/1k.bin" %
                                    ("" if terminate else "--cacert " + self.ca[0], NAME)),
                               capture_output=True, env=env, timeout=60, cwd=self.tmp)
        if probe.stdout != b"200":
            raise RuntimeError("srt probe: %r %r" % (probe.stdout, probe.stderr[-1500:]))
        return {"wrap": wrap, "env": env, "cafile": None if terminate else self.ca[0]}

    def target_sluice_exec(self):
        policy = os.path.join(self.tmp, "sluice-exec.toml")
        with open(policy, "w") as f:
            f.write(f"""[skills.default]
default_profile = "network-read"
allow_domains = ["{NAME}"]
{self.origin_trust()}""")
        os.chmod(policy, 0o644)

        def wrap(script):
            return [self.sluice, "exec", "--policy", policy, "--", "sh", "-c", script]
        return {"wrap": wrap, "cafile": None}

    # --- workloads -----------------------------------------------------------------------
    def curl(self, t, url, count, parallel, extra=()):
        cmd = ["curl", "-s", "-Z", "--parallel-max", str(parallel), "-o", "/dev/null",
               "-w", "%{http_code} %{size_download}\\n"] + list(extra) + t.get("curl", [])
        if "wrap" in t:
            if t.get("cafile"):
                cmd += ["--cacert", t["cafile"]]
            cmd.append(url + "?[1-%d]" % count)
            script = "date +%s%N; " + " ".join(shlex.quote(c) for c in cmd) + "; date +%s%N"
            p = subprocess.run(t["wrap"](script), capture_output=True, timeout=600, env=t.get("env"), cwd=self.tmp)
            words = p.stdout.decode().split()
            if len(words) < 2:
                return 1.0, []
            return (int(words[-1]) - int(words[0])) / 1e9, words[1:-1]
        cmd += ["--cacert", t.get("cafile", self.ca[0])]
        if t.get("proxy"):
            cmd += ["--proxy", t["proxy"]]
        else:
            cmd += ["--resolve", "%s:443:%s" % (NAME, ORIGIN)]
        cmd.append(url + "?[1-%d]" % count)
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, timeout=600)
        elapsed = time.perf_counter() - t0
        lines = p.stdout.decode().split()
        return elapsed, lines

    def workload(self, t, name):
        """(rate or None when a response was wrong, unit, the work done: requests or MiB)."""
        n = self.args.requests
        if name == "keep-alive":
            el, out = self.curl(t, "https://%s/1k.bin" % NAME, n, 8)
            ok = out.count("200") == n and out.count("1024") == n
            return (n / el if ok else None), "req/s", n
        if name == "handshake":
            m = max(n // 8, 50)
            el, out = self.curl(t, "https://%s/1k.bin" % NAME, m, 8, ["-H", "Connection: close"])
            ok = out.count("200") == m and out.count("1024") == m
            return (m / el if ok else None), "req/s", m
        if name == "bulk":
            m = 16
            el, out = self.curl(t, "https://%s/10m.bin" % NAME, m, 4)
            ok = out.count("200") == m and out.count(str(10 * 1024 * 1024)) == m
            return (m * 10 / el if ok else None), "MiB/s", m * 10
        raise ValueError(name)

    def idle_curve(self, t, counts):
        """RSS of the proxy (its processes together) at each count of idle terminated TLS tunnels,
        opened one after the other on the same proxy: [(count, (MiB, of which anonymous MiB))]; None
        for the counts it could not reach. The anonymous part is the proxy's own memory; the rest is
        pages of its binary and libraries, shared with every other process that maps them and
        reclaimable."""
        import ssl
        ctx = ssl.create_default_context(cafile=t["cafile"])
        socks, out = [], []
        host, port = t["proxy"].rsplit(":", 1)
        try:
            for want in sorted(set(counts)):
                while len(socks) < want:
                    s = socket.create_connection(("127.0.0.1", int(port)), timeout=10)
                    s.sendall(("CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (NAME, NAME)).encode())
                    if not s.recv(4096).startswith(b"HTTP/1.1 200"):
                        raise OSError("CONNECT refused")
                    socks.append(ctx.wrap_socket(s, server_hostname=NAME))
                time.sleep(1)
                out.append((want, tree_rss(t["pid"])))
        except OSError as e:
            print("idle curve stopped at %d tunnels: %s" % (len(socks), e), file=sys.stderr)
            out.extend((n, None) for n in sorted(set(counts)) if n not in dict(out))
        finally:
            for s in socks:
                s.close()
        return out

    # --- driver --------------------------------------------------------------------------
    def run(self):
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        want = 65536 if hard == resource.RLIM_INFINITY else min(65536, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        if self.args.idle and self.args.idle + 100 > want:
            print("note: descriptor limit %d; idle tunnels capped" % want, file=sys.stderr)
            self.args.idle = max(want - 200, 0) // 2
        if self.args.idle_curve:  # the client holds one descriptor per tunnel, the gateway one
            counts = [int(c) for c in self.args.idle_curve.split(",")]
            capped = sorted(set(min(c, max(want - 200, 0)) for c in counts))
            if capped != sorted(counts):
                print("note: descriptor limit %d; idle curve at %s" % (want, capped), file=sys.stderr)
            self.args.idle_curve = ",".join(str(c) for c in capped)
        install()
        self.setup_origin()
        h1 = {"curl": ["--http1.1"]}
        makers = {"direct": lambda: {}, "sluice": self.target_sluice, "sluice-exec": self.target_sluice_exec,
                  "sluice-http1.1": lambda: {**self.target_sluice(), **h1},
                  "sluice-exec-http1.1": lambda: {**self.target_sluice_exec(), **h1},
                  "sluice-allowlist": lambda: self.target_sluice("allowlist"),
                  "tinyproxy": self.target_tinyproxy, "squid-bump": self.target_squid,
                  "mitmproxy": self.target_mitmproxy, "srt": self.target_srt,
                  "srt-tls": lambda: self.target_srt(terminate=True)}
        workloads = self.args.workloads.split(",")
        results, spread, cpus, startups = {}, {}, {}, []
        for name in self.args.targets.split(","):
            try:
                t = makers[name]()
            except Exception as e:  # a peer that cannot start is reported, not hidden
                print("target %s failed to start: %s" % (name, e), file=sys.stderr)
                log = os.path.join(self.tmp, "target.log")
                if os.path.exists(log):
                    print(open(log, errors="replace").read()[-2000:], file=sys.stderr)
                results[name] = {w: (None, "") for w in workloads}
                continue
            results[name] = {}
            for w in workloads:
                vals, unit, cpu, kernel = [], "", [], []
                for _ in range(self.args.repeat):
                    before = cpu_times(t["pid"]) if "pid" in t else None
                    v, unit, work = self.workload(t, w)
                    vals.append(v)
                    if before is not None and v is not None:  # proxy CPU per request, or per MiB
                        after = cpu_times(t["pid"])
                        cpu.append((sum(after) - sum(before)) / work)
                        kernel.append((after[1] - before[1]) / work)
                results[name][w] = (None if None in vals else statistics.median(vals), unit)
                if cpu:
                    cpus.setdefault(name, {})[w] = statistics.median(cpu)
                    cpus[name][w + " kernel"] = statistics.median(kernel)
                if None not in vals and len(vals) > 1:
                    spread.setdefault(name, {})[w] = (min(vals), max(vals), unit)
            if "wrap" in t and "curl" not in t:  # one start-up row per sandbox, not per client protocol
                startups.append((name, t["wrap"]("true"), t.get("env")))
            if name in IDLE_TARGETS and (self.args.idle or self.args.idle_curve):
                # One pass, the counts in rising order: the heap keeps its peak after tunnels close,
                # so a count measured after a larger one would read the larger one's RSS.
                wanted = [int(c) for c in self.args.idle_curve.split(",")] if self.args.idle_curve else []
                curve = dict(self.idle_curve(t, wanted + ([self.args.idle] if self.args.idle else [])))
                if self.args.idle:
                    results[name]["idle"] = (curve[self.args.idle] and curve[self.args.idle][0], "MiB RSS")
                if wanted:
                    results[name]["idle-curve"] = [(n, curve[n]) for n in sorted(set(wanted))]
        self.report(results, workloads)
        if self.args.startup_runs and startups:
            self.startup_table(startups)
        if cpus:  # the proxy's own CPU (process and children, /proc/PID/stat): less noisy than rates
            print("\nproxy CPU per unit of work (median of the runs; direct has no proxy)")
            print("%-14s" % "target" + "".join("%24s" % (w + (" ms/MiB" if w == "bulk" else " us/req")) for w in workloads))
            for name, c in cpus.items():
                print("%-14s" % name + "".join(
                    "%24s" % ("%.1f" % (c[w] * (1e3 if w == "bulk" else 1e6)) if w in c else "-")
                    for w in workloads))
            print("of which in the kernel (system time: sockets, epoll, wake-ups)")
            for name, c in cpus.items():
                print("%-14s" % name + "".join(
                    "%24s" % ("%.1f" % (c[w + " kernel"] * (1e3 if w == "bulk" else 1e6)) if w in c else "-")
                    for w in workloads))
        for name, r in results.items():
            if r.get("idle-curve"):
                print("\n%s RSS with idle terminated tunnels: " % name + ", ".join(
                    "%d: %s" % (n, "FAILED" if v is None else "%.1f MiB (%.1f anonymous)" % v) for n, v in r["idle-curve"]))
        if spread:  # how far apart the repeated runs were: read ratios with this in mind
            print("\nspread of the %d runs (min-max)" % self.args.repeat)
            for name, r in spread.items():
                print("%-14s" % name + "".join("%24s" % ("%.0f-%.0f %s" % r[w] if w in r else "-")
                                               for w in workloads))

    def startup_table(self, sandboxes):
        """`true` in each sandbox target, sluice exec offline, bubblewrap's empty sandbox and a bare
        `unshare` (the floor for any namespace sandbox), every row once a round in turn."""
        rows = list(sandboxes)
        if any(name == "sluice-exec" for name, _, _ in rows):
            rows.append(("sluice-exec offline", [self.sluice, "exec", "--sandbox-profile", "offline", "--",
                                                 "true"], None))
        rows.append(("bwrap", BWRAP_TRUE, None))
        rows.append(("unshare -Urn", [shutil.which("unshare") or "unshare", "-Urn", "true"], None))
        ok = []
        for name, cmd, env in rows:  # a sandbox that cannot run `true` is reported, not timed
            p = subprocess.run(cmd, capture_output=True, env=env, cwd=self.tmp, timeout=120)
            if p.returncode == 0:
                ok.append((name, cmd, env))
            else:
                print("start-up of %s failed (%d): %s" % (name, p.returncode, p.stderr.decode(errors="replace")[-500:]),
                      file=sys.stderr)
        cwd = os.getcwd()
        os.chdir(self.tmp)  # the sandboxes' workspace, as for the workloads (not wherever this runs)
        try:
            got = measure_startup(ok, self.args.startup_runs)
        finally:
            os.chdir(cwd)
        bwrap = got.get("bwrap", (None,))[0]
        print("\nstart-up: `true` in the sandbox, %d rounds, every row once a round in turn" % self.args.startup_runs)
        print("%-22s%12s%12s%14s%12s" % ("sandbox", "median ms", "p90 ms", "page faults", "x bwrap"))
        for name, _, _ in rows:
            if name not in got:
                print("%-22s%12s" % (name, "FAILED"))
                continue
            med, p90, faults = got[name]
            print("%-22s%12.2f%12.2f%14.0f%12s" % (name, med, p90, faults, "%.2f" % (med / bwrap) if bwrap else "-"))

    def report(self, results, workloads):
        cols = workloads
        print("\n%s, %d cores, repeat %d, %d requests" % (time.strftime("%Y-%m-%d"), os.cpu_count(),
                                                          self.args.repeat, self.args.requests))
        print("%-14s" % "target" + "".join("%24s" % w for w in cols))
        direct = results.get("direct", {})
        for name, r in results.items():
            cells = []
            for w in cols:
                if w not in r:
                    cells.append("%24s" % "-")
                    continue
                v, unit = r[w]
                if v is None:
                    cells.append("%24s" % "FAILED")
                    continue
                d = direct.get(w, (None, ""))[0]
                ratio = (" (%.2f)" % (v / d)) if d else ""
                cells.append("%24s" % ("%.1f %s%s" % (v, unit, ratio)))
            print("%-14s" % name + "".join(cells))
        for name, r in results.items():
            if "idle" in r:
                v, unit = r["idle"]
                print("%s idle tunnels (%d): %s" % (name, self.args.idle, "FAILED" if v is None else "%.1f %s" % (v, unit)))

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
        subprocess.run(["pkill", "-f", os.path.join(self.tmp, "squid")], capture_output=True)
        if self.host:
            self.host.close()
        with open("/etc/hosts") as f:
            lines = [l for l in f if HOSTS_MARK not in l]
        with open("/etc/hosts", "w") as f:
            f.writelines(lines)
        shutil.rmtree(self.tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--requests", type=int, default=8000,
                    help="keep-alive GETs per run; handshake-bound runs an eighth of it")
    ap.add_argument("--extra-config", default="", help="TOML added at the end of sluice serve's configuration "
                    "(a written \\n is a line break: '[scan]\\nenabled = false' is the gateway without its scanner)")
    ap.add_argument("--idle", type=int, default=0, help="also measure RSS with this many idle tunnels")
    ap.add_argument("--idle-curve", default="",
                    help="also measure the RSS of sluice (and of Squid and mitmproxy, when among the targets) at "
                         "these counts of idle terminated tunnels, e.g. 1000,10000,50000 (capped by the descriptor limit)")
    # One worker: curl and nginx share this machine's cores with the proxy, and a second worker
    # thread only adds context switches (measured: keep-alive 0.54 of direct with 2, 0.61 with 1).
    # Squid and mitmproxy run one process too.
    ap.add_argument("--sluice-threads", type=int, default=1, help="sluice worker threads (0: one per core)")
    ap.add_argument("--startup-runs", type=int, default=31,
                    help="rounds of the start-up table (`true` in each sandbox; 0: none)")
    ap.add_argument("--workloads", default="keep-alive,handshake,bulk", help="which of the workloads to run, in order")
    ap.add_argument("--targets", default="direct,sluice,sluice-http1.1,sluice-exec,sluice-exec-http1.1,tinyproxy,squid-bump,mitmproxy,srt,srt-tls")
    ap.add_argument("--no-build", action="store_true", help="use the sluice already built")
    ap.add_argument("--sluice", default=None, help="the sluice binary (default: the release build, else the default one)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the harness creates a network namespace and installs packages")
    if not args.no_build:  # a fresh machine: the build dependencies, then the release build
        root = os.path.join(HERE, "../..")
        subprocess.run(["bash", "scripts/install-deps.sh"], cwd=root, check=True)
        subprocess.run(["bash", "scripts/build.sh", "release"], cwd=root, check=True, stdout=subprocess.DEVNULL)
    b = Bench(args)
    try:
        b.run()
    finally:
        b.close()


if __name__ == "__main__":
    main()
