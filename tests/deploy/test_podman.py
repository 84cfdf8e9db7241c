"""The image and the manifests on a real engine: the Debian package built into an image from
deploy/container/Containerfile on a `debian:bookworm-slim` made offline (scripts/container-base.sh:
mmdebstrap, cached outside the checkout), then run by `podman kube play` from the Deployment,
ConfigMap and Secret that `kubectl kustomize deploy/kubernetes` renders, on a podman network in
198.18.0.0/15 that this test creates. Through the pod: readiness, a client with its token allowed,
one without refused (407), a host outside the policy refused (403), the request in the container's
log with its client; inside: non-root, no capabilities, a read-only root file system; at SIGTERM
/readyz fails before the drain. And `sluice exec` inside a container of that image, as its user and
as root: with the engine's defaults (a masked /proc) doctor and exec name the cause and the fix
(125, nothing run); with `--security-opt unmask=ALL` and sluice's seccomp profile it runs: exit
status, read-only system, writable workspace, hidden home, network-read GET passed and POST refused.
Under Docker's rules for the namespace calls (applied to podman's default: Docker is not run here)
doctor and exec name the seccomp filter and sluice's profile; the profile generator's output for
those rules lets the sandbox start and keeps the rest of the filter. The CI recipe's container job
(deploy/ci/github-actions.yml) runs with podman behind `docker`."""
import base64
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

import yaml

from container_fixtures import one_client_policy, package, run, write_exec_files

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "../.."))
BUILD = os.environ.get("SLUICE_BUILD_DIR") or os.path.join(ROOT, "build/default")
SLUICE = os.environ.get("SLUICE_BIN") or os.path.join(BUILD, "sluice")
GENERATOR = os.path.join(ROOT, "deploy/container/seccomp-profile.py")
sys.path.insert(0, os.path.join(ROOT, "tests/integration"))
from origin import payload  # noqa: E402  (the bytes the test origin serves)

NETWORK = "sluice-kube-test"
SUBNET, GATEWAY, POD_IP = "198.18.60.0/24", "198.18.60.1", "198.18.60.10"
IMAGE = "localhost/sluice:test"
TOKEN = "podman-agent-token-0123456789"
# podman 4.3 on this machine: crun fails on the hybrid cgroup layout, runc works with these limits.
CONTAINERS_CONF = """[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
runtime = "runc"
"""


# Docker's default profile (moby's profiles/seccomp/default.json) allows these only to a container
# holding CAP_SYS_ADMIN, clone only without namespace flags, and refuses clone3 with ENOSYS; podman's
# default on this machine allows them all. The test applies Docker's rules for them to podman's
# default, to run a container as Docker would, with the podman it has.
DOCKER_SYS_ADMIN_ONLY = ["bpf", "clone", "clone3", "fanotify_init", "fsconfig", "fsmount", "fsopen", "fspick",
                         "lookup_dcookie", "mount", "mount_setattr", "move_mount", "open_tree", "perf_event_open",
                         "quotactl", "quotactl_fd", "setdomainname", "sethostname", "setns", "syslog", "umount",
                         "umount2", "unshare"]
CLONE_NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET


