"""The stdio side of the Model Context Protocol, as small as the tests' servers need: JSON-RPC lines
on stdin and stdout, `initialize`, `tools/list` and `tools/call`."""
import json
import sys


def serve(name, tools, call):
    """Answers until stdin closes. `tools` is the tools/list answer's list; `call(arguments)` returns
    the text of a tools/call answer."""
    def send(msg):
        sys.stdout.write(json.dumps(dict(msg, jsonrpc="2.0")) + "\n")
        sys.stdout.flush()
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        method, msg_id = msg.get("method"), msg.get("id")
        if msg_id is None:
            continue  # notifications
        if method == "initialize":
            send({"id": msg_id, "result": {
                "protocolVersion": msg.get("params", {}).get("protocolVersion", "2024-11-05"),
                "capabilities": {"tools": {}}, "serverInfo": {"name": name, "version": "1"}}})
        elif method == "tools/list":
            send({"id": msg_id, "result": {"tools": tools}})
        elif method == "tools/call":
            text = call(msg.get("params", {}).get("arguments", {}))
            send({"id": msg_id, "result": {"content": [{"type": "text", "text": text}]}})
        else:
            send({"id": msg_id, "error": {"code": -32601, "message": "no method " + str(method)}})
