"""A test origin: HTTP or HTTPS on loopback. Real python3 http.server, used by the integration tests.

GET /bytes/N        N deterministic bytes (Content-Length)
GET /chunked/N      N bytes in chunked encoding
GET /status/CODE    an empty response with that status (204, 304, ...)
GET /headers        the request head as received, as the body
GET /sse/N/S        N server-sent events (text/event-stream, chunked), S seconds apart
GET /sse-stall/N/S  the first event, then nothing
GET /tls-session    "reused" when this connection resumed a TLS session, else "new"
GET|POST /git/...   Git smart HTTP: `git http-backend` (CGI) on the repositories in ORIGIN_ROOT
GET|POST /private-git/...   the same, only with an Authorization header listed in ORIGIN_AUTH
GET /files/PATH     a file under ORIGIN_ROOT (a directory: its index.html)
GET /private/PATH   like /files/PATH, only with an Authorization header listed in ORIGIN_AUTH
                    ("|"-separated values); 401 with WWW-Authenticate otherwise
POST|PUT|PATCH|DELETE /echo   the request body back (Content-Length or chunked request)

With ORIGIN_RECORD set to a file, every request head that arrives is appended to it as a JSON line
(method, path, its framing and upgrade fields): what reached the origin, for the attack rows; and
to ORIGIN_RECORD.complete a line (method, path, bytes) once /echo has read a request's body whole.
"""
import http.server
import json
import os
import ssl
import subprocess
import sys
import threading

# /drip/TAG...: what arrived, by tag (the length of each request line's target): a budget's tests
# compare it with what sluice let through. /arrived/TAG says it.
ARRIVED = {}
ARRIVED_LOCK = threading.Lock()


