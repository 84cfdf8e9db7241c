"""What the container suites (test_podman, test_docker, test_swarm) make the same way: the Debian
package of this build, the one-client fleet policy on the shipped file, and for `sluice exec`
inside a container a request script and an exec policy for the test origin."""
import glob
import hashlib
import os
import subprocess


def run(cmd, timeout=900, check=True, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s\n%s" % (" ".join(cmd), p.returncode, p.stdout[-3000:],
                                                          p.stderr[-3000:]))
    return p


def package(build):
    """The Debian package of the build in `build` (cpack), made afresh."""
    for old in glob.glob(os.path.join(build, "sluice_*.deb")):
        os.unlink(old)
    run(["cpack", "-G", "DEB"], cwd=build)
    return glob.glob(os.path.join(build, "sluice_*.deb"))[0]


def one_client_policy(shipped, origin_port, gateway, token):
    """The shipped fleet policy (its text) up to [policy], then the test origin at `gateway` and one
    client, agent-1 of role agents, with `token`."""
    return shipped.split("[policy]")[0] + f"""[policy]
allow = ["origin.test:{origin_port}"]
[upstream]
allow_addresses = ["{gateway}/32"]
[upstream.resolve]
"origin.test" = "{gateway}"
[roles.agents]
[clients.agent-1]
token_sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"
role = "agents"
"""


def write_exec_files(directory, origin_port, gateway):
    """req.sh (METHOD URL through the sandbox's proxy with bash's /dev/tcp: the image has no curl)
    and exec-policy.toml (network-read, the origin allowed), readable by any user; their paths."""
    script = os.path.join(directory, "req.sh")
    with open(script, "w") as f:
        f.write('p=${http_proxy#http://}; p=${p%/}; exec 3<>/dev/tcp/${p%:*}/${p##*:}\n'
                'printf \'%s %s HTTP/1.1\\r\\nHost: origin.test:' + str(origin_port) +
                '\\r\\nContent-Length: 0\\r\\nConnection: close\\r\\n\\r\\n\' "$1" "$2" >&3\nhead -1 <&3\n')
    policy = os.path.join(directory, "exec-policy.toml")
    with open(policy, "w") as f:
        f.write('[skills.default]\ndefault_profile = "network-read"\nallow_domains = ["origin.test:%d"]\n'
                '[upstream]\nallow_addresses = ["%s/32"]\n[upstream.resolve]\n"origin.test" = "%s"\n'
                % (origin_port, gateway, gateway))
    for p in (script, policy):
        os.chmod(p, 0o644)
    return script, policy
