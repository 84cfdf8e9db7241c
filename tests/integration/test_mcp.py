"""MCP tool rules (docs/policy.md, "MCP routes"), end to end with a real MCP server and client: the
SDK's McpServer behind its Streamable HTTP transport (mcp_server.mjs, @modelcontextprotocol/sdk from
npm) on the test host as mcp.test, and the SDK's Client (mcp_client.mjs) driven through sluice
under network-read. An allowed tool works; a denied one gets sluice's JSON-RPC error and never
reaches the server; a raw JSON-RPC batch (curl; the SDK client sends none) with one denied call is
refused whole; the same over h2; a body that is not JSON-RPC is refused; the access log carries
mcp_method and mcp_tool, the metrics count per tool. Through `sluice serve` (root) and `sluice exec`
(root and 65534)."""
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import test_exec as base
from harness import SLUICE, Gateway, Processes, curl, header, make_leaf, status_of

M = base.M
HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.environ.get("SLUICE_HOSTS_CACHE", "/var/cache/sluice-test-hosts")
SDK_VERSION = "1.32.2"
NODE = shutil.which("node") or "/usr/bin/node"
URL = "https://mcp.test:8444/mcp"
RULE = 'mcp = { allow_tools = ["echo"], deny_tools = ["write_*"] }'
# MCP over WebSocket (mcp_ws_server.mjs): a route of its own that says so.
WS_URL = "wss://mcp.test:8445/ws"
WS_ROUTE = '{ host = "mcp.test:8445", paths = ["/ws"], methods = ["GET"], websocket = true, %s }' % RULE


def install_sdk():
    """The SDK (with undici, for the client's proxy and WebSocket, and ws for the WebSocket server) once into the hosts' cache, as the host suites
    install their agents."""
    prefix = os.path.join(CACHE, "mcp-sdk-" + SDK_VERSION)
    os.makedirs(CACHE, exist_ok=True)
    with open(os.path.join(CACHE, ".install.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        wanted = (os.path.join("@modelcontextprotocol", "sdk"), "ws")
        if not all(os.path.exists(os.path.join(prefix, "node_modules", w, "package.json")) for w in wanted):
            os.makedirs(prefix, exist_ok=True)
            p = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", prefix,
                                "@modelcontextprotocol/sdk@" + SDK_VERSION, "undici@6", "ws@8"], capture_output=True,
                               timeout=600)
            if p.returncode != 0:
                raise AssertionError("npm could not install the MCP SDK (a suite runs in a namespace without the "
                                     "registry: ctest installs it first as integration.mcp_sdk; by hand, python3 -c "
                                     "'import test_mcp; test_mcp.install_sdk()'): %s" % p.stderr.decode()[-2000:])
        subprocess.run(["chmod", "-R", "a+rX", prefix], check=True)
    return os.path.join(prefix, "node_modules")


def node_dir(where, modules):
    """A folder with the test's scripts and the SDK's node_modules beside them (ES modules resolve
    packages from the script's own folder up), where the sandbox can see it."""
    d = os.path.join(where, "mcp-node")
    os.makedirs(d, exist_ok=True)
    for name in ("mcp_tools.mjs", "mcp_server.mjs", "mcp_ws_server.mjs", "mcp_client.mjs"):
        shutil.copy(os.path.join(HERE, name), d)
    if not os.path.exists(os.path.join(d, "node_modules")):
        shutil.copytree(modules, os.path.join(d, "node_modules"), symlinks=True)
    subprocess.run(["chmod", "-R", "a+rX", d], check=True)
    return d


