"""A stdio MCP server with one tool, `fetch {url, method}`, for the whole-agent tests: it makes the
request from wherever the host started it (inside `sluice agent`'s boundary: through the proxy
variables, as any HTTP client there would) and answers with the status and body, or the error.

usage: fetch_mcp.py"""
import json
import sys
import urllib.error
import urllib.request


def reply(msg_id, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": result}) + "\n")
    sys.stdout.flush()


def fetch(url, method):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method, data=b"x" if method == "POST" else None),
                                    timeout=10) as r:
            return "status=%d body=%s" % (r.status, r.read(200).decode(errors="replace"))
    except urllib.error.HTTPError as e:
        return "status=%d body=%s" % (e.code, e.read(300).decode(errors="replace"))
    except Exception as e:  # what the host's model would see
        return "error=%s" % e


for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    method, msg_id = msg.get("method"), msg.get("id")
    if msg_id is None:
        continue
    if method == "initialize":
        reply(msg_id, {"protocolVersion": msg.get("params", {}).get("protocolVersion", "2024-11-05"),
                       "capabilities": {"tools": {}}, "serverInfo": {"name": "net", "version": "1"}})
    elif method == "tools/list":
        reply(msg_id, {"tools": [{"name": "fetch", "description": "Fetch a URL",
                                  "inputSchema": {"type": "object", "properties": {
                                      "url": {"type": "string"}, "method": {"type": "string"}},
                                      "required": ["url"]}}]})
    elif method == "tools/call":
        args = msg.get("params", {}).get("arguments", {})
        text = fetch(args.get("url", ""), args.get("method", "GET"))
        reply(msg_id, {"content": [{"type": "text", "text": text}]})
    else:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg_id,
                                     "error": {"code": -32601, "message": "no method " + str(method)}}) + "\n")
        sys.stdout.flush()
