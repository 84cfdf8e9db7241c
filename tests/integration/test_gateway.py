"""End-to-end tests of `sluice serve` with real clients (curl, python urllib), real origins
(python http.server over TLS with a test CA) and a real DNS server, all on loopback."""
import json
import os
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from harness import (SLUICE, Gateway, free_port, wait_port, LoopbackOrigins, Processes, curl, header, loopback_upstream, make_ca, make_leaf,
                     payload, raw_exchange, read_response, sha256, start_dns, start_origin, status_of)


class GatewayTest(LoopbackOrigins):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d, ca = cls.tmp.name, cls.ca
        rogue = make_ca(d, "rogue-ca")
        bad = make_leaf(d, rogue, "bad.test", "DNS:bad.test")
        cls.untrusted = start_origin(cls.procs, bad)
        dns = start_dns(cls.procs, {})
        cls.base = f"""
[policy]
allow = ["origin.test:{cls.https}", "origin.test:{cls.http}", "bad.test:{cls.untrusted}",
         "nxdomain.test", "loop.test:{cls.https}", "private.test", "meta.test"]
deny = ["blocked.origin.test"]
""" + loopback_upstream(ca[0], dns, {"origin.test": "127.0.0.1", "bad.test": "127.0.0.1",
                                     "loop.test": "127.0.0.2", "private.test": "10.0.0.1",
                                     "meta.test": "169.254.169.254"}) + """[timeouts]
dns = "2s"
"""
        cls.gw = Gateway(cls.procs, d, 'profile = "network-read"\n' + cls.base, "read")
        cls.pub = Gateway(cls.procs, d, 'profile = "publish"\n' + cls.base, "publish")

    def https_url(self, path):
        return f"https://origin.test:{self.https}{path}"

    def http_url(self, path):
        return f"http://origin.test:{self.http}{path}"

    # --- allowed traffic -------------------------------------------------------------------
    def test_https_get_10mib_is_byte_identical(self):
        p = curl(self.gw, self.https_url("/bytes/10485760"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(status_of(p.stderr.decode()), 200)
        self.assertEqual(sha256(p.stdout), sha256(payload(10485760)))

    def test_http_get_chunked_response_is_byte_identical(self):
        p = curl(self.gw, self.http_url("/chunked/1000000"))
        self.assertEqual(status_of(p.stderr.decode()), 200)
        self.assertEqual(sha256(p.stdout), sha256(payload(1000000)))

    def test_head_has_no_body_and_keeps_length(self):
        p = curl(self.gw, self.https_url("/bytes/4096"), "-I")
        self.assertEqual(status_of(p.stderr.decode()), 200)
        self.assertEqual(header(p.stderr.decode(), "Content-Length"), "4096")

    def test_204_and_304_without_body(self):
        for code in (204, 304):
            p = curl(self.gw, self.https_url(f"/status/{code}"))
            self.assertEqual(status_of(p.stderr.decode()), code)
            self.assertEqual(p.stdout, b"")

    def test_python_urllib_through_proxy(self):
        ctx = ssl.create_default_context(cafile=self.gw.ca)
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({"https": self.gw.proxy, "http": self.gw.proxy}),
            urllib.request.HTTPSHandler(context=ctx))
        with opener.open(self.https_url("/bytes/100000"), timeout=10) as r:
            self.assertEqual(r.status, 200)
            self.assertEqual(r.read(), payload(100000))
        with opener.open(self.http_url("/hello"), timeout=10) as r:
            self.assertEqual(r.read(), b"hello from origin /hello\n")

    def test_http10_client(self):
        out = raw_exchange(self.gw.port, f"GET http://origin.test:{self.http}/chunked/5000 HTTP/1.0\r\n\r\n".encode())
        head, _, body = out.partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.0 200"), head)
        self.assertNotIn(b"chunked", head.lower())
        self.assertEqual(body, payload(5000))

    def test_client_resumes_its_tls_session_with_the_gateway(self):
        # A client that opens a new tunnel per request (Connection: close) resumes its TLS session
        # from a ticket instead of a full handshake with the minted leaf (docs/benchmarks.md).
        sess = os.path.join(self.tmp.name, "client.sess")
        request = (f"GET /resume HTTP/1.1\r\nHost: origin.test:{self.https}\r\n"
                   "Connection: close\r\n\r\n").encode()
        outputs = []
        for flag in ("-sess_out", "-sess_in"):
            p = subprocess.run(["openssl", "s_client", "-proxy", "127.0.0.1:%d" % self.gw.port,
                                "-connect", "origin.test:%d" % self.https, "-servername", "origin.test",
                                "-CAfile", self.gw.ca, "-verify_return_error", "-ign_eof", flag, sess],
                               input=request, capture_output=True, timeout=20)
            outputs.append(p.stdout.decode(errors="replace"))
            self.assertIn("hello from origin /resume", outputs[-1], p.stderr)
        self.assertIn("New, TLSv1.3", outputs[0])
        self.assertIn("Reused, TLSv1.3", outputs[1])

    def test_gateway_resumes_its_tls_session_with_the_origin(self):
        # With no idle connection to reuse (pooling off), the next connection to the same origin
        # resumes the session the origin issued on the first, instead of a full handshake.
        gw = Gateway(self.procs, self.tmp.name, 'profile = "network-read"\n' + self.base +
                     "[limits]\npool_idle_per_host = 0\n", "nopool")
        seen = [curl(gw, self.https_url("/tls-session")).stdout for _ in range(3)]
        self.assertEqual(seen, [b"new\n", b"reused\n", b"reused\n"])

    def test_hop_by_hop_and_proxy_headers_not_forwarded(self):
        p = curl(self.gw, self.http_url("/headers"), "-H", "Proxy-Authorization: Basic eDp5", "-H", "Proxy-Foo: 1",
                 "-H", "Connection: close, X-Secret", "-H", "X-Secret: 1", "-H", "X-Keep: yes")
        body = p.stdout.decode().lower()
        self.assertIn("x-keep: yes", body)
        self.assertNotIn("proxy-authorization", body)
        self.assertNotIn("proxy-foo", body)
        self.assertNotIn("x-secret", body)

    def test_keepalive_reuse_visible_in_metrics(self):
        before = self.gw.metric("sluice_upstream_reused_total")
        p = curl(self.gw, self.https_url("/a"), "--next", "--proxy", self.gw.proxy, "--cacert", self.gw.ca,
                 self.https_url("/b"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(b"hello from origin /a\n", p.stdout)
        self.assertIn(b"hello from origin /b\n", p.stdout)
        self.assertGreaterEqual(self.gw.metric("sluice_upstream_reused_total"), before + 1)
        self.assertGreaterEqual(self.gw.metric("sluice_cert_cache_hits_total") +
                                self.gw.metric("sluice_certs_minted_total"), 1)

    # --- idle terminated tunnels (parked between requests) -------------------------------------
    def tunnel(self, gw):
        """A terminated CONNECT tunnel to origin.test through `gw`: the TLS socket."""
        s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
        s.sendall(f"CONNECT origin.test:{self.https} HTTP/1.1\r\nHost: origin.test:{self.https}\r\n\r\n".encode())
        self.assertTrue(s.recv(4096).startswith(b"HTTP/1.1 200"))
        return ssl.create_default_context(cafile=gw.ca).wrap_socket(s, server_hostname="origin.test")

    def get(self, tls, path):
        tls.sendall(f"GET {path} HTTP/1.1\r\nHost: origin.test:{self.https}\r\n\r\n".encode())
        return read_response(lambda: tls.recv(65536))

    def test_idle_tunnel_serves_requests_after_pauses(self):
        # A pause longer than the 100 ms a tunnel waits before it parks: each request after one is
        # read by a request loop resumed from parking, on the same connection and TLS session.
        tls = self.tunnel(self.gw)
        before = self.gw.metric("sluice_connections_active")
        for i in range(4):
            status, body = self.get(tls, "/parked/%d" % i)
            self.assertEqual((status, body), (200, b"hello from origin /parked/%d\n" % i))
            time.sleep(0.3)
        self.assertEqual(self.gw.metric("sluice_connections_active"), before)  # still counted while parked
        # A head in two pieces: the first wakes the parked tunnel, the resumed loop waits for the rest.
        tls.sendall(b"GET /split HTTP/1.1\r\n")
        time.sleep(0.3)
        tls.sendall(f"Host: origin.test:{self.https}\r\n\r\n".encode())
        self.assertEqual(read_response(lambda: tls.recv(65536)), (200, b"hello from origin /split\n"))
        tls.close()
        for _ in range(100):  # the parked tunnel's end is counted too
            if self.gw.metric("sluice_connections_active") == before - 1:
                break
            time.sleep(0.05)
        self.assertEqual(self.gw.metric("sluice_connections_active"), before - 1)

    def test_parked_tunnel_keeps_its_deadline_and_request_count(self):
        # [timeouts] idle and [limits] max_requests_per_connection hold across parking: the idle
        # deadline is not restarted by parking, and the count goes on where it stopped.
        gw = Gateway(self.procs, self.tmp.name, 'profile = "network-read"\n' + self.base +
                     'idle = "1500ms"\n[limits]\nmax_requests_per_connection = 3\n', "parkgw")
        tls = self.tunnel(gw)
        for i in range(3):
            self.assertEqual(self.get(tls, "/n%d" % i)[0], 200)
            if i < 2:
                time.sleep(0.3)
        start = time.monotonic()
        self.assertEqual(tls.recv(65536), b"")  # the third was the last: closed (close_notify)
        self.assertLess(time.monotonic() - start, 1.0, "the request count restarted after parking")
        tls.close()
        tls = self.tunnel(gw)
        self.assertEqual(self.get(tls, "/idle")[0], 200)
        start = time.monotonic()
        tls.settimeout(10)
        self.assertEqual(tls.recv(65536), b"")  # idled out, while parked
        waited = time.monotonic() - start
        self.assertGreater(waited, 1.0, "closed before [timeouts] idle")
        self.assertLess(waited, 5.0, "parking extended [timeouts] idle (1.5 s)")
        tls.close()

    def test_parked_tunnels_idle_out_each_at_its_own_deadline(self):
        # One timer per worker keeps every parked tunnel's deadline: tunnels parked 0.6 s apart
        # close 0.6 s apart, each after its own idle time, while a busy one stays open.
        gw = Gateway(self.procs, self.tmp.name, 'profile = "network-read"\n' + self.base + 'idle = "1500ms"\n',
                     "lotgw")
        tunnels, closed = [], {}
        for i in range(3):
            tls = self.tunnel(gw)
            self.assertEqual(self.get(tls, "/lot/%d" % i)[0], 200)
            tunnels.append((time.monotonic(), tls))
            time.sleep(0.6)
        busy = self.tunnel(gw)
        for started, tls in tunnels:
            tls.settimeout(10)
            self.assertEqual(tls.recv(65536), b"")  # idled out, parked
            closed[started] = time.monotonic() - started
            tls.close()
            self.assertEqual(self.get(busy, "/busy")[0], 200)  # kept busy: never idle 1.5 s
        for waited in closed.values():
            self.assertGreater(waited, 1.3, "a parked tunnel closed before its idle deadline")
            self.assertLess(waited, 4.0, "a parked tunnel outlived its idle deadline")
        self.assertEqual(self.get(busy, "/still")[0], 200)
        busy.close()

    def test_sigterm_closes_parked_tunnels_at_once(self):
        # An idle parked tunnel has no response to finish: the drain closes it at once instead of
        # waiting for its idle deadline (60 s here) or the drain's limit.
        gw = Gateway(self.procs, self.tmp.name, 'profile = "network-read"\n' + self.base +
                     'idle = "60s"\ndrain = "30s"\n', "draingw")
        tunnels = [self.tunnel(gw) for _ in range(3)]
        for i, tls in enumerate(tunnels):
            self.assertEqual(self.get(tls, "/d%d" % i)[0], 200)
        time.sleep(0.5)  # parked (after 100 ms idle)
        start = time.monotonic()
        gw.proc.send_signal(signal.SIGTERM)
        self.assertEqual(gw.proc.wait(timeout=20), 0)
        self.assertLess(time.monotonic() - start, 5.0, "the drain waited for idle parked tunnels")
        for tls in tunnels:
            tls.settimeout(5)
            self.assertEqual(tls.recv(65536), b"")
            tls.close()

    # --- policy denials --------------------------------------------------------------------
    def test_writes_refused_in_network_read(self):
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            p = curl(self.gw, self.https_url("/echo"), "-X", method, "-d", "x=1")
            heads = p.stderr.decode()
            self.assertEqual(status_of(heads), 403, method)
            ps = header(heads, "Proxy-Status")
            self.assertIn("error=http_request_denied", ps)
            self.assertIn('details="method_not_allowed"', ps)
            self.assertIn(b"read-only", p.stdout)

    def test_connect_to_unlisted_host_refused_before_tls(self):
        out = raw_exchange(self.gw.port, b"CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 403"), out)
        self.assertIn(b'details="host_not_allowlisted"', out)
        self.assertIn(b"--allow-domain evil.test", out)

    def test_deny_rule_beats_allow(self):
        out = raw_exchange(self.gw.port, b"CONNECT blocked.origin.test:443 HTTP/1.1\r\n\r\n")
        # blocked.origin.test is not on the allowlist either; allow it with a wildcard in a
        # check run to see the deny rule win.
        self.assertIn(b'details="host_denied"', out)
        self.assertIn(b"rule blocked.origin.test", out)

    def _tls_through(self, connect_host, sni, host_header):
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=5)
        s.sendall(f"CONNECT {connect_host}:{self.https} HTTP/1.1\r\n\r\n".encode())
        resp = s.recv(4096)
        self.assertTrue(resp.startswith(b"HTTP/1.1 200"), resp)
        ctx = ssl.create_default_context(cafile=self.gw.ca)
        ctx.check_hostname = False
        tls = ctx.wrap_socket(s, server_hostname=sni)
        tls.sendall(f"GET /x HTTP/1.1\r\nHost: {host_header}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = tls.recv(65536)
            if not chunk:
                break
            data += chunk
        tls.close()
        return data

    # --- SOCKS5 on the proxy port: judged exactly like CONNECT ---------------------------------
    def socks(self, gw, url, *args):
        return curl(gw, url, "--proxy", "socks5h://127.0.0.1:%d" % gw.port, *args)

    def test_socks5_connect_is_terminated_and_judged_like_connect(self):
        p = self.socks(self.gw, self.https_url("/bytes/4096"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sha256(p.stdout), sha256(payload(4096)))
        self.assertTrue(self.gw.logged(lambda l: l["method"] == "GET" and l["host"] == "origin.test" and
                                       l["path"] == "/bytes/4096" and l["decision"] == "allow"))
        # Read-only inside the SOCKS tunnel too.
        p = self.socks(self.gw, self.https_url("/upload"), "-X", "POST", "-d", "x=1")
        self.assertEqual(status_of(p.stderr.decode()), 403)
        self.assertIn("method_not_allowed", header(p.stderr.decode(), "Proxy-Status"))

    def test_socks5_refusals_are_socks_replies(self):
        # Not on the allowlist: "connection not allowed by ruleset", at once, logged.
        t0 = time.monotonic()
        p = self.socks(self.gw, "https://exfil.example.net/")
        self.assertNotEqual(p.returncode, 0)
        self.assertLess(time.monotonic() - t0, 5)
        self.assertIn(b"(2)", p.stderr)  # REP 0x02: connection not allowed by ruleset
        self.assertTrue(self.gw.logged(lambda l: l["host"] == "exfil.example.net" and
                                       l["reason"] == "host_not_allowlisted"))
        # An address the client resolved itself (socks5, not socks5h): an IP literal, refused.
        p = curl(self.gw, self.https_url("/"), "--proxy", "socks5://127.0.0.1:%d" % self.gw.port,
                 "--resolve", "origin.test:%d:127.0.0.1" % self.https)
        self.assertNotEqual(p.returncode, 0)
        # Upstream failure: a refused connection maps to its SOCKS code, not an HTTP page.
        raw = raw_exchange(self.gw.port, b"\x05\x01\x00" + b"\x05\x01\x00\x03" + bytes([11]) + b"origin.test" +
                           (1).to_bytes(2, "big"), read_timeout=5)
        self.assertEqual(raw[:2], b"\x05\x00")
        self.assertEqual(raw[2:4], b"\x05\x02")  # port 1 is not on the allowlist
        # BIND is not offered.
        raw = raw_exchange(self.gw.port, b"\x05\x01\x00" + b"\x05\x02\x00\x01" + bytes(4) + bytes(2),
                           read_timeout=5)
        self.assertEqual(raw[2:4], b"\x05\x07")

    def test_sni_mismatch_refused(self):
        with self.assertRaises(ssl.SSLError):
            self._tls_through("origin.test", "evil.test", "origin.test")
        self.assertTrue(self.gw.logged(lambda r: r["reason"] == "sni_mismatch"))

    def test_host_header_mismatch_refused(self):
        data = self._tls_through("origin.test", "origin.test", "evil.test")
        self.assertTrue(data.startswith(b"HTTP/1.1 403"), data)
        self.assertIn(b'details="host_mismatch"', data)
        ok = self._tls_through("origin.test", "origin.test", f"origin.test:{self.https}")
        self.assertTrue(ok.startswith(b"HTTP/1.1 200"), ok)

    def test_untrusted_upstream_certificate_is_502(self):
        p = curl(self.gw, f"https://bad.test:{self.untrusted}/")
        heads = p.stderr.decode()
        self.assertEqual(status_of(heads), 502)
        self.assertIn("error=tls_certificate_error", header(heads, "Proxy-Status"))

    def test_unresolvable_name_is_502_dns_error(self):
        p = curl(self.gw, "http://nxdomain.test/")
        heads = p.stderr.decode()
        self.assertEqual(status_of(heads), 502)
        self.assertIn("error=dns_error", header(heads, "Proxy-Status"))

    def test_names_pinned_to_special_addresses_refused(self):
        for url in (f"https://loop.test:{self.https}/", "http://private.test/", "http://meta.test/latest/meta-data/"):
            p = curl(self.gw, url)
            heads = p.stderr.decode()
            self.assertEqual(status_of(heads), 403, url)
            self.assertIn("error=destination_ip_prohibited", header(heads, "Proxy-Status"))

    def test_ip_literal_forms_refused(self):
        for host in ("2130706433", "0x7f.0.0.1", "0177.0.0.1", "127.1"):
            out = raw_exchange(self.gw.port, f"GET http://{host}:{self.http}/ HTTP/1.1\r\nHost: {host}:{self.http}\r\n\r\n".encode())
            self.assertIn(b'details="ambiguous_host"', out, host)

    def test_userinfo_and_fragment_refused(self):
        out = raw_exchange(self.gw.port, f"GET http://origin.test:{self.http}@evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n".encode())
        self.assertIn(b"HTTP/1.1 403", out)
        self.assertIn(b"userinfo_in_target", out)
        out = raw_exchange(self.gw.port, f"GET http://origin.test:{self.http}/a#frag HTTP/1.1\r\nHost: origin.test:{self.http}\r\n\r\n".encode())
        self.assertIn(b"HTTP/1.1 400", out)

    # --- framing and robustness ---------------------------------------------------------
    def test_smuggling_shapes_get_400_and_gateway_keeps_serving(self):
        u = f"http://origin.test:{self.http}/echo"
        h = f"Host: origin.test:{self.http}\r\n"
        cases = [
            f"POST {u} HTTP/1.1\r\n{h}Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            f"POST {u} HTTP/1.1\r\n{h}Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
            f"POST {u} HTTP/1.1\r\n{h}Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
            f"GET {u} HTTP/1.1\r\n{h}X-Folded: a\r\n  b\r\n\r\n",
            f"GET {u} HTTP/1.1\n{h}\n",
            f"GET http://origin.test:{self.http}/a/../b HTTP/1.1\r\n{h}\r\n",
            f"GET http://origin.test:{self.http}/a/%2e%2e/b HTTP/1.1\r\n{h}\r\n",
            "GARBAGE\r\n\r\n",
            f"GET {u} HTTP/1.1\r\n{h}X-Big: {'a' * 70000}\r\n\r\n",
        ]
        for raw in cases:
            for gw in (self.gw, self.pub):
                out = raw_exchange(gw.port, raw.encode())
                self.assertRegex(out[:12], rb"HTTP/1.1 4(00|31)", (raw[:80], out[:200]))
        p = curl(self.gw, self.https_url("/still-serving"))
        self.assertEqual(p.stdout, b"hello from origin /still-serving\n")

    def test_upgrade_refused_in_network_read(self):
        out = raw_exchange(self.gw.port, f"GET http://origin.test:{self.http}/ HTTP/1.1\r\nHost: origin.test:{self.http}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n".encode())
        self.assertIn(b"403", out[:16])
        self.assertIn(b"upgrade_refused", out)

    def test_origin_form_request_is_not_proxied(self):
        out = raw_exchange(self.gw.port, b"GET / HTTP/1.1\r\nHost: origin.test\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 400"), out)

    # --- publish ---------------------------------------------------------------------------
    def test_chunked_upload_passes_in_publish(self):
        data = payload(3 * 1024 * 1024 + 7)
        path = os.path.join(self.tmp.name, "upload.bin")
        with open(path, "wb") as f:
            f.write(data)
        p = curl(self.pub, self.https_url("/echo"), "-H", "Transfer-Encoding: chunked",
                 "--data-binary", "@" + path)
        self.assertEqual(status_of(p.stderr.decode()), 200, p.stderr)
        self.assertEqual(sha256(p.stdout), sha256(data))
        p = curl(self.pub, self.http_url("/echo"), "-X", "PUT", "--data-binary", "@" + path)
        self.assertEqual(sha256(p.stdout), sha256(data))

    # --- observability ---------------------------------------------------------------------
    def test_access_log_fields(self):
        curl(self.gw, self.https_url("/logged?token=secret"))
        self.assertTrue(self.gw.logged(lambda r: r["path"].startswith("/logged")))
        recs = [r for r in self.gw.access_log() if r["path"].startswith("/logged")]
        self.assertTrue(recs)
        r = recs[-1]
        for field in ("time", "command_id", "method", "scheme", "host", "port", "path", "rule",
                      "decision", "reason", "status", "bytes_in", "bytes_out", "duration_seconds"):
            self.assertIn(field, r)
        self.assertEqual(r["method"], "GET")
        self.assertEqual(r["scheme"], "https")
        self.assertEqual(r["host"], "origin.test")
        self.assertEqual(r["port"], self.https)
        self.assertEqual(r["path"], "/logged?REDACTED")
        self.assertEqual(r["rule"], f"origin.test:{self.https}")
        self.assertEqual(r["decision"], "allow")
        self.assertEqual(r["status"], 200)
        self.assertEqual(r["bytes_out"], len(b"hello from origin /logged?token=secret\n"))

    def test_metrics_and_health(self):
        curl(self.gw, self.https_url("/m"))
        text = self.gw.metrics()
        for name in ("sluice_requests_total", "sluice_connections_active", "sluice_bytes_total",
                     "sluice_request_duration_seconds", "sluice_upstream_connect_duration_seconds",
                     "sluice_dns_lookup_duration_seconds", "sluice_tls_handshakes_total",
                     "sluice_certs_minted_total", "sluice_cert_cache_hits_total",
                     "sluice_upstream_reused_total"):
            self.assertIn(name, text)
        self.assertGreater(self.gw.metric("sluice_requests_total", decision="allow", method="GET"), 0)
        self.assertGreater(self.gw.metric("sluice_tls_handshakes_total", side="client", result="ok"), 0)
        for path in ("/healthz", "/readyz"):
            with urllib.request.urlopen(f"http://127.0.0.1:{self.gw.admin}{path}", timeout=5) as r:
                self.assertEqual(r.status, 200)


    def test_allowlisted_ipv6_literal_served(self):
        """An IPv6 literal on the allowlist is served, in absolute form and through CONNECT."""
        d = self.tmp.name
        v6_plain = start_origin(self.procs, host="::1")
        v6_tls = start_origin(self.procs, make_leaf(d, self.ca, "v6", "IP:::1"), host="::1")
        body = f"""profile = "network-read"
[policy]
allow = ["[::1]:{v6_plain}", "[::1]:{v6_tls}"]
[tls]
upstream_ca_bundle = "{self.ca[0]}"
system_trust = false
[upstream]
allow_addresses = ["::1/128"]
"""
        gw = Gateway(self.procs, d, body, "v6")
        p = curl(gw, "http://[::1]:%d/v6plain" % v6_plain)
        self.assertEqual(status_of(p.stderr.decode()), 200, p.stderr)
        self.assertEqual(p.stdout, b"hello from origin /v6plain\n")
        p = curl(gw, "https://[::1]:%d/v6tls" % v6_tls)
        self.assertEqual(status_of(p.stderr.decode()), 200, p.stderr)
        self.assertEqual(p.stdout, b"hello from origin /v6tls\n")

    def test_http10_request_without_host_gets_one_upstream(self):
        out = raw_exchange(self.gw.port, b"GET http://origin.test:%d/headers HTTP/1.0\r\n\r\n" % self.http)
        self.assertTrue(out.startswith(b"HTTP/1.0 200") or out.startswith(b"HTTP/1.1 200"), out[:200])
        self.assertIn(b"Host: origin.test:%d" % self.http, out)

    def test_descriptor_limit_pauses_accepting_without_spinning(self):
        """With the descriptor limit reached, the accept loop backs off (no busy loop), counts the
        pause, logs it once per interval, and serves again once descriptors are free."""
        import resource
        d = self.tmp.name
        port, admin = free_port(), free_port()
        config = os.path.join(d, "emfile.toml")
        with open(config, "w") as f:
            f.write('profile = "network-read"\n' + self.base +
                    '[listen]\nproxy = "127.0.0.1:%d"\nadmin = "127.0.0.1:%d"\n' % (port, admin))
        err_path = os.path.join(d, "emfile.stderr")
        with open(err_path, "wb") as err:
            proc = subprocess.Popen([SLUICE, "serve", "--config", config, "--threads", "1"],
                                    stdout=subprocess.DEVNULL, stderr=err,
                                    preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64)))
        self.procs.procs.append(proc)
        wait_port(admin, proc)
        clients = []
        try:
            for _ in range(150):  # more than the limit: the rest wait in the listen backlog
                clients.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            time.sleep(0.5)

            def cpu():
                with open("/proc/%d/stat" % proc.pid) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            start = cpu()
            time.sleep(3)
            used = cpu() - start
            # A spinning accept loop burns the whole 3 s; a paused one almost nothing.
            self.assertLess(used, 1.0, "accept loop used %.2f CPU-seconds in 3 s" % used)
            for c in clients:
                c.close()
            clients = []
            time.sleep(0.5)
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % admin, timeout=10) as r:
                metrics = r.read().decode()
            paused = [l for l in metrics.splitlines() if l.startswith("sluice_accept_paused_total ")]
            self.assertTrue(paused and float(paused[0].split()[1]) > 0, paused)
            gw = type("G", (), {"proxy": "http://127.0.0.1:%d" % port, "ca": None})()
            p = subprocess.run(["curl", "-sS", "--max-time", "20", "--proxy", gw.proxy, "-o", "/dev/null",
                                "-w", "%{http_code}", self.http_url("/after")], capture_output=True)
            self.assertEqual(p.stdout, b"200", p.stderr)
        finally:
            for c in clients:
                c.close()
            proc.kill()
            proc.wait()
        log = open(err_path).read()
        self.assertEqual(log.count("out of file descriptors"), 1, log)


class ReloadAndDrainTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.procs = Processes()
        self.origin = start_origin(self.procs)
        self.body = f"""
[upstream]
allow_addresses = ["127.0.0.1/32"]
[upstream.resolve]
"a.test" = "127.0.0.1"
"b.test" = "127.0.0.1"
"""
        self.gw = Gateway(self.procs, self.tmp.name,
                          f'[policy]\nallow = ["a.test:{self.origin}"]\n' + self.body)

    def tearDown(self):
        self.procs.stop_all()
        self.tmp.cleanup()

    def get(self, host):
        p = curl(self.gw, f"http://{host}:{self.origin}/r")
        return status_of(p.stderr.decode())

    def test_bad_reload_keeps_old_policy_good_reload_applies(self):
        self.assertEqual(self.get("a.test"), 200)
        self.assertEqual(self.get("b.test"), 403)
        self.gw.write_config('[policy]\nallow = ["re:([bad"]\n' + self.body)
        self.gw.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        self.assertEqual(self.get("a.test"), 200)
        self.assertIn("reload failed, keeping the previous policy", self.gw.stderr_text())
        self.assertIn("bad regex", self.gw.stderr_text())
        self.gw.write_config(f'[policy]\nallow = ["b.test:{self.origin}"]\n' + self.body)
        self.gw.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        self.assertEqual(self.get("b.test"), 200)
        self.assertEqual(self.get("a.test"), 403)

    def test_kept_alive_connection_follows_reload(self):
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", self.gw.port, timeout=10)
        url = f"http://a.test:{self.origin}/k"
        conn.request("GET", url, headers={"Host": f"a.test:{self.origin}"})
        r = conn.getresponse()
        self.assertEqual((r.status, r.read()), (200, b"hello from origin /k\n"))
        self.gw.write_config(f'[policy]\nallow = ["b.test:{self.origin}"]\n' + self.body)
        self.gw.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        for _ in range(3):  # the same connection, judged by the new policy, many times over
            conn.request("GET", url, headers={"Host": f"a.test:{self.origin}"})
            r = conn.getresponse()
            r.read()
            self.assertEqual(r.status, 403)
        conn.close()
        self.assertEqual(self.get("b.test"), 200)
        self.assertIsNone(self.gw.proc.poll())

    def test_sigterm_drains_and_exits_zero(self):
        self.assertEqual(self.get("a.test"), 200)
        self.gw.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.gw.proc.wait(timeout=15), 0)