def payload(n):
    block = bytes(range(256)) * 64
    out = bytearray()
    while len(out) < n:
        out += block
    return bytes(out[:n])


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def parse_request(self):
        ok = super().parse_request()
        record = os.environ.get("ORIGIN_RECORD")
        if ok and record:
            line = {"method": self.command, "path": self.path,
                    "transfer_encoding": self.headers.get("Transfer-Encoding"),
                    "content_length": self.headers.get("Content-Length"), "upgrade": self.headers.get("Upgrade")}
            with open(record, "a") as f:
                f.write(json.dumps(line) + "\n")
        return ok

    def _body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(data)
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length", 0)))

    def _send(self, code, body, chunked=False, head=False, content_type=None):
        self.send_response(code)
        self.send_header("X-Origin", "test")
        if content_type:
            self.send_header("Content-Type", content_type)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if not head:
                for i in range(0, len(body), 4096):
                    part = body[i:i + 4096]
                    self.wfile.write(b"%x\r\n" % len(part) + part + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
            return
        if code not in (204, 304):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head and code not in (204, 304):
            self.wfile.write(body)

    def _send_payload(self, n, head):
        """payload(n) with its head sent first and the bytes as they are made: a large body (80 MB
        for the slow-reader rows) costs its head no wait, however busy the machine is."""
        self.send_response(200)
        self.send_header("X-Origin", "test")
        self.send_header("Content-Length", str(n))
        self.end_headers()
        if head:
            return
        block = bytes(range(256)) * 256  # 64 KiB, a whole number of payload's 256-byte cycles
        try:
            while n > 0:
                self.wfile.write(block[:n])
                n -= len(block)
        except OSError:
            pass  # the client went away (the slow-reader rows end that way)

    def _authorized(self):
        allowed = [a for a in os.environ.get("ORIGIN_AUTH", "").split("|") if a]
        if self.headers.get("Authorization") in allowed:
            return True
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="private"')
        self.send_header("Content-Length", "0")
        self.end_headers()
        return False

    def _git(self, body=b""):
        """One CGI exchange with git http-backend; the request body as received (gzip included)."""
        path, _, query = self.path.partition("?")
        prefix = "/private-git" if path.startswith("/private-git/") else "/git"
        if prefix == "/private-git" and not self._authorized():
            return
        env = {"PATH": "/usr/bin:/bin", "GIT_PROJECT_ROOT": os.environ["ORIGIN_ROOT"],
               "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": path[len(prefix):], "QUERY_STRING": query,
               "REQUEST_METHOD": self.command, "CONTENT_TYPE": self.headers.get("Content-Type", ""),
               "CONTENT_LENGTH": str(len(body)), "REMOTE_ADDR": "198.18.0.1", "REMOTE_USER": "test",
               "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
               "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", "")}
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True).stdout
        head, _, payload_ = out.partition(b"\r\n\r\n")
        status = 200
        headers = []
        for line in head.split(b"\r\n"):
            name, _, value = line.decode().partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload_)))
        self.end_headers()
        self.wfile.write(payload_)

    def _route(self, head=False):
        if self.path.startswith(("/git/", "/private-git/")) and os.environ.get("ORIGIN_ROOT"):
            return self._git()
        parts = self.path.split("?")[0].strip("/").split("/")
        if parts[0] == "drip" and len(parts) > 1:
            with ARRIVED_LOCK:
                ARRIVED[parts[1]] = ARRIVED.get(parts[1], 0) + len(self.path)
            return self._send(200, b"ok\n", head=head)
        if parts[0] == "arrived" and len(parts) > 1:
            with ARRIVED_LOCK:
                n = ARRIVED.get(parts[1], 0)
            return self._send(200, b"%d\n" % n, head=head)
        if parts[0] == "bytes":
            n = int(parts[1])
            if n > (1 << 20):
                return self._send_payload(n, head)
            return self._send(200, payload(n), head=head)
        if parts[0] == "chunked":
            return self._send(200, payload(int(parts[1])), chunked=True, head=head)
        if parts[0] == "private":
            allowed = [a for a in os.environ.get("ORIGIN_AUTH", "").split("|") if a]
            if self.headers.get("Authorization") not in allowed:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="private"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            parts = ["files"] + parts[1:]
        if parts[0] == "files" and os.environ.get("ORIGIN_ROOT"):
            # Static files (a git repository for dumb HTTP), confined to ORIGIN_ROOT.
            root = os.path.realpath(os.environ["ORIGIN_ROOT"])
            path = os.path.realpath(os.path.join(root, *parts[1:]))
            if os.path.isdir(path):
                path = os.path.join(path, "index.html")  # a PEP 503 index page, say
            if not path.startswith(root + os.sep) or not os.path.isfile(path):
                return self._send(404, b"not found\n", head=head)
            with open(path, "rb") as f:
                return self._send(200, f.read(), head=head,
                                  content_type="text/html" if path.endswith(".html") else None)
        if parts[0] == "status":
            return self._send(int(parts[1]), b"")
        if parts[0] in ("sse", "sse-stall") and not head:
            return self._sse(int(parts[1]), float(parts[2]), stall=parts[0] == "sse-stall")
        if parts[0] == "tls-session":
            reused = getattr(self.connection, "session_reused", False)
            return self._send(200, b"reused\n" if reused else b"new\n", head=head)
        if parts[0] == "headers":
            return self._send(200, (self.requestline + "\n" + str(self.headers)).encode(), head=head)
        return self._send(200, b"hello from origin " + self.path.encode() + b"\n", head=head)

    def _sse(self, count, interval, stall=False):
        """Server-sent events, chunked: COUNT events, INTERVAL seconds apart; "sse-stall" sends the
        first and then nothing, holding the connection open."""
        import time
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for i in range(count):
                if i:
                    time.sleep(600 if stall else interval)
                event = b"data: event %d\n\n" % i
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass

    def do_GET(self):
        self._route()

    def do_HEAD(self):
        self._route(head=True)

    def do_OPTIONS(self):
        self._send(200, b"")

    def _echo(self):
        if self.path.startswith(("/git/", "/private-git/")) and os.environ.get("ORIGIN_ROOT"):
            return self._git(self._body())
        body = self._body()
        record = os.environ.get("ORIGIN_RECORD")
        length = self.headers.get("Content-Length")
        if length is not None and len(body) != int(length):
            return  # cut short (the connection closed inside the body): nothing to answer
        if record:  # a body that arrived whole: the request reached the origin, not just its head
            with open(record + ".complete", "a") as f:
                f.write(json.dumps({"method": self.command, "path": self.path, "bytes": len(body)}) + "\n")
        self._send(200, body)

    do_POST = do_PUT = do_PATCH = do_DELETE = _echo


def main():
    port = int(sys.argv[1])
    host = os.environ.get("ORIGIN_HOST", "127.0.0.1")
    server_class = http.server.ThreadingHTTPServer
    if ":" in host:  # an IPv6 literal
        import socket

        class V6(http.server.ThreadingHTTPServer):
            address_family = socket.AF_INET6
        server_class = V6
    server = server_class((host, port), Handler)
    server.daemon_threads = True
    if len(sys.argv) > 3:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(sys.argv[2], sys.argv[3])
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
