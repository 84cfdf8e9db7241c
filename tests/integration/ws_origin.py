"""A WebSocket test origin (python3-websockets): wss with a certificate, or plain ws.

Usage: ws_origin.py PORT [CERT KEY]. Listens on ORIGIN_HOST (default 127.0.0.1). Every path
echoes each message back; /close-4001 closes at once with code 4001. Each event is appended to
the file WS_LOG as one line: "open PATH AUTHORIZATION", "message PATH LENGTH", "close PATH CODE".
WS_COMPRESSION=deflate accepts permessage-deflate where a client offers it (else it is declined).
Prints "ready" once listening."""
import asyncio
import os
import ssl
import sys

import websockets

LOG = os.environ.get("WS_LOG")


def log(*words):
    if LOG:
        with open(LOG, "a") as f:
            f.write(" ".join(str(w) for w in words) + "\n")


async def handler(ws, path):
    log("open", path, ws.request_headers.get("Authorization", "-"))
    if path == "/close-4001":
        await ws.close(4001, "origin says goodbye")
        log("close", path, 4001)
        return
    try:
        async for message in ws:
            log("message", path, len(message))
            await ws.send(message)
    except websockets.ConnectionClosed:
        pass
    log("close", path, ws.close_code)


async def main():
    port = int(sys.argv[1])
    ctx = None
    if len(sys.argv) > 3:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(sys.argv[2], sys.argv[3])
    host = os.environ.get("ORIGIN_HOST", "127.0.0.1")
    compression = "deflate" if os.environ.get("WS_COMPRESSION") == "deflate" else None
    async with websockets.serve(handler, host, port, ssl=ctx, max_size=None, compression=compression,
                                ping_interval=None):
        print("ready", flush=True)
        await asyncio.Future()


asyncio.run(main())
