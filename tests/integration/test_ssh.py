"""Git over SSH inside `sluice exec`, with the user's key never inside: real OpenSSH (sshd with
git-shell on a test host at 198.18.0.2, ssh and git in the sandbox) and the caller's ssh-agent
outside, as root and as 65534.

What passes: clone (scp-like and ssh:// with another port), fetch, ls-remote and archive --remote
under network-read; push under publish; OpenSSH without the view's configuration (`ssh -F FILE`),
against the view's /etc/ssh/ssh_known_hosts, with the host's own entries kept for other hosts. What
is refused, with the reason on the client's stderr: a push under network-read, a repository outside
the rule's paths, a shell, a pty, other commands, a command with something smuggled after the
repository, sftp and scp, forwarding (-W, -R), an unknown or changed server key (nothing of the
login is sent). The agent's socket is never in the view."""
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

import test_exec as base
from git_sshd import GitSshd, agent_with_key
from netns import TestHost
from harness import log_records

M = {}
USER = "sluicegit"


def setUpModule():
    if os.geteuid() != 0:
        raise unittest.SkipTest("the SSH suite runs sshd in a network namespace and needs root")
    d = M["tmp"] = tempfile.mkdtemp(prefix="sluice-ssh-test-")
    os.chmod(d, 0o755)
    host = M["host"] = TestHost()
    # sshd on 22 and 2222 of the test host, with its own host key.
    sshd = M["sshd"] = GitSshd(d, USER, [("198.18.0.2", 22), ("198.18.0.2", 2222)], netns=host)
    M["git_home"] = sshd.home
    M["user_key"] = sshd.user_key
    M["host_pub"] = sshd.host_pub
    M["wrong_pin"] = sshd.wrong_pin
    M["host_pub_rsa"] = sshd.host_pub_rsa
    M["sshd_log"] = sshd.log
    M["policy"] = os.path.join(d, "policy.toml")
    with open(M["policy"], "w") as f:
        f.write(f"""
[skills.default]
default_profile = "network-read"
escalations = ["publish"]
ssh = [{{ host = "git.test", paths = ["org/*"], user = "{USER}" }}, {{ host = "git.test", port = 2222, user = "{USER}" }}]

[skills.keyfile]
default_profile = "network-read"

[[skills.keyfile.ssh]]
host = "git.test"
paths = ["org/repo.git"]
user = "{USER}"
identity = "file:KEYFILE"
host_key = "{M['host_pub']}"

[skills.plain]
default_profile = "network-read"
allow_domains = ["git.test:2222"]

[skills.rsapin]
default_profile = "network-read"
ssh = [{{ host = "git.test", user = "{USER}", host_key = "{M['host_pub_rsa']}" }}]

[skills.badpin]
default_profile = "network-read"
ssh = [{{ host = "git.test", user = "{USER}", host_key = "{M['wrong_pin']}" }}]

[timeouts]
header_read = "5s"  # the SSH handshake's deadline too (test_stalled_key_exchange_and_oversized_packet)

[upstream]
allow_addresses = ["198.18.0.0/15"]

[upstream.resolve]
"git.test" = "198.18.0.2"
""")


def tearDownModule():
    if "sshd" in M:
        M["sshd"].close()
    if "host" in M:
        M["host"].close()
    if "tmp" in M:
        shutil.rmtree(M["tmp"], ignore_errors=True)


