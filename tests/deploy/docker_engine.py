"""Docker Engine for the deploy tests: Debian's dockerd (docker.io), started by the test with a
configuration of its own and stopped after it.

Everything Docker makes is in 198.19.0.0/16 (RFC 2544 benchmarking range, like every other test
host here): the default bridge at 198.19.0.1/24, local networks from 198.19.64.0/18, swarm networks
from 198.19.128.0/17. Its data root (/var/lib/sluice-test-docker: the images, kept between runs as
a cache) and its socket are its own, apart from any Docker already on the machine.

Docker adds iptables chains of its own. Where it turns IP forwarding on itself, it also sets the
FORWARD policy to DROP; the tests' hosts (network namespaces over veth pairs, podman's bridges) are
reached from this machine itself (INPUT/OUTPUT), not forwarded, so they work either way, and the
policy found before dockerd started is put back when it stops."""
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import time

from container_fixtures import run

DOCKERD = "/usr/sbin/dockerd"
DOCKER = "/usr/bin/docker"  # Debian's client, of the daemon's version (not another one on PATH)
SOCKET = "/run/sluice-test-docker.sock"
PIDFILE = "/run/sluice-test-docker.pid"
DATA_ROOT = "/var/lib/sluice-test-docker"
EXEC_ROOT = "/run/sluice-test-docker"
RANGE = "198.19.0.0/16"
BRIDGE_IP = "198.19.0.1"
CONFIG = {
    "bip": BRIDGE_IP + "/24",
    "default-address-pools": [{"base": "198.19.64.0/18", "size": 24}],
    "data-root": DATA_ROOT,
    "exec-root": EXEC_ROOT,
    "pidfile": PIDFILE,
    "hosts": ["unix://" + SOCKET],
    # Every container this daemon runs, swarm tasks included (a service cannot ask for it).
    "no-new-privileges": True,
    "log-driver": "json-file",
}


class HostOrigin:
    """The test origin (tests/integration/origin.py) on this machine at `address`, for containers."""

    def __init__(self, address, port):
        self.proc = subprocess.Popen(["/usr/bin/python3", os.path.join(os.path.dirname(__file__), "..", "integration",
                                                                       "origin.py"), str(port)],
                                     env=dict(os.environ, ORIGIN_HOST=address), stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            self.stop()
            raise AssertionError("the test origin did not start on %s:%d" % (address, port))

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()


def forward_policy():
    for line in run(["iptables", "-S", "FORWARD"]).stdout.splitlines():
        if line.startswith("-P FORWARD "):
            return line.split()[2]
    return None


class Engine:
    def __init__(self, workdir):
        for tool in (DOCKERD, DOCKER, "iptables"):
            if not shutil.which(tool):
                raise AssertionError("%s is not installed (scripts/install-deps.sh installs docker.io)" % tool)
        self.workdir = workdir
        self.env = dict(os.environ, DOCKER_HOST="unix://" + SOCKET)
        self.proc = None
        self._stop_leftover()
        others = run(["pidof", "dockerd"], check=False).stdout.strip()
        if not others:
            self._clean_leftovers()
        # The range must be Docker's alone here: refuse to run where any of it is routed already,
        # except by the bridges a stopped dockerd of these tests leaves behind (removed here).
        for line in run(["ip", "-4", "route", "show"]).stdout.splitlines():
            words = line.split()
            dest = words[0]
            if dest == "default" or not ipaddress.ip_network(dest, strict=False).overlaps(ipaddress.ip_network(RANGE)):
                continue
            dev = words[words.index("dev") + 1] if "dev" in words else ""
            if not others and re.fullmatch(r"docker0|docker_gwbridge|br-[0-9a-f]{12}", dev):
                run(["ip", "link", "del", dev])
            else:
                raise AssertionError("Docker's test range %s is already routed on this machine (%s); free it "
                                     "or run the test elsewhere" % (RANGE, line))
        self.forward_before = forward_policy()
        conf = os.path.join(workdir, "daemon.json")
        with open(conf, "w") as f:
            json.dump(CONFIG, f)
        self.log_path = os.path.join(workdir, "dockerd.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([DOCKERD, "--config-file", conf], stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 60
        while self.docker(["info", "--format", "{{.ServerVersion}}"], check=False).returncode != 0:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError("dockerd did not start:\n" + self.log_tail())
            time.sleep(0.3)

    def _stop_leftover(self):
        # A dockerd of an earlier run of these tests (its pid file is ours alone) is stopped first.
        try:
            with open(PIDFILE) as f:
                pid = int(f.read().strip())
            os.kill(pid, signal.SIGTERM)
        except (OSError, ValueError):
            return
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except OSError:
                return
            time.sleep(0.2)
        os.kill(pid, signal.SIGKILL)

    @staticmethod
    def _clean_leftovers():
        """What a dockerd of these tests that was stopped may leave behind, with no dockerd running:
        the network namespaces of its overlay networks (bind mounts under its exec root) and VXLAN
        devices it made but had not moved into one yet (named vx-VNI-ID). A new overlay network with
        the same VNI fails with "error creating vxlan interface: file exists" otherwise."""
        netns = os.path.join(EXEC_ROOT, "netns")
        if os.path.isdir(netns):
            for name in os.listdir(netns):
                path = os.path.join(netns, name)
                run(["umount", path], check=False)
                try:
                    os.unlink(path)
                except OSError:
                    pass
        for line in run(["ip", "-o", "link", "show", "type", "vxlan"]).stdout.splitlines():
            dev = line.split(":")[1].strip().split("@")[0]
            if re.fullmatch(r"vx-[0-9a-f]{6}-[0-9a-z]+", dev):
                run(["ip", "link", "del", dev], check=False)

    def log_tail(self, n=4000):
        with open(self.log_path, errors="replace") as f:
            return f.read()[-n:]

    def docker(self, args, check=True, timeout=600, **kw):
        return run([DOCKER] + args, check=check, timeout=timeout, env=self.env, **kw)

    def build_image(self, tag, deb, containerfile):
        """The image from a Containerfile and the package, on the offline base that
        scripts/container-base.sh makes (cached outside the checkout), without a network."""
        root = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
        run(["bash", os.path.join(root, "scripts/container-base.sh"), deb],
            env=dict(self.env, SLUICE_ENGINE=DOCKER), timeout=1500)
        context = os.path.join(self.workdir, "image-" + tag.replace("/", "_").replace(":", "_"))
        os.makedirs(context)
        shutil.copy(containerfile, os.path.join(context, "Dockerfile"))
        shutil.copy(deb, context)
        self.docker(["build", "--network=none", "--build-arg", "APT_UPDATE=no", "-t", tag, context], timeout=900)

    def stop(self):
        if self.proc is not None:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait()
            self.proc = None
            self.log.close()
            if not run(["pidof", "dockerd"], check=False).stdout.strip():
                self._clean_leftovers()
        if self.forward_before and forward_policy() != self.forward_before:
            run(["iptables", "-P", "FORWARD", self.forward_before])
