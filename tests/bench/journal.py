#!/usr/bin/python3
"""Benchmark: what the workspace journal (`sluice exec --journal`) costs, side by side with the same
run without it, every row once a round in turn, in a scratch workspace of --files files (default
5,000, in 50 directories): `true` (the set-up and end: the overlay, the record, the walk of the
layer), a command that writes 20,000 small files (an `npm install` of a local tree), one that
rewrites 100 of the workspace's files in place, and, with --big MiB, one that rewrites a file of
that size in place (the layer copies it up whole first). Prints medians and the ratio; asserts
nothing.

usage: journal.py [--runs N] [--sluice PATH] [--files N] [--big MIB]"""
import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from exec_startup import default_binary

WRITE_20K = ("import os\n"
             "for d in range(200):\n"
             "    p = 'node_modules/pkg%d' % d\n"
             "    os.makedirs(p)\n"
             "    for i in range(100):\n"
             "        open('%s/f%d.js' % (p, i), 'w').write('module.exports = %d;\\n' % i)\n")
REWRITE_100 = ("import os\n"
               "for i in range(100):\n"
               "    p = 'src/d%d/f%d.txt' % (i % 50, i)\n"
               "    open(p, 'a').write('more\\n')\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--sluice", default=None)
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--big", type=int, default=0, help="MiB of a file rewritten in place (0: no such row)")
    a = ap.parse_args()
    sluice = a.sluice or default_binary()
    tmp = tempfile.mkdtemp(prefix="sluice-journal-bench-")
    ws, home = os.path.join(tmp, "ws"), os.path.join(tmp, "home")
    os.makedirs(home)
    for i in range(a.files):
        d = os.path.join(ws, "src", "d%d" % (i % 50))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "f%d.txt" % i), "w") as f:
            f.write("file %d\n" % i)
    if a.big:
        with open(os.path.join(ws, "big.bin"), "wb") as f:
            f.truncate(a.big << 20)
    env = {"PATH": "/usr/bin:/bin", "HOME": home, "LANG": "C.UTF-8"}
    rows = [("true", ["true"]), ("write 20,000 files", ["/usr/bin/python3", "-c", WRITE_20K]),
            ("rewrite 100 files", ["/usr/bin/python3", "-c", REWRITE_100])]
    if a.big:
        rows.append(("rewrite %d MiB in place" % a.big,
                     ["dd", "if=/dev/zero", "of=big.bin", "bs=1M", "count=%d" % a.big, "conv=notrunc", "status=none"]))
    times = {(name, j): [] for name, _ in rows for j in (False, True)}
    try:
        for _ in range(a.runs):
            for name, cmd in rows:
                for journal in (False, True):
                    argv = [sluice, "exec", "--sandbox-profile", "offline"] + (["--journal"] if journal else []) + ["--"] + cmd
                    t0 = time.perf_counter()
                    p = subprocess.run(argv, cwd=ws, env=env, capture_output=True)
                    times[(name, journal)].append(time.perf_counter() - t0)
                    if p.returncode != 0:
                        raise SystemExit("%s failed: %s" % (" ".join(argv), p.stderr.decode()))
                    shutil.rmtree(os.path.join(ws, "node_modules"), ignore_errors=True)   # not timed
                    shutil.rmtree(os.path.join(home, ".local"), ignore_errors=True)
        print("workspace: %d files; %d rounds; medians" % (a.files, a.runs))
        print("%-28s %12s %12s %8s" % ("row", "off (ms)", "journal (ms)", "ratio"))
        for name, _ in rows:
            off = statistics.median(times[(name, False)]) * 1000
            on = statistics.median(times[(name, True)]) * 1000
            print("%-28s %12.1f %12.1f %8.2f" % (name, off, on, on / off))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
