#!/usr/bin/python3
"""A decider program for the decider suite ([decider] command): one JSON question per line on its
standard input, one answer per line on its standard output, answered out of order where a question
is slow. Each question is appended to the file named by argv[1], so a test sees what was asked.

By path: /deny refuses (a reason; /deny-451 with status 451), /ask hands to a person, /slow never
answers in time, /crash exits, /headers allows and edits fields, /cached/... is allowed and cached
by host and path; a path holding /inspect asks for the body, then refuses a body holding
"forbidden" and allows the rest; one holding /greedy asks for the body even when it has it;
a tunnel or relayed TCP connection to a host named blocked.* is refused; anything else is allowed."""
import base64
import json
import sys
import threading
import time

log = open(sys.argv[1], "a")
out_lock = threading.Lock()


def answer(qid, result):
    with out_lock:
        sys.stdout.write(json.dumps({"id": qid, "result": result}) + "\n")
        sys.stdout.flush()


def decide(q):
    path = q["path"]
    if q["protocol"] in ("connect", "tcp") and q["host"].startswith("blocked."):
        return {"decision": "deny", "reason": "team rule 9: no tunnels to blocked hosts"}
    has_body = "body" in q or "body_base64" in q
    if "/greedy" in path:
        return {"decision": "body"}
    if "/inspect" in path:
        if not has_body:
            return {"decision": "body"}
        body = q["body"] if "body" in q else base64.b64decode(q["body_base64"]).decode("latin-1")
        if "forbidden" in body:
            return {"decision": "deny", "reason": "the body says forbidden (%d bytes)" % q["body_bytes"]}
        return True
    if path.startswith("/deny-451"):
        return {"decision": "deny", "status": 451, "reason": "unavailable for legal reasons (rule 451)"}
    if path.startswith("/deny"):
        return {"decision": "deny", "reason": "team rule 7: no /deny paths"}
    if path.startswith("/ask"):
        return {"decision": "ask"}
    if path.startswith("/headers"):
        return {"decision": "allow", "set_fields": {"x-decided": "by-the-decider"}, "remove_fields": ["x-remove-me"]}
    if path.startswith("/cached"):
        return {"decision": "allow", "cache": {"seconds": 60, "keys": ["host", "path"]}}
    return True


for line in sys.stdin:
    msg = json.loads(line)
    q = msg["input"]
    log.write(json.dumps(q) + "\n")
    log.flush()
    if q["path"].startswith("/crash"):
        sys.exit(3)
    if q["path"].startswith("/slow"):
        threading.Thread(target=lambda i=msg["id"]: (time.sleep(5), answer(i, True)), daemon=True).start()
        continue
    answer(msg["id"], decide(q))
