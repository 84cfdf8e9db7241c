"""The adversarial matrix against `sluice serve` (docs/threat-model.md): destination and name tricks,
cross-checks, read-only semantics, framing, resource abuse and TLS. Real processes on loopback only;
the 'forbidden' destinations are loopback addresses outside the allowed range, each with a listener
that counts connections, so that a test proves nothing was dialed."""
import os
import socket
import ssl
import subprocess
import time
import unittest

import resource

# Thousands of idle connections need descriptors, here and in the gateways started below.
resource.setrlimit(resource.RLIMIT_NOFILE, (min(8192, resource.getrlimit(resource.RLIMIT_NOFILE)[1]),
                                            resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

from harness import (PYTHON, HERE, Gateway, LoopbackOrigins, curl, free_port, header,
                     loopback_upstream, make_leaf, raw_exchange, run, start_dns, start_origin, status_of)


def expired_leaf(d, ca, name):
    """A certificate for `name` that expired in 2020, signed by `ca` (openssl ca with explicit dates)."""
    key, csr, pem = (os.path.join(d, name + x) for x in (".key", ".csr", ".pem"))
    run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
         "-out", csr, "-subj", "/CN=" + name])
    db = os.path.join(d, "index.txt")
    open(db, "w").close()
    conf = os.path.join(d, "ca.cnf")
    with open(conf, "w") as f:
        f.write(f"""[ca]\ndefault_ca = c\n[c]\ndatabase = {db}\nnew_certs_dir = {d}\nserial = {d}/serial\n
default_md = sha256\npolicy = p\nunique_subject = no\ncopy_extensions = none\nx509_extensions = e\n[p]\ncommonName = supplied\n
[e]\nsubjectAltName = DNS:{name}\n""")
    with open(os.path.join(d, "serial"), "w") as f:
        f.write("1000\n")
    run(["openssl", "ca", "-batch", "-config", conf, "-cert", ca[0], "-keyfile", ca[1], "-in", csr, "-out", pem,
         "-startdate", "20200101000000Z", "-enddate", "20200102000000Z", "-notext"])
    return pem, key


