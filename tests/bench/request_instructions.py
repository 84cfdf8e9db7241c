#!/usr/bin/python3
"""Instructions a keep-alive request costs `sluice serve`, counted by callgrind (which counts
instructions, not seconds: the same for the same binary and inputs whatever else the machine does,
so two binaries compare exactly). Each binary serves the same plain-HTTP proxy requests for 1 KiB
from the test origin on loopback (tests/integration/origin.py) over one keep-alive connection, with
the access log on (a file); the counters are zeroed after a warm-up and dumped after the measured
requests, so start-up and the warm-up's allocations are left out. Prints instructions per request
for each binary, and for two binaries the second's ratio to the first.

--tunnel sends the same requests inside one terminated CONNECT tunnel to the origin over TLS
(its certificate from a test CA sluice trusts): the path of an agent's HTTPS requests. --pause S
waits S seconds before each measured request, so that a tunnel parks between requests (it parks
after 100 ms idle; under callgrind everything runs slower, so take S well above it: 0.5).

--keep DIR copies each binary's callgrind dump of the measured requests to DIR (callgrind-N.out,
N its place on the command line), for `callgrind_annotate --inclusive=yes DIR/callgrind-0.out`.

--bulk MIB counts instead what sluice spends a MiB of response body inside a terminated tunnel:
curl (one connection, its requests one after the other) fetches MIB MiB from the origin over TLS,
--warmup times before the counters are zeroed and --requests times after, once speaking HTTP/1.1
to sluice and once h2 (sluice speaks HTTP/1.1 to the origin either way): the translated path's
cost for bulk against the HTTP/1.1 path's, exactly (issue #56, item 1). --curl-keepalive does the
same for keep-alive requests of 1 KiB (curl, one at a time, on one connection; instructions a
request). --h2-origin makes the origin nginx over h2 (installed: nginx-light), so that the h2
client's downloads are h2 on both legs.

--client (with --curl-keepalive or --bulk) also counts curl's own instructions a request (a MiB),
curl itself run under callgrind: through each binary, and straight to an nginx origin speaking
both protocols, for reference. It shows what h2 costs the client itself: on a machine whose cores
the client shares with sluice and the origin, that is part of what an h2 client's rate pays.

--nghttpx (with --curl-keepalive --h2-origin) adds nghttpx (Debian's nghttp2-proxy, the proxy of
the library sluice uses: TLS and h2 on both legs, one worker in one process) as a row: the same
curl requests to it as a reverse proxy for the same nginx, counted the same way. The reference of
issue #56's item 2, in instructions rather than seconds.

--scan-both measures one binary with the secret scanner off ([scan] enabled = false), then on:
its cost per request. --chain-both does the same for the access log's chain ([log] chain = false,
then on with signed checkpoints).

usage: tests/bench/request_instructions.py [--requests 400] [--warmup 100] [--tunnel] [--pause S]
       [--keep DIR] [--scan-off | --scan-both | --chain-both] [--bulk MIB [--h2-origin] | --curl-keepalive]
       [--client] [--nghttpx]
       BINARY [BINARY...]
(callgrind from valgrind, on every machine of this kind)."""
import argparse
import glob
import http.client
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../integration"))
from harness import free_port, make_ca, make_leaf, wait_port  # noqa: E402


def connection(port, origin_port, args, cafile):
    """A keep-alive connection to the origin through sluice: plain proxy requests, or (--tunnel) a
    CONNECT tunnel that sluice terminates, TLS with sluice's CA."""
    if not args.tunnel:
        return http.client.HTTPConnection("127.0.0.1", port, timeout=30), "http://origin.test:%d" % origin_port
    c = http.client.HTTPSConnection("127.0.0.1", port, timeout=30, context=ssl.create_default_context(cafile=cafile))
    c.set_tunnel("origin.test", origin_port)
    return c, ""


def requests(c, prefix, n, pause=0):
    for _ in range(n):
        if pause:
            time.sleep(pause)
        c.request("GET", prefix + "/bytes/1024")
        r = c.getresponse()
        body = r.read()
        if r.status != 200 or len(body) != 1024:
            raise SystemExit("the request through sluice failed: %d, %d bytes" % (r.status, len(body)))


