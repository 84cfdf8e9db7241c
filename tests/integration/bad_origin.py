"""A misbehaving HTTP origin on loopback for the adversarial suite. By request path:
/hang      reads the request and never answers
/trickle   answers a 1 MiB Content-Length body one byte every 0.3 s
/endless   answers a chunked body that never ends
/short     promises a 1 MiB Content-Length body, sends 1000 bytes and closes
/huge      sends a 3 MiB Content-Length body (above the adversarial gateway's 2 MiB cap)
/reason    answers "299 Words Of Its Own" with a small body (/reason-chunked: a chunked one)
/no-reason answers "299" and "204" with no reason phrase at all (/no-reason-204 for the second)
/garbage   answers bytes that are no HTTP/1.1 status line
/cut-head  sends half a response head, then closes (over TLS: without close_notify, a truncation)
/silent    reads the request and closes without a byte
/big-head  answers a head of 64 KiB (above the gateways' 16 KiB max_header_bytes)
/upload    reads a request body as it comes and never answers; GET /received says how many of its
           body bytes have arrived so far (all /upload requests together)
anything else: a normal small response. Also counts connections (GET /count on the same port).
Usage: bad_origin.py PORT [ADDRESS [CERT KEY]]: with CERT and KEY, it speaks TLS (http/1.1 in ALPN)."""
import socket
import ssl
import sys
import threading
import time

count = 0
received = 0  # body bytes of /upload requests


def serve(conn):
    global count, received
    try:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                return
            data += chunk
        path = data.split(b" ")[1]
        query = next((q for q in (b"/count", b"/received") if path.endswith(q)), None)
        if query is None:
            count += 1  # connections that carried a real request; count queries excluded
        if query is not None:
            body = str(count if query == b"/count" else received).encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        elif path.endswith(b"/upload"):
            received += len(data.split(b"\r\n\r\n", 1)[1])
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                received += len(chunk)
        elif path.endswith(b"/garbage"):
            conn.sendall(b"SSH-2.0-not-http\r\n\r\n")
        elif path.endswith(b"/cut-head"):
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Le")
        elif path.endswith(b"/silent"):
            pass
        elif path.endswith(b"/big-head"):
            conn.sendall(b"HTTP/1.1 200 OK\r\nX-Big: " + b"b" * 65536 + b"\r\nContent-Length: 0\r\n\r\n")
        elif path.endswith(b"/hang"):
            time.sleep(30)
        elif path.endswith(b"/trickle"):
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n")
            for _ in range(100):
                conn.sendall(b"x")
                time.sleep(0.3)
        elif path.endswith(b"/short"):
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n" + b"s" * 1000)
        elif path.endswith(b"/huge"):
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3145728\r\n\r\n")
            for _ in range(48):
                conn.sendall(b"h" * 65536)
        elif path.endswith(b"/reason"):
            conn.sendall(b"HTTP/1.1 299 Words Of Its Own\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
        elif path.endswith(b"/no-reason"):
            conn.sendall(b"HTTP/1.1 299 \r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
        elif path.endswith(b"/no-reason-204"):
            conn.sendall(b"HTTP/1.1 204 \r\nConnection: close\r\n\r\n")
        elif path.endswith(b"/reason-chunked"):
            conn.sendall(b"HTTP/1.1 299 Words Of Its Own\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                         b"3\r\nok\n\r\n0\r\n\r\n")
        elif path.endswith(b"/endless"):
            conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            block = b"y" * 65536
            while True:
                conn.sendall(b"10000\r\n" + block + b"\r\n")
        else:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
    except OSError:
        pass
    finally:
        conn.close()


def main():
    global count
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1", int(sys.argv[1])))
    s.listen(128)
    tls = None
    if len(sys.argv) > 4:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(sys.argv[3], sys.argv[4])
        tls.set_alpn_protocols(["http/1.1"])
    print("ready", flush=True)
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve_tls if tls else serve, args=(c, tls) if tls else (c,), daemon=True).start()


def serve_tls(raw, tls):
    """One TLS connection: the handshake, then serve() on it. Closing an SSLSocket sends no
    close_notify (only unwrap() would): an early close is a truncation the client can tell."""
    raw.settimeout(10)
    try:
        conn = tls.wrap_socket(raw, server_side=True)
    except (OSError, ssl.SSLError):
        raw.close()
        return
    serve(conn)


if __name__ == "__main__":
    main()