def setUpModule():
    base.setUpModule()
    d = M["tmp"]
    M["mcp_modules"] = install_sdk()
    M["mcp_dir"] = node_dir(d, M["mcp_modules"])
    ca = (os.path.join(d, "origin-ca.pem"), os.path.join(d, "origin-ca.key"))
    leaf = make_leaf(d, ca, "mcp.test", "DNS:mcp.test")
    for f in leaf:
        os.chmod(f, 0o644)
    M["received"] = os.path.join(d, "mcp-received.jsonl")
    p = M["host"].start(NODE, os.path.join(M["mcp_dir"], "mcp_server.mjs"), "198.18.0.2", "8444", leaf[0], leaf[1],
                        M["received"])
    line = p.stdout.readline().strip()
    assert line == b"ready", (line, p.stderr.read1().decode() if hasattr(p.stderr, "read1") else "")
    # permessage-deflate on at the server: on an MCP route sluice takes the client's offer off the
    # upgrade (a dropped message would break a compressor's window), so none is agreed.
    p = M["host"].start("/usr/bin/env", "MCP_WS_DEFLATE=1", NODE, os.path.join(M["mcp_dir"], "mcp_ws_server.mjs"),
                        "198.18.0.2", "8445", leaf[0], leaf[1], M["received"])
    line = p.stdout.readline().strip()
    assert line == b"ready", (line, p.stderr.read1().decode() if hasattr(p.stderr, "read1") else "")


tearDownModule = base.tearDownModule


def received():
    """What reached the MCP server: each request's method and body, each tool that ran."""
    if not os.path.exists(M["received"]):
        return []
    with open(M["received"]) as f:
        return [json.loads(l) for l in f if l.strip()]


def trust_and_upstream():
    with open(M["policy"]) as f:
        policy = f.read()
    return policy[policy.index("[tls]"):] + '"mcp.test" = "198.18.0.2"\n'