class StartupErrorTest(unittest.TestCase):
    def test_bad_config_exits_125_with_line_and_fix(self):
        with tempfile.TemporaryDirectory() as d:
            cfg = os.path.join(d, "bad.toml")
            with open(cfg, "w") as f:
                f.write('[policy]\nallow = ["ok.test",\n  "host:99999"]\n')
            p = subprocess.run([__import__("harness").SLUICE, "serve", "--config", cfg], capture_output=True)
            self.assertEqual(p.returncode, 125)
            err = p.stderr.decode()
            self.assertIn(cfg + ":3:", err)
            self.assertIn("1 to 65535", err)

    def test_check_command(self):
        sl = __import__("harness").SLUICE
        p = subprocess.run([sl, "check", "--sandbox-profile", "network-read", "--allow-domain", "*.github.com",
                            "GET", "https://api.github.com/repos"], capture_output=True)
        self.assertEqual(p.returncode, 0)
        self.assertEqual(p.stdout.decode().strip(), "ALLOW rule=*.github.com")
        p = subprocess.run([sl, "check", "--sandbox-profile", "network-read", "--allow-domain", "*.github.com",
                            "POST", "https://api.github.com/repos"], capture_output=True)
        self.assertEqual(p.returncode, 1)
        self.assertIn("DENY reason=method_not_allowed", p.stdout.decode())
        p = subprocess.run([sl, "check", "--allow-domain", "github.com", "GET", "https://github.com@evil.com/"],
                           capture_output=True)
        self.assertIn("DENY reason=userinfo_in_target", p.stdout.decode())

    def test_ca_init_and_show(self):
        sl = __import__("harness").SLUICE
        with tempfile.TemporaryDirectory() as d:
            cert, key = os.path.join(d, "ca.pem"), os.path.join(d, "ca.key")
            p = subprocess.run([sl, "ca", "init", "--cert", cert, "--key", key], capture_output=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(os.stat(key).st_mode & 0o777, 0o600)
            p = subprocess.run([sl, "ca", "init", "--cert", cert, "--key", key], capture_output=True)
            self.assertEqual(p.returncode, 125)
            self.assertIn("--force", p.stderr.decode())
            p = subprocess.run([sl, "ca", "show", "--cert", cert], capture_output=True)
            self.assertIn("sha256:", p.stdout.decode())
            v = subprocess.run(["openssl", "x509", "-in", cert, "-noout", "-text"], capture_output=True)
            self.assertIn("CA:TRUE", v.stdout.decode())


if __name__ == "__main__":
    unittest.main()
