"""An HTTP/2 client for the tests (python3-h2, python3-hyperframe): through a proxy by CONNECT, TLS
with ALPN h2, and able to send what a careful client never would (uppercase names, connection
fields, floods of frames), for the attack rows of the h2 suite."""
import socket
import ssl
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import hpack
from hyperframe.frame import ContinuationFrame, DataFrame, HeadersFrame, PingFrame, SettingsFrame


def tunnel(proxy_port, host, port, ca, timeout=10, alpn=("h2", "http/1.1")):
    """A TLS socket to host:port through the proxy's CONNECT, ALPN h2 negotiated (or not: check
    `.selected_alpn_protocol()`)."""
    raw = socket.create_connection(("127.0.0.1", proxy_port), timeout=timeout)
    raw.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = raw.recv(4096)
        if not chunk:
            raise OSError("proxy closed during CONNECT")
        head += chunk
    if not head.startswith(b"HTTP/1.1 200"):
        raise OSError("CONNECT refused: " + head.split(b"\r\n")[0].decode())
    ctx = ssl.create_default_context(cafile=ca)
    ctx.set_alpn_protocols(list(alpn))
    return ctx.wrap_socket(raw, server_hostname=host)


class Client:
    """One HTTP/2 connection. Responses are collected per stream: headers, data, trailers, reset."""

    def __init__(self, sock, authority, settings=None):
        self.sock = sock
        self.authority = authority
        cfg = h2.config.H2Configuration(client_side=True, validate_outbound_headers=False,
                                        normalize_outbound_headers=False, validate_inbound_headers=False,
                                        header_encoding=None)
        self.conn = h2.connection.H2Connection(config=cfg)
        self.conn.initiate_connection()
        if settings:
            self.conn.update_settings(settings)
        self.flush()
        self.streams = {}
        self.goaway = None
        self.closed = False

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            try:
                self.sock.sendall(data)
            except OSError:
                self.closed = True

    def send_raw(self, data):
        try:
            self.sock.sendall(data)
        except OSError:
            self.closed = True

    def headers(self, path, method="GET", extra=(), end=True, pseudo=None):
        """Opens a stream: the pseudo-headers (overridable), then `extra` as given."""
        sid = self.conn.get_next_available_stream_id()
        hdrs = pseudo if pseudo is not None else [(":method", method), (":scheme", "https"),
                                                  (":authority", self.authority), (":path", path)]
        self.conn.send_headers(sid, list(hdrs) + list(extra), end_stream=end)
        self.flush()
        self.streams[sid] = {"headers": None, "data": b"", "trailers": None, "reset": None, "ended": False}
        return sid

    def data(self, sid, payload, end=True):
        while payload:
            window = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            if window <= 0:
                self.pump(0.2)
                continue
            self.conn.send_data(sid, payload[:window], end_stream=end and len(payload) <= window)
            payload = payload[window:]
            self.flush()
        if end and not payload and not self.streams[sid]["ended"]:
            pass

    def pump(self, timeout):
        """Reads for up to `timeout` seconds (less if the connection ends); handles events."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except (socket.timeout, ssl.SSLWantReadError):
            return True
        except OSError:
            self.closed = True
            return False
        if not data:
            self.closed = True
            return False
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            self.closed = True
            return False
        for e in events:
            s = self.streams.get(getattr(e, "stream_id", None))
            if isinstance(e, h2.events.ResponseReceived) and s is not None:
                s["headers"] = {k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v
                                for k, v in e.headers}
            elif isinstance(e, h2.events.TrailersReceived) and s is not None:
                s["trailers"] = {k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v
                                 for k, v in e.headers}
            elif isinstance(e, h2.events.DataReceived) and s is not None:
                s["data"] += e.data
                self.conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
            elif isinstance(e, h2.events.StreamEnded) and s is not None:
                s["ended"] = True
            elif isinstance(e, h2.events.StreamReset) and s is not None:
                s["reset"] = e.error_code
                s["ended"] = True
            elif isinstance(e, h2.events.ConnectionTerminated):
                self.goaway = e.error_code
        self.flush()
        return True

    def wait(self, sids, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.closed:
            if all(self.streams[s]["ended"] for s in sids):
                return True
            self.pump(0.2)
        return all(self.streams[s]["ended"] for s in sids)

    def wait_closed(self, timeout=10):
        """Reads until the server ends the connection (GOAWAY or close); True if it did."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.closed and self.goaway is None:
            self.pump(0.2)
        return self.closed or self.goaway is not None

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def headers_frame(sid, block, end_headers=True, end_stream=True):
    f = HeadersFrame(sid)
    f.data = block
    f.flags.add("END_HEADERS") if end_headers else None
    f.flags.add("END_STREAM") if end_stream else None
    return f.serialize()


def continuation_frame(sid, block, end=False):
    f = ContinuationFrame(sid)
    f.data = block
    if end:
        f.flags.add("END_HEADERS")
    return f.serialize()


def encode(headers, encoder=None):
    return (encoder or hpack.Encoder()).encode(headers)


def ping_frame(i):
    f = PingFrame(0)
    f.opaque_data = i.to_bytes(8, "big")
    return f.serialize()


def settings_frame():
    return SettingsFrame(0).serialize()


def data_frame(sid, payload=b"", end=False):
    f = DataFrame(sid)
    f.data = payload
    if end:
        f.flags.add("END_STREAM")
    return f.serialize()


def raw_connection(proxy_port, host, port, ca):
    """A tunnel with the client preface and an empty SETTINGS sent: frames from here on are the
    caller's, raw (read back with read_frames)."""
    s = tunnel(proxy_port, host, port, ca)
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + settings_frame())
    return s


def read_frames(sock, timeout=10, until=None):
    """Frames the server sends, as (type, flags, stream_id, payload), until it closes, `timeout`
    passes, or `until(frame)` is true. Type 7 is GOAWAY (its error code: payload[4:8]), 3 RST_STREAM,
    1 HEADERS."""
    frames, buf = [], b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except (socket.timeout, ssl.SSLWantReadError):
            break
        except OSError:
            break
        if not chunk:
            break
        buf += chunk
        while len(buf) >= 9:
            length = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + length:
                break
            f = (buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF, buf[9:9 + length])
            frames.append(f)
            buf = buf[9 + length:]
            if until and until(f):
                return frames
    return frames


def goaway_code(frames):
    """The error code of the first GOAWAY among `frames`, or None."""
    for t, _, _, payload in frames:
        if t == 7:
            return int.from_bytes(payload[4:8], "big")
    return None
