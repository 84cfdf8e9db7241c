"""The attacks of the protocol-path security rows, each sent with raw frames or bytes through a
proxy's CONNECT tunnel: what sluice answered, for the caller to compare with what the origin
received (origin.py's ORIGIN_RECORD). test_h2 calls them through `sluice serve`; inside `sluice
exec` this file runs as a script (as root and as 65534), with the proxy and CA the sandbox gives
its command, and prints the answers as one JSON object:

    /usr/bin/python3 h2_attacks.py read|publish HOST:PORT

- get_with_body: a GET (HEAD, OPTIONS) as HEADERS without END_STREAM and without content-length,
  then DATA: under network-read it must not reach the origin.
- made_you_reset: streams that the client makes the server reset (HEADERS, then a WINDOW_UPDATE
  that overflows the stream's window; CVE-2025-8671): GOAWAY past a bound.
- hpack_bomb: header blocks that reference one 4,000-byte dynamic-table entry 16,000 times: a few
  431s, then GOAWAY.
- malformed_field: a header block nghttp2 resets for an upper-case name (logged, never forwarded).
- lower_stream_id: a HEADERS frame on a stream id lower than one already used (RFC 9113 section
  5.1.1): GOAWAY PROTOCOL_ERROR, and the request never forwarded.
- deny_twin: a deny route's path with a trailing slash, over HTTP/1.1 and h2.
- websocket_bad_key: a WebSocket handshake whose Sec-WebSocket-Key is no 16-byte nonce.
"""
import json
import os
import socket
import ssl
import sys
import time
import urllib.parse

import h2_client as h2c


def _split(authority):
    host, _, port = authority.rpartition(":")
    return host, int(port)


def _stream_answer(s):
    head = s["headers"] or {}
    return {"status": head.get(":status"), "proxy_status": head.get("proxy-status", ""), "reset": s["reset"]}


def get_with_body(port, ca, authority, path, method="GET"):
    """HEADERS (no END_STREAM, no content-length), then a DATA frame with END_STREAM."""
    host, p = _split(authority)
    c = h2c.Client(h2c.tunnel(port, host, p, ca), authority)
    sid = c.headers(path, method=method, end=False)
    c.pump(0.3)  # the request as a careless origin would see it: its head judged, its body to come
    c.data(sid, b"exfiltrated=" + os.urandom(8).hex().encode())
    c.wait([sid], 10)
    c.close()
    return _stream_answer(c.streams[sid])


def made_you_reset(port, ca, authority, prefix, streams=20000):
    """Each stream: HEADERS (a GET, END_STREAM), then WINDOW_UPDATE of 2^31-1 on it, which
    overflows its window: the server resets the stream (FLOW_CONTROL_ERROR) for the client."""
    host, p = _split(authority)
    s = h2c.raw_connection(port, host, p, ca)
    enc = h2c.hpack.Encoder()
    sent, goaway, t0 = 0, None, time.monotonic()
    frames = []
    for start in range(0, streams, 500):
        burst = b""
        for i in range(start, min(streams, start + 500)):
            sid = 1 + 2 * i
            burst += h2c.headers_frame(sid, enc.encode([(":method", "GET"), (":scheme", "https"),
                                                         (":authority", authority), (":path", "%s%d" % (prefix, i))]))
            burst += (4).to_bytes(3, "big") + bytes([8, 0]) + sid.to_bytes(4, "big") + (0x7FFFFFFF).to_bytes(4, "big")
        try:
            s.sendall(burst)
        except OSError:
            break
        sent = min(streams, start + 500)
        frames += h2c.read_frames(s, 0.01, until=lambda f: f[0] == 7)
        goaway = h2c.goaway_code(frames)
        if goaway is not None:
            break
    if goaway is None:
        frames += h2c.read_frames(s, 10, until=lambda f: f[0] == 7)
        goaway = h2c.goaway_code(frames)
    s.close()
    return {"goaway": goaway, "sent": sent, "seconds": round(time.monotonic() - t0, 2),
            "resets": len([f for f in frames if f[0] == 3])}


def hpack_bomb(port, ca, authority, path, blocks=20, references=16000):
    """Block 1 puts one 4,000-byte field in the dynamic table; each block references it
    `references` times (64 MB decoded from 16 KB on the wire)."""
    host, p = _split(authority)
    s = h2c.raw_connection(port, host, p, ca)
    enc = h2c.hpack.Encoder()
    bomb = ("x-bomb", "b" * 4000)
    base = [(":method", "GET"), (":scheme", "https"), (":authority", authority)]
    statuses, frames, sent = [], [], 0
    t0 = time.monotonic()
    for b in range(blocks):
        block = enc.encode(base + [(":path", "%s/%d" % (path, b)), bomb] + [bomb] * (references - 1))
        parts = [block[i:i + 16000] for i in range(0, len(block), 16000)]
        data = h2c.headers_frame(1 + 2 * b, parts[0], end_headers=len(parts) == 1)
        for i, f in enumerate(parts[1:]):
            data += h2c.continuation_frame(1 + 2 * b, f, end=i == len(parts) - 2)
        try:
            s.sendall(data)
        except OSError:
            break
        sent += 1
        frames += h2c.read_frames(s, 2, until=lambda f: f[0] == 7 or (f[0] == 1 and f[2] == 1 + 2 * b))
        if h2c.goaway_code(frames) is not None:
            break
    frames += h2c.read_frames(s, 2, until=lambda f: f[0] == 7)
    s.close()
    dec = h2c.hpack.Decoder()
    for f in frames:
        if f[0] == 1:
            statuses.append(dict(dec.decode(f[3])).get(":status"))
    return {"statuses": statuses, "goaway": h2c.goaway_code(frames), "blocks_sent": sent,
            "seconds": round(time.monotonic() - t0, 2)}