class Counter:
    """A listener on a forbidden loopback address that counts connections."""

    def __init__(self, procs, address):
        self.port = free_port()
        self.address = address
        p = procs.start([PYTHON, os.path.join(HERE, "bad_origin.py"), str(self.port), address])
        assert p.stdout.readline().strip() == b"ready"

    def count(self):
        with socket.create_connection((self.address, self.port), timeout=5) as s:
            s.sendall(b"GET /count HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while True:
                c = s.recv(4096)
                if not c:
                    break
                data += c
        return int(data.split(b"\r\n\r\n")[1])


class Adversarial(LoopbackOrigins):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d, ca = cls.tmp.name, cls.ca
        wrong = make_leaf(d, ca, "other.test", "DNS:other.test")
        old = expired_leaf(d, ca, "expired.test")
        cls.wrong = start_origin(cls.procs, wrong)
        cls.expired = start_origin(cls.procs, old)
        cls.bad = free_port()
        p = cls.procs.start([PYTHON, os.path.join(HERE, "bad_origin.py"), str(cls.bad)])
        assert p.stdout.readline().strip() == b"ready"
        cls.bad_tls = free_port()
        p = cls.procs.start([PYTHON, os.path.join(HERE, "bad_origin.py"), str(cls.bad_tls), "127.0.0.1",
                             *make_leaf(d, ca, "badtls.test", "DNS:badtls.test")])
        assert p.stdout.readline().strip() == b"ready"
        # 127.0.0.2 and 127.0.0.3 stand for private and metadata destinations: not in the allowed
        # range (127.0.0.1/32), each with a counting listener on the port the tests ask for.
        cls.trap = Counter(cls.procs, "127.0.0.2")
        dns = start_dns(cls.procs, {"mixed.test": ["127.0.0.2", "127.0.0.1"],
                                    "rebind.test": ["127.0.0.1", "127.0.0.2"],
                                    "private.test": ["127.0.0.2"]})
        cls.body = f"""
[policy]
allow = ["origin.test:{cls.https}", "origin.test:{cls.http}", "wrong.test:{cls.wrong}",
         "expired.test:{cls.expired}", "bad.test:{cls.bad}", "mixed.test:{cls.trap.port}",
         "rebind.test:{cls.trap.port}", "private.test:{cls.trap.port}",
         "127.0.0.2:{cls.trap.port}", "allowed.test:{cls.http}", "badtls.test:{cls.bad_tls}"]
""" + loopback_upstream(ca[0], dns, {name: "127.0.0.1" for name in ("origin.test", "wrong.test",
                                                                     "expired.test", "bad.test",
                                                                     "allowed.test", "badtls.test")}) + """[timeouts]
tls_handshake = "2s"
header_read = "1s"
idle = "2s"
io = "1500ms"
request = "4s"
[limits]
max_response_body_bytes = 2097152
max_header_bytes = 16384
"""
        cls.gw = Gateway(cls.procs, d, 'profile = "network-read"\n' + cls.body, "read")
        cls.pub = Gateway(cls.procs, d, 'profile = "publish"\n' + cls.body, "pub")

    def get(self, gw, raw):
        return raw_exchange(gw.port, raw.encode() if isinstance(raw, str) else raw)

    def still_serving(self, gw=None):
        p = curl(gw or self.gw, f"http://origin.test:{self.http}/alive")
        self.assertEqual(p.stdout, b"hello from origin /alive\n")

    def test_an_origin_failure_has_one_reason_whatever_the_client_speaks(self):
        """The same failure of an HTTPS origin, met by an HTTP/1.1 client and by an h2 client (sent
        on as HTTP/1.1 both), ends in the same reason: one mapping of origin failures
        (gateway/upstream/failure.cpp). A TLS connection cut inside the response head was
        response_incomplete over HTTP/1.1 but upstream_protocol_error over h2."""
        rows = (("/cut-head", "response_incomplete", 502), ("/silent", "response_incomplete", 502),
                ("/garbage", "upstream_protocol_error", 502),
                ("/big-head", "upstream_response_too_large", 502), ("/hang", "response_timeout", 504))
        for path, reason, status in rows:
            for version, protocol in (("--http1.1", "http/1.1"), ("--http2", "h2")):
                p = curl(self.pub, f"https://badtls.test:{self.bad_tls}{path}", version)
                heads = p.stderr.decode()
                self.assertEqual(status_of(heads), status, (path, version, heads))
                self.assertIn(f'details="{reason}"', header(heads, "Proxy-Status") or "", (path, version, heads))
                self.assertTrue(self.pub.logged(lambda r: r["path"] == path and r["protocol"] == protocol and
                                                r["reason"] == reason), (path, protocol))
        self.still_serving(self.pub)

    # --- destination tricks -----------------------------------------------------------------
    def test_ip_literal_notations_refused(self):
        for host in ("2130706433", "0x7f000001", "0177.0.0.1", "0x7f.0.0.1", "127.1", "127.0.1",
                     "017700000001"):
            out = self.get(self.gw, f"GET http://{host}:{self.http}/ HTTP/1.1\r\nHost: {host}:{self.http}\r\n\r\n")
            self.assertIn(b'details="ambiguous_host"', out, host)
        for host in ("[::ffff:127.0.0.2]", "[::127.0.0.2]", "[64:ff9b::7f00:2]", "[2002:7f00:2::1]",
                     "[::1]", "[fd00:ec2::254]", "169.254.169.254", "100.64.0.1", "0.0.0.0"):
            out = self.get(self.gw, f"GET http://{host}:{self.trap.port}/ HTTP/1.1\r\nHost: {host}:{self.trap.port}\r\n\r\n")
            self.assertTrue(out.startswith(b"HTTP/1.1 403"), (host, out[:100]))
        self.assertEqual(self.trap.count(), 0)

    def test_listed_special_address_still_refused(self):
        out = self.get(self.gw, f"GET http://127.0.0.2:{self.trap.port}/ HTTP/1.1\r\nHost: 127.0.0.2:{self.trap.port}\r\n\r\n")
        self.assertIn(b"destination_ip_prohibited", out)
        self.assertEqual(self.trap.count(), 0)

    def test_localhost_names_refused(self):
        out = self.get(self.gw, f"GET http://localhost:{self.http}/ HTTP/1.1\r\nHost: localhost:{self.http}\r\n\r\n")
        self.assertIn(b'details="localhost_refused"', out)
        out = self.get(self.gw, f"GET http://a.localhost:{self.http}/ HTTP/1.1\r\nHost: a.localhost:{self.http}\r\n\r\n")
        self.assertIn(b'details="localhost_refused"', out)

    def test_dns_answers_mixing_allowed_and_forbidden_dial_only_checked(self):
        for name in ("mixed.test", "rebind.test", "rebind.test", "rebind.test", "private.test"):
            out = self.get(self.gw, f"GET http://{name}:{self.trap.port}/x HTTP/1.1\r\nHost: {name}:{self.trap.port}\r\nConnection: close\r\n\r\n")
            self.assertRegex(out[:12], rb"HTTP/1.1 (200|403|502)", name)
        self.assertEqual(self.trap.count(), 0)

    # --- name tricks --------------------------------------------------------------------------
    def test_name_tricks(self):
        cases = {
            f"allowed.test.evil.test:{self.http}": b"host_not_allowlisted",
            f"evilallowed.test:{self.http}": b"host_not_allowlisted",
            f"ALLOWED.TEST.:{self.http}": b"HTTP/1.1 200",
            f"allowed%2etest:{self.http}": b"invalid_host",
            f"allowed..test:{self.http}": b"invalid_host",
            f"{'a' * 64}.test:{self.http}": b"invalid_host",
            f"xn--bcher-kva.test:{self.http}": b"host_not_allowlisted",
            f"under_score.test:{self.http}": b"host_not_allowlisted",
        }
        for auth, want in cases.items():
            out = self.get(self.gw, f"GET http://{auth}/ HTTP/1.1\r\nHost: {auth}\r\nConnection: close\r\n\r\n")
            self.assertIn(want, out, auth)
        out = self.get(self.gw, f"GET http://allowed.test:{self.http}@evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n")
        self.assertIn(b"userinfo_in_target", out)
        out = self.get(self.gw, "GET http://b\xc3\xbccher.test/ HTTP/1.1\r\nHost: x\r\n\r\n".encode("latin-1"))
        self.assertRegex(out[:12], rb"HTTP/1.1 4\d\d")

    # --- cross-checks ------------------------------------------------------------------------
    def tunnel(self, gw, connect, sni, requests):
        s = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
        s.sendall(f"CONNECT {connect} HTTP/1.1\r\nHost: {connect}\r\n\r\n".encode())
        resp = s.recv(4096)
        if not resp.startswith(b"HTTP/1.1 200"):
            s.close()
            return resp
        ctx = ssl.create_default_context(cafile=gw.ca)
        ctx.check_hostname = False
        t = ctx.wrap_socket(s, server_hostname=sni)
        t.sendall(requests.encode())
        data = b""
        try:
            while True:
                c = t.recv(65536)
                if not c:
                    break
                data += c
        except (socket.timeout, ssl.SSLError):
            pass
        t.close()
        return data

    def test_connect_sni_host_and_authority_cross_checks(self):
        o = f"origin.test:{self.https}"
        ok = self.tunnel(self.gw, o, None, f"GET /nosni HTTP/1.1\r\nHost: {o}\r\nConnection: close\r\n\r\n")
        self.assertTrue(ok.startswith(b"HTTP/1.1 200"), ok[:100])  # no SNI: the CONNECT host's leaf
        out = self.tunnel(self.gw, o, "origin.test", f"GET https://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n")
        self.assertIn(b"host_mismatch", out)
        out = self.tunnel(self.gw, o, "origin.test", f"GET https://{o}/ HTTP/1.1\r\nHost: evil.test\r\n\r\n")
        self.assertIn(b"host_mismatch", out)
        out = self.tunnel(self.gw, o, "origin.test",
                          f"GET /a HTTP/1.1\r\nHost: {o}\r\n\r\nGET /b HTTP/1.1\r\nHost: evil.test\r\n\r\n")
        self.assertIn(b"hello from origin /a", out)
        self.assertIn(b"host_mismatch", out)
        self.assertNotIn(b"hello from origin /b", out)
        out = self.tunnel(self.gw, o, "origin.test", f"CONNECT evil.test:443 HTTP/1.1\r\nHost: {o}\r\n\r\n")
        self.assertIn(b"connect_in_tunnel", out)
        with self.assertRaises(ssl.SSLError):
            ctx = ssl.create_default_context(cafile=self.gw.ca)
            s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=5)
            s.sendall(f"CONNECT {o} HTTP/1.1\r\n\r\n".encode())
            s.recv(4096)
            ctx.wrap_socket(s, server_hostname="evil.test")

    def test_plain_bytes_in_tunnel_refused(self):
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=5)
        s.sendall(f"CONNECT origin.test:{self.https} HTTP/1.1\r\n\r\n".encode())
        self.assertTrue(s.recv(4096).startswith(b"HTTP/1.1 200"))
        s.sendall(b"GET / HTTP/1.1\r\nHost: origin.test\r\n\r\n")
        self.assertIn(b"tls_required", s.recv(4096))
        s.close()

    # --- read-only semantics -------------------------------------------------------------------
    def test_read_only_semantics(self):
        u = f"http://origin.test:{self.http}"
        h = f"Host: origin.test:{self.http}\r\n"
        cases = [
            (f"get {u}/ HTTP/1.1\r\n{h}\r\n", b"4"),
            (f"TRACE {u}/ HTTP/1.1\r\n{h}\r\n", b"method_not_allowed"),
            (f"PROPFIND {u}/ HTTP/1.1\r\n{h}\r\n", b"method_not_allowed"),
            (f"PATCH {u}/ HTTP/1.1\r\n{h}Content-Length: 0\r\n\r\n", b"method_not_allowed"),
            (f"GET {u}/ HTTP/1.1\r\n{h}X-HTTP-Method-Override: DELETE\r\n\r\n", b"method_override_refused"),
            (f"GET {u}/ HTTP/1.1\r\n{h}X-HTTP-Method: PUT\r\n\r\n", b"method_override_refused"),
            (f"GET {u}/ HTTP/1.1\r\n{h}Content-Length: 4\r\n\r\nabcd", b"body_on_read_method"),
            (f"GET {u}/ HTTP/1.1\r\n{h}Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n", b"upgrade_refused"),
            (f"GET {u}/ HTTP/1.1\r\n{h}Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n", b"h2c_refused"),
        ]
        for raw, want in cases:
            out = self.get(self.gw, raw)
            self.assertTrue(out.startswith(b"HTTP/1.1 4"), (raw[:60], out[:80]))
            self.assertIn(want, out, raw[:60])
        out = self.get(self.gw, f"GET {u}/e HTTP/1.1\r\n{h}Expect: 100-continue\r\nConnection: close\r\n\r\n")
        self.assertIn(b"HTTP/1.1 200 OK", out[:200])
        out = self.get(self.gw, f"GET {u}/one HTTP/1.1\r\n{h}\r\nPOST {u}/two HTTP/1.1\r\n{h}Content-Length: 0\r\n\r\nGET {u}/three HTTP/1.1\r\n{h}Connection: close\r\n\r\n")
        self.assertIn(b"hello from origin /one", out)
        self.assertIn(b"method_not_allowed", out)
        self.assertIn(b"hello from origin /three", out)
        self.still_serving()

    # --- framing -------------------------------------------------------------------------------
    def test_framing_errors_are_4xx_and_never_forwarded(self):
        u = f"http://bad.test:{self.bad}"
        h = f"Host: bad.test:{self.bad}\r\n"
        before = self.bad_count()
        cases = [
            f"POST {u}/ HTTP/1.1\r\n{h}Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            f"POST {u}/ HTTP/1.1\r\n{h}Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
            f"POST {u}/ HTTP/1.1\r\n{h}Transfer-Encoding: chunked, identity\r\n\r\n",
            f"POST {u}/ HTTP/1.1\r\n{h}Transfer-Encoding: identity\r\n\r\n",
            f"GET {u}/ HTTP/1.1\r\n{h}X-A: b\r\n c\r\n\r\n",
            f"GET {u}/ HTTP/1.1\n{h}\n",
            f"GET {u}/ HTTP/1.1\r\n{h}X-A: a\x00b\r\n\r\n",
            f"GET {u}/ HTTP/1.1\r\n{h}X-A: a\x01b\r\n\r\n",
            f"GET {u}/a b HTTP/1.1\r\n{h}\r\n",
            f"GET {u}/a/../b HTTP/1.1\r\n{h}\r\n",
            f"GET {u}/a/%2E%2e/b HTTP/1.1\r\n{h}\r\n",
            f"GET {u}/a\\b HTTP/1.1\r\n{h}\r\n",
            f"GET {u}/a#x HTTP/1.1\r\n{h}\r\n",
            f"GET {u}/ HTTP/1.1\r\n{h}X-Big: {'a' * 20000}\r\n\r\n",
        ]
        for raw in cases:
            for gw in (self.gw, self.pub):
                out = self.get(gw, raw.encode("latin-1"))
                self.assertRegex(out[:12], rb"HTTP/1.1 4(00|31)", (raw[:70], out[:120]))
        # An oversize chunk-size line inside a body: the head was fine, the body is not.
        out = self.get(self.pub, f"POST {u}/ HTTP/1.1\r\n{h}Transfer-Encoding: chunked\r\n\r\n{'f' * 5000}\r\n")
        self.assertRegex(out[:12], rb"HTTP/1.1 400", out[:120])
        # Only that last head reached the origin (which counts it once it has read it: waited for).
        deadline = time.monotonic() + 5
        while self.bad_count() - before < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.bad_count() - before, 1)
        self.still_serving()
        self.still_serving(self.pub)

    def test_header_rules_from_the_attack_corpus(self):
        """Connection naming a checked field, and '_' spellings of the framing fields: 400 before
        anything leaves (the origin counts none), the gateway serving on."""
        u = f"http://bad.test:{self.bad}"
        h = f"Host: bad.test:{self.bad}\r\n"
        before = self.bad_count()
        cases = [
            (f"GET {u}/ HTTP/1.1\r\n{h}Connection: host\r\n\r\n", b"connection_strips_field"),
            (f"GET {u}/ HTTP/1.1\r\n{h}Connection: close, Content-Length\r\n\r\n", b"connection_strips_field"),
            (f"GET {u}/ HTTP/1.1\r\n{h}Connection: authorization\r\nAuthorization: x\r\n\r\n",
             b"connection_strips_field"),
            (f"POST {u}/ HTTP/1.1\r\n{h}Content-Length: 5\r\nTransfer_Encoding: chunked\r\n\r\n0\r\n\r\n",
             b"underscore_framing_field"),
            (f"POST {u}/ HTTP/1.1\r\n{h}Transfer-Encoding: chunked\r\nContent_Length: 5\r\n\r\n0\r\n\r\n",
             b"underscore_framing_field"),
        ]
        for raw, reason in cases:
            for gw in (self.gw, self.pub):
                out = self.get(gw, raw)
                self.assertTrue(out.startswith(b"HTTP/1.1 400"), (raw[:60], out[:100]))
                self.assertIn(reason, out)
        self.assertEqual(self.bad_count(), before)
        # The others are stripped as ever: Connection: close and TE pass.
        out = self.get(self.pub, f"GET http://origin.test:{self.http}/ok HTTP/1.1\r\nHost: origin.test:{self.http}\r\n"
                                 "Connection: close, TE\r\nTE: trailers\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 200"), out[:100])
        self.still_serving()
        self.still_serving(self.pub)

    def bad_count(self):
        with socket.create_connection(("127.0.0.1", self.bad), timeout=5) as s:
            s.sendall(b"GET /count HTTP/1.1\r\nHost: x\r\n\r\n")
            data = s.recv(4096)
        return int(data.split(b"\r\n\r\n")[1])

    # --- resource abuse ------------------------------------------------------------------------
    def test_slowloris_head_cut_at_deadline(self):
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        t0 = time.time()
        s.sendall(b"GET http://origin.test/ HTTP/1.1\r\n")
        closed = False
        try:
            for _ in range(20):
                s.sendall(b"X-Slow: 1\r\n")
                time.sleep(0.25)
        except OSError:
            closed = True
        if not closed:
            s.settimeout(5)
            closed = s.recv(100) in (b"",) or True
        self.assertLess(time.time() - t0, 6)
        s.close()
        self.still_serving()

    def test_slow_socks_greeting_cut_at_deadline(self):
        # A SOCKS5 greeting dribbled byte by byte: the deadline covers the whole greeting.
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        t0 = time.time()
        s.sendall(b"\x05\xff")  # 255 methods announced, sent one per 100 ms
        for _ in range(40):
            try:
                s.sendall(b"\x01")
            except OSError:
                break
            time.sleep(0.1)
        s.settimeout(5)
        try:
            data = s.recv(100)
        except OSError:
            data = b""
        self.assertEqual(data, b"")
        self.assertLess(time.time() - t0, 4.5)  # header_read is 1 s
        s.close()
        self.still_serving()

    def test_slow_body_cut(self):
        s = socket.create_connection(("127.0.0.1", self.pub.port), timeout=10)
        s.sendall(f"POST http://origin.test:{self.http}/echo HTTP/1.1\r\nHost: origin.test:{self.http}\r\nContent-Length: 100\r\n\r\nab".encode())
        t0 = time.time()
        data = s.recv(4096)  # the gateway gives up after the io timeout
        self.assertLess(time.time() - t0, 8)
        s.close()
        self.still_serving(self.pub)

    def test_a_large_body_goes_on_as_it_comes(self):
        # A request body of 1 MiB or more is relayed in pieces of up to 512 KiB: a piece is what
        # one read brings, so the first bytes of a slow upload reach the origin at once, not once
        # 512 KiB have come.
        s = socket.create_connection(("127.0.0.1", self.pub.port), timeout=10)
        s.sendall(f"POST http://bad.test:{self.bad}/upload HTTP/1.1\r\nHost: bad.test:{self.bad}\r\n"
                  f"Content-Length: {2 * 1024 * 1024}\r\n\r\n".encode())
        time.sleep(0.3)  # the head goes on alone; the bytes below come in a read of their own
        s.sendall(b"u" * 1000)
        try:
            got, deadline = None, time.time() + 1.2  # within the adversarial gateway's io timeout
            while time.time() < deadline:
                got = curl(self.pub, f"http://bad.test:{self.bad}/received").stdout
                if got == b"1000":
                    break
                time.sleep(0.1)
            self.assertEqual(got, b"1000")
        finally:
            s.close()
        self.still_serving(self.pub)

    def test_many_idle_connections(self):
        socks = []
        n = min(2000, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 3)
        for _ in range(n):
            socks.append(socket.create_connection(("127.0.0.1", self.gw.port), timeout=5))
        self.still_serving()  # other clients are served while they sit there
        # Past header_read the gateway closes every one of them: each socket reads EOF.
        deadline = time.time() + 15
        for s in socks:
            s.settimeout(max(deadline - time.time(), 0.1))
            self.assertEqual(s.recv(16), b"")
            s.close()
        for _ in range(40):
            if self.gw.metric("sluice_connections_active") < 10:
                break
            time.sleep(0.25)
        self.assertLess(self.gw.metric("sluice_connections_active"), 10)

    def client_socket(self, gw, rcvbuf=None):
        s = socket.socket()
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(10)
        s.connect(("127.0.0.1", gw.port))
        return s

    def open_tunnel(self, gw, tls=False, rcvbuf=None):
        """A CONNECT through `gw` to the https origin, answered 200; TLS inside it when `tls`."""
        s = self.client_socket(gw, rcvbuf)
        s.sendall(f"CONNECT origin.test:{self.https} HTTP/1.1\r\nHost: origin.test:{self.https}\r\n\r\n".encode())
        self.assertTrue(s.recv(4096).startswith(b"HTTP/1.1 200"))
        if tls:
            s = ssl.create_default_context(cafile=gw.ca).wrap_socket(s, server_hostname="origin.test")
        return s

    def never_reading_client(self, name, tunnel):
        """A client with a tiny receive buffer that asks for 80 MB and reads nothing, against a gateway
        without the response cap, so that only the stalled writes can end it. Returns the request's
        access-log records once the io timeout has passed."""
        gw = Gateway(self.procs, self.tmp.name, 'profile = "network-read"\n' +
                     self.body.replace("max_response_body_bytes = 2097152\n", ""), name)
        if tunnel:
            s = self.open_tunnel(gw, tls=True, rcvbuf=4096)
            s.sendall(f"GET /bytes/80000000 HTTP/1.1\r\nHost: origin.test:{self.https}\r\n\r\n".encode())
        else:
            s = self.client_socket(gw, rcvbuf=4096)
            s.sendall(f"GET http://origin.test:{self.http}/bytes/80000000 HTTP/1.1\r\nHost: origin.test:{self.http}\r\n\r\n".encode())
        # The record is written once the blocked write's io timeout (1.5 s) has passed: waited for,
        # with the bound the fixed wait had and more.
        gw.logged(lambda r: r["path"] == "/bytes/80000000", timeout=8)
        self.still_serving(gw)
        recs = [r for r in gw.access_log() if r["path"] == "/bytes/80000000"]
        s.close()
        return recs

    def test_client_that_never_reads(self):
        recs = self.never_reading_client("nocap", tunnel=False)
        self.assertTrue(recs and recs[-1]["reason"] == "client_aborted", recs[-1:])

    # --- deadlines inside terminated tunnels (gateway/tls_stream) ------------------------------
    def closed_within(self, s, seconds):
        """True when the peer closes `s` (EOF or reset) within `seconds`."""
        s.settimeout(seconds)
        try:
            while s.recv(4096):
                pass
            return True
        except (ConnectionResetError, ssl.SSLError):
            return True
        except socket.timeout:
            return False

    def test_stalled_tls_handshake_cut(self):
        s = self.open_tunnel(self.gw)
        s.sendall(bytes.fromhex("160301020001"))  # a ClientHello record header promising 512 bytes
        t0 = time.time()
        self.assertTrue(self.closed_within(s, 8))
        self.assertLess(time.time() - t0, 5)  # tls_handshake is 2 s
        s.close()
        self.still_serving()

    def test_slowloris_head_inside_tunnel_cut(self):
        t = self.open_tunnel(self.gw, tls=True)
        t0 = time.time()
        t.sendall(f"GET /slow HTTP/1.1\r\nHost: origin.test:{self.https}\r\n".encode())
        closed = False
        try:
            for _ in range(24):
                t.sendall(b"X-Slow: 1\r\n")
                time.sleep(0.25)
        except (OSError, ssl.SSLError):
            closed = True
        self.assertTrue(closed or self.closed_within(t, 5))
        self.assertLess(time.time() - t0, 5)  # header_read is 1 s
        t.close()
        self.still_serving()

    def test_idle_tunnel_closed_after_idle_timeout(self):
        t = self.open_tunnel(self.gw, tls=True)
        t.sendall(f"GET /first HTTP/1.1\r\nHost: origin.test:{self.https}\r\n\r\n".encode())
        t.settimeout(5)
        self.assertTrue(t.recv(4096).startswith(b"HTTP/1.1 200"))
        t0 = time.time()
        self.assertTrue(self.closed_within(t, 8))
        self.assertLess(time.time() - t0, 5)  # idle is 2 s
        t.close()

    def test_tunnel_client_that_never_reads(self):
        recs = self.never_reading_client("nocap-tls", tunnel=True)
        self.assertTrue(recs and recs[-1]["reason"] == "client_aborted", recs[-1:])

    def test_upstream_that_never_answers_is_504(self):
        t0 = time.time()
        p = curl(self.gw, f"http://bad.test:{self.bad}/hang")
        self.assertEqual(status_of(p.stderr.decode()), 504)
        self.assertIn("http_response_timeout", header(p.stderr.decode(), "Proxy-Status"))
        self.assertLess(time.time() - t0, 6)

    def test_trickling_and_endless_responses_are_cut(self):
        t0 = time.time()
        p = curl(self.gw, f"http://bad.test:{self.bad}/trickle")
        self.assertNotEqual(p.returncode, 0)  # cut short: the body is incomplete
        self.assertLess(time.time() - t0, 8)
        p = curl(self.gw, f"http://bad.test:{self.bad}/endless")
        self.assertNotEqual(p.returncode, 0)
        self.assertLessEqual(len(p.stdout), 2097152 + 65536)
        reasons = {r["path"]: r["reason"] for r in self.gw.lines_where(
            lambda r: r["host"] == "bad.test" and r["path"] in ("/trickle", "/endless"), 2)}
        self.assertEqual(reasons.get("/trickle"), "response_timeout")
        self.assertEqual(reasons.get("/endless"), "response_too_large")
        self.still_serving()

    def test_sized_responses_cut_short_or_too_large_are_never_passed_off_as_whole_and_codes_kept(self):
        # A Content-Length body is relayed as raw bytes (no parser): the gateway itself must notice
        # an origin that stops early and a body over the cap, and must not pool that connection.
        p = curl(self.gw, f"http://bad.test:{self.bad}/short")
        self.assertNotEqual(p.returncode, 0)  # curl: transfer closed with bytes outstanding
        self.assertEqual(len(p.stdout), 1000)
        p = curl(self.gw, f"http://bad.test:{self.bad}/huge")
        self.assertNotEqual(p.returncode, 0)
        self.assertLessEqual(len(p.stdout), 2097152 + 65536)
        for path in ("/reason", "/reason-chunked"):  # a code Beast has no name for, its own words
            p = curl(self.gw, f"http://bad.test:{self.bad}{path}")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn(b"HTTP/1.1 299 Words Of Its Own", p.stderr)
            self.assertEqual(p.stdout, b"ok\n")
        # No reason phrase from the origin: the standard one where the code has one, else none.
        p = curl(self.gw, f"http://bad.test:{self.bad}/no-reason")
        self.assertIn(b"HTTP/1.1 299 \r\n", p.stderr)
        p = curl(self.gw, f"http://bad.test:{self.bad}/no-reason-204")
        self.assertIn(b"HTTP/1.1 204 No Content\r\n", p.stderr)
        reasons = {r["path"]: r["reason"] for r in self.gw.lines_where(
            lambda r: r["host"] == "bad.test" and r["path"] in ("/short", "/huge", "/reason"), 3)}
        self.assertEqual(reasons.get("/short"), "response_incomplete")
        self.assertEqual(reasons.get("/huge"), "response_too_large")
        self.assertEqual(reasons.get("/reason"), "allowed")
        self.still_serving()

    # --- TLS -------------------------------------------------------------------------------------
    def test_expired_and_wrong_host_upstream_certificates(self):
        for url in (f"https://expired.test:{self.expired}/", f"https://wrong.test:{self.wrong}/"):
            p = curl(self.gw, url)
            heads = p.stderr.decode()
            self.assertEqual(status_of(heads), 502, url)
            self.assertIn("tls_certificate_error", header(heads, "Proxy-Status"), url)

    def test_ca_name_constraints_reject_unlisted_names(self):
        # The gateway's ephemeral CA is constrained to its allowlist (no regex entries here).
        d = self.tmp.name
        key = os.path.join(d, "evil.key")
        csr = os.path.join(d, "evil.csr")
        run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
             key, "-out", csr, "-subj", "/CN=evil.test"])
        text = subprocess.run(["openssl", "x509", "-in", self.gw.ca, "-noout", "-text"], capture_output=True).stdout.decode()
        self.assertIn("Name Constraints", text)
        self.assertIn("DNS:origin.test", text)
        self.assertNotIn("evil.test", text)


if __name__ == "__main__":
    unittest.main()
