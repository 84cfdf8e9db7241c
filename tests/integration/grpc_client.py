"""A gRPC client for the HTTP/2 suite: every call grpc_origin.py serves, through whatever proxy
the environment names (grpc_proxy / https_proxy) and with the CA in GRPC_DEFAULT_SSL_ROOTS_FILE_PATH
or argv[2]. Usage: grpc_client.py HOST:PORT [CA]. Prints one JSON object: each call's outcome
(its messages, or [status code name, details]) and the x-saw-auth trailing metadata."""
import hashlib
import json
import sys

import grpc

MIB = bytes(range(256)) * 4096


def main():
    target = sys.argv[1]
    roots = open(sys.argv[2], "rb").read() if len(sys.argv) > 2 else None
    ch = grpc.secure_channel(target, grpc.ssl_channel_credentials(roots),
                             options=[("grpc.max_receive_message_length", 64 << 20)])
    out = {}

    def run(name, fn):
        try:
            out[name] = fn()
        except grpc.RpcError as e:
            out[name] = [e.code().name, e.details()]

    def unary():
        resp, call = ch.unary_unary("/pkg.Allowed/Echo").with_call(b"hello", timeout=20)
        return [resp.decode(), dict(call.trailing_metadata()).get("x-saw-auth")]

    def stream():
        call = ch.unary_stream("/pkg.Allowed/Stream")(b"5", timeout=20)
        msgs = [m.decode() for m in call]
        return [msgs, dict(call.trailing_metadata()).get("x-saw-auth")]

    def big():
        call = ch.unary_stream("/pkg.Allowed/Big")(b"6", timeout=60)
        return [sum(1 for m in call if m == MIB), dict(call.trailing_metadata()).get("x-saw-auth")]

    def total():
        parts = (bytes([i]) * (1 << 20) for i in range(5))
        resp, call = ch.stream_unary("/pkg.Allowed/Sum").with_call(parts, timeout=60)
        return [resp.decode(), dict(call.trailing_metadata()).get("x-saw-auth")]

    def chat():
        # Each message is sent only after the answer to the one before came back: a bidirectional
        # call that the gateway buffered until the request ended would hang here (and time out).
        import queue
        q = queue.Queue()
        q.put(b"abc")
        call = ch.stream_stream("/pkg.Allowed/Chat")(iter(q.get, None), timeout=20)
        got = []
        for m in call:
            got.append(m.decode())
            q.put({"cba": b"hello", "olleh": b"xyz"}.get(got[-1]))
        return [got, dict(call.trailing_metadata()).get("x-saw-auth")]

    run("unary", unary)
    run("stream", stream)
    run("big", big)
    run("sum", total)
    run("chat", chat)
    run("missing", lambda: ch.unary_unary("/pkg.Allowed/Missing")(b"x", timeout=20).decode())
    run("delete", lambda: ch.unary_unary("/pkg.Service/Delete")(b"x", timeout=20).decode())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