def curl_requests(port, origin_port, cafile, args, n, wrap=()):
    """n GETs of args.size bytes on one curl connection, each checked: through sluice's terminated
    tunnel (`port`), or with port None straight to the origin. `wrap` runs curl under another command
    (callgrind, for --client)."""
    url = "https://origin.test:%d/bytes/%d" % (origin_port, args.size)
    route = (["-x", "http://127.0.0.1:%d" % port] if port else
             ["--resolve", "origin.test:%d:127.0.0.1" % origin_port])
    p = subprocess.run(list(wrap) + ["curl", "-s", "-w", "%{http_code} %{size_download} %{http_version}\n",
                                     "--" + args.protocol, "--cacert", cafile] + route + ["-o", "/dev/null", url] * n,
                       capture_output=True, text=True, timeout=1200)
    want = "200 %d %s" % (args.size, "2" if args.protocol == "http2" else "1.1")
    if p.returncode != 0 or p.stdout.split("\n")[:n] != [want] * n:
        raise SystemExit("the download %s failed: %r %s" % ("through sluice" if port else "straight to the origin",
                                                            p.stdout, p.stderr))


def callgrind_total(path):
    """The instruction count of a callgrind dump (its summary line); 0 when it has none."""
    with open(path) as f:
        for line in f:
            m = re.match(r"(?:summary|totals): (\d+)", line)
            if m:
                return int(m.group(1))
    return 0


def largest_dump(out):
    """The callgrind dump of the measured requests among `out`'s (one file per dump, `out`.N): the
    one of most instructions, as (instructions, path); (0, None) when there is none."""
    return max(((callgrind_total(d), d) for d in glob.glob(out + ".*")), default=(0, None))


def client_cost(port, origin_port, cafile, args, tmp):
    """curl's own instructions a request (a MiB): curl run under callgrind for --warmup requests and
    for --warmup + --requests, the difference over --requests (start-up and handshakes cancel out)."""
    totals = []
    for n in (args.warmup, args.warmup + args.requests):
        out = os.path.join(tmp, "curl-callgrind-%d.out" % n)
        curl_requests(port, origin_port, cafile, args, n, ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out])
        totals.append(callgrind_total(out))
    return (totals[1] - totals[0]) / args.requests / (args.bulk or 1)


def nginx_h2_origin(tmp, ca, port, size):
    """nginx speaking h2 (and HTTP/1.1) over TLS on loopback, serving /bytes/SIZE: random bytes."""
    cert, key = make_leaf(tmp, ca, "nginx", "DNS:origin.test")
    www = os.path.join(tmp, "www")
    os.makedirs(os.path.join(www, "bytes"))
    with open(os.path.join(www, "bytes", str(size)), "wb") as f:
        f.write(os.urandom(size))
    for path, mode in ((tmp, 0o755), (www, 0o755), (www + "/bytes", 0o755), (www + "/bytes/%d" % size, 0o644)):
        os.chmod(path, mode)  # nginx's workers run as nobody
    with open(os.path.join(tmp, "nginx.conf"), "w") as f:
        f.write("daemon off; worker_processes 1; pid %s/nginx.pid; error_log %s/nginx-error.log;\n"
                "events {}\nhttp { access_log off; server { listen 127.0.0.1:%d ssl http2; "
                "ssl_certificate %s; ssl_certificate_key %s; root %s; } }\n" % (tmp, tmp, port, cert, key, www))
    p = subprocess.Popen(["nginx", "-c", os.path.join(tmp, "nginx.conf")], stderr=subprocess.DEVNULL)
    wait_port(port, p, timeout=20)
    return p


def direct_client_costs(tmp, ca, args):
    """curl's own instructions a request (a MiB) straight to nginx, over HTTP/1.1 and over h2: what
    each protocol costs the client with no proxy between ([(protocol, instructions)])."""
    d = os.path.join(tmp, "direct")
    os.makedirs(d)
    os.chmod(tmp, 0o755)  # nginx's workers (nobody) reach the files through it
    port = free_port()
    nginx = nginx_h2_origin(d, ca, port, args.size)
    try:
        out = []
        for proto in ("http1.1", "http2"):
            args.protocol = proto
            out.append((proto, client_cost(None, port, os.path.join(tmp, "test-ca.pem"), args, d)))
        return out
    finally:
        nginx.terminate()
        nginx.wait(timeout=20)


