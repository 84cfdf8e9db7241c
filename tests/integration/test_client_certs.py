"""`sluice serve`'s HTTPS proxy listener: clients speak TLS to the gateway and identify themselves by
a client certificate (a SAN URI such as a SPIFFE ID, or a SAN DNS name, issued by a CA in
[tls] client_ca) or by a token sent inside that TLS. Certificates that are expired, from another CA,
meant for servers, or that name no client (or two) are refused with 407 naming why; the subject's
common name never identifies anyone; a token cannot override a certificate; a reload that drops a
certificate client revokes it, inside an open tunnel too. Real curl and python clients, real TLS
inside TLS, origins on loopback."""
import os
import socket
import ssl
import subprocess
import time

from harness import (Gateway, LoopbackOrigins, header, loopback_upstream, make_ca, make_client, make_leaf,
                     payload, read_response, sha256, start_dns, status_of)

BUILDER = "spiffe://agents.test/ns/ci/sa/builder"
TOKEN = "tok-keeper-0123456789abcdef"


class ClientCertificateTest(LoopbackOrigins):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.tmp.name
        dns = start_dns(cls.procs, {})
        upstream = loopback_upstream(cls.ca[0], dns, {"origin.test": "127.0.0.1", "other.test": "127.0.0.1"})
        # The listener's own certificate, from a CA of its own (what the clients trust for the proxy).
        cls.listener_ca = make_ca(d, "listener-ca")
        listener = make_leaf(d, cls.listener_ca, "sluice.test", "DNS:localhost,IP:127.0.0.1")
        clients_ca = make_ca(d, "clients-ca")
        rogue_ca = make_ca(d, "rogue-ca")
        cls.certs = {
            "builder": make_client(d, clients_ca, "builder", "URI:" + BUILDER),
            "scout": make_client(d, clients_ca, "scout", "DNS:Scout.Agents.Test"),
            "piper": make_client(d, clients_ca, "piper", "DNS:piper.agents.test"),
            "stranger": make_client(d, clients_ca, "stranger", "URI:spiffe://agents.test/ns/ci/sa/stranger"),
            "expired": make_client(d, clients_ca, "expired", "URI:" + BUILDER,
                                   days=("20200101000000Z", "20200201000000Z")),
            "rogue": make_client(d, rogue_ca, "rogue", "URI:" + BUILDER),
            "server-only": make_client(d, clients_ca, "server-only", "URI:" + BUILDER, usage="serverAuth"),
            "cn-only": make_client(d, clients_ca, "cn-only", "DNS:nobody.agents.test", cn=BUILDER),
            "twins": make_client(d, clients_ca, "twins", "URI:%s,DNS:scout.agents.test" % BUILDER),
        }
        digest = sha256(TOKEN.encode())
        cls.body = f"""
profile = "network-read"
[policy]
allow = ["origin.test:{cls.https}", "origin.test:{cls.http}"]
[roles.read]
[roles.narrow]
allow = ["other.test"]
[roles.tunnel]
profile = "allowlist"
[clients.builder]
certificate = "{BUILDER}"
role = "read"
[clients.scout]
certificate = "scout.agents.test"
role = "narrow"
[clients.piper]
certificate = "piper.agents.test"
role = "tunnel"
[clients.keeper]
token_sha256 = "{digest}"
role = "read"
""" + upstream.replace("[tls]\n", f"""[tls]
proxy_cert = "{listener[0]}"
proxy_key = "{listener[1]}"
client_ca = "{clients_ca[0]}"
""") + '[timeouts]\ndns = "2s"\n'
        cls.tls_port = cls.free_port()
        cls.gw = Gateway(cls.procs, d, cls.body, "certs", listen_extra='proxy_tls = "127.0.0.1:%d"\n' % cls.tls_port)

    @staticmethod
    def free_port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def via_tls(self, url, cert=None, *args):
        cmd = ["curl", "-sS", "--max-time", "20", "-o", "-", "-D", "/dev/stderr",
               "--proxy", "https://127.0.0.1:%d" % self.tls_port, "--proxy-cacert", self.listener_ca[0],
               "--cacert", self.gw.ca]
        if cert:
            pem, key = self.certs[cert]
            cmd += ["--proxy-cert", pem, "--proxy-key", key]
        return subprocess.run(cmd + list(args) + [url], capture_output=True)

    def url(self, path, host="origin.test"):
        return f"https://{host}:{self.https}{path}"

    def test_uri_certificate_identifies_the_client_for_https_and_http(self):
        p = self.via_tls(self.url("/bytes/4096"), "builder")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sha256(p.stdout), sha256(payload(4096)))
        p = self.via_tls(f"http://origin.test:{self.http}/bytes/100", "builder")
        self.assertEqual(status_of(p.stderr.decode()), 200, p.stderr)
        self.assertEqual(p.stdout, payload(100))
        self.assertTrue(self.gw.logged(lambda l: l["path"] == "/bytes/4096" and l["client"] == "builder"
                                       and l["role"] == "read" and l["decision"] == "allow"))
        self.assertTrue(self.gw.logged(lambda l: l["path"] == "/bytes/100" and l["client"] == "builder"))
        self.assertGreaterEqual(self.gw.metric("sluice_requests_total", client="builder", decision="allow"), 2)
        # A POST is still refused by the role's profile (network-read), inside TLS inside TLS.
        p = self.via_tls(self.url("/post"), "builder", "-X", "POST", "-d", "x")
        self.assertEqual(status_of(p.stderr.decode()), 403)

    def test_dns_certificate_picks_its_role(self):
        # scout's role allows other.test only; its SAN is compared case-insensitively.
        p = self.via_tls(self.url("/bytes/10"), "scout")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("403", p.stderr.decode())
        self.assertTrue(self.gw.logged(lambda l: l["client"] == "scout" and l["role"] == "narrow"
                                       and l["decision"] == "deny" and l["reason"] == "host_not_allowlisted"))

    def test_allowlist_role_passes_tunnels_through_inside_tls(self):
        # piper's role is allowlist: the tunnel is not terminated; the origin's own certificate
        # reaches the client through sluice's TLS.
        cmd = ["curl", "-sS", "--max-time", "20", "-o", "-", "--proxy", "https://127.0.0.1:%d" % self.tls_port,
               "--proxy-cacert", self.listener_ca[0], "--cacert", self.ca[0],
               "--proxy-cert", self.certs["piper"][0], "--proxy-key", self.certs["piper"][1],
               self.url("/bytes/70000")]
        p = subprocess.run(cmd, capture_output=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sha256(p.stdout), sha256(payload(70000)))
        self.assertTrue(self.gw.logged(lambda l: l["client"] == "piper" and l["method"] == "CONNECT"
                                       and l["decision"] == "allow" and l["bytes_out"] >= 70000))

    def test_token_inside_tls_without_a_certificate(self):
        p = self.via_tls(self.url("/bytes/64"), None, "--proxy-user", "keeper:" + TOKEN)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, payload(64))
        p = self.via_tls(f"http://origin.test:{self.http}/bytes/10")
        head = p.stderr.decode()
        self.assertEqual(status_of(head), 407, head)
        self.assertIn("proxy_auth_required", header(head, "Proxy-Status"))
        self.assertTrue(self.gw.logged(lambda l: l["client"] == "keeper" and l["path"] == "/bytes/64"))

    def test_refused_certificates_get_407_naming_why(self):
        cases = {
            "expired": ("client_certificate_invalid", "certificate has expired"),
            "rogue": ("client_certificate_invalid", "unable to get local issuer certificate"),
            "server-only": ("client_certificate_invalid", "unsuitable certificate purpose"),
            "stranger": ("proxy_auth_invalid", "URI:spiffe://agents.test/ns/ci/sa/stranger"),
            "cn-only": ("proxy_auth_invalid", "DNS:nobody.agents.test"),
            "twins": ("proxy_auth_invalid", "more than one"),
        }
        for cert, (reason, says) in cases.items():
            with self.subTest(cert=cert):
                # A valid token for another client does not stand in for a refused certificate.
                p = self.via_tls(f"http://origin.test:{self.http}/bytes/10?{cert}", cert,
                                 "--proxy-user", "keeper:" + TOKEN)
                head = p.stderr.decode()
                self.assertEqual(status_of(head), 407, head)
                self.assertIn(reason, header(head, "Proxy-Status"))
                self.assertIn(says, p.stdout.decode())
                self.assertTrue(self.gw.logged(lambda l: l["reason"] == reason and l["client"] == ""
                                               and l["decision"] == "deny"))
                # CONNECT: refused before any tunnel.
                p = self.via_tls(self.url("/bytes/10"), cert)
                self.assertNotEqual(p.returncode, 0)
                self.assertIn("407", p.stderr.decode())
        self.assertGreaterEqual(self.gw.metric("sluice_requests_total", reason="client_certificate_invalid"), 6)

    def test_a_token_cannot_override_the_certificate(self):
        # scout's certificate with keeper's valid token: scout it is (narrow role: origin.test denied).
        p = self.via_tls(f"http://origin.test:{self.http}/bytes/10?override", "scout",
                         "--proxy-user", "keeper:" + TOKEN)
        self.assertEqual(status_of(p.stderr.decode()), 403)
        self.assertTrue(self.gw.logged(lambda l: l["path"] == "/bytes/10?REDACTED" and l["client"] == "scout"))

    def test_plain_http_on_the_tls_port_is_logged(self):
        p = subprocess.run(["curl", "-sS", "--max-time", "10", "--proxy", "http://127.0.0.1:%d" % self.tls_port,
                            f"http://origin.test:{self.http}/bytes/10"], capture_output=True)
        self.assertNotEqual(p.returncode, 0)
        self.assertTrue(self.gw.logged(lambda l: l["reason"] in ("client_tls_error", "client_tls_rejected")
                                       and l["method"] == "-"))
        # An untrusted listener certificate: the client refuses, sluice logs the alert.
        p = subprocess.run(["curl", "-sS", "--max-time", "10", "--proxy", "https://127.0.0.1:%d" % self.tls_port,
                            f"http://origin.test:{self.http}/bytes/10"], capture_output=True)
        self.assertNotEqual(p.returncode, 0)
        self.assertTrue(self.gw.logged(lambda l: l["reason"] == "client_tls_rejected"))

    # --- reload: a certificate client removed is revoked ----------------------------------------------
    def outer(self, cert):
        ctx = ssl.create_default_context(cafile=self.listener_ca[0])
        ctx.load_cert_chain(*self.certs[cert])
        s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", self.tls_port), timeout=10),
                            server_hostname="localhost")
        return s

    def test_reload_without_the_client_revokes_it_in_keep_alive_and_tunnels(self):
        # Keep-alive absolute-form requests on one TLS connection, and a tunnel (TLS inside TLS,
        # driven by hand with a memory BIO) on another, both opened as builder.
        plain = self.outer("builder")
        req = (f"GET http://origin.test:{self.http}/bytes/5 HTTP/1.1\r\nHost: origin.test:{self.http}\r\n\r\n").encode()
        plain.sendall(req)
        self.assertEqual(read_response(lambda: plain.recv(65536)), (200, payload(5)))
        tunnel = self.outer("builder")
        tunnel.sendall(f"CONNECT origin.test:{self.https} HTTP/1.1\r\nHost: origin.test:{self.https}\r\n\r\n".encode())
        self.assertEqual(read_response(lambda: tunnel.recv(65536))[0], 200)
        inner_ctx = ssl.create_default_context(cafile=self.gw.ca)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        inner = inner_ctx.wrap_bio(incoming, outgoing, server_hostname="origin.test")

        def pump(op):
            while True:
                try:
                    result = op()
                    if outgoing.pending:
                        tunnel.sendall(outgoing.read())
                    return result
                except ssl.SSLWantReadError:
                    if outgoing.pending:
                        tunnel.sendall(outgoing.read())
                    data = tunnel.recv(65536)
                    if not data:
                        raise ConnectionError("tunnel closed")
                    incoming.write(data)

        def inner_get(path):
            pump(lambda: inner.write(f"GET {path} HTTP/1.1\r\nHost: origin.test:{self.https}\r\n\r\n".encode()))
            return read_response(lambda: pump(lambda: inner.read(65536)))

        pump(inner.do_handshake)
        self.assertEqual(inner_get("/bytes/7"), (200, payload(7)))
        # The file drops builder (scout stays); the replica reloads it within a few seconds.
        reloads = self.gw.stderr_text().count("reloaded policy")
        self.gw.write_config(self.body.replace(f'[clients.builder]\ncertificate = "{BUILDER}"\nrole = "read"\n', ""),
                             listen_extra='proxy_tls = "127.0.0.1:%d"\n' % self.tls_port)
        deadline = time.monotonic() + 10
        while self.gw.stderr_text().count("reloaded policy") <= reloads:
            self.assertLess(time.monotonic(), deadline, "the policy file was not reloaded")
            time.sleep(0.2)
        try:
            plain.sendall(req)
            status, body = read_response(lambda: plain.recv(65536))
            self.assertEqual(status, 407)
            self.assertIn(b"names no client", body)
            self.assertEqual(inner_get("/bytes/7")[0], 403)
            self.assertTrue(self.gw.logged(lambda l: l["reason"] == "client_revoked" and l["client"] == "builder"))
        finally:
            plain.close()
            tunnel.close()
            self.gw.write_config(self.body, listen_extra='proxy_tls = "127.0.0.1:%d"\n' % self.tls_port)
            deadline = time.monotonic() + 10
            while self.via_tls(f"http://origin.test:{self.http}/bytes/1", "builder").stdout != payload(1):
                self.assertLess(time.monotonic(), deadline, "the restored policy was not reloaded")
                time.sleep(0.2)


if __name__ == "__main__":
    import unittest
    unittest.main()
