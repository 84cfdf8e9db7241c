"""A fake model server for driving agent hosts headlessly: it speaks the Anthropic Messages API
(SSE), OpenAI Responses (SSE, and over a WebSocket at GET .../responses as Codex's provider with
supports_websockets does: one JSON event per text frame, a prewarm with "generate": false answered
by response.completed alone) and OpenAI Chat Completions (SSE) on 127.0.0.1.

The prompt names one tool call: "SLUICE-CALL:" followed by the base64 of a JSON object such as
{"tool": "Bash", "input": {"command": "..."}} (base64, because hosts quote prompts in their own ways
before they reach the model; a bare JSON object is understood too).
A request that offers tools and carries no tool result yet gets that call; a request with a tool
result gets a final text and ends the turn; anything else (titles, quota checks) gets a short text.
Every tool result received is appended to RESULTS (JSON lines) so a test sees what the model saw.

usage: fake_model.py PORT RESULTS [CERT KEY]   (prints "ready" once listening; HTTPS with CERT KEY)"""
import base64
import hashlib
import json
import os
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RESULTS = sys.argv[2]
lock = threading.Lock()


def record(entry):
    with lock, open(RESULTS, "a") as f:
        f.write(json.dumps(entry) + "\n")


def text_of(content):
    if isinstance(content, str):
        return content
    out = []
    for block in content or []:
        if isinstance(block, dict):
            if block.get("type") in ("text", "input_text", "output_text"):
                out.append(block.get("text", ""))
            elif block.get("type") == "tool_result":
                out.append(text_of(block.get("content")))
    return "\n".join(out)


