"""Runs inside (and outside) the sandbox to try one thing. Prints what happened; exits 0 when the
attempt succeeded and 1 when it was blocked, so that a test can run it on both sides."""
import errno
import json
import os
import signal
import socket
import sys
import time


def ok(msg):
    print("OK " + msg)
    sys.exit(0)


def blocked(msg):
    print("BLOCKED " + msg)
    sys.exit(1)


def main():
    what = sys.argv[1]
    args = sys.argv[2:]
    if what == "tcp":
        try:
            socket.create_connection((args[0], int(args[1])), timeout=2).close()
            ok("connected")
        except OSError as e:
            blocked(str(e))
    if what == "udp":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(2)
        try:
            s.sendto(b"ping", (args[0], int(args[1])))
            data, _ = s.recvfrom(100)
            ok("reply " + data.decode())
        except OSError as e:
            blocked(str(e))
    if what == "dns":
        # A raw DNS query to the given server, then the system resolver.
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(2)
        q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x06origin\x04test\x00\x00\x01\x00\x01"
        try:
            s.sendto(q, (args[0], 53))
            s.recvfrom(512)
            ok("dns answer")
        except OSError as e:
            blocked("dns: " + str(e))
    if what == "resolve":
        try:
            socket.getaddrinfo(args[0], 443)
            ok("resolved")
        except OSError as e:
            blocked(str(e))
    if what in ("abstract", "unix"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(("\0" if what == "abstract" else "") + args[0])
            ok("connected")
        except OSError as e:
            blocked(str(e))
    if what in ("raw", "raw6"):
        family, proto = ((socket.AF_INET, socket.IPPROTO_ICMP) if what == "raw"
                         else (socket.AF_INET6, socket.IPPROTO_ICMPV6))
        try:
            socket.socket(family, socket.SOCK_RAW, proto)
            ok("raw socket")
        except OSError as e:
            blocked(str(e))
    if what == "readmem":
        # Every process this sandbox can see: none may have its memory or environment read,
        # except our own.
        found = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            for name in ("mem", "environ"):
                try:
                    with open("/proc/%s/%s" % (pid, name), "rb") as f:
                        if name == "mem":
                            f.seek(0x400000)
                        f.read(64)
                        found.append("%s/%s" % (pid, name))
                except OSError:
                    pass
        if found:
            ok("readable: " + ",".join(found))
        blocked("no other process readable")
    if what == "find-key":
        # Looks for PEM private keys in the directory the trust variables point at.
        d = os.path.dirname(os.environ.get("SSL_CERT_FILE", "/nonexistent/x"))
        for root, _, files in os.walk(d):
            for f in files:
                with open(os.path.join(root, f), "rb") as fh:
                    if b"PRIVATE KEY" in fh.read():
                        ok("key in " + f)
        blocked("no key in " + d)
    if what == "pids":
        print(json.dumps(sorted(int(p) for p in os.listdir("/proc") if p.isdigit())))
        sys.exit(0)
    if what == "kill-outside":
        pid = int(args[0])
        try:
            os.kill(pid, 0)
            ok("signalled %d" % pid)
        except OSError as e:
            blocked(str(e))
    if what == "icmp":
        # Unprivileged ICMP echo (ping sockets), then IPv6 to the host's loopback.
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
            s.settimeout(2)
            s.sendto(b"\x08\x00\x00\x00\x12\x34\x00\x01", (args[0], 0))
            s.recvfrom(100)
            ok("icmp echo answered")
        except OSError as e:
            blocked("icmp: " + str(e))
    if what == "argv":
        print(json.dumps(args))
        sys.exit(0)
    if what == "env":
        print(json.dumps(dict(os.environ)))
        sys.exit(0)
    if what == "trap":
        # Waits for a signal, records it, exits 7.
        out = args[0]

        def handler(sig, _):
            with open(out, "w") as f:
                f.write(str(sig))
            sys.exit(7)

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)
        with open(out + ".ready", "w") as f:
            f.write("ready")
        time.sleep(60)
        sys.exit(0)
    if what == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if what == "unshare":
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
            # A fresh namespace of our own: still no way out of the sandbox's network.
            try:
                socket.create_connection((args[0], int(args[1])), timeout=2).close()
                ok("escaped via unshare")
            except OSError as e:
                blocked("unshare worked but no route: " + str(e))
        blocked("unshare: " + os.strerror(ctypes.get_errno()))
    if what == "setns":
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                fd = os.open("/proc/%s/ns/net" % pid, os.O_RDONLY)
            except OSError:
                continue
            if libc.setns(fd, 0) == 0:
                try:
                    socket.create_connection((args[0], int(args[1])), timeout=2).close()
                    ok("escaped via setns to %s" % pid)
                except OSError:
                    pass
        blocked("setns gave no way out")
    if what == "ptrace-init":
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        PTRACE_ATTACH = 16
        if libc.ptrace(PTRACE_ATTACH, 1, 0, 0) == 0:
            ok("attached to init")
        blocked("ptrace: " + os.strerror(ctypes.get_errno()))
    if what == "fd":
        # Is descriptor N open here?
        try:
            os.fstat(int(args[0]))
            ok("descriptor %s is open" % args[0])
        except OSError as e:
            blocked(str(e))
    if what == "fd-talk":
        # Talks to whatever descriptor N is connected to: sends a line, reads the answer.
        fd = int(args[0])
        try:
            os.write(fd, b"hello\n")
            data = os.read(fd, 100)
            ok("answer %r" % data)
        except OSError as e:
            blocked(str(e))
    if what == "tiocsti":
        # Types into the terminal on stdin, as an injected command would.
        import fcntl
        import termios
        try:
            for c in b"echo INJECTED\n":
                fcntl.ioctl(0, termios.TIOCSTI, bytes([c]))
            ok("typed into the terminal")
        except OSError as e:
            blocked("TIOCSTI: " + str(e))
    if what == "ctty":
        # A controlling terminal, and whether we lead our own session.
        info = {"sid_is_self": os.getsid(0) == os.getpid(), "pgid_is_self": os.getpgid(0) == os.getpid()}
        try:
            os.close(os.open("/dev/tty", os.O_RDWR))
            info["ctty"] = True
        except OSError as e:
            info["ctty"] = False
            info["error"] = e.errno
        print(json.dumps(info))
        sys.exit(0)
    if what == "family":
        # socket(FAMILY, TYPE): prints the errno on failure.
        try:
            socket.socket(int(args[0]), int(args[1]), 0).close()
            ok("socket created")
        except OSError as e:
            print("ERRNO %d" % e.errno)
            sys.exit(1)
    if what == "syscall":
        # A raw syscall number with zero arguments: prints the errno.
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        r = libc.syscall(int(args[0]), 0, 0, 0, 0, 0)
        print("ERRNO %d" % (ctypes.get_errno() if r < 0 else 0))
        sys.exit(1 if r < 0 else 0)
    if what == "write":
        # Appends a line to a file.
        try:
            with open(args[0], "a") as f:
                f.write(args[1] if len(args) > 1 else "x\n")
            ok("wrote " + args[0])
        except OSError as e:
            blocked(str(e))
    if what == "read":
        try:
            with open(args[0], "rb") as f:
                data = f.read()
            if data:
                ok("read %d bytes of %s" % (len(data), args[0]))
            blocked("empty " + args[0])
        except OSError as e:
            blocked(str(e))
    print("unknown probe " + what)
    sys.exit(2)


if __name__ == "__main__":
    main()
