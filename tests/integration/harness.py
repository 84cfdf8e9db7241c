"""Shared machinery for the integration tests: test CAs and certificates (openssl), origins
(origin.py), a DNS server (dns_server.py), `sluice serve` processes, and clients (curl, urllib).
Everything talks to loopback only."""
import hashlib
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import unittest
import urllib.request

from origin import payload  # noqa: F401  (the bytes the test origin serves)

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3"
SLUICE = os.environ.get("SLUICE_BIN") or os.path.join(HERE, "../../build/default/sluice")


def free_port():
    """A free loopback port below the kernel's ephemeral range. A port the kernel hands out for
    bind(0) comes from that range, where every outgoing connection takes its local port too: one of
    them could take it between this check and the server's own bind (a replica in test_fleet once
    failed so: Address already in use)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    if low > 11000:
        for _ in range(100):
            port = random.randint(10000, low - 1)
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_records(lines):
    """An access log's records, as objects: its lines without the chain's checkpoint lines
    ({"type": "checkpoint", ...}; docs/metrics.md, "The chain"). A file's last line without its
    newline is one the gateway is still writing (a reader can catch a write half done) and is left
    for the next read; any other line that is not JSON fails."""
    import json
    out = []
    lines = list(lines)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            o = json.loads(line)
        except ValueError:
            if i == len(lines) - 1 and not line.endswith("\n"):
                break
            raise
        if o.get("type") != "checkpoint":
            out.append(o)
    return out


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, **kw)


def loopback_upstream(ca_pem, dns_port, resolve):
    """Config sections for origins on loopback: trust only the test CA, dial only 127.0.0.1, ask the
    test DNS server, and pin `resolve` (name -> address)."""
    pins = "".join('"%s" = "%s"\n' % (name, addr) for name, addr in resolve.items())
    return f"""[tls]
upstream_ca_bundle = "{ca_pem}"
system_trust = false
[upstream]
allow_addresses = ["127.0.0.1/32"]
dns_servers = ["127.0.0.1:{dns_port}"]
[upstream.resolve]
{pins}"""


def netns_upstream(ca_pem, names):
    """Config sections for origins on the test host in its network namespace (netns.TestHost,
    198.18.0.2): trust only the test CA, permit the test range, pin each of `names` to the host."""
    pins = "".join('"%s" = "198.18.0.2"\n' % name for name in names)
    return f"""[tls]
upstream_ca_bundle = "{ca_pem}"
system_trust = false
[upstream]
allow_addresses = ["198.18.0.0/15"]
[upstream.resolve]
{pins}"""


def make_ca(directory, name):
    key, pem = os.path.join(directory, name + ".key"), os.path.join(directory, name + ".pem")
    run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", key, "-out", pem, "-days", "2", "-subj", "/CN=" + name])
    return pem, key


def make_leaf(directory, ca, name, san):
    key, csr, pem = (os.path.join(directory, name + ext) for ext in (".key", ".csr", ".pem"))
    ext = os.path.join(directory, name + ".ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=%s\n" % san)
    run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", key, "-out", csr, "-subj", "/CN=" + name])
    run(["openssl", "x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial",
         "-out", pem, "-days", "2", "-extfile", ext])
    return pem, key


def make_client(directory, ca, name, san, cn=None, usage="clientAuth", days=None):
    """A client certificate: `san` as the subjectAltName, extendedKeyUsage `usage`; `days` = None
    for one valid now, or (start, end) in openssl's YYYYMMDDHHMMSSZ form for other validity."""
    key, csr, pem = (os.path.join(directory, name + ext) for ext in (".key", ".csr", ".pem"))
    ext = os.path.join(directory, name + ".ext")
    with open(ext, "w") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=%s\n" % usage)
        if san:
            f.write("subjectAltName=%s\n" % san)
    run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", key, "-out", csr, "-subj", "/CN=" + (cn or name).replace("/", "\\/")])
    if days is None:
        run(["openssl", "x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial",
             "-out", pem, "-days", "2", "-extfile", ext])
        return pem, key
    # `openssl ca` sets any validity window (x509 -req only counts days from now).
    db = os.path.join(directory, "ca-db-" + name)
    os.makedirs(db)
    open(os.path.join(db, "index.txt"), "w").close()
    with open(os.path.join(db, "serial"), "w") as f:
        f.write("1000\n")
    cnf = os.path.join(db, "ca.cnf")
    with open(cnf, "w") as f:
        f.write(f"""[ca]
default_ca = test
[test]
database = {db}/index.txt
new_certs_dir = {db}
serial = {db}/serial
certificate = {ca[0]}
private_key = {ca[1]}
default_md = sha256
policy = any
unique_subject = no
[any]
commonName = supplied
""")
    run(["openssl", "ca", "-batch", "-config", cnf, "-in", csr, "-out", pem, "-notext",
         "-startdate", days[0], "-enddate", days[1], "-extfile", ext])
    return pem, key