def malformed_field(port, ca, authority, path):
    """A field name in upper case (RFC 9113 section 8.2.1): nghttp2 resets the stream itself."""
    host, p = _split(authority)
    c = h2c.Client(h2c.tunnel(port, host, p, ca), authority)
    sid = c.headers(path, extra=[("X-Smuggle", "1")])
    c.wait([sid], 10)
    c.close()
    return _stream_answer(c.streams[sid])


def lower_stream_id(port, ca, authority, path):
    """Stream 5 (a GET), then HEADERS on stream 3, which was never opened: a connection error."""
    host, p = _split(authority)
    s = h2c.raw_connection(port, host, p, ca)
    enc = h2c.hpack.Encoder()
    base = [(":method", "GET"), (":scheme", "https"), (":authority", authority)]
    s.sendall(h2c.headers_frame(5, enc.encode(base + [(":path", path + "/5")])))
    frames = h2c.read_frames(s, 5, until=lambda f: f[0] == 1 and f[2] == 5)
    s.sendall(h2c.headers_frame(3, enc.encode(base + [(":path", path + "/3")])))
    frames += h2c.read_frames(s, 5, until=lambda f: f[0] == 7)
    s.close()
    return {"goaway": h2c.goaway_code(frames), "stream_5_answered": any(f[0] == 1 and f[2] == 5 for f in frames)}


def _http1(port, ca, authority, head):
    """One HTTP/1.1 exchange inside the tunnel (ALPN http/1.1 only): the status line and head."""
    host, p = _split(authority)
    s = h2c.tunnel(port, host, p, ca, alpn=("http/1.1",))
    s.sendall(head.encode())
    data = b""
    s.settimeout(10)
    try:
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, ssl.SSLError, OSError):
        pass
    s.close()
    head_text = data.split(b"\r\n\r\n")[0].decode("latin-1")
    lines = head_text.split("\r\n")
    status = lines[0].split(" ")[1] if lines and len(lines[0].split(" ")) > 1 else None
    ps = [l.split(":", 1)[1].strip() for l in lines[1:] if l.lower().startswith("proxy-status:")]
    return {"status": status, "proxy_status": ps[0] if ps else ""}


def deny_twin(port, ca, authority, path):
    """The deny route's path with a trailing slash, over HTTP/1.1 and over h2."""
    h1 = _http1(port, ca, authority, f"GET {path}/ HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n")
    host, p = _split(authority)
    c = h2c.Client(h2c.tunnel(port, host, p, ca), authority)
    sid = c.headers(path + "/")
    c.wait([sid], 10)
    c.close()
    return {"http/1.1": h1, "h2": _stream_answer(c.streams[sid])}


def websocket_bad_key(port, ca, authority, path):
    """Upgrades whose Sec-WebSocket-Key is not a base64 16-byte nonce (RFC 6455 section 4.1)."""
    out = {}
    for name, key in (("short", "aGVsbG8="), ("not_base64", "not base64 at all!!!!!=="), ("none", None)):
        key_line = "" if key is None else f"Sec-WebSocket-Key: {key}\r\n"
        out[name] = _http1(port, ca, authority,
                           f"GET {path}/{name} HTTP/1.1\r\nHost: {authority}\r\nConnection: Upgrade\r\n"
                           f"Upgrade: websocket\r\n{key_line}Sec-WebSocket-Version: 13\r\n\r\n")
    return out


def read_attacks(port, ca, authority):
    """The rows that network-read must hold, by prefix of the paths they send."""
    return {
        "get_with_body": get_with_body(port, ca, authority, "/atk-body/get"),
        "head_with_body": get_with_body(port, ca, authority, "/atk-body/head", method="HEAD"),
        "options_with_body": get_with_body(port, ca, authority, "/atk-body/options", method="OPTIONS"),
        "made_you_reset": made_you_reset(port, ca, authority, "/atk-myr/"),
        "hpack_bomb": hpack_bomb(port, ca, authority, "/atk-bomb"),
        "malformed_field": malformed_field(port, ca, authority, "/atk-malformed"),
        "lower_stream_id": lower_stream_id(port, ca, authority, "/atk-lower"),
        "deny_twin": deny_twin(port, ca, authority, "/public/exact"),
    }


def publish_attacks(port, ca, authority):
    return {"websocket_bad_key": websocket_bad_key(port, ca, authority, "/atk-ws")}


def main():
    which, authority = sys.argv[1], sys.argv[2]
    proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
    ca = os.environ["SSL_CERT_FILE"]
    attacks = read_attacks if which == "read" else publish_attacks
    print(json.dumps(attacks(proxy.port, ca, authority)))


if __name__ == "__main__":
    main()
