"""The person at Claude Code's permission prompt, for headless tests: a stdio MCP server whose one
tool, `approve`, is what `claude -p --permission-prompt-tool mcp__person__approve` asks instead of
a terminal prompt. It answers as APPROVER_ANSWER says ("allow" or "deny") and appends every request
it got to APPROVER_LOG (JSON lines), so that a test sees what the person was shown.

usage: approver_mcp.py   (the environment names the answer and the log)"""
import json
import os

from mcp_stdio import serve

ANSWER = os.environ.get("APPROVER_ANSWER", "deny")
LOG = os.environ.get("APPROVER_LOG", "")


def approve(args):
    if LOG:
        with open(LOG, "a") as f:
            f.write(json.dumps(args) + "\n")
    if ANSWER == "allow":
        return json.dumps({"behavior": "allow", "updatedInput": args.get("input", {})})
    return json.dumps({"behavior": "deny", "message": "the person said no"})


serve("person", [{"name": "approve", "description": "Ask the person whether a tool call may run",
                  "inputSchema": {"type": "object", "properties": {
                      "tool_name": {"type": "string"}, "input": {"type": "object"},
                      "tool_use_id": {"type": "string"}}}}], approve)
