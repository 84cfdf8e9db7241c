"""The person at Claude Code's permission prompt, for headless tests: a stdio MCP server whose one
tool, `approve`, is what `claude -p --permission-prompt-tool mcp__person__approve` asks instead of
a terminal prompt. It answers as APPROVER_ANSWER says ("allow" or "deny") and appends every request
it got to APPROVER_LOG (JSON lines), so that a test sees what the person was shown.

usage: approver_mcp.py   (the environment names the answer and the log)"""
import json
import os
import sys

ANSWER = os.environ.get("APPROVER_ANSWER", "deny")
LOG = os.environ.get("APPROVER_LOG", "")


def reply(msg_id, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": result}) + "\n")
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
        reply(msg_id, {"protocolVersion": msg.get("params", {}).get("protocolVersion", "2024-11-05"),
                       "capabilities": {"tools": {}}, "serverInfo": {"name": "person", "version": "1"}})
    elif method == "tools/list":
        reply(msg_id, {"tools": [{"name": "approve", "description": "Ask the person whether a tool call may run",
                                  "inputSchema": {"type": "object", "properties": {
                                      "tool_name": {"type": "string"}, "input": {"type": "object"},
                                      "tool_use_id": {"type": "string"}}}}]})
    elif method == "tools/call":
        args = msg.get("params", {}).get("arguments", {})
        if LOG:
            with open(LOG, "a") as f:
                f.write(json.dumps(args) + "\n")
        if ANSWER == "allow":
            answer = {"behavior": "allow", "updatedInput": args.get("input", {})}
        else:
            answer = {"behavior": "deny", "message": "the person said no"}
        reply(msg_id, {"content": [{"type": "text", "text": json.dumps(answer)}]})
    else:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg_id,
                                     "error": {"code": -32601, "message": "no method " + str(method)}}) + "\n")
        sys.stdout.flush()
