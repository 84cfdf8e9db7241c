#!/usr/bin/python3
"""Benchmark: wall time and minor page faults of `sluice exec ... -- true`, network-read and
offline, against a bare `true`, sluice's own load (`--version`), a bare `unshare` (user + network
namespaces, no gateway) and bubblewrap's empty sandbox (`bwrap --unshare-all`), every row once a
round in turn; the loader's relocation count for sluice. With curl installed, one more row: a
command's first request (network-read, a GET the gateway refuses itself), which waits for the
gateway and its scanner's database. Prints medians; asserts nothing.

usage: exec_startup.py [--runs N] [--sluice PATH] [--against PATH] [--user UID] [--files N]

--against PATH adds sluice's rows for a second binary (a build of an earlier commit, say), in the
same rounds: an A/B comparison that the machine's swings hit alike.

--files N adds rows in a scratch workspace of N files (100 directories, a Git repository with hooks
at its root and N/1000 nested ones): the guard walks it before the command and again after it.
The --cache rows show the cost of the tool caches' mounts (npm, pip, cargo: five binds).

Run it from a project directory (the working directory is the sandbox's workspace). As root, sluice
also masks every /etc entry others may not read; --user 65534 measures an unprivileged caller."""
import argparse
import ctypes
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# bubblewrap's empty sandbox: all namespaces, / read-only, no gateway (the peer to beat at start-up)
BWRAP_TRUE = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all", "true"]


def default_binary():
    for preset in ("release", "default"):
        p = os.path.join(HERE, "../../build", preset, "sluice")
        if os.path.exists(p):
            return os.path.realpath(p)
    raise SystemExit("build sluice first: scripts/build.sh release")


