#!/usr/bin/python3
"""Benchmark: wall time of `sluice exec ... -- true`, network-read and offline, against a bare
`true` and a bare `unshare` (user + network namespaces, no gateway). Prints medians; asserts nothing.

usage: exec_startup.py [--runs N] [--sluice PATH] [--user UID]

Run it from a project directory (the working directory is the sandbox's workspace). As root, sluice
also masks every /etc entry others may not read; --user 65534 measures an unprivileged caller."""
import argparse
import os
import shutil
import statistics
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def default_binary():
    for preset in ("release", "default"):
        p = os.path.join(HERE, "../../build", preset, "sluice")
        if os.path.exists(p):
            return os.path.realpath(p)
    raise SystemExit("build sluice first: scripts/build.sh release")


def measure(cmd, runs, env=None):
    for _ in range(min(runs, 5)):  # warm the page cache
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env).returncode
        times.append((time.perf_counter() - t) * 1000)
        if rc != 0:
            raise SystemExit("failed (%d): %s" % (rc, " ".join(cmd)))
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.9) - 1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--sluice", default=None)
    ap.add_argument("--user", type=int, default=None, help="run everything as this uid (setpriv)")
    a = ap.parse_args()
    s = a.sluice or default_binary()
    rows = [
        ("true (no sandbox)", ["true"]),
        ("unshare -Urn true", [shutil.which("unshare") or "unshare", "-Urn", "true"]),
        ("sluice exec offline", [s, "exec", "--sandbox-profile", "offline", "--", "true"]),
        ("sluice exec network-read", [s, "exec", "--sandbox-profile", "network-read",
                                      "--allow-domain", "example.com", "--", "true"]),
    ]
    if a.user is not None:
        pre = ["setpriv", "--reuid=%d" % a.user, "--regid=%d" % a.user, "--clear-groups"]
        rows = [(name, pre + cmd) for name, cmd in rows]
    print("binary: %s, runs: %d, cores: %d, uid: %s" % (s, a.runs, os.cpu_count(),
                                                        os.getuid() if a.user is None else a.user))
    print("%-28s %10s %10s" % ("command", "median ms", "p90 ms"))
    for name, cmd in rows:
        med, p90 = measure(cmd, a.runs)
        print("%-28s %10.2f %10.2f" % (name, med, p90))


if __name__ == "__main__":
    main()
