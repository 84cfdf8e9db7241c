"""Plays the person at `opencode serve`'s permission API: sends one prompt to a new session, answers
every permission OpenCode asks for in that session with ANSWER (once or reject), and waits until the
session is idle again. Prints the permission requests as one JSON array.

usage: opencode_serve.py PORT PROMPT ANSWER   (run where 127.0.0.1:PORT is the server)"""
import json
import sys
import time
import urllib.request

PORT, PROMPT, ANSWER = int(sys.argv[1]), sys.argv[2], sys.argv[3]
BASE = "http://127.0.0.1:%d" % PORT


def call(method, path, body=None, timeout=30):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        text = r.read().decode()
    return json.loads(text) if text.strip() else None


start = time.time()
while True:  # the server may still be starting: refused, or a request that hangs (2 s each)
    try:
        session = call("POST", "/session", {}, timeout=2)["id"]
        break
    except OSError:
        if time.time() - start > 60:
            sys.exit("opencode_serve.py: no server on port %d within 60 s" % PORT)
        time.sleep(0.2)
call("POST", "/session/%s/prompt_async" % session, {"parts": [{"type": "text", "text": PROMPT}]})
asked, answered = [], set()
deadline = time.time() + 180
while time.time() < deadline:
    for p in call("GET", "/permission") or []:
        if p.get("sessionID") == session and p["id"] not in answered:
            answered.add(p["id"])
            asked.append(p)
            call("POST", "/permission/%s/reply" % p["id"], {"reply": ANSWER})
    status = (call("GET", "/session/status") or {}).get(session, {}).get("type", "idle")
    if status == "idle":  # and the turn has been taken: an assistant message is complete
        messages = call("GET", "/session/%s/message" % session) or []
        if any(m["info"].get("role") == "assistant" and m["info"].get("time", {}).get("completed")
               for m in messages):
            break
    time.sleep(0.2)
else:
    sys.exit("opencode_serve.py: the session did not finish within 180 s")
print(json.dumps(asked))