def children():
    """This process's children, from /proc (zombies included)."""
    me, out = os.getpid(), set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                        out.add(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return out


def become_subreaper():
    """Orphans of a measured run (sluice's init, which may still be tearing its namespaces down
    when sluice has exited; bwrap's) become this process's children, so their page faults are
    counted once reaped."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        raise SystemExit("prctl(PR_SET_CHILD_SUBREAPER): %s" % os.strerror(ctypes.get_errno()))


def run_once(cmd, env):
    """Wall milliseconds and minor page faults of one run, its whole process tree: the faults of
    every descendant that was waited for count towards its parent, and so towards this process,
    which also reaps (outside the timing) what the run left behind. Call become_subreaper() first."""
    keep = children()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
    t = time.perf_counter()
    rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env).returncode
    ms = (time.perf_counter() - t) * 1000
    if rc != 0:
        raise SystemExit("failed (%d): %s" % (rc, " ".join(cmd)))
    while True:  # an orphan may itself leave orphans behind
        left = children() - keep
        if not left:
            break
        for pid in left:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    return ms, resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - before


def measure_all(rows, runs):
    """Every row once per round, in turn, so that the machine's swings hit all rows alike.
    {name: (median ms, p90 ms, median page faults)}."""
    become_subreaper()
    for name, cmd, env in rows:  # warm the page cache
        for _ in range(min(runs, 5)):
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    seen = {name: ([], []) for name, _, _ in rows}
    for _ in range(runs):
        for name, cmd, env in rows:
            ms, faults = run_once(cmd, env)
            seen[name][0].append(ms)
            seen[name][1].append(faults)
    out = {}
    for name, (times, faults) in seen.items():
        times.sort()
        out[name] = (statistics.median(times), times[int(len(times) * 0.9) - 1], statistics.median(faults))
    return out


def relocations(binary):
    """The dynamic loader's count of relocations for one start of `binary --version`."""
    p = subprocess.run([binary, "--version"], capture_output=True, text=True, env=dict(os.environ, LD_DEBUG="statistics"))
    total = 0
    for line in p.stderr.splitlines():
        if "number of relocations:" in line and "cache" not in line:
            total += int(line.rsplit(":", 1)[1])
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--sluice", default=None)
    ap.add_argument("--against", default=None, help="a second sluice binary, measured in the same rounds")
    ap.add_argument("--user", type=int, default=None, help="run everything as this uid (setpriv)")
    ap.add_argument("--files", type=int, default=0, help="also run in a scratch workspace of N files")
    a = ap.parse_args()
    s = a.sluice or default_binary()
    cache_home = tempfile.mkdtemp(prefix="sluice-bench-home-")
    if a.user is not None:
        os.chown(cache_home, a.user, a.user)
    cache_env = dict(os.environ, HOME=cache_home, XDG_CACHE_HOME=cache_home + "/.cache")
    rows = [
        ("true (no sandbox)", ["true"]),
        ("sluice --version (its load)", [s, "--version"]),
        ("unshare -Urn true", [shutil.which("unshare") or "unshare", "-Urn", "true"]),
        ("sluice exec offline", [s, "exec", "--sandbox-profile", "offline", "--", "true"]),
        ("sluice exec network-read", [s, "exec", "--sandbox-profile", "network-read",
                                      "--allow-domain", "example.com", "--", "true"]),
        ("offline --cache npm,pip,cargo", [s, "exec", "--sandbox-profile", "offline", "--cache", "npm",
                                           "--cache", "pip", "--cache", "cargo", "--", "true"], cache_env),
    ]
    if shutil.which("curl"):
        # What a command's first request waits for: the sandbox, the gateway and its scanner's
        # database (compiled for the run), then a GET that the gateway refuses itself (403, a host
        # not allowed: no origin, no network). Not counted in the x bwrap comparisons.
        rows.append(("network-read, first request", [s, "exec", "--sandbox-profile", "network-read", "--",
                                                      "curl", "-s", "-o", "/dev/null", "http://refused.example/"]))
    if a.against:
        b = os.path.realpath(a.against)
        rows += [(name + " [against]", [b if part == s else part for part in cmd], *rest)
                 for name, cmd, *rest in [r for r in rows if s in r[1]]]
    if shutil.which("bwrap"):
        rows.insert(3, ("bwrap --unshare-all true", BWRAP_TRUE))
    scratch = None
    if a.files:
        scratch = make_workspace(a.files, a.user)
        rows.append(("offline, %d-file workspace" % a.files,
                     ["sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", scratch, s, "exec",
                      "--sandbox-profile", "offline", "--", "true"]))
    if a.user is not None:
        pre = ["setpriv", "--reuid=%d" % a.user, "--regid=%d" % a.user, "--clear-groups"]
        rows = [(name, pre + cmd) for name, cmd in rows]
    print("binary: %s, runs: %d, cores: %d, uid: %s, relocations at load: %d" % (
        s, a.runs, os.cpu_count(), os.getuid() if a.user is None else a.user, relocations(s)))
    if a.against:
        print("against: %s, relocations at load: %d" % (os.path.realpath(a.against), relocations(a.against)))
    rows = [row if len(row) == 3 else (*row, None) for row in rows]
    results = measure_all(rows, a.runs)
    print("%-32s %10s %10s %14s" % ("command", "median ms", "p90 ms", "page faults"))
    for name, _, _ in rows:
        med, p90, faults = results[name]
        print("%-32s %10.2f %10.2f %14.0f" % (name, med, p90, faults))
    shutil.rmtree(cache_home, ignore_errors=True)
    if scratch:
        shutil.rmtree(scratch, ignore_errors=True)


def make_workspace(files, user):
    """A scratch project of `files` files in 100 directories, with a Git repository (hooks) at its
    root and one nested repository per 1,000 files."""
    d = tempfile.mkdtemp(prefix="sluice-bench-ws-")
    git = ["git", "-c", "init.defaultBranch=main"]
    subprocess.run(git + ["init", "-q", d], check=True)
    for i in range(files):
        sub = os.path.join(d, "src", "d%02d" % (i % 100))
        os.makedirs(sub, exist_ok=True)
        with open(os.path.join(sub, "f%d.txt" % i), "w") as f:
            f.write("x\n")
    for k in range(files // 1000):
        subprocess.run(git + ["init", "-q", os.path.join(d, "vendor", "lib%d" % k)], check=True)
    if user is not None:
        subprocess.run(["chown", "-R", "%d:%d" % (user, user), d], check=True)
    return d


if __name__ == "__main__":
    main()