def find_call(texts):
    for t in texts:
        at = t.find("SLUICE-CALL:")
        if at >= 0:
            code = re.match(r"[A-Za-z0-9+/=]*", t[at + 12:]).group(0)
            try:
                return json.loads(base64.b64decode(code))
            except ValueError:
                pass
    expanded = []
    for t in texts:
        expanded.append(t)
        if t.strip().startswith('"'):  # some hosts send the prompt JSON-quoted
            try:
                expanded.append(json.loads(t.strip()))
            except ValueError:
                pass
    for t in expanded:
        if not isinstance(t, str):
            continue
        start = t.find("{\"tool\"")
        if start < 0:
            continue
        try:
            return json.JSONDecoder().raw_decode(t[start:])[0]
        except ValueError:
            continue
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def sse(self, events):
        body = "".join(("event: %s\n" % name if name else "") + "data: %s\n\n" %
                       (d if isinstance(d, str) else json.dumps(d)) for name, d in events).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.headers.get("Upgrade", "").lower() == "websocket" and self.path.split("?")[0].endswith("/responses"):
            return self.responses_websocket()
        body = json.dumps({"data": [], "object": "list"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_request_of(self, req, **extra):
        if os.environ.get("FAKE_MODEL_LOG"):
            with lock, open(os.environ["FAKE_MODEL_LOG"], "a") as f:
                f.write(json.dumps(dict({"path": self.path, "method": self.command, "request": req,
                                         "headers": {k.lower(): v for k, v in self.headers.items()}}, **extra)) + "\n")

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        req = json.loads(self.rfile.read(n) or b"{}")
        self.log_request_of(req)
        path = self.path.split("?")[0]
        if path.endswith("/messages/count_tokens"):
            return self.json({"input_tokens": 10})
        if path.endswith("/messages"):
            return self.anthropic(req)
        if path.endswith("/responses"):
            return self.openai_responses(req)
        if path.endswith("/chat/completions"):
            return self.chat(req)
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def json(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    # --- Anthropic Messages -------------------------------------------------------------------
    def anthropic(self, req):
        msgs = req.get("messages", [])
        results = [b for m in msgs if m.get("role") == "user" and isinstance(m.get("content"), list)
                   for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
        call = find_call([text_of(m.get("content")) for m in msgs if m.get("role") == "user"])
        start = {"type": "message_start", "message": {
            "id": "msg_fake", "type": "message", "role": "assistant", "model": req.get("model", "fake"),
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1}}}
        if req.get("tools") and call and not results:
            block = {"type": "tool_use", "id": "toolu_fake_1", "name": call["tool"], "input": {}}
            events = [("message_start", start),
                      ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
                      ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
                          "type": "input_json_delta", "partial_json": json.dumps(call["input"])}}),
                      ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                      ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use",
                                         "stop_sequence": None}, "usage": {"output_tokens": 5}}),
                      ("message_stop", {"type": "message_stop"})]
            return self.sse(events)
        for r in results:
            record({"host": "anthropic", "is_error": bool(r.get("is_error")), "content": text_of(r.get("content"))})
        text = "done" if results else "ok"
        events = [("message_start", start),
                  ("content_block_start", {"type": "content_block_start", "index": 0,
                                           "content_block": {"type": "text", "text": ""}}),
                  ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                           "delta": {"type": "text_delta", "text": text}}),
                  ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                  ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn",
                                     "stop_sequence": None}, "usage": {"output_tokens": 1}}),
                  ("message_stop", {"type": "message_stop"})]
        self.sse(events)

    # --- OpenAI Responses ---------------------------------------------------------------------
    def openai_responses(self, req):
        self.sse(self.responses_events(req))

    def ws_read(self):
        """One message (fragments joined): (opcode, payload); (None, b"") at the end."""
        data, first_op = b"", None
        while True:
            head = self.rfile.read(2)
            if len(head) < 2:
                return None, b""
            fin, op, masked, n = head[0] & 0x80, head[0] & 0x0F, head[1] & 0x80, head[1] & 0x7F
            if n == 126:
                n = int.from_bytes(self.rfile.read(2), "big")
            elif n == 127:
                n = int.from_bytes(self.rfile.read(8), "big")
            mask = self.rfile.read(4) if masked else b"\0\0\0\0"
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(n)))
            if op >= 8:
                return op, payload
            first_op = first_op or op
            data += payload
            if fin:
                return first_op, data

    def ws_send(self, op, payload):
        n = len(payload)
        head = bytes([0x80 | op]) + (bytes([n]) if n < 126 else bytes([126]) + n.to_bytes(2, "big")
                                     if n < 65536 else bytes([127]) + n.to_bytes(8, "big"))
        self.wfile.write(head + payload)
        self.wfile.flush()

    def responses_websocket(self):
        """The Responses API over a WebSocket (no extension accepted: frames stay uncompressed)."""
        self.log_request_of(None, websocket=True)
        accept = base64.b64encode(hashlib.sha1((self.headers.get("Sec-WebSocket-Key", "") +
                                                "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        while True:
            op, payload = self.ws_read()
            if op is None:
                return
            if op == 8:
                self.ws_send(8, payload[:2])
                return
            if op == 9:
                self.ws_send(10, payload)
                continue
            if op != 1:
                continue
            req = json.loads(payload)
            self.log_request_of(req, websocket=True)
            if req.get("generate") is False:  # the prewarm: nothing generated, the response completed
                events = [(None, {"type": "response.completed", "response": {"id": "resp_warm", "output": []}})]
            else:
                events = self.responses_events(req)
            for _, event in events:
                self.ws_send(1, json.dumps(event).encode())

    def responses_events(self, req):
        items = req.get("input", [])
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        call = find_call([text_of(i.get("content")) for i in items if isinstance(i, dict) and i.get("role") == "user"])
        resp = {"id": "resp_fake", "object": "response", "status": "completed", "model": req.get("model", "fake"),
                "output": [], "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
                                        "input_tokens_details": {"cached_tokens": 0},
                                        "output_tokens_details": {"reasoning_tokens": 0}}}
        events = [("response.created", {"type": "response.created", "response": dict(resp, status="in_progress")})]
        if req.get("tools") and call and not outputs:
            item = {"type": "function_call", "id": "fc_fake_1", "call_id": "call_fake_1", "name": call["tool"],
                    "arguments": json.dumps(call["input"]), "status": "completed"}
            # Codex offers an MCP server's tools in a namespace ({"type": "namespace", "name":
            # "mcp__net", "tools": [...]}): the call names the namespace and the tool apart.
            for t in req["tools"]:
                ns = t.get("name") if isinstance(t, dict) and t.get("type") == "namespace" else None
                prefix = ns if ns and ns.endswith("__") else (ns or "") + "__"  # "mcp__net__" in 0.131
                if ns and call["tool"].startswith(prefix):
                    item.update(name=call["tool"][len(prefix):], namespace=ns)
            events += [("response.output_item.added", {"type": "response.output_item.added", "output_index": 0, "item": item}),
                       ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item})]
            resp["output"] = [item]
        else:
            for o in outputs:
                out = o.get("output")
                record({"host": "responses", "content": out if isinstance(out, str) else json.dumps(out)})
            msg = {"type": "message", "id": "msg_fake", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": "done" if outputs else "ok", "annotations": []}]}
            events += [("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                                       "item": dict(msg, content=[], status="in_progress")}),
                       ("response.output_text.delta", {"type": "response.output_text.delta", "output_index": 0,
                                                       "content_index": 0, "item_id": "msg_fake",
                                                       "delta": msg["content"][0]["text"]}),
                       ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": msg})]
            resp["output"] = [msg]
        events.append(("response.completed", {"type": "response.completed", "response": resp}))
        return events

    # --- OpenAI Chat Completions --------------------------------------------------------------
    def chat(self, req):
        msgs = req.get("messages", [])
        outputs = [m for m in msgs if m.get("role") == "tool"]
        call = find_call([text_of(m.get("content")) for m in msgs if m.get("role") == "user"])
        base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": req.get("model", "fake")}
        if req.get("tools") and call and not outputs:
            chunks = [dict(base, choices=[{"index": 0, "delta": {"role": "assistant", "tool_calls": [{
                "index": 0, "id": "call_fake_1", "type": "function",
                "function": {"name": call["tool"], "arguments": json.dumps(call["input"])}}]}, "finish_reason": None}]),
                dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": "tool_calls"}])]
        else:
            for o in outputs:
                record({"host": "chat", "content": text_of(o.get("content"))})
            chunks = [dict(base, choices=[{"index": 0, "delta": {"role": "assistant", "content": "done" if outputs else "ok"},
                                          "finish_reason": None}]),
                      dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}])]
        chunks.append(dict(base, choices=[], usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}))
        self.sse([(None, c) for c in chunks] + [(None, "[DONE]")])


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    if len(sys.argv) > 4:  # CERT KEY: HTTPS, as a real model endpoint is
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(sys.argv[3], sys.argv[4])
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print("ready", flush=True)
    server.serve_forever()
