#!/usr/bin/python3
"""Git over SSH through sluice against the same sshd directly, side by side in one run (issue 38's
benchmark). A bare repository of about 50 MB of incompressible blobs on a test host at 198.18.0.2
(OpenSSH's sshd with git-shell, test_ssh.py's set-up); each round clones it
- directly: git with OpenSSH from this namespace, the user's key in an ssh-agent;
- through sluice: the same clone inside `sluice exec` (network-read), sluice logging in upstream with
  the same agent.
Both clone into a tmpfs (/dev/shm directly, the sandbox's private /tmp through sluice), and each
time is taken around `git clone` alone (inside the sandbox for sluice: its start-up is not counted).
Prints the median of each and the ratio of throughput, sluice to direct.

usage (root): tests/bench/ssh_clone.py [--repeat 5] [--megabytes 50] [--binary PATH]"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../integration"))
import test_ssh  # noqa: E402
from harness import run  # noqa: E402

M = test_ssh.M
USER = test_ssh.USER


def make_big_repo(megabytes):
    home = M["git_home"]
    src = tempfile.mkdtemp(dir=M["tmp"])
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    run(git + ["init", "-q", src])
    for i in range(megabytes):
        with open(os.path.join(src, "blob%03d" % i), "wb") as f:
            f.write(os.urandom(1024 * 1024))
    run(git + ["-C", src, "add", "."])
    run(git + ["-C", src, "commit", "-qm", "big"])
    dest = os.path.join(home, "org", "big.git")
    run(["git", "clone", "-q", "--bare", src, dest])
    run(["git", "-C", dest, "repack", "-adq"])
    run(["chown", "-R", USER, dest])
    shutil.rmtree(src)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--megabytes", type=int, default=50)
    ap.add_argument("--binary", default=os.environ.get("SLUICE_BIN", os.path.join(HERE, "../../build/default/sluice")))
    args = ap.parse_args()
    os.environ["SLUICE_BIN"] = os.path.abspath(args.binary)
    test_ssh.setUpModule()
    agent = None
    try:
        make_big_repo(args.megabytes)
        d = tempfile.mkdtemp(dir=M["tmp"])
        key = os.path.join(d, "id")
        shutil.copy(M["user_key"], key)
        os.chmod(key, 0o600)
        known = os.path.join(d, "known_hosts")
        with open(known, "w") as f:
            f.write(f"git.test {M['host_pub']}\n")
        sock = os.path.join(d, "agent.sock")
        agent = subprocess.Popen(["ssh-agent", "-D", "-a", sock], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not os.path.exists(sock):
            time.sleep(0.05)
        env = dict(os.environ, SSH_AUTH_SOCK=sock, HOME=d)
        run(["ssh-add", "-q", key], env=env)
        home = os.path.join(d, "home")
        os.makedirs(os.path.join(home, ".ssh"))
        shutil.copy(known, os.path.join(home, ".ssh", "known_hosts"))
        policy = os.path.join(d, "policy.toml")
        with open(M["policy"]) as f:
            text = f.read()
        with open(policy, "w") as f:
            f.write(text)
        direct_ssh = (f"ssh -o UserKnownHostsFile={known} -o GlobalKnownHostsFile=/dev/null -o HostKeyAlias=git.test "
                      "-o StrictHostKeyChecking=yes")
        timer = ('s=$(date +%s%N); git clone -q "$1" "$2" && e=$(date +%s%N) && echo $(( (e - s) / 1000 )) '
                 '&& du -sk "$2" | cut -f1')
        direct, through = [], []
        size_kib = 0
        for _ in range(args.repeat):
            out = tempfile.mkdtemp(dir="/dev/shm")
            p = subprocess.run(["sh", "-c", timer, "sh", f"{USER}@198.18.0.2:org/big.git", out + "/c"],
                               env=dict(env, GIT_SSH_COMMAND=direct_ssh), capture_output=True, text=True)
            shutil.rmtree(out)
            if p.returncode != 0:
                raise SystemExit("direct clone failed: " + p.stderr)
            us, kib = p.stdout.split()
            direct.append(int(us) / 1e6)
            size_kib = int(kib)
            log = os.path.join(d, "access.log")
            p = subprocess.run([args.binary, "exec", "--policy", policy, "--access-log", log, "--", "sh", "-c", timer, "sh",
                                f"{USER}@git.test:org/big.git", "/tmp/c"],
                               env={"PATH": "/usr/bin:/bin", "HOME": home, "SSH_AUTH_SOCK": sock, "LANG": "C.UTF-8"},
                               capture_output=True, text=True, cwd=d)
            if p.returncode != 0:
                with open(log) as f:
                    raise SystemExit("clone through sluice failed: " + p.stderr + f.read())
            through.append(int(p.stdout.split()[0]) / 1e6)
        md, mt = statistics.median(direct), statistics.median(through)
        mb = size_kib / 1024
        print(f"git clone over SSH of {args.megabytes} MB of random blobs ({mb:.0f} MB on disk with the "
              f"checkout), median of {args.repeat}")
        print(f"{'path':<16}{'seconds':>10}{'MB/s':>10}{'of direct':>12}")
        print(f"{'direct':<16}{md:>10.3f}{args.megabytes / md:>10.1f}{1.0:>12.2f}")
        print(f"{'through sluice':<16}{mt:>10.3f}{args.megabytes / mt:>10.1f}{md / mt:>12.2f}")
        print("all rounds (s): direct " + " ".join(f"{x:.3f}" for x in direct) +
              "; sluice " + " ".join(f"{x:.3f}" for x in through))
    finally:
        if agent:
            agent.kill()
            agent.wait()
        test_ssh.tearDownModule()


if __name__ == "__main__":
    main()