def measure_nghttpx(tmp, ca, origin_port, args):
    """nghttpx's instructions a request under callgrind: curl's requests to it as a reverse proxy
    (TLS and h2 to curl, TLS and h2 to the nginx origin, an access log line each), one worker in one
    process, counted as measure() counts sluice."""
    port = free_port()
    cert, key = make_leaf(tmp, ca, "nghttpx", "DNS:origin.test")
    out = os.path.join(tmp, "callgrind-nghttpx.out")
    p = subprocess.Popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out, "nghttpx", "--single-process",
                          "--workers", "1", "-f", "127.0.0.1,%d" % port,
                          "-b", "127.0.0.1,%d;;tls;proto=h2;sni=origin.test" % origin_port, "--cacert", ca[0],
                          "--no-ocsp", "--errorlog-file", os.path.join(tmp, "nghttpx.log"),
                          "--accesslog-file", os.path.join(tmp, "nghttpx-access.log"), key, cert],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, p, timeout=120)
        curl_requests(None, port, ca[0], args, args.warmup)
        subprocess.run(["callgrind_control", "-z", str(p.pid)], check=True, capture_output=True)
        curl_requests(None, port, ca[0], args, args.requests)
        subprocess.run(["callgrind_control", "-d", str(p.pid)], check=True, capture_output=True)
        time.sleep(0.5)
    finally:
        p.terminate()
        p.wait(timeout=120)
    total, _ = largest_dump(out)
    if not total:
        raise SystemExit("no callgrind dump for nghttpx in %s" % tmp)
    return total / args.requests


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
[tls]
upstream_ca_bundle = "{tmp}/test-ca.pem"
system_trust = false
[log]
access_log = "{tmp}/access-{index}.log"
""")
        if args.chain == "off":  # the access log's chain switched off (docs/metrics.md, "The chain")
            f.write("chain = false\n")
        elif args.chain == "signed":  # the chain, its checkpoints signed (every 60 s, the default)
            f.write(f'signing_key = "file:{tmp}/log-key.pem"\n')
        if args.scan_off:  # the secret scanner switched off ([scan] enabled = false)
            f.write("[scan]\nenabled = false\n")
    cafile = os.path.join(tmp, "sluice-ca-%d.pem" % index)
    out = os.path.join(tmp, "callgrind-%d.out" % index)
    p = subprocess.Popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out, binary, "serve",
                          "--config", conf, "--ca-out", cafile], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    try:
        wait_port(port, p, timeout=120)
        for _ in range(600):  # the CA file may be complete a moment after the port opens
            if os.path.exists(cafile) and b"END CERTIFICATE" in open(cafile, "rb").read():
                break
            time.sleep(0.1)
        if args.curl:
            def run(n, pause=0):
                curl_requests(port, origin_port, cafile, args, n)
        else:
            c, prefix = connection(port, origin_port, args, cafile)

            def run(n, pause=0):
                requests(c, prefix, n, pause)
        run(args.warmup)
        subprocess.run(["callgrind_control", "-z", str(p.pid)], check=True, capture_output=True)
        run(args.requests, args.pause)
        subprocess.run(["callgrind_control", "-d", str(p.pid)], check=True, capture_output=True)
        if args.client:
            args.client_costs.append(client_cost(port, origin_port, cafile, args, tmp))
        if not args.curl:
            c.close()
        time.sleep(0.5)
    finally:
        p.terminate()
        p.wait(timeout=120)
    total, kept = largest_dump(out)
    if args.keep and kept:
        os.makedirs(args.keep, exist_ok=True)
        shutil.copyfile(kept, os.path.join(args.keep, "callgrind-%d.out" % index))
    if not total:
        raise SystemExit("no callgrind dump for %s in %s" % (binary, tmp))
    return total / args.requests / (args.bulk or 1)  # a download's MiB, or a request


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--requests", type=int, help="measured requests (default 400; with --bulk, downloads: 4)")
    ap.add_argument("--warmup", type=int, help="requests before the counters are zeroed (100; --bulk: 1)")
    ap.add_argument("--tunnel", action="store_true", help="requests inside a terminated CONNECT tunnel")
    ap.add_argument("--pause", type=float, default=0, help="seconds before each measured request")
    ap.add_argument("--keep", metavar="DIR", help="copy each binary's callgrind dump to DIR")
    ap.add_argument("--scan-off", action="store_true",
                    help="[scan] enabled = false for every binary (a binary without [scan] refuses the key)")
    ap.add_argument("--scan-both", action="store_true",
                    help="one binary, measured with [scan] off and then on (the scanner's cost per request)")
    ap.add_argument("--chain-both", action="store_true",
                    help="one binary, measured with [log] chain = false and then with the chain on and signed")
    ap.add_argument("--bulk", type=int, metavar="MIB",
                    help="MIB-MiB downloads through a terminated tunnel by curl, over HTTP/1.1 and over h2 "
                         "(instructions a MiB); --requests and --warmup count downloads")
    ap.add_argument("--curl-keepalive", action="store_true",
                    help="the keep-alive requests made by curl inside a terminated tunnel, one at a time on one "
                         "connection, over HTTP/1.1 and over h2 (instructions a request)")
    ap.add_argument("--client", action="store_true",
                    help="with --curl-keepalive or --bulk: also count curl's own instructions, through each binary "
                         "and straight to an nginx origin speaking both protocols")
    ap.add_argument("--nghttpx", action="store_true",
                    help="with --curl-keepalive --h2-origin: also count nghttpx proxying the same requests")
    ap.add_argument("--h2-origin", action="store_true",
                    help="with --bulk or --curl-keepalive: the origin is nginx speaking h2 (sluice then speaks h2 "
                         "to it for an h2 client)")
    args = ap.parse_args()
    args.chain = None
    if args.h2_origin and not (args.bulk or args.curl_keepalive):
        ap.error("--h2-origin goes with --bulk or --curl-keepalive")
    if args.nghttpx and not (args.curl_keepalive and args.h2_origin):
        ap.error("--nghttpx goes with --curl-keepalive --h2-origin")
    if args.bulk and args.curl_keepalive:
        ap.error("--bulk or --curl-keepalive, not both")
    args.curl = bool(args.bulk or args.curl_keepalive)  # curl's requests, over HTTP/1.1 and over h2
    if args.client and not args.curl:
        ap.error("--client goes with --curl-keepalive or --bulk")
    args.client_costs = []
    args.size = args.bulk << 20 if args.bulk else 1024
    args.tunnel = args.tunnel or args.curl
    if args.requests is None:
        args.requests = 4 if args.bulk else 400
    if args.warmup is None:
        args.warmup = 1 if args.bulk else 100
    with tempfile.TemporaryDirectory() as tmp:
        origin_port = free_port()
        cmd = ["/usr/bin/python3", os.path.join(HERE, "../integration/origin.py"), str(origin_port)]
        ca = make_ca(tmp, "test-ca")
        if args.tunnel:  # the origin speaks TLS with a certificate from the CA sluice trusts
            cmd += list(make_leaf(tmp, ca, "origin", "DNS:origin.test"))
        if args.h2_origin:
            origin = nginx_h2_origin(tmp, ca, origin_port, args.size)
        else:
            origin = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            if not args.h2_origin and origin.stdout.readline().strip() != "ready":
                raise SystemExit("the test origin did not start")
            if args.chain_both:
                subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", tmp + "/log-key.pem"],
                               check=True, capture_output=True)
                args.chain = "off"
                off = measure(args.binaries[0], tmp, origin_port, args, 0)
                args.chain = "signed"
                results = [("%s (chain off)" % args.binaries[0], off),
                           ("%s (chain, signed)" % args.binaries[0], measure(args.binaries[0], tmp, origin_port, args, 1))]
            elif args.scan_both:
                args.scan_off = True
                off = measure(args.binaries[0], tmp, origin_port, args, 0)
                args.scan_off = False
                results = [("%s ([scan] off)" % args.binaries[0], off),
                           ("%s ([scan] on)" % args.binaries[0], measure(args.binaries[0], tmp, origin_port, args, 1))]
            elif args.curl:
                results = []
                for i, b in enumerate(args.binaries):
                    for j, proto in enumerate(("http1.1", "http2")):
                        args.protocol = proto
                        results.append(("%s (%s)" % (b, proto), measure(b, tmp, origin_port, args, 2 * i + j)))
                if args.client:
                    direct = direct_client_costs(tmp, ca, args)
                if args.nghttpx:
                    args.protocol = "http2"
                    results.append(("nghttpx (http2)", measure_nghttpx(tmp, ca, origin_port, args)))
            else:
                results = [(b, measure(b, tmp, origin_port, args, i)) for i, b in enumerate(args.binaries)]
        finally:
            origin.terminate()  # nginx's master takes its worker with it
            origin.wait(timeout=20)
    unit = "MiB" if args.bulk else "request"
    if args.client:
        print("%-50s %12s %12s   (instructions/%s)" % ("", "sluice", "curl", unit))
        for proto, per in direct:
            print("%-50s %12s %12.0f" % ("straight to nginx (%s)" % proto, "-", per))
        costs = args.client_costs + [None] * (len(results) - len(args.client_costs))  # nghttpx's: not counted
        for (b, per), client in zip(results, costs):
            print("%-50s %12.0f %12s" % (b, per, "-" if client is None else "%.0f" % client))
        return
    for b, per in results:
        print("%-50s %10.0f instructions/%s" % (b, per, unit))
    if len(results) == 2:
        print("ratio second/first: %.3f" % (results[1][1] / results[0][1]))


if __name__ == "__main__":
    main()
