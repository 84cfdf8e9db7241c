"""A test host in its own network namespace, reached over a veth pair: 198.18.0.1 on this side,
198.18.0.2 inside (RFC 2544 benchmarking range). Needs root; used by the exec and bench suites."""
import os
import re
import subprocess


def _owner_alive(pid):
    """Whether the test process that made a host (its pid is in the names) still runs: a pid in use
    by anything but a Python test runner counts as gone."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return b"python" in f.read()
    except OSError:
        return False


def _remove_orphans():
    """Removes test hosts this module made in processes that are gone (a run killed before its
    tearDown, e.g. by a timeout): their route would make every later test host fail. Hosts of live
    test processes and anything not named like ours are left alone."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    for name in names:
        m = re.fullmatch(r"sluice-t(\d+)", name)
        if m and not _owner_alive(int(m.group(1))):
            subprocess.run(["ip", "link", "del", "sl%dh" % (int(m.group(1)) % 100000)], capture_output=True)
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


class TestHost:
    def __init__(self, name=None):
        self.name = name or "sluice-t%d" % os.getpid()
        self.host_if = "sl%dh" % (os.getpid() % 100000)
        self.peer_if = "sl%dp" % (os.getpid() % 100000)
        self.address = "198.18.0.2"
        self.procs = []
        # Fail clearly, not with wrong results, when another test host (or anything else) already
        # routes the range: connections would reach the wrong machine.
        _remove_orphans()
        routes = subprocess.run(["ip", "-4", "route", "show", "to", "match", "198.18.0.2"],
                                capture_output=True, text=True).stdout
        if any(line.split()[0] != "default" for line in routes.splitlines() if line.strip()):
            raise RuntimeError("198.18.0.0/24 is already routed on this machine (%s); the test host "
                               "needs it: remove the stale route or namespace (ip netns list) and "
                               "run again" % routes.strip().replace("\n", "; "))
        self._ip("netns", "add", self.name)
        self._ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.peer_if)
        self._ip("link", "set", self.peer_if, "netns", self.name)
        self._ip("addr", "add", "198.18.0.1/24", "dev", self.host_if)
        self._ip("link", "set", self.host_if, "up")
        self.run("ip", "addr", "add", "198.18.0.2/24", "dev", self.peer_if)
        self.run("ip", "link", "set", self.peer_if, "up")
        self.run("ip", "link", "set", "lo", "up")

    def _ip(self, *args):
        subprocess.run(["ip"] + list(args), check=True, capture_output=True)

    def run(self, *cmd):
        return subprocess.run(["ip", "netns", "exec", self.name] + list(cmd), check=True,
                              capture_output=True)

    def start(self, *cmd, env=None):
        p = subprocess.Popen(["ip", "netns", "exec", self.name] + list(cmd), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env)
        self.procs.append(p)
        return p

    def close(self):
        # SIGTERM first: a server with workers (nginx) takes them down with it, where SIGKILL to
        # its master would leave them running, orphaned, in a namespace of no use.
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            p.stdout.close()
            p.stderr.close()
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