def call(i, tool, text):
    return {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": tool, "arguments": {"text": text}}}


def post_json(gw, body, *args):
    return curl(gw, URL, "-X", "POST", "-H", "Content-Type: application/json",
                "-H", "Accept: application/json, text/event-stream", "--data-binary", body, *args)


class McpServe(unittest.TestCase):
    """`sluice serve` under network-read: only the MCP route's POSTs pass, call by call."""

    @classmethod
    def setUpClass(cls):
        cls.procs = Processes()
        cls.dir = tempfile.mkdtemp(dir=M["tmp"])
        os.chmod(cls.dir, 0o755)
        cfg = ('profile = "network-read"\n[policy]\nallow = [{ host = "mcp.test:8444", paths = ["/mcp"], %s }]\n'
               % RULE) + trust_and_upstream()
        cls.gw = Gateway(cls.procs, cls.dir, cfg, "mcp")

    @classmethod
    def tearDownClass(cls):
        cls.procs.stop_all()
        shutil.rmtree(cls.dir, True)

    def client(self, *tools):
        env = dict(os.environ, HTTPS_PROXY=self.gw.proxy, NODE_EXTRA_CA_CERTS=self.gw.ca)
        p = subprocess.run([NODE, os.path.join(M["mcp_dir"], "mcp_client.mjs"), URL, *tools], capture_output=True,
                           env=env, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        out = json.loads(p.stdout.decode().strip().splitlines()[-1])
        self.assertNotIn("error", out, out)
        return out

    def test_sdk_client_allowed_tool_works_denied_tool_gets_the_error_and_never_arrives(self):
        marker = os.urandom(4).hex()
        before = len(received())
        out = self.client("echo", "write_note")
        self.assertEqual(out["tools"], ["echo", "write_note"])  # tools/list passes, as initialize does
        echo, write = out["calls"]
        self.assertEqual((echo["ok"], echo["text"]), (True, "echo: hi"), out)
        self.assertFalse(write["ok"])
        self.assertEqual(write["code"], -32001, write)
        self.assertIn("sluice refused tools/call of tool 'write_note' (mcp_tool_denied", write["message"])
        self.assertIn("deny_tools", write["message"])
        arrived = received()[before:]
        self.assertIn({"ran": "echo", "text": "hi"}, arrived)
        self.assertFalse([r for r in arrived if "write_note" in json.dumps(r) and r.get("method") == "POST"
                          and '"tools/call"' in r["body"]], arrived)
        self.assertNotIn("write_note", [r.get("ran") for r in arrived])
        self.assertTrue(self.gw.logged(lambda l: l.get("mcp_tool") == "write_note"), self.gw.access_log())
        lines = [l for l in self.gw.access_log() if l.get("mcp_tool") in ("echo", "write_note")]
        self.assertIn(("allow", "allowed", "tools/call", 200), [(l["decision"], l["reason"], l["mcp_method"], l["status"])
                                                               for l in lines if l["mcp_tool"] == "echo"])
        refused = [l for l in lines if l["mcp_tool"] == "write_note"][-1]
        self.assertEqual((refused["decision"], refused["reason"], refused["rule"]),
                         ("deny", "mcp_tool_denied", "mcp.test:8444 * /mcp mcp"))
        self.assertTrue(self.gw.logged(lambda l: l.get("mcp_method") == "initialize"))
        self.assertGreaterEqual(self.gw.metric("sluice_mcp_calls_total", tool="echo", decision="allow"), 1)
        self.assertGreaterEqual(self.gw.metric("sluice_mcp_calls_total", tool="write_*", decision="deny"), 1)
        del marker

    def test_a_batch_with_one_denied_call_is_refused_whole(self):
        marker = os.urandom(4).hex()
        batch = json.dumps([call(1, "echo", marker), call(2, "write_note", marker),
                            {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}])
        p = post_json(self.gw, batch)
        self.assertEqual(status_of(p.stderr.decode()), 200, p.stderr)
        self.assertEqual(header(p.stderr.decode(), "content-type"), "application/json")
        self.assertIn('details="mcp_tool_denied"', header(p.stderr.decode(), "proxy-status"))
        answer = json.loads(p.stdout)
        self.assertEqual([(a["id"], a["error"]["code"], a["error"]["data"]["sluice"]["reason"]) for a in answer],
                         [(1, -32001, "mcp_batch_refused"), (2, -32001, "mcp_tool_denied")])
        self.assertNotIn(marker, json.dumps(received()))  # not even the allowed call left
        # The same batch without the denied call reaches the server (whatever it makes of a batch).
        ok = json.dumps([call(3, "echo", marker + "a"), call(4, "echo", marker + "b")])
        p = post_json(self.gw, ok)
        self.assertNotIn("proxy-status", p.stderr.decode().lower())
        self.assertIn(marker + "a", json.dumps(received()))
        self.assertTrue(self.gw.logged(lambda l: l.get("mcp_tool") == "echo,write_note" and l["decision"] == "deny"))

    def test_h2_is_judged_the_same(self):
        marker = os.urandom(4).hex()
        p = post_json(self.gw, json.dumps(call(5, "write_note", marker)), "--http2")
        self.assertIn("HTTP/2 200", p.stderr.decode())
        answer = json.loads(p.stdout)
        self.assertEqual((answer["id"], answer["error"]["data"]["sluice"]["reason"]), (5, "mcp_tool_denied"))
        p = post_json(self.gw, json.dumps(call(6, "echo", marker)), "--http2")
        self.assertIn("HTTP/2 200", p.stderr.decode())
        self.assertIn("echo: " + marker, p.stdout.decode())
        self.assertEqual([r.get("ran") for r in received() if r.get("text") == marker], ["echo"])
        self.assertTrue(self.gw.logged(lambda l: l.get("protocol") == "h2" and l.get("mcp_tool") == "write_note"
                                       and l["reason"] == "mcp_tool_denied"))

    def test_what_is_not_json_rpc_is_refused_and_other_posts_stay_refused(self):
        marker = os.urandom(4).hex()
        for body, code in (("not json " + marker, -32700), ('{"id": 1, "method": "tools/call", "x": "%s"}' % marker, -32600),
                           ('{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"%s"}}' % marker, -32001)):
            p = post_json(self.gw, body)
            self.assertEqual(status_of(p.stderr.decode()), 200, p.stderr)
            self.assertEqual(json.loads(p.stdout)["error"]["code"], code, p.stdout)
        p = post_json(self.gw, body, "-H", "Content-Encoding: gzip")
        self.assertIn("mcp_body_refused", p.stdout.decode())
        self.assertNotIn(marker, json.dumps(received()))
        # network-read: a POST anywhere else is still refused; the route's GET passes as the profile's.
        p = curl(self.gw, "https://mcp.test:8444/other", "-X", "POST", "--data-binary", "{}")
        self.assertEqual(status_of(p.stderr.decode()), 403)
        self.assertIn(b"method_not_allowed", p.stderr)
        p = curl(self.gw, URL)
        self.assertEqual(status_of(p.stderr.decode()), 405)  # the server's answer: the GET reached it

    def test_a_websocket_on_an_mcp_route_is_refused(self):
        p = curl(self.gw, URL, "-H", "Connection: Upgrade", "-H", "Upgrade: websocket", "-H", "Sec-WebSocket-Version: 13",
                 "-H", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "--http1.1")
        self.assertEqual(status_of(p.stderr.decode()), 403)
        self.assertIn(b"mcp_websocket_refused", p.stderr)


def raw_websocket(gw, messages):
    """Sends each JSON-RPC message (text) over one WebSocket to WS_URL through the gateway's proxy
    (python's websockets, permessage-deflate offered), reading one answer after each message that
    expects one; returns the answers, how the connection ended and the extensions agreed."""
    import asyncio
    import ssl
    import websockets
    import ws_client

    async def run():
        os.environ["HTTPS_PROXY"] = gw.proxy
        kw = {"ssl": ssl.create_default_context(cafile=gw.ca), "sock": ws_client.via_proxy("mcp.test", 8445),
              "server_hostname": "mcp.test", "subprotocols": ["mcp"], "open_timeout": 20, "ping_interval": None}
        answers = []
        async with websockets.connect(WS_URL, **kw) as ws:
            for m, answered in messages:
                await ws.send(m)
                if answered:
                    answers.append(json.loads(await asyncio.wait_for(ws.recv(), 20)))
            await ws.close(1000, "done")
            return answers, ws.close_code, [e.name for e in ws.extensions]
    saved = os.environ.get("HTTPS_PROXY")
    try:
        return asyncio.run(run())
    finally:
        if saved is None:
            os.environ.pop("HTTPS_PROXY", None)
        else:
            os.environ["HTTPS_PROXY"] = saved


class McpWebSocketServe(unittest.TestCase):
    """MCP over WebSocket on a route that says websocket = true: each client message is judged as a
    POST's body is, a refused one never reaches the server and the client gets the JSON-RPC error on
    the same connection, which goes on."""

    @classmethod
    def setUpClass(cls):
        cls.procs = Processes()
        cls.dir = tempfile.mkdtemp(dir=M["tmp"])
        os.chmod(cls.dir, 0o755)
        cfg = ('profile = "network-read"\n[policy]\nallow = [%s]\n' % WS_ROUTE) + trust_and_upstream()
        cls.gw = Gateway(cls.procs, cls.dir, cfg, "mcpws")

    @classmethod
    def tearDownClass(cls):
        cls.procs.stop_all()
        shutil.rmtree(cls.dir, True)

    def test_sdk_client_over_websocket_denied_tool_gets_the_error_and_the_session_goes_on(self):
        before = len(received())
        env = dict(os.environ, HTTPS_PROXY=self.gw.proxy, NODE_EXTRA_CA_CERTS=self.gw.ca)
        p = subprocess.run([NODE, os.path.join(M["mcp_dir"], "mcp_client.mjs"), WS_URL, "echo", "write_note", "echo"],
                           capture_output=True, env=env, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        out = json.loads(p.stdout.decode().strip().splitlines()[-1])
        self.assertNotIn("error", out, out)
        self.assertEqual(out["tools"], ["echo", "write_note"])
        first, write, again = out["calls"]
        self.assertEqual((first["ok"], first["text"]), (True, "echo: hi"), out)
        self.assertFalse(write["ok"])
        self.assertEqual(write["code"], -32001, write)
        self.assertIn("sluice refused tools/call of tool 'write_note' (mcp_tool_denied", write["message"])
        self.assertEqual((again["ok"], again["text"]), (True, "echo: hi"), out)  # the same connection went on
        arrived = received()[before:]
        self.assertEqual([r.get("ran") for r in arrived if "ran" in r], ["echo", "echo"])
        self.assertFalse([r for r in arrived if "write_note" in r.get("ws", "")], arrived)
        self.assertTrue([r for r in arrived if '"initialize"' in r.get("ws", "")], arrived)
        self.assertTrue(self.gw.logged(lambda l: l.get("protocol") == "websocket" and l.get("mcp_refused") == 1),
                        self.gw.access_log())
        line = [l for l in self.gw.access_log() if l.get("mcp_refused") == 1][-1]
        self.assertEqual((line["decision"], line["rule"], line["mcp_tool"]),
                         ("allow", "mcp.test:8445 GET /ws websocket mcp", "echo,write_note"))
        self.assertEqual(line["mcp_method"].split(",")[:3], ["initialize", "notifications/initialized", "tools/list"])
        self.assertGreaterEqual(self.gw.metric("sluice_mcp_calls_total", tool="echo", decision="allow"), 2)
        self.assertGreaterEqual(self.gw.metric("sluice_mcp_calls_total", tool="write_*", decision="deny"), 1)

    def test_a_batch_with_one_denied_call_is_refused_whole_and_the_connection_goes_on(self):
        marker = os.urandom(4).hex()
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        batch = [call(1, "echo", marker), call(2, "write_note", marker)]
        answers, code, extensions = raw_websocket(self.gw, [(json.dumps(init), True),
                                                ('{"jsonrpc":"2.0","method":"notifications/initialized"}', False),
                                                (json.dumps(batch), True), ("not json " + marker, True),
                                                (json.dumps(call(3, "echo", marker)), True)])
        self.assertEqual(code, 1000)
        self.assertEqual(extensions, [])  # offered by the client, accepted by the server, taken off by sluice
        self.assertEqual(answers[0]["id"], 0)
        self.assertIn("result", answers[0])
        self.assertEqual([(a["id"], a["error"]["data"]["sluice"]["reason"]) for a in answers[1]],
                         [(1, "mcp_batch_refused"), (2, "mcp_tool_denied")])
        self.assertEqual((answers[2]["id"], answers[2]["error"]["code"]), (None, -32700))
        self.assertEqual(answers[3]["result"]["content"][0]["text"], "echo: " + marker)
        # Only the last call reached the server: not the batch's allowed call, not what was not JSON.
        self.assertEqual([r for r in received() if marker in json.dumps(r) and "ws" in r][0]["ws"],
                         json.dumps(call(3, "echo", marker)))
        self.assertEqual([r["text"] for r in received() if r.get("ran") and r.get("text") == marker], [marker])
        self.assertTrue(self.gw.logged(lambda l: l.get("mcp_refused") == 2 and l.get("ws_close_code") == 1000),
                        self.gw.access_log())


class McpReportServe(unittest.TestCase):
    """A role in report mode: refused calls pass, logged would_deny; `sluice policy suggest` proposes
    the route's allow_tools from the log."""

    def test_report_mode_lets_calls_through_and_suggest_proposes_the_tools(self):
        procs = Processes()
        self.addCleanup(procs.stop_all)
        d = tempfile.mkdtemp(dir=M["tmp"])
        self.addCleanup(shutil.rmtree, d, True)
        token = os.urandom(16).hex()
        cfg = ('profile = "network-read"\n[policy]\nallow = [{ host = "mcp.test:8444", paths = ["/mcp"], '
               'mcp = { allow_tools = ["echo"] } }]\n[roles.scout]\nmode = "report"\n'
               '[clients.agent]\ntoken_sha256 = "%s"\nrole = "scout"\n' % hashlib.sha256(token.encode()).hexdigest())
        gw = Gateway(procs, d, cfg + trust_and_upstream(), "report")
        marker = os.urandom(4).hex()
        proxy = "http://agent:%s@127.0.0.1:%d" % (token, gw.port)
        for c in (call(1, "echo", marker), call(2, "write_note", marker)):
            p = subprocess.run(["curl", "-sS", "--max-time", "20", "--proxy", proxy, "--cacert", gw.ca, "-X", "POST",
                                "-H", "Content-Type: application/json", "-H", "Accept: application/json, text/event-stream",
                                "--data-binary", json.dumps(c), URL], capture_output=True)
            self.assertIn(marker, p.stdout.decode(), p.stderr)  # the server answered: it passed
        self.assertIn({"ran": "write_note", "text": marker}, received())
        self.assertTrue(gw.logged(lambda l: l.get("mcp_tool") == "write_note"))
        line = [l for l in gw.access_log() if l.get("mcp_tool") == "write_note"][-1]
        self.assertEqual((line["decision"], line["reason"], line["role"]), ("would_deny", "mcp_tool_not_allowed", "scout"))
        self.assertGreaterEqual(gw.metric("sluice_mcp_calls_total", tool="other", decision="would_deny"), 1)
        p = subprocess.run([SLUICE, "policy", "suggest", "--access-log", gw.log], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("# MCP route mcp.test:8444 * /mcp mcp: 1 refused request", p.stdout)
        self.assertIn('  mcp = { allow_tools = ["echo", "write_note"] },', p.stdout)


class McpExecAsRoot(base.ExecCase):
    """`sluice exec` under network-read with the route in the skill's allow_domains."""

    def run_client(self, route, url, *tools):
        """The SDK client inside `sluice exec` (network-read, `route` in the skill's allow_domains):
        its JSON line, the access log's lines, and what reached the server meanwhile."""
        d = node_dir(self.work, M["mcp_modules"])
        policy = os.path.join(self.work, "policy.toml")
        with open(policy, "w") as f:
            f.write('[skills.default]\ndefault_profile = "network-read"\nallow_domains = [%s]\n' % route +
                    trust_and_upstream())
        os.chmod(policy, 0o644)
        log = os.path.join(self.work, "access.log")
        before = len(received())
        p = subprocess.run(self.prefix() + [SLUICE, "exec", "--policy", policy, "--access-log", log, "--", NODE,
                                            os.path.join(d, "mcp_client.mjs"), url, *tools],
                           capture_output=True, env=self.env(), timeout=120, cwd=self.work)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        out = json.loads(p.stdout.decode().strip().splitlines()[-1])
        self.assertNotIn("error", out, out)
        with open(log) as f:
            lines = [json.loads(l) for l in f if l.strip() and '"checkpoint"' not in l]
        return out, lines, received()[before:]

    def test_exec_runs_the_sdk_client_through_the_rule(self):
        out, lines, arrived = self.run_client('{ host = "mcp.test:8444", paths = ["/mcp"], %s }' % RULE, URL,
                                              "echo", "write_note")
        echo, write = out["calls"]
        self.assertEqual(echo["text"], "echo: hi", out)
        self.assertEqual(write["code"], -32001, out)
        self.assertIn("mcp_tool_denied", write["message"])
        self.assertNotIn("write_note", [r.get("ran") for r in arrived])
        self.assertIn(("deny", "mcp_tool_denied", "write_note"),
                      [(l["decision"], l["reason"], l.get("mcp_tool")) for l in lines])
        self.assertIn(("allow", "echo"), [(l["decision"], l.get("mcp_tool")) for l in lines])

    def test_exec_runs_the_sdk_client_over_websocket(self):
        out, lines, arrived = self.run_client(WS_ROUTE, WS_URL, "write_note", "echo")
        write, echo = out["calls"]
        self.assertEqual(write["code"], -32001, out)
        self.assertIn("mcp_tool_denied", write["message"])
        self.assertEqual(echo["text"], "echo: hi", out)
        self.assertNotIn("write_note", [r.get("ran") for r in arrived])
        self.assertIn(("allow", "websocket", "write_note,echo", 1),
                      [(l["decision"], l.get("protocol"), l.get("mcp_tool"), l.get("mcp_refused")) for l in lines])


class McpExecAsNobody(McpExecAsRoot):
    user = 65534


if __name__ == "__main__":
    unittest.main()