def docker_like(podman_default):
    rules = []
    for rule in podman_default["syscalls"]:
        rule = dict(rule)
        if rule["action"] == "SCMP_ACT_ALLOW" and not rule.get("includes") and not rule.get("args"):
            rule["names"] = [n for n in rule["names"] if n not in DOCKER_SYS_ADMIN_ONLY + ["pivot_root"]]
        if rule["names"]:
            rules.append(rule)
    rules += [
        {"names": DOCKER_SYS_ADMIN_ONLY, "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}},
        {"names": ["clone"], "action": "SCMP_ACT_ALLOW", "excludes": {"caps": ["CAP_SYS_ADMIN"]},
         "args": [{"index": 0, "value": CLONE_NAMESPACE_FLAGS, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]},
        {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38, "excludes": {"caps": ["CAP_SYS_ADMIN"]}},
    ]
    # Docker answers a call its profile does not list with EPERM (podman's default: ENOSYS).
    return dict(podman_default, syscalls=rules, defaultErrnoRet=1)


class PodmanKubePlay(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("rootful podman and mmdebstrap need root")
        for tool in ("podman", "mmdebstrap", "kubectl", "cpack"):
            if not shutil.which(tool):
                raise AssertionError("%s is not installed (scripts/install-deps.sh installs it)" % tool)
        cls.tmp = tempfile.TemporaryDirectory()
        conf = os.path.join(cls.tmp.name, "containers.conf")
        with open(conf, "w") as f:
            f.write(CONTAINERS_CONF)
        cls.env = dict(os.environ, CONTAINERS_CONF=conf)
        # What an earlier run may have left: its pod and its network (and so the bridge's route).
        cls.podman(["pod", "rm", "-f", "sluice-pod-0"], check=False)
        cls.podman(["network", "rm", "-f", NETWORK], check=False)
        cls.remove_volumes()
        # The subnet must be ours alone: refuse to run where it is routed already.
        routes = run(["ip", "-4", "route", "show"]).stdout
        for line in routes.splitlines():
            dest = line.split()[0]
            if dest != "default" and ipaddress.ip_network(dest, strict=False).overlaps(ipaddress.ip_network(SUBNET)):
                raise AssertionError("the test network %s is already routed on this machine (%s); free it "
                                     "or run the test elsewhere" % (SUBNET, line))
        d = cls.tmp.name
        # The package, the offline base, the image.
        deb = package(BUILD)
        run(["bash", os.path.join(ROOT, "scripts/container-base.sh"), deb], env=cls.env, timeout=1500)
        context = os.path.join(d, "image")
        os.makedirs(context)
        shutil.copy(os.path.join(ROOT, "deploy/container/Containerfile"), context)
        shutil.copy(deb, context)
        cls.podman(["build", "--network=none", "--build-arg", "APT_UPDATE=no", "-t", IMAGE, context],
                   timeout=900)
        # The manifests as a platform team renders them, with a test policy and CA.
        fleet = os.path.join(d, "fleet")
        shutil.copytree(os.path.join(ROOT, "deploy/kubernetes"), fleet)
        run([SLUICE, "ca", "init", "--cert", os.path.join(fleet, "ca.pem"), "--key", os.path.join(fleet, "ca.key")])
        cls.origin_port = 18080
        with open(os.path.join(fleet, "sluice.toml")) as f:
            policy = one_client_policy(f.read(), cls.origin_port, GATEWAY, TOKEN)
        with open(os.path.join(fleet, "sluice.toml"), "w") as f:
            f.write(policy)
        rendered = run(["kubectl", "kustomize", fleet]).stdout
        keep = []
        for o in yaml.safe_load_all(rendered):
            if not o or o["kind"] not in ("Deployment", "ConfigMap", "Secret"):
                continue
            if o["kind"] == "Secret":
                # podman 4.3 (Debian 12's) writes a Secret volume's files still base64-encoded and
                # ignores stringData; the same files go in as a ConfigMap of that name instead.
                o = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": o["metadata"],
                     "data": {k: base64.b64decode(v).decode() for k, v in o["data"].items()}}
            if o["kind"] == "Deployment":
                cls.deployment = o
                # One replica: the pod gets the test network's address. podman before 4.5 publishes
                # every containerPort on the host's own addresses (0.0.0.0:3128); the pod's address
                # on the test network is all the test needs, so the ports are not declared here.
                o["spec"]["replicas"] = 1
                c = o["spec"]["template"]["spec"]["containers"][0]
                cls.ports = {p["name"]: p["containerPort"] for p in c.pop("ports")}
                c["image"] = IMAGE
                c["imagePullPolicy"] = "Never"
                for v in o["spec"]["template"]["spec"]["volumes"]:
                    if "secret" in v:
                        v["configMap"] = {"name": v.pop("secret")["secretName"], "optional": False}
            keep.append(o)
        # For `sluice exec` inside a container: a request helper and an exec policy for the origin.
        cls.request_script, cls.exec_policy = write_exec_files(d, cls.origin_port, GATEWAY)
        # The seccomp profiles: Docker's rules, sluice's generator run on them, and the shipped one.
        with open("/usr/share/containers/seccomp.json") as f:
            cls.podman_default = json.load(f)
        cls.docker_profile = os.path.join(d, "docker-like.json")
        with open(cls.docker_profile, "w") as f:
            json.dump(docker_like(cls.podman_default), f)
        cls.generated_profile = os.path.join(d, "docker-like-sluice.json")
        with open(cls.generated_profile, "w") as f:
            f.write(run(["/usr/bin/python3", GENERATOR, cls.docker_profile]).stdout)
        cls.shipped_profile = os.path.join(ROOT, "deploy/container/seccomp.json")
        os.chmod(d, 0o755)
        cls.manifests = os.path.join(d, "play.yaml")
        with open(cls.manifests, "w") as f:
            yaml.safe_dump_all(keep, f)
        cls.podman(["network", "create", "--subnet", SUBNET, "--gateway", GATEWAY, NETWORK])
        cls.played = True
        p = cls.podman(["kube", "play", "--network", NETWORK, "--ip", POD_IP, cls.manifests], check=False)
        if p.returncode != 0:
            cls.tearDownClass()
            raise AssertionError("podman kube play failed:\n%s\n%s" % (p.stdout, p.stderr))
        try:
            cls.container = cls.find_container()
        except AssertionError:
            cls.tearDownClass()
            raise
        # The origin on the host side of the pod's network (the bridge exists once the pod runs).
        cls.origin = subprocess.Popen(["/usr/bin/python3", os.path.join(ROOT, "tests/integration/origin.py"),
                                       str(cls.origin_port)], env=dict(os.environ, ORIGIN_HOST=GATEWAY),
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if cls.origin.stdout.readline().strip() != "ready":
            cls.tearDownClass()
            raise AssertionError("the test origin did not start on %s:%d" % (GATEWAY, cls.origin_port))
        deadline = time.monotonic() + 60
        while True:
            try:
                if cls.get("http://%s:9090/readyz" % POD_IP)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                logs = cls.podman(["logs", cls.container], check=False)
                cls.tearDownClass()
                raise AssertionError("the pod did not become ready within 60 s:\n" + logs.stdout + logs.stderr)
            time.sleep(0.5)

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "origin", None):
            cls.origin.kill()
            cls.origin.wait()
            cls.origin.stdout.close()
            cls.origin = None
        if getattr(cls, "played", False):
            cls.podman(["kube", "down", cls.manifests], check=False, timeout=120)
            cls.played = False
        cls.podman(["network", "rm", "-f", NETWORK], check=False)
        cls.remove_volumes()
        if getattr(cls, "tmp", None):
            cls.tmp.cleanup()
            cls.tmp = None

    @classmethod
    def remove_volumes(cls):
        # podman 4.3 keeps a ConfigMap's volume after `kube down` and serves its old files to the
        # next `kube play`: the test's own are removed before and after.
        for name in ("sluice-policy", "sluice-ca"):
            cls.podman(["volume", "rm", "-f", name], check=False)

    @classmethod
    def podman(cls, args, check=True, timeout=300):
        return run(["podman"] + args, check=check, timeout=timeout, env=cls.env)

    @classmethod
    def find_container(cls):
        ps = json.loads(cls.podman(["ps", "-a", "--format", "json"]).stdout)
        found = [c for c in ps if c.get("Image") == IMAGE]
        if len(found) != 1:
            raise AssertionError("expected one sluice container, podman ps says: %s" % ps)
        name = found[0]["Names"][0]
        if found[0]["State"] != "running":
            logs = cls.podman(["logs", name], check=False)
            raise AssertionError("the sluice container is %s:\n%s%s" % (found[0]["State"], logs.stdout, logs.stderr))
        return name

    @staticmethod
    def get(url, proxy=None, headers=None):
        handlers = [urllib.request.ProxyHandler({"http": proxy} if proxy else {})]
        opener = urllib.request.build_opener(*handlers)
        req = urllib.request.Request(url, headers=headers or {})
        try:
            with opener.open(req, timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def proxied(self, path, token=TOKEN, host="origin.test"):
        proxy = "http://agent-1:%s@%s:3128" % (token, POD_IP) if token else "http://%s:3128" % POD_IP
        return self.get("http://%s:%d%s" % (host, self.origin_port, path), proxy)

    def test_requests_through_the_pod(self):
        self.assertEqual(self.proxied("/bytes/100"), (200, payload(100)))
        status, body = self.proxied("/bytes/100", token=None)
        self.assertEqual(status, 407, body)
        status, body = self.proxied("/bytes/100", token="wrong-token")
        self.assertEqual(status, 407, body)
        status, body = self.proxied("/bytes/100", host="elsewhere.test")
        self.assertEqual(status, 403, body)
        self.assertEqual(self.get("http://%s:9090/healthz" % POD_IP)[0], 200)
        # The access log is the container's stderr: JSON lines with the client.
        deadline = time.monotonic() + 10
        while True:
            logs = self.podman(["logs", self.container]).stderr
            lines = [x for x in (json.loads(l) for l in logs.splitlines() if l.startswith("{"))
                     if x.get("type") != "checkpoint"]  # the chain's checkpoint lines are no requests
            if any(l.get("client") == "agent-1" and l.get("path") == "/bytes/100" and l["decision"] == "allow"
                   for l in lines):
                break
            self.assertLess(time.monotonic(), deadline, logs[-3000:])
            time.sleep(0.3)
        self.assertTrue(any(l["reason"] == "proxy_auth_required" for l in lines))

    def test_the_container_is_locked_down_as_the_manifest_says(self):
        info = json.loads(self.podman(["inspect", self.container]).stdout)[0]
        self.assertTrue(info["HostConfig"]["ReadonlyRootfs"])
        self.assertEqual(self.podman(["exec", self.container, "/usr/bin/id", "-u"]).stdout.strip(), "10001")
        status = self.podman(["exec", self.container, "/bin/cat", "/proc/1/status"]).stdout
        caps = {l.split(":")[0]: l.split(":")[1].strip() for l in status.splitlines() if l.startswith("Cap")}
        self.assertEqual(caps["CapEff"], "0000000000000000", caps)
        self.assertEqual(caps["CapBnd"], "0000000000000000", caps)
        self.assertIn("NoNewPrivs:\t1", status)
        self.assertIn("Seccomp:\t2", status)  # filtered: the engine's default profile (RuntimeDefault)
        p = self.podman(["exec", self.container, "/usr/bin/touch", "/usr/bin/x"], check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("Read-only file system", p.stderr + p.stdout)

    def sandbox_in_container(self, script, *options, user="10001", network="none"):
        return self.podman(["run", "--rm", "--network", network, "--user", user, "--entrypoint", "/bin/sh"] +
                           list(options) + [IMAGE, "-c", "mkdir -p /tmp/project /tmp/home && cd /tmp/project && " + script],
                           check=False, timeout=120)

    def test_exec_in_a_container_names_the_masked_proc_and_runs_once_unmasked(self):
        # `sluice exec` inside a container (a dev container, a CI job): with the engine's defaults
        # the kernel refuses the sandbox a /proc of its own; doctor and exec say so with the fix.
        for user in ("10001", "0"):
            with self.subTest(user=user):
                p = self.sandbox_in_container("sluice doctor --json; sluice exec -- /bin/true; echo rc=$?", user=user)
                report = json.loads(p.stdout.splitlines()[0])
                self.assertFalse(report["runnerReady"], p.stdout)
                platform = [c for c in report["checks"] if c["name"] == "platform"][0]
                self.assertIn("/proc has masked paths", platform["detail"])
                self.assertIn("rc=125", p.stdout)
                self.assertIn("cause: the podman container's /proc has masked paths", p.stderr)
                self.assertIn("--security-opt unmask=ALL", p.stderr)
                # With the fix the doctor is ready and commands run, their exit status kept (here
                # and below with sluice's shipped seccomp profile in place of the engine's default).
                p = self.sandbox_in_container(
                    "sluice doctor >/dev/null && echo ready; sluice exec -- /bin/sh -c 'echo inside; exit 7'; "
                    "echo rc=$?; sluice exec -- /bin/sh -c 'touch /etc/x' 2>/dev/null; echo etc=$?; "
                    "echo secret > $HOME/.netrc 2>/dev/null; sluice exec -- /bin/sh -c 'echo w > out.txt; "
                    "test ! -e $HOME/.netrc'; echo ws=$? $(cat out.txt)",
                    "--security-opt", "unmask=ALL", "--security-opt", "seccomp=" + self.shipped_profile,
                    "-e", "HOME=/tmp/home", user=user)
                out = p.stdout
                self.assertIn("ready", out, p.stderr)
                self.assertIn("inside\nrc=7", out, p.stderr)
                self.assertIn("etc=1", out)          # the system is read-only inside
                self.assertIn("ws=0 w", out, p.stderr)  # the workspace is writable; home is hidden
                # network-read, on the test network where the origin is: a GET passes, a POST is
                # refused (the image has no curl: bash's /dev/tcp speaks to the sandbox's proxy).
                p = self.sandbox_in_container(
                    "cp /tmp/req.sh . && sluice exec --policy /tmp/policy.toml -- /bin/bash -c "
                    "'bash req.sh GET http://origin.test:%d/bytes/5; bash req.sh POST http://origin.test:%d/post'"
                    % (self.origin_port, self.origin_port),
                    "--security-opt", "unmask=ALL", "--security-opt", "seccomp=" + self.shipped_profile,
                    "-v", "%s:/tmp/req.sh:ro" % self.request_script, "-v", "%s:/tmp/policy.toml:ro" % self.exec_policy,
                    user=user, network=NETWORK)
                self.assertIn("HTTP/1.1 200 OK", p.stdout, p.stderr)
                self.assertIn("HTTP/1.1 403 Forbidden", p.stdout, p.stderr)
                self.assertIn("method_not_allowed", p.stderr)
                # offline, on the same network: the origin is not reachable at its address, the
                # container itself is (the same request outside sluice).
                p = self.sandbox_in_container(
                    "sluice exec --sandbox-profile offline -- /bin/bash -c 'exec 3<>/dev/tcp/%s/%d' 2>/dev/null; "
                    "echo offline=$?; /bin/bash -c 'exec 3<>/dev/tcp/%s/%d' && echo outside=0; "
                    "test -e /dev/net/tun || echo no-tun-device"
                    % (GATEWAY, self.origin_port, GATEWAY, self.origin_port),
                    "--security-opt", "unmask=ALL", "--security-opt", "seccomp=" + self.shipped_profile,
                    user=user, network=NETWORK)
                self.assertIn("offline=1", p.stdout, p.stderr)
                self.assertIn("outside=0", p.stdout, p.stderr)
                self.assertIn("no-tun-device", p.stdout)  # sluice needs none: its capture is loopback

    def test_exec_in_a_container_under_dockers_seccomp_rules(self):
        # Docker's default refuses unshare(CLONE_NEWUSER) to a container without CAP_SYS_ADMIN, root
        # in it included: doctor and exec name the filter and sluice's profile.
        for user in ("10001", "0"):
            with self.subTest(user=user):
                p = self.sandbox_in_container("sluice doctor --json; sluice exec -- /bin/true; echo rc=$?",
                                              "--security-opt", "unmask=ALL",
                                              "--security-opt", "seccomp=" + self.docker_profile, user=user)
                report = json.loads(p.stdout.splitlines()[0])
                self.assertFalse(report["runnerReady"], p.stdout)
                platform = [c for c in report["checks"] if c["name"] == "platform"][0]
                self.assertIn("container's seccomp filter refuses unshare(CLONE_NEWUSER)", platform["detail"])
                self.assertIn("rc=125", p.stdout)
                self.assertIn("cause: the podman container's seccomp filter refuses unshare(CLONE_NEWUSER)", p.stderr)
                self.assertIn("--security-opt seccomp=/usr/share/sluice/container/seccomp.json", p.stderr)
                self.assertEqual(len([l for l in p.stderr.splitlines() if "cause:" in l]), 1, p.stderr)
                # The generator run on Docker's rules: the sandbox starts, and the rest of the
                # filter is still the engine's (a call Docker refuses without a capability is refused).
                p = self.sandbox_in_container(
                    "sluice doctor >/dev/null && echo ready; sluice exec -- /bin/sh -c 'exit 7'; echo rc=$?; "
                    "perl -e 'my $r = syscall(308, 0, 0); print \"setns $r \", $! + 0, \"\\n\"'",  # setns(2)
                    "--security-opt", "unmask=ALL", "--security-opt", "seccomp=" + self.generated_profile, user=user)
                self.assertIn("ready", p.stdout, p.stderr)
                self.assertIn("rc=7", p.stdout, p.stderr)
                self.assertIn("setns -1 1", p.stdout, p.stderr)  # EPERM: Docker's rule, kept

    def test_the_ci_recipes_container_job(self):
        """deploy/ci/github-actions.yml's `container` job, its step as a runner runs it, with podman
        behind the `docker` it calls (podman's names for Docker's options: unmask=ALL for
        systempaths=unconfined; no AppArmor option where AppArmor is off; the container on the test
        network, where the origin is): sluice's seccomp profile from the checkout, doctor, the agent's
        command under sluice exec (GET passed, POST refused, the checkout written). With Docker's
        rules in place of the profile, the job stops at doctor, which names the filter."""
        sys.path.insert(0, os.path.join(ROOT, "tests/package"))
        import ci_job
        d = tempfile.mkdtemp(prefix="ci-", dir=self.tmp.name)
        shim = os.path.join(d, "bin")
        os.makedirs(shim)
        with open(os.path.join(shim, "docker"), "w") as f:
            f.write('#!/bin/bash\n[ "$1" = run ] || exec podman "$@"\nshift\nargs=()\n'
                    'for a in "$@"; do case "$a" in\n'
                    '  systempaths=unconfined) args+=(unmask=ALL) ;;\n'
                    '  *) args+=("$a") ;;\nesac; done\n'
                    'if [ "$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)" != Y ]; then\n'
                    '  out=(); skip=0; for a in "${args[@]}"; do\n'
                    '    if [ "$a" = --security-opt ]; then skip=1; continue; fi\n'
                    '    if [ $skip = 1 ]; then skip=0; [ "$a" = apparmor=unconfined ] || out+=(--security-opt "$a"); continue; fi\n'
                    '    out+=("$a"); done; args=("${out[@]}")\nfi\n'
                    'exec podman run --network %s "${args[@]}"\n' % NETWORK)
        os.chmod(os.path.join(shim, "docker"), 0o755)
        checkout = os.path.join(d, "checkout")
        os.makedirs(os.path.join(checkout, ".github"))
        os.makedirs(os.path.join(checkout, "ci"))
        shutil.copy(self.exec_policy, os.path.join(checkout, ".github", "sluice.toml"))
        with open(os.path.join(checkout, "ci", "agent-task.sh"), "w") as f:
            f.write("#!/bin/bash\nfor m in GET POST; do\n"
                    "  p=${http_proxy#http://}; p=${p%%/}; exec 3<>/dev/tcp/${p%%:*}/${p##*:}\n"
                    "  printf '%%s http://origin.test:%d/bytes/5 HTTP/1.1\\r\\nHost: origin.test:%d\\r\\n"
                    "Content-Length: 0\\r\\nConnection: close\\r\\n\\r\\n' $m >&3\n"
                    "  echo \"$m $(head -1 <&3)\"; exec 3<&-\ndone\necho written > agent-output.txt\n"
                    % (self.origin_port, self.origin_port))
        os.chmod(os.path.join(checkout, "ci", "agent-task.sh"), 0o755)
        recipe = os.path.join(ROOT, "deploy", "ci", "github-actions.yml")
        env = {"CONTAINERS_CONF": self.env["CONTAINERS_CONF"], "SLUICE_IMAGE": IMAGE, "HOME": d}
        path = shim + ":/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
        shutil.copy(self.shipped_profile, os.path.join(checkout, ".github", "sluice-seccomp.json"))
        steps = ci_job.run_job(recipe, "container", checkout, env=env, path=path)
        self.assertEqual([s[1] for s in steps], [0], steps)
        self.assertIn("GET HTTP/1.1 200 OK", steps[0][2], steps)
        self.assertIn("POST HTTP/1.1 403 Forbidden", steps[0][2])
        with open(os.path.join(checkout, "agent-output.txt")) as f:
            self.assertEqual(f.read(), "written\n")
        os.unlink(os.path.join(checkout, "agent-output.txt"))
        # Docker's own default in its place: the job stops at doctor, which names the filter.
        shutil.copy(self.docker_profile, os.path.join(checkout, ".github", "sluice-seccomp.json"))
        steps = ci_job.run_job(recipe, "container", checkout, env=env, path=path)
        self.assertNotEqual(steps[0][1], 0, steps)
        self.assertIn("container's seccomp filter refuses unshare(CLONE_NEWUSER)", steps[0][2] + steps[0][3])
        self.assertFalse(os.path.exists(os.path.join(checkout, "agent-output.txt")))

    def test_the_shipped_profile_is_the_generator_on_this_engines_default(self):
        out = run(["/usr/bin/python3", GENERATOR, "/usr/share/containers/seccomp.json"]).stdout
        with open(self.shipped_profile) as f:
            self.assertEqual(json.loads(out), json.load(f),
                             "deploy/container/seccomp.json is not the generator's output for this machine's "
                             "podman default; regenerate it: deploy/container/seccomp-profile.py "
                             "/usr/share/containers/seccomp.json > deploy/container/seccomp.json")
        # Against Docker's rules it adds exactly what sluice needs, unconditionally, and nothing else.
        with open(self.docker_profile) as f:
            base = json.load(f)
        with open(self.generated_profile) as f:
            made = json.load(f)
        added = made["syscalls"][-1]
        self.assertEqual(added["action"], "SCMP_ACT_ALLOW")
        self.assertNotIn("args", added)
        self.assertNotIn("includes", added)
        self.assertEqual(set(added["names"]) - {"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"},
                         {"clone", "unshare", "mount", "umount2", "pivot_root", "open_tree", "move_mount",
                          "mount_setattr"})
        rest = [dict(r, names=[n for n in r["names"] if n not in added["names"]]) for r in base["syscalls"]]
        self.assertEqual(made["syscalls"][:-1], [r for r in rest if r["names"]])
        self.assertEqual({k: v for k, v in made.items() if k != "syscalls"},
                         {k: v for k, v in base.items() if k != "syscalls"})

    def test_zz_sigterm_turns_readyz_false_before_the_drain(self):
        # Named to run last: it stops the pod, as a kubelet does at a rolling update: SIGTERM, then
        # up to terminationGracePeriodSeconds. (podman 4.3's `kube down` removes the pod at once.)
        seen = []
        stop = threading.Event()

        def watch():
            while not stop.is_set():
                try:
                    seen.append(self.get("http://%s:9090/readyz" % POD_IP)[0])
                except OSError:
                    seen.append(None)
                time.sleep(0.1)
        t = threading.Thread(target=watch, daemon=True)
        t.start()
        time.sleep(0.5)
        start = time.monotonic()
        grace = str(self.deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"])
        self.podman(["pod", "stop", "--time", grace, "sluice-pod-0"], timeout=120)
        stop.set()
        t.join()
        took = time.monotonic() - start
        self.assertEqual(seen[0], 200)
        self.assertIn(503, seen, seen)  # not ready while still answering: the drain delay
        self.assertGreater(took, 3, "the pod stopped before its drain_delay (5 s in the shipped file)")


if __name__ == "__main__":
    unittest.main()
