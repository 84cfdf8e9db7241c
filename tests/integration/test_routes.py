"""Rules per route with `sluice serve` and real clients: an allow entry that names methods and
paths widens network-read by one POST path, narrows a host to the paths it lists, and a deny route
refuses a path in every spelling. The matched route is the access log's rule, the metric label and
the Proxy-Status detail's rule; `sluice check` prints it. Loopback origins only."""
import subprocess
import unittest

from harness import (SLUICE, Gateway, LoopbackOrigins, curl, header, loopback_upstream, start_dns,
                     status_of)


class RoutesTest(LoopbackOrigins):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d, ca = cls.tmp.name, cls.ca
        dns = start_dns(cls.procs, {})
        o = "origin.test:%d" % cls.https
        cls.post_rule = o + " POST /echo"
        cls.read_rule = o + " GET,HEAD,OPTIONS /bytes/*"
        cls.deny_rule = o + " * /bytes/666"
        cls.body = f"""profile = "network-read"
[policy]
allow = [{{ host = "{o}", methods = ["POST"], paths = ["/echo"] }},
         {{ host = "{o}", methods = "read-only", paths = ["/bytes/*"] }},
         "origin.test:{cls.http}"]
deny = [{{ host = "{o}", paths = ["/bytes/666"] }}]
""" + loopback_upstream(ca[0], dns, {"origin.test": "127.0.0.1"})
        cls.gw = Gateway(cls.procs, d, cls.body, "routes")

    def url(self, path):
        return "https://origin.test:%d%s" % (self.https, path)

    def last_log(self, path):
        self.assertTrue(self.gw.logged(lambda r: r["path"] == path), path)
        return [r for r in self.gw.access_log() if r["path"] == path][-1]

    def test_double_escapes_and_overlong_utf8_match_no_route(self):
        """A routed path an origin could decode again ("%252e" is "%2e", then ".") or leniently
        ("%c0%ae" is an overlong "."): no allow route covers it, every deny route does."""
        for path in ("/bytes/%252e%252e/secret", "/bytes/%c0%ae%c0%ae/secret", "/bytes/%e0%80%ae"):
            p = curl(self.gw, self.url(path), "--path-as-is")
            heads = p.stderr.decode()
            self.assertEqual(status_of(heads), 403, (path, heads))
            self.assertIn('details="route_denied"', header(heads, "Proxy-Status"), path)
        p = curl(self.gw, self.url("/bytes/%25"), "--path-as-is")  # one escaped '%' is no double escape
        self.assertNotEqual(status_of(p.stderr.decode()), 403, p.stderr)

    def test_a_post_route_widens_network_read_by_one_path(self):
        p = curl(self.gw, self.url("/echo"), "-X", "POST", "-d", "payload=1")
        self.assertEqual(status_of(p.stderr.decode()), 200, p.stderr)
        self.assertEqual(p.stdout, b"payload=1")
        r = self.last_log("/echo")
        self.assertEqual((r["decision"], r["rule"]), ("allow", self.post_rule))
        self.assertGreaterEqual(self.gw.metric("sluice_rule_requests_total", rule=self.post_rule), 1)
        # The route covers POST on /echo only: other paths, other spellings, other methods refused.
        for method, path, reason in (("POST", "/echo2", "method_not_allowed"),
                                     ("POST", "/echo/", "method_not_allowed"),
                                     ("POST", "/ECHO", "method_not_allowed"),
                                     # unreadable paths: denied where a deny route covers the host
                                     ("POST", "//echo", "route_denied"),
                                     ("POST", "/echo;x=1", "route_denied"),
                                     ("POST", "/ok?/echo", "method_not_allowed"),
                                     ("PUT", "/echo", "method_not_allowed"),
                                     ("GET", "/echo", "route_not_allowed")):
            p = curl(self.gw, self.url(path), "-X", method, *(["-d", "x"] if method != "GET" else []),
                     "--path-as-is")
            heads = p.stderr.decode()
            self.assertEqual(status_of(heads), 403, (method, path, heads))
            self.assertIn('details="%s"' % reason, header(heads, "Proxy-Status"), (method, path))

    def test_a_read_only_route_narrows_the_host_to_its_paths(self):
        p = curl(self.gw, self.url("/bytes/16"))
        self.assertEqual(status_of(p.stderr.decode()), 200)
        self.assertEqual(self.last_log("/bytes/16")["rule"], self.read_rule)
        p = curl(self.gw, self.url("/hello"))
        heads = p.stderr.decode()
        self.assertEqual(status_of(heads), 403)
        self.assertIn('details="route_not_allowed"', header(heads, "Proxy-Status"))
        # A plain entry (the http origin) keeps the profile's methods on every path.
        p = curl(self.gw, "http://origin.test:%d/anything" % self.http)
        self.assertEqual(status_of(p.stderr.decode()), 200)

    def test_a_deny_route_refuses_every_spelling_of_its_path(self):
        for path in ("/bytes/666", "/BYTES/666", "/bytes/%36%36%36", "/bytes/666;x", "/bytes//666"):
            p = curl(self.gw, self.url(path), "--path-as-is")
            heads = p.stderr.decode()
            self.assertEqual(status_of(heads), 403, (path, heads))
            ps = header(heads, "Proxy-Status")
            self.assertIn('details="route_denied"; rule="%s"' % self.deny_rule, ps, path)
            self.assertIn(self.deny_rule.encode(), p.stdout, path)
        self.assertEqual(self.last_log("/bytes/666")["rule"], self.deny_rule)
        p = curl(self.gw, self.url("/bytes/667"))
        self.assertEqual(status_of(p.stderr.decode()), 200)

    def test_check_prints_the_route(self):
        def check(method, url):
            return subprocess.run([SLUICE, "check", "--config", self.gw.config, method, url],
                                  capture_output=True, text=True)
        p = check("POST", self.url("/echo"))
        self.assertEqual((p.returncode, p.stdout.strip()), (0, "ALLOW rule=" + self.post_rule))
        p = check("POST", self.url("/other"))
        self.assertEqual(p.returncode, 1)
        self.assertTrue(p.stdout.startswith("DENY reason=method_not_allowed"), p.stdout)
        p = check("GET", self.url("/bytes/666"))
        self.assertEqual(p.stdout.strip(), "DENY reason=route_denied rule=" + self.deny_rule)

    def test_check_and_the_gateway_agree(self):
        """`sluice check` judges with the gateway's own judge: for each request of a table, what it
        prints is what the gateway decides, over HTTP/1.1 and over h2 (a Git fetch's POST, as Git
        sends it, is the read it is under network-read)."""
        oid = b"a" * 40
        negotiation = b"0032want " + oid + b"\n" + b"00000009done\n"
        git = ("-H", "Content-Type: application/x-git-upload-pack-request", "--data-binary", "@-")
        http = "http://origin.test:%d" % self.http
        rows = [("GET", self.url("/bytes/16"), ()),
                ("POST", self.url("/echo"), ("-d", "x")),
                ("POST", self.url("/other"), ("-d", "x")),
                ("GET", self.url("/bytes/666"), ()),
                ("GET", self.url("/bytes/666/"), ()),
                ("GET", self.url("/hello"), ()),
                ("GET", "https://elsewhere.test:%d/" % self.https, ()),
                ("GET", http + "/anything", ()),
                ("POST", http + "/org/repo.git/git-upload-pack", git),
                ("POST", http + "/org/repo.git/git-receive-pack", ("-d", "x")),
                ("POST", http + "/anything", ("-d", "x"))]
        for method, url, args in rows:
            p = subprocess.run([SLUICE, "check", "--config", self.gw.config, method, url],
                               capture_output=True, text=True)
            first = p.stdout.split("\n")[0].split()
            self.assertIn(first[0], ("ALLOW", "DENY"), p.stdout + p.stderr)
            said = first[1].split("=", 1)[1] if first[0] == "DENY" else "allow"
            self.assertEqual(p.returncode, 0 if said == "allow" else 1, (url, p.stdout))
            versions = ["--http1.1", "--http2"] if url.startswith("https:") else ["--http1.1"]
            for version in versions:
                c = subprocess.run(["curl", "-sS", "--max-time", "20", "--proxy", self.gw.proxy, "--cacert",
                                    self.gw.ca, "-o", "/dev/null", "-D", "/dev/stderr", "-X", method, version,
                                    "--path-as-is", *args, url],
                                   input=negotiation if "@-" in args else b"", capture_output=True)
                heads = c.stderr.decode()
                ps = header(heads, "Proxy-Status") or ""
                did = ps.split('details="', 1)[1].split('"', 1)[0] if status_of(heads) == 403 else "allow"
                self.assertEqual(did, said, (method, url, version, p.stdout, heads))

    def test_bad_route_refused_at_load_with_the_line(self):
        p = subprocess.run([SLUICE, "check", "--config", "/dev/stdin", "GET", self.url("/")],
                           input='[policy]\nallow = [{ host = "a.test", paths = ["/a//b"] }]\n',
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 125, p.stdout + p.stderr)
        self.assertIn(":2:", p.stderr)
        self.assertIn("'//'", p.stderr)


if __name__ == "__main__":
    unittest.main()