class SshAsRoot(base.ExecCase):

    def setUp(self):
        super().setUp()
        uid = self.user if self.user is not None else 0
        # The caller's own files: its key (for the agent and the key-file skill), its known_hosts.
        # Outside the workspace, as ~/.ssh and the agent's socket are: nothing of them is in the view.
        self.keys = tempfile.mkdtemp(dir=M["tmp"])
        os.chmod(self.keys, 0o700)
        self.key = os.path.join(self.keys, "id")
        shutil.copy(M["user_key"], self.key)
        os.chmod(self.key, 0o600)
        ssh_dir = os.path.join(self.home, ".ssh")
        os.makedirs(ssh_dir)
        with open(os.path.join(ssh_dir, "known_hosts"), "w") as f:
            f.write(f"git.test {M['host_pub']}\n[git.test]:2222 {M['host_pub']}\n")
        with open(M["policy"]) as f:
            text = f.read().replace("KEYFILE", self.key)
        self.policy = os.path.join(self.keys, "policy.toml")
        with open(self.policy, "w") as f:
            f.write(text)
        for p in (self.keys, self.key, ssh_dir, os.path.join(ssh_dir, "known_hosts"), self.policy):
            os.chown(p, uid, uid)
        os.chmod(self.policy, 0o644)
        # The caller's agent, outside the sandbox, holding the key (ssh-agent serves its own user).
        self.agent_sock = os.path.join(self.keys, "agent.sock")
        self.agent = agent_with_key(self.prefix(), self.agent_sock, self.key)

    def tearDown(self):
        self.agent.kill()
        self.agent.wait()
        shutil.rmtree(self.keys, ignore_errors=True)
        super().tearDown()

    def sx(self, *args, env=None, policy=True, timeout=90, cwd=None, wrap=()):
        cmd = list(wrap) + self.prefix() + [base.SLUICE, "exec", "--policy", self.policy] + list(args)
        e = self.env(dict({"SSH_AUTH_SOCK": self.agent_sock}, **(env or {})))
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e, cwd=cwd or self.work) as p:
            try:
                out, err = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired as t:
                # Before the kill: where sluice's threads and the sandbox's processes are.
                # Kernel threads left out: they said nothing and pushed the rest out of CI's excerpt.
                rows = subprocess.run(["ps", "-eo", "pid,ppid,stat,wchan:24,args", "--forest"],
                                      capture_output=True, text=True).stdout.splitlines()
                where = "\n".join(r[:200] for r in rows if r.split()[1:2] not in (["0"], ["2"])
                                   or "PID" in r.split()[:1]) + "\n"
                with open(M["sshd_log"], errors="replace") as f:
                    where += "\nsshd's log, the end:\n" + "".join(f.readlines()[-40:])
                if shutil.which("gdb"):  # last: the end of a long report is what CI keeps
                    bt = subprocess.run(["gdb", "-p", str(p.pid), "-batch", "-ex", "thread apply all bt 16"],
                                        capture_output=True, text=True, timeout=60).stdout
                    where += "\nsluice's threads:\n" + "\n".join(
                        l[:200] for l in bt.splitlines() if l.startswith(("Thread", "#")))
                p.kill()
                out, err = p.communicate()
                raise subprocess.TimeoutExpired(cmd, timeout, out, err + b"\n" + where.encode()) from t
            return subprocess.CompletedProcess(cmd, p.returncode, out, err)

    def sh(self, script, *extra, env=None, wrap=()):
        summary = os.path.join(self.work, "summary.json")
        log = os.path.join(self.work, "access.log")
        if os.path.exists(log):
            os.unlink(log)
        def read_log():
            if not os.path.exists(log):
                return []
            with open(log) as f:
                return log_records(f)
        try:
            p = self.sx(*extra, "--json-summary", summary, "--access-log", log, "--", "sh", "-c",
                        "export GIT_TERMINAL_PROMPT=0; " + script, env=env, wrap=wrap)
        except subprocess.TimeoutExpired as e:
            # Which step hung, and what the gateway had logged by then.
            # The access log first: a long report is cut in the middle when CI shows it.
            self.fail(f"timed out after {e.timeout} s\naccess log:\n" +
                      "\n".join(json.dumps(l) for l in read_log()) +
                      f"\nstderr:\n{(e.stderr or b'').decode(errors='replace')}")
        lines = read_log()
        return p, [l for l in lines if l.get("protocol") == "ssh"]

    def test_fetches_under_network_read(self):
        script = (f"set -ex; git clone -q {USER}@git.test:org/repo.git /tmp/c; cat /tmp/c/README; "
                  "git -C /tmp/c fetch -q origin; "
                  f"git ls-remote {USER}@git.test:org/repo.git | grep -c refs/heads/main; "
                  f"git archive --remote={USER}@git.test:org/repo.git HEAD README | tar -xO README; "
                  f"git clone -q ssh://{USER}@git.test:2222/~/org/repo.git /tmp/d; cat /tmp/d/README")
        p, log = self.sh(script)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(p.stdout.decode(), "hello over ssh\n1\nhello over ssh\nhello over ssh\n")
        self.assertTrue(all(l["decision"] == "allow" for l in log), log)
        methods = sorted({l["method"] for l in log})
        self.assertEqual(methods, ["git-upload-archive", "git-upload-pack"], log)
        first = log[0]
        self.assertEqual((first["host"], first["port"], first["path"], first["scheme"], first["ssh_user"]),
                         ("git.test", 22, "org/repo.git", "ssh", USER))
        self.assertEqual(first["exit_status"], 0)
        self.assertGreater(first["bytes_out"], 100)
        self.assertEqual(log[-1]["port"], 2222)

    def test_a_large_clone_arrives_whole(self):
        metrics = os.path.join(self.work, "metrics")
        os.makedirs(metrics)
        os.chmod(metrics, 0o777)
        p, log = self.sh(f"set -e; git clone -q {USER}@git.test:org/large.git /tmp/l; "
                         "git -C /tmp/l fsck --no-progress --strict; wc -c < /tmp/l/blob",
                         "--metrics-textfile", metrics)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(p.stdout.decode().split()[-1], str(12 * 1024 * 1024))
        self.assertEqual([(l["decision"], l["exit_status"]) for l in log], [("allow", 0)])
        self.assertGreater(log[0]["bytes_out"], 12 * 1024 * 1024)
        # The same metrics families as HTTP, told apart by protocol.
        with open(os.path.join(metrics, "sluice_exec.prom")) as f:
            text = f.read()
        self.assertIn('sluice_requests_total{decision="allow",method="git-upload-pack",profile="network-read",'
                      'protocol="ssh",reason="allowed"} 1', text)
        self.assertIn('protocol="ssh",reason="allowed",rule="ssh://git.test org/*",skill="default"} 1', text)

    def test_push_needs_publish(self):
        script = (f"set -e; git clone -q {USER}@git.test:org/push.git /tmp/w; cd /tmp/w; echo more >> README; "
                  "git -c user.name=t -c user.email=t@t commit -qam more; git push -q origin HEAD:main")
        p, log = self.sh(script)
        self.assertNotEqual(p.returncode, 0)
        err = p.stderr.decode()
        self.assertIn("git_push_refused", err)
        self.assertIn("publish", err)
        self.assertEqual([l["reason"] for l in log if l["method"] == "git-receive-pack"], ["git_push_refused"])
        p, log = self.sh(script, "--sandbox-profile", "publish", "--confirm-external-side-effects")
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        pushed = [l for l in log if l["method"] == "git-receive-pack"]
        self.assertEqual([(l["decision"], l["exit_status"]) for l in pushed], [("allow", 0)])
        self.assertGreater(pushed[0]["bytes_in"], 0)

    def test_repository_outside_the_rule(self):
        p, log = self.sh(f"git ls-remote {USER}@git.test:other/secret.git")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("ssh_repository_not_allowed", p.stderr.decode())
        self.assertEqual([l["reason"] for l in log], ["ssh_repository_not_allowed"])

    def test_everything_but_git_is_refused(self):
        rows = {
            "shell": (f"ssh {USER}@git.test", "ssh_command_refused"),
            "pty": (f"ssh -tt {USER}@git.test", "ssh_command_refused"),
            "command": (f"ssh {USER}@git.test id", "ssh_command_refused"),
            "smuggled": (f"ssh {USER}@git.test \"git-upload-pack 'org/repo.git'; id\"", "ssh_bad_repository"),
            "option": (f"ssh {USER}@git.test \"git-upload-pack '--help'\"", "ssh_bad_repository"),
            "sftp": (f"echo ls | sftp -b - {USER}@git.test", "ssh_command_refused"),
            "scp": (f"scp -O {USER}@git.test:org/repo.git/HEAD /tmp/x", "ssh_command_refused"),
            "stdio-forward": (f"ssh -W 127.0.0.1:22 {USER}@git.test", "ssh_forwarding_refused"),
            "remote-forward": (f"ssh -o ExitOnForwardFailure=yes -R 0:127.0.0.1:80 {USER}@git.test "
                               "\"git-upload-pack 'org/repo.git'\" </dev/null", "ssh_forwarding_refused"),
        }
        before = os.path.getsize(M["sshd_log"])
        for name, (cmd, reason) in rows.items():
            with self.subTest(name):
                p, log = self.sh(f"{cmd} </dev/null; echo status=$?")
                out = p.stdout.decode()
                self.assertRegex(out, r"status=[1-9]", (out, p.stderr.decode()))
                if reason:
                    self.assertIn(reason, p.stderr.decode())
                    self.assertTrue(log and all(l["decision"] == "deny" for l in log), log)
                    self.assertEqual(log[0]["reason"], reason)
        # Nothing of these reached the server as a login of the user.
        with open(M["sshd_log"]) as f:
            f.seek(before)
            self.assertNotIn("Accepted publickey", f.read())

    def test_nothing_of_the_key_is_inside(self):
        # After a fetch (the relay has used the agent and seen the server's key): no agent socket,
        # no key, not the server's real key, in the environment, /proc or any file the view shows.
        with open(self.key) as f:
            secret = f.read().split("\n")[1][:40]
        real = M["host_pub"].split()[1]
        p, log = self.sh(f"git ls-remote -q {USER}@git.test:org/repo.git >/dev/null; echo fetched=$?; "
                         "echo sock=${SSH_AUTH_SOCK:-none}; "
                         f"ls {self.agent_sock} {self.key} 2>&1 | grep -c 'No such file'; "
                         f"grep -rlsF -e '{secret}' -e '{real}' /proc/[0-9]*/environ /.sluice /etc/ssh $HOME /tmp "
                         "| head -3; echo searched; "
                         "grep -c '^GlobalKnownHostsFile /.sluice/known_hosts' /etc/ssh/ssh_config; "
                         "ssh -G git.test | grep -i '^forwardagent'")
        out = p.stdout.decode()
        self.assertIn("fetched=0", out, p.stderr.decode())
        self.assertIn("sock=none\n2\nsearched\n1\nforwardagent no\n", out)
        self.assertEqual([l["decision"] for l in log], ["allow"])

    def test_ssh_without_the_views_configuration(self):
        # `ssh -F FILE` reads no system configuration, so not the view's ssh_config either: OpenSSH's
        # default global known-hosts file, /etc/ssh/ssh_known_hosts, holds the gateway's key too (where
        # the host has none, as here, the view makes one). A host alias of the -F file's resolves to
        # git.test, whose key is the one checked.
        script = ("set -e; printf 'Host gt\\n  HostName git.test\\n  User %s\\n' " + USER + " > /tmp/config; "
                  "GIT_SSH_COMMAND='ssh -F /tmp/config -o BatchMode=yes' git clone -q gt:org/repo.git /tmp/c; "
                  "cat /tmp/c/README; "
                  "GIT_SSH_COMMAND='ssh -F /dev/null -o BatchMode=yes' "
                  f"git ls-remote ssh://{USER}@git.test:2222/~/org/repo.git | grep -c refs/heads/main; "
                  "grep -c '^git.test ssh-ed25519 ' /etc/ssh/ssh_known_hosts; "
                  "touch /etc/ssh/x 2>/dev/null || echo read-only; "
                  "wc -c < /etc/ssh/ssh_host_ed25519_key")
        p, log = self.sh(script)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(p.stdout.decode(), "hello over ssh\n1\n1\nread-only\n0\n")
        self.assertEqual([(l["decision"], l["port"]) for l in log], [("allow", 22), ("allow", 2222)])

    def test_host_known_hosts_kept_but_not_for_served_hosts(self):
        # A host whose /etc/ssh/ssh_known_hosts lists git.test with the server's real key (and other
        # hosts): inside, git.test's entry is the gateway's, so that `ssh -F /dev/null` does not find
        # the key changed; the other hosts' entries stay. The host's /etc/ssh is a directory of this
        # test's, bound in a mount namespace of sluice's own.
        etc_ssh = tempfile.mkdtemp(dir=M["tmp"])
        os.chmod(etc_ssh, 0o755)
        shutil.copy("/etc/ssh/ssh_config", etc_ssh)
        other = "other.test " + M["host_pub"]
        with open(os.path.join(etc_ssh, "ssh_known_hosts"), "w") as f:
            f.write(f"git.test,alias.test {M['host_pub']}\n{other}\n")
        for name in ("ssh_config", "ssh_known_hosts"):
            os.chmod(os.path.join(etc_ssh, name), 0o644)
        wrap = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                'mount --bind "$0" /etc/ssh && exec "$@"', etc_ssh]
        script = ("GIT_SSH_COMMAND='ssh -F /dev/null -o BatchMode=yes' "
                  f"git ls-remote {USER}@git.test:org/repo.git | grep -c refs/heads/main; "
                  "cut -d' ' -f1 /etc/ssh/ssh_known_hosts | grep -v '^#' | sort")
        try:
            p, log = self.sh(script, wrap=wrap)
        finally:
            shutil.rmtree(etc_ssh, ignore_errors=True)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(p.stdout.decode(), "1\n[git.test]:2222\nalias.test\ngit.test\nother.test\n",
                         p.stderr.decode())
        self.assertEqual([l["decision"] for l in log], ["allow"])

    def test_stalled_key_exchange_and_oversized_packet(self):
        probe = os.path.join(self.work, "kex.py")
        with open(probe, "w") as f:
            f.write("import socket, struct, sys, time\n"
                    "s = socket.create_connection(('git.test', 22), timeout=20)\n"
                    "banner = s.recv(256)\n"
                    "s.sendall(b'SSH-2.0-stall\\r\\n')\n"
                    "if sys.argv[1] == 'big':\n"
                    "    s.sendall(struct.pack('>I', 0x7fffff00) + b'\\x06' + b'x' * 4096)\n"
                    "t = time.monotonic()\n"
                    "try:\n"
                    "    while s.recv(4096): pass\n"
                    "except ConnectionResetError: pass  # closed with our bytes unread\n"
                    "print(sys.argv[1], banner.startswith(b'SSH-2.0-'), 'closed')\n")
        os.chmod(probe, 0o644)
        p, log = self.sh(f"/usr/bin/python3 {probe} big; /usr/bin/python3 {probe} stall")
        self.assertEqual(p.stdout.decode(), "big True closed\nstall True closed\n", p.stderr.decode())
        self.assertEqual([l["reason"] for l in log], ["ssh_handshake_failed", "ssh_handshake_timeout"])

    def test_local_forwarding_gets_nothing(self):
        probe = os.path.join(self.work, "fwd.py")
        with open(probe, "w") as f:
            f.write("import socket\n"
                    "s = socket.create_connection(('127.0.0.1', 2001), timeout=20)\n"
                    "print('forwarded', repr(s.recv(100)))\n")
        os.chmod(probe, 0o644)
        p, log = self.sh(f"ssh -f -N -L 2001:127.0.0.1:22 {USER}@git.test </dev/null; /usr/bin/python3 {probe}")
        self.assertIn("forwarded b''", p.stdout.decode(), p.stderr.decode())
        self.assertEqual([(l["method"], l["reason"]) for l in log], [("forward", "ssh_forwarding_refused")])

    def test_a_port_without_ssh_rule_closes_at_once(self):
        # Captured (an allow entry names the port) but no ssh entry: sluice cannot judge SSH there,
        # and closes at once with the reason rather than leave the client waiting for a banner.
        probe = os.path.join(self.work, "raw.py")
        with open(probe, "w") as f:
            f.write("import socket, sys\n"
                    "s = socket.create_connection(('git.test', 2222), timeout=10)\n"
                    "s.sendall(sys.argv[1].encode() + b'\\r\\n')\n"
                    "data = b''\n"
                    "while True:\n"
                    "    b = s.recv(4096)\n"
                    "    if not b: break\n"
                    "    data += b\n"
                    "print('closed', data.split(b'\\r\\n')[0].decode())\n")
        os.chmod(probe, 0o644)
        p, _ = self.sh(f"ssh -p 2222 -o ConnectTimeout=10 {USER}@git.test true </dev/null; echo status=$?; "
                       f"/usr/bin/python3 {probe} 'SSH-2.0-OpenSSH_9.2p1 Debian-2'; "
                       f"/usr/bin/python3 {probe} 'HELO mail.example'", "--skill", "plain")
        out = p.stdout.decode()
        self.assertIn("status=255", out, p.stderr.decode())
        # A banner, or any line that is no request: 400 naming non_http_protocol, and closed.
        self.assertEqual(out.count("closed HTTP/1.1 400"), 2, (out, p.stderr.decode()))
        self.assertIn("non_http_protocol", p.stderr.decode())

    def test_key_file_and_pinned_host_key(self):
        p, log = self.sh(f"git ls-remote {USER}@git.test:org/repo.git | grep -c refs/heads/main",
                         "--skill", "keyfile", env={"SSH_AUTH_SOCK": ""})
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(p.stdout, b"1\n")
        # An RSA pin: the server is asked for its RSA key (signed with SHA-2), which matches.
        p, log = self.sh(f"git ls-remote {USER}@git.test:org/repo.git | grep -c refs/heads/main", "--skill", "rsapin")
        self.assertEqual(p.stdout, b"1\n", p.stderr.decode())
        p, log = self.sh(f"git ls-remote {USER}@git.test:org/repo.git", "--skill", "badpin")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("ssh_host_key_changed", p.stderr.decode())
        self.assertEqual([l["reason"] for l in log], ["ssh_host_key_changed"])

    def test_unknown_server_key_sends_nothing(self):
        os.unlink(os.path.join(self.home, ".ssh", "known_hosts"))
        before = os.path.getsize(M["sshd_log"])
        p, log = self.sh(f"git ls-remote {USER}@git.test:org/repo.git")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("ssh_host_key_unknown", p.stderr.decode())
        self.assertIn("known_hosts", p.stderr.decode())
        with open(M["sshd_log"]) as f:
            f.seek(before)
            self.assertNotIn("Accepted", f.read())


class SshAsNobody(SshAsRoot):
    user = 65534


if __name__ == "__main__":
    unittest.main()
