"""Beyond HTTP inside `sluice exec`, as root and as 65534, with real servers from Debian: PostgreSQL
on a test host (198.18.0.2, "db.test") reached by a skill's tcp entry, psql connecting and querying
and the access log naming the database user and database (never the password); Redis and a dev
server (python's http.server) on the host's loopback, reached inside as host.sluice.internal
(host_services): Redis' TCP where the entry says tcp = true, the dev server's GET under
network-read and its POST refused. Refused, each with its reason: TCP to a name no entry grants,
an entry of another profile, a private address without allow_addresses, a port of the host's
loopback that is not granted. `sluice check tcp://...` answers as the gateway does."""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

import test_exec as base
from harness import PYTHON, SLUICE, Gateway, Processes, free_port, wait_port
from harness import log_records
from netns import TestHost

M = {}
PG = "/usr/lib/postgresql/15/bin"
PG_PASSWORD = "pg-secret-%s" % os.urandom(4).hex()
REDIS_PASSWORD = "redis-secret-%s" % os.urandom(4).hex()


def need(path):
    if not os.path.exists(path):
        raise unittest.SkipTest("%s is not installed (Debian's postgresql, redis-server)" % path)


def start_postgres(host, d):
    """PostgreSQL 15 in the test host's namespace on 198.18.0.2:5432, a user `app` with a password
    (SCRAM) and a database `appdb`."""
    data = os.path.join(d, "pg")
    sock = os.path.join(d, "pgsock")
    for p in (data, sock):
        os.makedirs(p)
        shutil.chown(p, "postgres", "postgres")
    pwfile = os.path.join(d, "pgpw")
    with open(pwfile, "w") as f:
        f.write(PG_PASSWORD + "\n")
    shutil.chown(pwfile, "postgres", "postgres")
    subprocess.run(["runuser", "-u", "postgres", "--", PG + "/initdb", "-D", data, "-U", "postgres",
                    "--auth-local=trust", "--auth-host=scram-sha-256", "--pwfile", pwfile],
                   check=True, capture_output=True)
    with open(os.path.join(data, "pg_hba.conf"), "a") as f:
        f.write("host all all 198.18.0.0/15 scram-sha-256\n")
    log = open(os.path.join(d, "pg.log"), "w")
    proc = subprocess.Popen(["ip", "netns", "exec", host.name, "runuser", "-u", "postgres", "--",
                             PG + "/postgres", "-D", data, "-k", sock, "-c", "listen_addresses=198.18.0.2",
                             "-c", "port=5432", "-c", "ssl=off", "-c", "fsync=off"],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        ok = subprocess.run(["runuser", "-u", "postgres", "--", "psql", "-h", sock, "-p", "5432", "-d", "postgres",
                             "-c", "select 1"], capture_output=True)
        if ok.returncode == 0:
            break
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError("PostgreSQL did not start: %s; see %s" % (ok.stderr.decode(), log.name))
        time.sleep(0.3)
    sql = ("CREATE USER app PASSWORD '%s'; CREATE DATABASE appdb OWNER app;" % PG_PASSWORD)
    for stmt in sql.split(";")[:-1]:
        subprocess.run(["runuser", "-u", "postgres", "--", "psql", "-h", sock, "-p", "5432", "-d", "postgres",
                        "-c", stmt], check=True, capture_output=True)
    return proc


def setUpModule():
    if os.geteuid() != 0:
        raise unittest.SkipTest("the services suite runs servers in a network namespace and needs root")
    for p in (PG + "/postgres", "/usr/bin/psql", "/usr/bin/redis-server", "/usr/bin/redis-cli"):
        need(p)
    d = M["tmp"] = tempfile.mkdtemp(prefix="sluice-services-test-")
    os.chmod(d, 0o755)
    M["host"] = TestHost()
    M["pg"] = start_postgres(M["host"], d)
    # Redis and a dev server on this machine's loopback: "the host" of the sandbox.
    M["redis_port"] = free_port()
    M["redis"] = subprocess.Popen(["redis-server", "--port", str(M["redis_port"]), "--bind", "127.0.0.1",
                                   "--save", "", "--appendonly", "no", "--requirepass", REDIS_PASSWORD],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    M["web_port"] = free_port()
    www = os.path.join(d, "www")
    os.makedirs(www)
    with open(os.path.join(www, "index.html"), "w") as f:
        f.write("dev server ok\n")
    M["web"] = subprocess.Popen([PYTHON, "-m", "http.server", "--bind", "127.0.0.1", "--directory", www,
                                 str(M["web_port"])], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    M["closed_port"] = free_port()  # a host port nobody granted (nothing listens either)
    M["secret_port"] = free_port()  # a host port something listens on, not granted
    M["secret"] = subprocess.Popen([PYTHON, "-m", "http.server", "--bind", "127.0.0.1", "--directory", www,
                                    str(M["secret_port"])], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for port in (M["redis_port"], M["web_port"], M["secret_port"]):
        wait_port(port)
    M["policy"] = os.path.join(d, "policy.toml")
    with open(M["policy"], "w") as f:
        f.write(f"""
[skills.default]
default_profile = "network-read"
escalations = ["publish"]
tcp = [{{ host = "db.test", port = 5432 }}, {{ host = "write.test", port = 5432, profiles = ["publish"] }}]
host_services = [{{ port = {M['web_port']} }}, {{ port = {M['redis_port']}, tcp = true }}]

[upstream]
allow_addresses = ["198.18.0.0/15"]

[upstream.resolve]
"db.test" = "198.18.0.2"
"other.test" = "198.18.0.2"
"write.test" = "198.18.0.2"
""")
    os.chmod(M["policy"], 0o644)
    # The skill without allow_addresses: the same pins, the private test host refused.
    M["noaddr_policy"] = os.path.join(d, "noaddr.toml")
    with open(M["noaddr_policy"], "w") as f:
        f.write(open(M["policy"]).read().replace('allow_addresses = ["198.18.0.0/15"]', "allow_addresses = []"))
    os.chmod(M["noaddr_policy"], 0o644)


def tearDownModule():
    for k in ("redis", "web", "secret", "pg"):
        if k in M:
            M[k].terminate()
            M[k].wait()
    if "host" in M:
        M["host"].close()
    if "tmp" in M:
        shutil.rmtree(M["tmp"], ignore_errors=True)


class ServicesAsRoot(base.ExecCase):

    def run_in(self, script, *args, policy=None):
        log = os.path.join(self.work, "access.log")
        summary = os.path.join(self.work, "summary.json")
        for p in (log, summary):
            if os.path.exists(p):
                os.unlink(p)
        cmd = self.prefix() + [SLUICE, "exec", "--policy", policy or M["policy"], "--access-log", log,
                               "--json-summary", summary] + list(args) + ["--", "sh", "-c", script]
        p = subprocess.run(cmd, capture_output=True, env=self.env(), timeout=120, cwd=self.work)
        lines = log_records(open(log)) if os.path.exists(log) else []
        with open(summary) as f:
            return p, lines, json.load(f)

    def tcp_lines(self, lines):
        return [x for x in lines if x.get("protocol") == "tcp"]

    def test_psql_connects_and_the_log_names_user_and_database(self):
        p, lines, summary = self.run_in(f"PGPASSWORD={PG_PASSWORD} psql 'host=db.test port=5432 user=app dbname=appdb sslmode=disable' "
                                        "-Atc 'select current_user, current_database(), 6*7'")
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(p.stdout.decode().strip(), "app|appdb|42")
        tcp = self.tcp_lines(lines)
        self.assertEqual(len(tcp), 1, lines)
        line = tcp[0]
        self.assertEqual((line["host"], line["port"], line["decision"], line["rule"], line["entry"]),
                         ("db.test", 5432, "allow", "tcp://db.test:5432", "capture"))
        self.assertEqual((line["db_protocol"], line["db_user"], line["db_name"]), ("postgresql", "app", "appdb"))
        # psql sends Terminate, then closes; PostgreSQL closes on reading Terminate too: whichever
        # end's close sluice reads first is the one logged (a clean-clone CI run read the server's),
        # never an error, the idle or the whole-connection deadline.
        self.assertIn(line["closed_by"], ("client", "server"))
        self.assertGreater(line["bytes_in"], 0)
        self.assertGreater(line["bytes_out"], 0)
        self.assertIn("tcp://db.test:5432", summary["tcp"])
        everything = json.dumps(lines) + json.dumps(summary) + p.stderr.decode()
        self.assertNotIn(PG_PASSWORD, everything)

    def test_tcp_without_an_entry_is_refused_with_the_reason(self):
        p, lines, summary = self.run_in(f"PGPASSWORD={PG_PASSWORD} psql 'host=other.test port=5432 user=app dbname=appdb sslmode=disable "
                                        "connect_timeout=20' -Atc 'select 1'")
        self.assertNotEqual(p.returncode, 0)
        refused = [(x["host"], x["port"], x["reason"]) for x in lines if x["decision"] != "allow"]
        self.assertEqual(refused, [("other.test", 5432, "non_http_protocol")])
        self.assertIn("tcp = [{ host = \"other.test\", port = 5432 }]", p.stderr.decode())

    def test_an_entry_of_another_profile_is_refused(self):
        p, lines, _ = self.run_in(f"PGPASSWORD={PG_PASSWORD} psql 'host=write.test port=5432 user=app dbname=appdb sslmode=disable "
                                  "connect_timeout=20' -Atc 'select 1'")
        self.assertNotEqual(p.returncode, 0)
        self.assertEqual([x["reason"] for x in lines if x["host"] == "write.test"], ["non_http_protocol"])

    def test_a_private_address_needs_allow_addresses(self):
        p, lines, _ = self.run_in(f"PGPASSWORD={PG_PASSWORD} psql 'host=db.test port=5432 user=app dbname=appdb sslmode=disable "
                                  "connect_timeout=20' -Atc 'select 1'", policy=M["noaddr_policy"])
        self.assertNotEqual(p.returncode, 0)
        self.assertEqual([(x["host"], x["reason"]) for x in self.tcp_lines(lines)],
                         [("db.test", "destination_address_denied")])

    def test_redis_on_the_host_through_a_host_service(self):
        port = M["redis_port"]
        p, lines, summary = self.run_in(f"redis-cli -h host.sluice.internal -p {port} --user default --pass {REDIS_PASSWORD} --no-auth-warning PING && "
                                        f"redis-cli -h host.sluice.internal -p {port} --user default --pass {REDIS_PASSWORD} --no-auth-warning GET nothing")
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(p.stdout.decode().split("\n")[:2], ["PONG", ""])
        tcp = self.tcp_lines(lines)
        self.assertEqual([(x["host"], x["port"], x["decision"], x["db_protocol"], x["db_user"]) for x in tcp],
                         [("host.sluice.internal", port, "allow", "redis", "default")] * 2)
        self.assertIn({"name": "host.sluice.internal", "port": port, "tcp": True}, summary["hostServices"])
        self.assertNotIn(REDIS_PASSWORD, json.dumps(lines))

    def test_a_dev_server_on_the_host_is_judged_as_http(self):
        url = "http://host.sluice.internal:%d/" % M["web_port"]
        # Through the proxy variables and, with them ignored, through capture.
        script = (f"curl -sS {url}; curl -sS --noproxy '*' {url}; "
                  f"curl -sS -o /dev/null -w '%{{http_code}}\\n' -X POST -d x {url}")
        p, lines, _ = self.run_in(script)
        self.assertEqual(p.stdout.decode().split("\n")[:3], ["dev server ok", "dev server ok", "403"],
                         p.stderr.decode())
        got = [(x["method"], x["entry"], x["decision"], x["reason"]) for x in lines]
        self.assertEqual(got, [("GET", "proxy", "allow", "allowed"), ("GET", "capture", "allow", "allowed"),
                               ("POST", "proxy", "deny", "method_not_allowed")])
        # HTTP only: raw TCP to that port is not what the entry grants.
        p, lines, _ = self.run_in(f"{PYTHON} -c \"import socket; s=socket.create_connection(('host.sluice.internal', "
                                  f"{M['web_port']}), timeout=20); s.sendall(bytes(8)); print(repr(s.recv(10)))\"")
        self.assertEqual(p.stdout, b"b''\n", p.stderr.decode())
        self.assertEqual([x["reason"] for x in lines], ["tcp_not_allowed"])

    def test_the_rest_of_the_hosts_loopback_stays_unreachable(self):
        secret, closed = M["secret_port"], M["closed_port"]
        script = (f"curl -sS -o /dev/null -w '%{{http_code}}\\n' http://host.sluice.internal:{secret}/; "
                  f"curl -sS --max-time 10 --noproxy '*' http://host.sluice.internal:{secret}/ || echo refused; "
                  f"curl -sS --max-time 10 --noproxy '*' http://127.0.0.1:{secret}/ || echo refused; "
                  f"curl -sS -o /dev/null -w '%{{http_code}}\\n' http://127.0.0.1:{secret}/")
        p, lines, _ = self.run_in(script)
        out = p.stdout.decode().split("\n")
        self.assertEqual(out[:4], ["403", "refused", "refused", "403"], p.stderr.decode())
        self.assertNotIn("dev server ok", p.stdout.decode())
        self.assertTrue(all(x["decision"] != "allow" for x in lines), lines)
        # A port nobody listens on: refused as well, not "connection refused" by the host.
        p, lines, _ = self.run_in(f"curl -sS -o /dev/null -w '%{{http_code}}\\n' http://host.sluice.internal:{closed}/")
        self.assertEqual(p.stdout.decode().strip(), "403")

    def test_connect_through_the_proxy_relays_tcp(self):
        """A client that asks the proxy for CONNECT (HTTPS_PROXY-aware database drivers, SOCKS5
        clients) gets the same relay: Redis' PING through CONNECT host.sluice.internal:PORT."""
        port = M["redis_port"]
        script = (f"{PYTHON} -c \"import os, socket, urllib.parse\n"
                  "u=urllib.parse.urlsplit(os.environ['HTTP_PROXY'])\n"
                  "s=socket.create_connection((u.hostname, u.port), timeout=20)\n"
                  f"s.sendall(b'CONNECT host.sluice.internal:{port} HTTP/1.1\\r\\nHost: host.sluice.internal:{port}\\r\\n\\r\\n')\n"
                  "head=b''\n"
                  "while not head.endswith(b'\\r\\n\\r\\n'): head+=s.recv(1)\n"
                  f"s.sendall(b'AUTH {REDIS_PASSWORD}\\r\\nPING\\r\\n')\n"
                  "got=b''\n"
                  "while got.count(b'\\r\\n')<2: got+=s.recv(100)\n"
                  "print(head.split(b'\\r\\n')[0].decode(), got.split())\"")
        p, lines, _ = self.run_in(script)
        self.assertEqual(p.stdout.decode().strip(), "HTTP/1.1 200 Connection established [b'+OK', b'+PONG']",
                         p.stderr.decode())
        tcp = self.tcp_lines(lines)
        self.assertEqual([(x["method"], x["entry"], x["status"], x["db_user"]) for x in tcp],
                         [("CONNECT", "proxy", 200, "default")])

    def test_check_answers_as_the_gateway(self):
        def check(url, *args):
            p = subprocess.run(self.prefix() + [SLUICE, "check", "--config", M["policy"]] + list(args) + [url],
                               capture_output=True, timeout=30)
            return p.returncode, p.stdout.decode().strip(), p.stderr.decode()
        self.assertEqual(check("tcp://db.test:5432")[:2], (0, "ALLOW rule=tcp://db.test:5432"))
        self.assertEqual(check("tcp://other.test:5432")[:2], (1, "DENY reason=tcp_not_allowed"))
        self.assertEqual(check("tcp://write.test:5432")[:2], (1, "DENY reason=tcp_not_allowed"))
        self.assertEqual(check("tcp://write.test:5432", "--sandbox-profile", "publish")[:2],
                         (0, "ALLOW rule=tcp://write.test:5432"))
        port = M["redis_port"]
        self.assertEqual(check(f"tcp://host.sluice.internal:{port}")[:2],
                         (0, f"ALLOW rule=host.sluice.internal:{port}"))
        self.assertEqual(check(f"tcp://host.sluice.internal:{M['web_port']}")[:2],
                         (1, f"DENY reason=tcp_not_allowed rule=host.sluice.internal:{M['web_port']}"))
        self.assertEqual(check(f"tcp://host.sluice.internal:{M['secret_port']}")[:2],
                         (1, "DENY reason=host_service_not_granted"))
        p = subprocess.run(self.prefix() + [SLUICE, "check", "--config", M["noaddr_policy"], "tcp://db.test:5432"],
                           capture_output=True, timeout=30)
        self.assertEqual(p.stdout.decode().strip(), "DENY reason=destination_address_denied rule=tcp://db.test:5432")
        rc, out, err = check("tcp://db.test")
        self.assertNotEqual(rc, 0)
        self.assertIn("tcp://HOST:PORT", err)

    def test_a_repository_policy_cannot_grant_tcp(self):
        os.makedirs(os.path.join(self.work, ".sluice"))
        with open(os.path.join(self.work, ".sluice", "policy.toml"), "w") as f:
            f.write('[policy]\ntcp = [{ host = "other.test", port = 5432 }]\n')
        os.chmod(os.path.join(self.work, ".sluice", "policy.toml"), 0o644)
        cmd = self.prefix() + [SLUICE, "exec", "--policy", M["policy"], "--", "true"]
        p = subprocess.run(cmd, capture_output=True, env=self.env(), timeout=60, cwd=self.work)
        self.assertEqual(p.returncode, 125)
        self.assertIn("[policy] tcp is not allowed here", p.stderr.decode())


class ServeRelaysTcp(unittest.TestCase):
    """serve: [policy] tcp lets a client's CONNECT (or SOCKS5) to that name and port through as a
    relay; the same port on another name is judged as any CONNECT (refused: not allowlisted)."""

    def test_connect_to_a_tcp_entry(self):
        procs = Processes()
        try:
            gw = Gateway(procs, M["tmp"], """
profile = "network-read"
[policy]
allow = ["origin.test"]
tcp = [{ host = "db.test", port = 5432 }]
[upstream]
allow_addresses = ["198.18.0.0/15"]
[upstream.resolve]
"db.test" = "198.18.0.2"
"other.test" = "198.18.0.2"
""", name="serve-tcp")

            def connect(host):
                s = socket.create_connection(("127.0.0.1", gw.port), timeout=20)
                s.sendall(b"CONNECT %s:5432 HTTP/1.1\r\nHost: %s:5432\r\n\r\n" % (host, host))
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    c = s.recv(1)
                    if not c:
                        break
                    head += c
                return s, head.split(b"\r\n")[0].decode()

            s, status = connect(b"db.test")
            self.assertEqual(status, "HTTP/1.1 200 Connection established")
            s.sendall(bytes.fromhex("0000000804d2162f"))  # PostgreSQL's SSLRequest: the server says N (ssl=off)
            self.assertEqual(s.recv(1), b"N")
            s.close()
            s, status = connect(b"other.test")
            self.assertEqual(status.split()[1], "403")
            s.close()
            self.assertTrue(gw.logged(lambda x: x.get("protocol") == "tcp"))
            line = [x for x in gw.access_log() if x.get("protocol") == "tcp"][0]
            self.assertEqual((line["host"], line["method"], line["rule"], line["closed_by"]),
                             ("db.test", "CONNECT", "tcp://db.test:5432", "client"))
            self.assertTrue(gw.logged(lambda x: x["host"] == "other.test" and x["reason"] == "host_not_allowlisted"))
            self.assertGreater(gw.metric("sluice_requests_total", protocol="tcp"), 0)
        finally:
            procs.stop_all()


    def test_a_clients_byte_rate_holds_in_the_relay(self):
        """A client whose role has bytes_per_second is paced in a relayed connection as in any
        tunnel: 256 KiB echoed (512 KiB both ways) at 128 KiB/s, one second's burst, takes 3 s or
        more (a lower bound: the limit is tested, not the machine)."""
        import base64
        import hashlib
        echo_port = free_port()
        echo = subprocess.Popen([PYTHON, "-c", (
            "import socket, sys\n"
            "l=socket.create_server(('127.0.0.1', int(sys.argv[1]))); print('ready', flush=True)\n"
            "c,_=l.accept()\n"
            "while True:\n d=c.recv(65536)\n if not d: break\n c.sendall(d)\n"
            "c.close()"), str(echo_port)], stdout=subprocess.PIPE)
        self.assertEqual(echo.stdout.readline().strip(), b"ready")
        token = "tok-metered-tcp-0123"
        procs = Processes()
        try:
            gw = Gateway(procs, M["tmp"], f"""
profile = "network-read"
[policy]
allow = ["origin.test"]
tcp = [{{ host = "echo.test", port = {echo_port} }}]
[roles.metered]
bytes_per_second = 131072
[clients.slow]
token_sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"
role = "metered"
[upstream]
allow_addresses = ["127.0.0.1/32"]
[upstream.resolve]
"echo.test" = "127.0.0.1"
""", name="serve-tcp-rate")
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=30)
            auth = base64.b64encode(b"slow:" + token.encode())
            s.sendall(b"CONNECT echo.test:%d HTTP/1.1\r\nHost: echo.test:%d\r\nProxy-Authorization: Basic %s\r\n\r\n"
                      % (echo_port, echo_port, auth))
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                head += s.recv(1)
            self.assertTrue(head.startswith(b"HTTP/1.1 200"), head)
            data = os.urandom(256 * 1024)
            t0 = time.monotonic()
            s.sendall(data)
            got = b""
            while len(got) < len(data):
                c = s.recv(65536)
                if not c:
                    break
                got += c
            took = time.monotonic() - t0
            s.close()
            self.assertEqual(got, data)
            self.assertGreater(took, 2.5)
        finally:
            procs.stop_all()
            echo.kill()
            echo.wait()
            echo.stdout.close()


class ServicesAsNobody(ServicesAsRoot):
    user = 65534


if __name__ == "__main__":
    unittest.main()
