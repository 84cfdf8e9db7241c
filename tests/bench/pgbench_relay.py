#!/usr/bin/python3
"""PostgreSQL through sluice's TCP relay against the same server directly, side by side in one run
(issue 52's benchmark). PostgreSQL 15 on a test host at 198.18.0.2 (test_services.py's set-up, a
`tcp = [{ host = "db.test", port = 5432 }]` entry); `pgbench -S` (select-only, the relay's
worst case: one small round trip per transaction) with CLIENTS connections for SECONDS, each round
- directly: pgbench from this namespace to 198.18.0.2;
- through sluice: the same pgbench inside `sluice exec` (network-read), to db.test, captured and
  relayed.
- with --peers, through two other user-space TCP relays on this host's loopback, for the cost of
  one relay hop alone: socat (a read and a write per piece, poll) and HAProxy in TCP mode (one
  thread, epoll, splice where the kernel offers it).
Rounds alternate (direct, sluice, [socat, haproxy,] direct, ...). Prints each round's transactions
per second (pgbench's own figure, without connection set-up), the medians and the ratios to direct.

usage (root): tests/bench/pgbench_relay.py [--repeat 3] [--seconds 10] [--clients 4] [--peers] [--binary PATH]"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../integration"))
import test_services  # noqa: E402

M = test_services.M
PASSWORD = test_services.PG_PASSWORD


def tps(output):
    m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", output)
    if not m:
        raise RuntimeError("pgbench printed no tps:\n" + output)
    return float(m.group(1))


def start_peers(work):
    """socat and HAProxy relaying 127.0.0.1:15433 and :15434 to the test host's PostgreSQL."""
    socat = subprocess.Popen(["socat", "TCP-LISTEN:15433,bind=127.0.0.1,reuseaddr,fork,nodelay",
                              "TCP:198.18.0.2:5432,nodelay"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cfg = os.path.join(work, "haproxy.cfg")
    with open(cfg, "w") as f:
        f.write("global\n  nbthread 1\ndefaults\n  mode tcp\n  timeout connect 5s\n  timeout client 1m\n"
                "  timeout server 1m\nlisten pg\n  bind 127.0.0.1:15434\n  server db 198.18.0.2:5432\n")
    haproxy = subprocess.Popen(["haproxy", "-f", cfg, "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import socket
    import time
    for port in (15433, 15434):
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError("a peer relay did not listen on 127.0.0.1:%d" % port)
    return [socat, haproxy]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--peers", action="store_true", help="also through socat and HAProxy (TCP mode)")
    ap.add_argument("--binary", default=os.environ.get("SLUICE_BIN", os.path.join(HERE, "../../build/default/sluice")))
    args = ap.parse_args()
    binary = os.path.abspath(args.binary)
    test_services.setUpModule()
    try:
        env = dict(os.environ, PGPASSWORD=PASSWORD)
        conn = "host=%s port=5432 user=app dbname=appdb sslmode=disable"
        subprocess.run(["pgbench", "-i", "-q", "-s", "2", conn % "198.18.0.2"], env=env, check=True,
                       capture_output=True)
        work = tempfile.mkdtemp(dir=M["tmp"])
        home = os.path.join(work, "home")
        os.makedirs(home)
        bench = ["pgbench", "-S", "-n", "-c", str(args.clients), "-j", "2", "-T", str(args.seconds)]
        direct, relayed = [], []
        peers = {"socat": ([], 15433), "haproxy": ([], 15434)} if args.peers else {}
        procs = start_peers(work) if args.peers else []
        for i in range(args.repeat):
            p = subprocess.run(bench + [conn % "198.18.0.2"], env=env, capture_output=True, text=True)
            direct.append(tps(p.stdout))
            script = "PGPASSWORD=%s %s '%s'" % (PASSWORD, " ".join(bench), conn % "db.test")
            p = subprocess.run([binary, "exec", "--policy", M["policy"], "--sandbox-profile", "network-read", "--",
                                "sh", "-c", script], capture_output=True, text=True, cwd=work,
                               env={"PATH": "/usr/bin:/bin", "HOME": home, "LANG": "C.UTF-8"})
            if p.returncode != 0:
                raise RuntimeError("pgbench through sluice failed:\n" + p.stderr)
            relayed.append(tps(p.stdout))
            line = "round %d: direct %.0f tps, through sluice %.0f tps" % (i + 1, direct[-1], relayed[-1])
            for name, (got, port) in peers.items():
                p = subprocess.run(bench + ["host=127.0.0.1 port=%d user=app dbname=appdb sslmode=disable" % port],
                                   env=env, capture_output=True, text=True)
                got.append(tps(p.stdout))
                line += ", %s %.0f tps" % (name, got[-1])
            print(line)
        for proc in procs:
            proc.terminate()
        d, r = statistics.median(direct), statistics.median(relayed)
        line = ("pgbench -S, %d clients, %d s: direct %.0f tps, through sluice %.0f tps, ratio %.2f"
                % (args.clients, args.seconds, d, r, r / d))
        for name, (got, _) in peers.items():
            line += "; %s %.0f tps, ratio %.2f" % (name, statistics.median(got), statistics.median(got) / d)
        print(line)
    finally:
        test_services.tearDownModule()


if __name__ == "__main__":
    main()
