"""Transparent capture: clients that ignore the proxy variables (Node's https.get and fetch, curl
--noproxy '*', raw sockets, wget --no-proxy) still reach sluice inside `sluice exec`, and are judged
by the same policy as proxied requests, with the same logs and summary. Real clients, the test host
at 198.18.0.2 (HTTPS on 8443, plain HTTP on 8080), as root and as 65534."""
import json
import os
import shutil
import subprocess
import unittest

import test_exec as base
from harness import HERE, PYTHON
from harness import log_records

M = base.M


def setUpModule():
    base.setUpModule()
    env = dict(os.environ, ORIGIN_HOST="198.18.0.2", ORIGIN_ROOT=M["tmp"])
    p = M["host"].start(PYTHON, os.path.join(HERE, "origin.py"), "8080", env=env)
    assert p.stdout.readline().strip() == b"ready"


tearDownModule = base.tearDownModule

NO_PROXY_VARS = "unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy; "


class CaptureAsRoot(base.ExecCase):

    def run_captured(self, script, *extra):
        summary = os.path.join(self.work, "summary.json")
        log = os.path.join(self.work, "access.log")
        p = self.sx("--sandbox-profile", "network-read", *extra, "--json-summary", summary,
                    "--access-log", log, "--", "sh", "-c", NO_PROXY_VARS + script)
        s = json.load(open(summary)) if os.path.exists(summary) else {}
        lines = log_records(open(log)) if os.path.exists(log) else []
        return p, s, lines

    def decisions(self, summary):
        return sorted((r["host"], r["port"], r["decision"], r["reason"]) for r in summary.get("requests", []))

    def test_curl_ignoring_proxy_is_judged_like_a_proxied_request(self):
        p, s, log = self.run_captured(
            "curl --noproxy '*' -sS https://origin.test:8443/hello; "
            "curl --noproxy '*' -s -o /dev/null -w '%{http_code}\\n' https://other.test:8443/; exit 0")
        self.assertEqual(p.stdout.decode(), "hello from origin /hello\n000\n", p.stderr.decode())
        self.assertEqual(self.decisions(s), [("origin.test", 8443, "allow", "allowed"),
                                             ("other.test", 8443, "deny", "host_not_allowlisted")])
        self.assertIn("--allow-domain other.test:8443", p.stderr.decode())
        captured = [(x["host"], x["decision"]) for x in log if x["entry"] == "capture"]
        self.assertIn(("origin.test", "allow"), captured)
        self.assertIn(("other.test", "deny"), captured)

    def test_node_https_get_and_fetch_without_proxy_support(self):
        if not shutil.which("node"):
            self.skipTest("no node on this machine")
        js = ("const https=require('https');"
              "https.get('https://origin.test:8443/node-get',r=>{let b='';r.on('data',d=>b+=d);"
              "r.on('end',async()=>{process.stdout.write(b);"
              "const f=await fetch('https://origin.test:8443/node-fetch');process.stdout.write(await f.text());"
              "try{await fetch('https://unlisted.test/');console.log('LEAK')}catch(e){console.log('refused')}})})"
              ".on('error',e=>{console.log('error',e.message);process.exit(3)})")
        p, s, _ = self.run_captured(f"node -e \"{js}\"")
        self.assertEqual(p.returncode, 0, p.stdout.decode() + p.stderr.decode())
        self.assertEqual(p.stdout.decode(),
                         "hello from origin /node-get\nhello from origin /node-fetch\nrefused\n")
        self.assertIn(("unlisted.test", 443, "deny", "host_not_allowlisted"), self.decisions(s))

    def test_wget_with_no_proxy_and_no_ca_variable(self):
        if not shutil.which("wget"):
            self.skipTest("no wget on this machine")
        p, s, _ = self.run_captured("unset SSL_CERT_FILE; wget --no-proxy -qO- https://origin.test:8443/wget")
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(p.stdout, b"hello from origin /wget\n")

    def test_jvm_needs_no_options(self):
        """The JVM reaches the origin through capture and trusts the CA through the view's cacerts:
        no JAVA_TOOL_OPTIONS, so nothing extra on stderr."""
        java, src = self.java_fetch()
        p, s, log = self.run_captured(f"unset JAVA_TOOL_OPTIONS; {java} {src} https://origin.test:8443/jvm")
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(p.stdout, b"hello from origin /jvm\n")
        self.assertNotIn(b"Picked up", p.stderr)
        self.assertEqual([x["entry"] for x in log if x["path"] == "/jvm"], ["capture"])

    def test_plain_http_captured_and_writes_refused(self):
        p, s, log = self.run_captured(
            "curl --noproxy '*' -sS http://origin.test:8080/plain; "
            "curl --noproxy '*' -sS -X POST -d x=1 http://origin.test:8080/echo; "
            "curl --noproxy '*' -s -o /dev/null -w '%{http_code}\\n' -X POST -d x=1 https://origin.test:8443/echo",
            "--allow-domain", "origin.test:8080")
        out = p.stdout.decode()
        self.assertTrue(out.startswith("hello from origin /plain\nsluice: denied POST http://origin.test:8080/echo: "
                                       "method_not_allowed"), out)
        self.assertTrue(out.endswith("403\n"), out)
        got = self.decisions(s)
        self.assertIn(("origin.test", 8080, "allow", "allowed"), got)
        self.assertIn(("origin.test", 8080, "deny", "method_not_allowed"), got)
        self.assertIn(("origin.test", 8443, "deny", "method_not_allowed"), got)
        self.assertTrue(all(x["entry"] == "capture" for x in log), log)

    def test_allowlist_profile_passes_captured_tls_through(self):
        """allowlist does not terminate: a captured TLS connection to a listed name is a tunnel to
        the origin, which shows its own certificate; other names are refused all the same."""
        shutil.copy(os.path.join(M["tmp"], "origin-ca.pem"), os.path.join(self.work, "origin-ca.crt"))
        os.chmod(os.path.join(self.work, "origin-ca.crt"), 0o644)
        summary = os.path.join(self.work, "summary.json")
        p = self.sx("--sandbox-profile", "allowlist", "--json-summary", summary, "--", "sh", "-c",
                    "curl --noproxy '*' -sS --cacert origin-ca.crt https://origin.test:8443/tunnel; "
                    "curl --noproxy '*' -s -o /dev/null -w '%{http_code}\\n' --cacert origin-ca.crt "
                    "https://other.test:8443/; exit 0")
        self.assertEqual(p.stdout.decode(), "hello from origin /tunnel\n000\n", p.stderr.decode())
        self.assertEqual(self.decisions(json.load(open(summary))),
                         [("origin.test", 8443, "allow", "allowed"), ("other.test", 8443, "deny", "host_not_allowlisted")])

    def test_literal_addresses_are_judged_as_literals(self):
        """An address the DNS responder never handed out is judged as the IP literal it is: the
        test host's real address is not allowlisted, so nothing reaches it."""
        p, s, _ = self.run_captured("curl --noproxy '*' -sk -o /dev/null -w '%{http_code}\\n' "
                                    "https://198.18.0.2:8443/; curl --noproxy '*' -s -o /dev/null -w "
                                    "'%{http_code}\\n' http://198.18.0.2:8080/ --max-time 10; exit 0",
                                    "--allow-domain", "origin.test:8080")
        self.assertEqual(p.stdout.decode(), "000\n403\n", p.stderr.decode())
        got = self.decisions(s)
        self.assertIn(("198.18.0.2", 8443, "deny", "host_not_allowlisted"), got)
        self.assertIn(("198.18.0.2", 8080, "deny", "host_not_allowlisted"), got)

    def test_non_http_protocol_refused_and_logged(self):
        script = (f"{PYTHON} -c \"import socket; s=socket.create_connection(('origin.test', 8443), timeout=20); "
                  "s.sendall(b'SSH-2.0-OpenSSH_9.2\\r\\n'); print(repr(s.recv(100)))\"")
        p, s, log = self.run_captured(script)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(p.stdout, b"b''\n")  # closed, nothing relayed
        refused = [x for x in log if x["reason"] == "non_http_protocol"]
        self.assertEqual([(x["host"], x["port"], x["entry"]) for x in refused], [("origin.test", 8443, "capture")])

    def test_ssh_banner_on_a_plain_port_is_closed_at_once(self):
        """An SSH client on a captured plain-HTTP port sends its banner and waits for the server's:
        sluice answers 400 naming non_http_protocol and closes at once (not at the 30 s header
        deadline), and logs it."""
        script = (f"{PYTHON} -c \"import socket, time; t=time.monotonic(); "
                  "s=socket.create_connection(('origin.test', 8080), timeout=20); "
                  "s.sendall(b'SSH-2.0-OpenSSH_9.2p1 Debian-2\\r\\n'); data=b''\n"
                  "while True:\n c=s.recv(4096)\n if not c: break\n data+=c\n"
                  "print(data.split(b'\\r\\n')[0].decode(), b'non_http_protocol' in data, round(time.monotonic()-t) < 5)\"")
        p, s, log = self.run_captured(script, "--allow-domain", "origin.test:8080")
        self.assertEqual(p.stdout.decode().strip(), "HTTP/1.1 400 Bad Request True True", p.stderr.decode())
        refused = [(x["host"], x["port"], x["entry"]) for x in log if x["reason"] == "non_http_protocol"]
        self.assertEqual(refused, [("origin.test", 8080, "capture")])

    def test_dns_over_udp_and_tcp_answers_from_the_pool(self):
        script = (f"{PYTHON} -c \"import socket,struct\n"
                  "q=bytes.fromhex('abcd01000001000000000000')+b'\\x06origin\\x04test\\x00\\x00\\x01\\x00\\x01'\n"
                  "u=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); u.settimeout(5); u.sendto(q,('127.0.0.1',53)); a=u.recv(512)\n"
                  "t=socket.create_connection(('127.0.0.1',53),timeout=5); t.sendall(struct.pack('>H',len(q))+q)\n"
                  "n=struct.unpack('>H',t.recv(2))[0]; b=t.recv(n)\n"
                  "print(a==b, socket.inet_ntoa(a[-4:]), socket.gethostbyname('origin.test'))\"")
        p, s, _ = self.run_captured(script)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        same, udp_addr, resolved = p.stdout.decode().split()
        self.assertEqual(same, "True")
        self.assertTrue(udp_addr.startswith("198.19."), udp_addr)
        self.assertEqual(udp_addr, resolved)

    def test_other_ports_and_udp_refused_at_once(self):
        """Ports the policy cannot allow have no listener: connections are refused at once, and UDP
        other than DNS gets nowhere (QUIC clients fall back to TCP)."""
        script = (f"{PYTHON} -c \"import socket\n"
                  "try:\n socket.create_connection(('origin.test', 9000), timeout=5); print('connected')\n"
                  "except OSError as e: print(type(e).__name__)\n"
                  "u=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); u.settimeout(2); u.connect(('198.18.0.2',9001))\n"
                  "u.send(b'ping')\n"
                  "try: print(u.recv(10))\n"
                  "except OSError as e: print(type(e).__name__)\"")
        p, s, _ = self.run_captured(script)
        self.assertEqual(p.stdout.decode().split(), ["ConnectionRefusedError", "ConnectionRefusedError"],
                         p.stderr.decode())

    def test_names_the_host_file_maps_resolve_through_sluice(self):
        """A name only the host's /etc/hosts knows (a line added for this test) reaches the gateway
        by its name from Node's fetch, curl --noproxy and the JVM: inside, /etc/hosts holds the
        loopback names only, so the name goes through sluice's resolver and capture judges it by
        name, where before the client connected to the bare address and was refused."""
        line = "198.18.0.2 hostsfile.test\n"
        with open("/etc/hosts") as f:
            original = f.read()
        if "hostsfile.test" in original:
            self.fail("/etc/hosts already names hostsfile.test; remove that line and run again")
        try:
            with open("/etc/hosts", "a") as f:
                f.write(("" if original.endswith("\n") or not original else "\n") + line)
            outside = subprocess.run(["getent", "hosts", "hostsfile.test"], capture_output=True, text=True)
            self.assertEqual(outside.stdout.split()[:1], ["198.18.0.2"])  # the line is live outside
            script = ["grep -c hostsfile.test /etc/hosts",
                      "curl --noproxy '*' -sS http://hostsfile.test:8080/curl"]
            if shutil.which("node"):
                script.append("node -e \"fetch('http://hostsfile.test:8080/node').then(r=>r.text())"
                              ".then(t=>process.stdout.write(t),e=>{console.log('error',e.message)})\"")
            if shutil.which("java"):
                java, src = self.java_fetch()
                script.append(f"unset JAVA_TOOL_OPTIONS; {java} {src} http://hostsfile.test:8080/jvm")
            p, s, log = self.run_captured("; ".join(script) + "; exit 0", "--allow-domain", "hostsfile.test:8080")
            want = ["0", "hello from origin /curl"]
            if shutil.which("node"):
                want.append("hello from origin /node")
            if shutil.which("java"):
                want.append("hello from origin /jvm")
            self.assertEqual(p.stdout.decode().splitlines(), want, p.stderr.decode())
            self.assertEqual(self.decisions(s), [("hostsfile.test", 8080, "allow", "allowed")])
            self.assertTrue(all(x["entry"] == "capture" for x in log), log)
        finally:
            with open("/etc/hosts", "w") as f:
                f.write(original)


class CaptureAsNobody(CaptureAsRoot):
    user = 65534


if __name__ == "__main__":
    unittest.main()