def wait_port(port, proc=None, timeout=30):
    # 30 s: an ASan build compiles the scanner's database ([scan]) at start in about 3 s of CPU, and
    # a loaded 2-core machine stretches that to 10.
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("process exited early: %s" % proc.args)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError("port %d never opened" % port)


class Processes:
    """Starts processes and stops them all at the end of a test class."""

    def __init__(self):
        self.procs = []

    def start(self, cmd, **kw):
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
        self.procs.append(p)
        return p

    def stop_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            for stream in (p.stdout, p.stderr):
                if stream:
                    stream.close()


def start_origin(procs, cert=None, host=None):
    port = free_port()
    cmd = [PYTHON, os.path.join(HERE, "origin.py"), str(port)]
    if cert:
        cmd += list(cert)
    p = procs.start(cmd, env=dict(os.environ, ORIGIN_HOST=host) if host else None)
    assert p.stdout.readline().strip() == b"ready"
    return port


def start_dns(procs, records):
    port = free_port()
    p = procs.start([PYTHON, os.path.join(HERE, "dns_server.py"), str(port)] +
                    ["%s=%s" % (k, ",".join(v)) for k, v in records.items()])
    assert p.stdout.readline().strip() == b"ready"
    return port


class Gateway:
    """One `sluice serve` process with a config written from a TOML string."""

    def __init__(self, procs, directory, toml_body, name="gw", listen_extra="", args=(), log_format=None):
        self.dir = directory
        self.port = free_port()
        self.admin = free_port()
        self.config = os.path.join(directory, name + ".toml")
        self.ca = os.path.join(directory, name + "-ca.pem")
        self.log = os.path.join(directory, name + "-access.log")
        self.stderr_path = os.path.join(directory, name + ".stderr")
        self.log_format = log_format  # [log] format; None: the default (sluice's JSON line)
        self.write_config(toml_body, listen_extra)
        self.stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen([SLUICE, "serve", "--config", self.config, "--ca-out", self.ca, *args],
                                     stdout=subprocess.DEVNULL, stderr=self.stderr)
        procs.procs.append(self.proc)
        self.stderr.close()  # the child holds its own descriptor
        wait_port(self.port, self.proc)
        wait_port(self.admin, self.proc)

    def write_config(self, body, listen_extra=""):
        """`listen_extra`: more [listen] keys (proxy_tls = ...)."""
        with open(self.config, "w") as f:
            f.write(body + "\n")
            f.write('[listen]\nproxy = "127.0.0.1:%d"\nadmin = "127.0.0.1:%d"\n' % (self.port, self.admin))
            f.write(listen_extra)
            f.write('[log]\naccess_log = "%s"\n' % self.log)
            if self.log_format:
                f.write('format = "%s"\n' % self.log_format)

    @property
    def proxy(self):
        return "http://127.0.0.1:%d" % self.port

    def metrics(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.admin, timeout=5) as r:
            return r.read().decode()

    def metric(self, name, **labels):
        total = 0.0
        for line in self.metrics().splitlines():
            if not line.startswith(name) or line.startswith("#"):
                continue
            series, value = line.rsplit(" ", 1)
            if series.split("{")[0] != name:
                continue
            if all('%s="%s"' % kv in series for kv in labels.items()):
                total += float(value)
        return total

    def access_log(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            return log_records(f)

    def logged(self, pred, timeout=5.0):
        """True once an access-log line satisfies `pred`: the line is written after the client has
        its answer, so a test that reads the log at once may be early (seen under ASan)."""
        return bool(self.wait_log(lambda lines: any(pred(l) for l in lines), timeout))

    def wait_log(self, ready, timeout=5.0):
        """The access log's lines once `ready(lines)` holds, or, at the timeout, as they are then
        (an empty list when `ready` never held). A line is written after the client has its answer,
        and a worker writes its lines together after the work its loop has ready, so requests that
        ran side by side (an h2 connection's streams) may reach the file in more than one write."""
        deadline = time.monotonic() + timeout
        while True:
            lines = self.access_log()
            if ready(lines):
                return lines
            if time.monotonic() > deadline:
                return []
            time.sleep(0.05)

    def lines_where(self, pred, at_least=1, timeout=5.0):
        """The lines satisfying `pred` once `at_least` of them are in the file; at the timeout, those
        there then, for the assertion to show. A test reads what it asserts on through this (or
        `logged`), never the file at once: see `wait_log`."""
        lines = self.wait_log(lambda ls: sum(1 for l in ls if pred(l)) >= at_least, timeout) or self.access_log()
        return [l for l in lines if pred(l)]

    def stderr_text(self):
        with open(self.stderr_path) as f:
            return f.read()


def curl(gw, url, *args, cacert=True):
    cmd = ["curl", "-sS", "--max-time", "20", "--proxy", gw.proxy, "-o", "-", "-D", "/dev/stderr"]
    if cacert:
        cmd += ["--cacert", gw.ca]
    cmd += list(args) + [url]
    p = subprocess.run(cmd, capture_output=True)
    return p


def status_of(headers_text):
    """The final status code in a `curl -D` dump (after any CONNECT response)."""
    codes = [int(l.split()[1]) for l in headers_text.splitlines() if l.startswith("HTTP/")]
    return codes[-1] if codes else 0


def header(headers_text, name):
    value = None
    for line in headers_text.splitlines():
        if line.lower().startswith(name.lower() + ":"):
            value = line.split(":", 1)[1].strip()
    return value


def raw_exchange(port, data, read_timeout=5):
    """Sends raw bytes to the proxy and returns everything read until close or timeout."""
    with socket.create_connection(("127.0.0.1", port), timeout=read_timeout) as s:
        s.sendall(data)
        out = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        except socket.timeout:
            pass
        return out


def read_response(recv):
    """(status, body) of one HTTP/1.1 response read with `recv()` (bytes; b"" at the end): the head
    up to its blank line, then as many body bytes as Content-Length says. Status 0 if nothing came."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = recv()
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = recv()
        if not chunk:
            break
        body += chunk
    return (int(head.split()[1]) if head else 0), body


def sha256(data):
    return hashlib.sha256(data).hexdigest()


class LoopbackOrigins(unittest.TestCase):
    """A suite's shared set-up: a scratch directory, the processes it starts, a test CA and two origins
    on loopback, https for origin.test (cls.https) and plain http (cls.http). Suites add their own
    origins and gateways in setUpClass after calling this one."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.procs = Processes()
        cls.ca = make_ca(cls.tmp.name, "origin-ca")
        cls.https = start_origin(cls.procs, make_leaf(cls.tmp.name, cls.ca, "origin.test", "DNS:origin.test"))
        cls.http = start_origin(cls.procs)

    @classmethod
    def tearDownClass(cls):
        cls.procs.stop_all()
        cls.tmp.cleanup()
