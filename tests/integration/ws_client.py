"""A WebSocket client for the tests (python3-websockets), inside or outside `sluice exec`.

Usage: ws_client.py URL COUNT [BIG_BYTES]. Sends COUNT text messages (the last one BIG_BYTES long
when given, else small) and checks that each comes back unchanged, then closes with 1000. With
HTTPS_PROXY set and a wss URL, the connection goes through the proxy by CONNECT (websockets 10
has no proxy support of its own); otherwise it is direct (inside sluice exec, the capture takes
it). Prints one JSON line: {"echoed": N, "close_code": C} or {"error": "...", "status": S}."""
import asyncio
import json
import os
import socket
import ssl
import sys
import urllib.parse

import websockets


def via_proxy(host, port):
    proxy = urllib.parse.urlparse(os.environ["HTTPS_PROXY"])
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=10)
    s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            break
        head += chunk
    if not head.startswith(b"HTTP/1.1 200"):
        raise OSError("CONNECT refused: " + head.split(b"\r\n")[0].decode())
    s.settimeout(None)
    return s


async def main():
    url, count = sys.argv[1], int(sys.argv[2])
    big = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    u = urllib.parse.urlparse(url)
    kw = {"max_size": None, "compression": None, "open_timeout": 20, "ping_interval": None}
    if u.scheme == "wss":
        kw["ssl"] = ssl.create_default_context(cafile=os.environ.get("WS_CA"))
        if os.environ.get("HTTPS_PROXY"):
            kw["sock"] = via_proxy(u.hostname, u.port or 443)
            kw["server_hostname"] = u.hostname
    try:
        async with websockets.connect(url, **kw) as ws:
            for i in range(count):
                msg = ("m%d-" % i) + ("x" * (big - 2 - len(str(i))) if big and i == count - 1 else "hello")
                await ws.send(msg)
                back = await asyncio.wait_for(ws.recv(), 30)
                if back != msg:
                    print(json.dumps({"error": "echo differs at message %d" % i}))
                    return
            await ws.close(1000, "done")
            print(json.dumps({"echoed": count, "close_code": ws.close_code}))
    except websockets.InvalidStatusCode as e:
        print(json.dumps({"error": "status", "status": e.status_code}))
    except websockets.ConnectionClosed as e:
        print(json.dumps({"error": "closed", "close_code": e.code, "reason": e.reason}))
    except OSError as e:
        print(json.dumps({"error": str(e)}))


if __name__ == "__main__":
    asyncio.run(main())
