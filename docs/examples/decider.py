#!/usr/bin/python3
"""An example decider for sluice ([decider] command = "/usr/bin/python3 /etc/sluice/decider.py").

sluice starts it and writes one question per line on its standard input:
    {"id": 7, "input": {"method": "GET", "host": "api.example.com", "port": 443, "path": "/v1/x", ...}}
and reads one answer per line on its standard output, in any order:
    {"id": 7, "result": {"decision": "allow"}}
It ends when its standard input ends (sluice stopped). What it prints on standard error shows in
sluice's messages. See docs/policy.md, "An external decider", for every key of the question and
the answer.

This one lets a team's read-only API through for any client, refuses the rest of the host's paths
with a reason the agent sees, and leaves every other miss refused; answers are cached per host and
path for a minute. A POST to /v1/notes is decided on its body: the decider asks for it
({"decision": "body"}) and is asked again with "body" (or "body_base64")."""
import json
import sys

TEAM_API = "api.example.com"


def decide(q):
    if q["host"] != TEAM_API:
        return {"decision": "deny", "reason": q["host"] + " is not one of the team's services"}
    if q["method"] == "CONNECT":
        return {"decision": "allow"}  # the tunnel: each request inside is asked about again
    if q["method"] == "POST" and q["path"] == "/v1/notes":
        if "body" not in q and "body_base64" not in q:
            return {"decision": "body"}  # asked again with the body, read whole by sluice
        if "BEGIN PRIVATE KEY" in q.get("body", ""):
            return {"decision": "deny", "reason": "notes may not carry keys"}
        return {"decision": "allow"}
    if q["path"].startswith("/v1/public/"):
        return {"decision": "allow", "set_fields": {"x-team": "agents"},
                "cache": {"seconds": 60, "keys": ["host", "path", "method"]}}
    return {"decision": "deny", "status": 403, "reason": "only /v1/public/ of the team API is open to agents",
            "cache": {"seconds": 60, "keys": ["host", "path", "method"]}}


for line in sys.stdin:
    message = json.loads(line)
    try:
        result = decide(message["input"])
    except Exception as e:  # an answer sluice cannot use is refused anyway; say why
        print("decider: %s" % e, file=sys.stderr)
        result = {"decision": "deny", "reason": "the decider failed"}
    sys.stdout.write(json.dumps({"id": message["id"], "result": result}) + "\n")
    sys.stdout.flush()
