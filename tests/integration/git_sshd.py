"""A Git host over SSH for tests: OpenSSH's sshd (Debian openssh-server) with an account whose shell
is git-shell and bare repositories under its home (org/repo.git, org/push.git, other/secret.git
and org/large.git, 12 MB), as on a forge. The user's key pair is made here; its public half is
authorized. sshd listens where it is told: in a test host's network namespace or on loopback."""
import os
import pwd
import shutil
import subprocess
import time

from harness import run


def keygen(path):
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", path])
    with open(path + ".pub") as f:
        return " ".join(f.read().split()[:2])


def agent_with_key(prefix, sock, key):
    """The caller's ssh-agent (run through `prefix`, as its user) on socket `sock`, holding `key`;
    returns its process. The socket file exists from bind(), a moment before the agent listens, so
    ssh-add is tried again while it finds no agent (exit 2), for up to 5 s."""
    agent = subprocess.Popen(prefix + ["ssh-agent", "-D", "-a", sock], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    deadline = time.time() + 5
    while True:
        p = subprocess.run(prefix + ["ssh-add", "-q", key], capture_output=True,
                           env={"SSH_AUTH_SOCK": sock, "PATH": "/usr/bin:/bin"})
        if p.returncode == 0:
            return agent
        if p.returncode != 2 or time.time() > deadline:
            agent.kill()
            agent.wait()
            raise AssertionError("ssh-add %s: %s" % (key, p.stderr.decode()))
        time.sleep(0.05)


class GitSshd:
    def __init__(self, directory, user, listen, netns=None, large=True):
        """`listen`: (address, port) pairs; `netns`: a netns.TestHost to run sshd in."""
        if not shutil.which("sshd") or not shutil.which("git-shell"):
            raise RuntimeError("the SSH tests need openssh-server and git installed")
        self.dir = directory
        self.user = user
        self.made_user = False
        self.proc = None
        home = self.home = os.path.join(directory, "git-home")
        try:
            pwd.getpwnam(user)
        except KeyError:
            run(["useradd", "--system", "--no-create-home", "--home-dir", home, "--shell", "/usr/bin/git-shell", user])
            self.made_user = True
        # '*': no password, and not locked ('!' is, and sshd then refuses every login).
        run(["usermod", "--home", home, "--password", "*", user])
        for sub in (".ssh", "org", "other"):
            os.makedirs(os.path.join(home, sub))
        src = os.path.join(directory, "src")
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
        run(git + ["init", "-q", src])
        with open(os.path.join(src, "README"), "w") as f:
            f.write("hello over ssh\n")
        run(git + ["-C", src, "add", "README"])
        run(git + ["-C", src, "commit", "-qm", "first"])
        for repo in ("org/repo.git", "org/push.git", "other/secret.git"):
            run(["git", "clone", "-q", "--bare", src, os.path.join(home, repo)])
        if large:
            # Larger than any window in flight: the end of its pack must reach the client (a relay
            # that closed with the client's last packets unread reset the connection and lost it).
            with open(os.path.join(src, "blob"), "wb") as f:
                f.write(os.urandom(12 * 1024 * 1024))
            run(git + ["-C", src, "add", "blob"])
            run(git + ["-C", src, "commit", "-qm", "large"])
            run(["git", "clone", "-q", "--bare", src, os.path.join(home, "org", "large.git")])
        shutil.rmtree(src)
        # The user's key: it stays outside (in an agent, or a file the trusted policy names).
        self.user_key = os.path.join(directory, "user_key")
        pub = keygen(self.user_key)
        with open(os.path.join(home, ".ssh", "authorized_keys"), "w") as f:
            f.write(pub + "\n")
        run(["chown", "-R", user, home])
        host_key = os.path.join(directory, "ssh_host_ed25519_key")
        self.host_pub = keygen(host_key)
        # An RSA host key too, as most servers have: a pin of it must get sshd to show it.
        rsa_key = os.path.join(directory, "ssh_host_rsa_key")
        run(["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-N", "", "-C", "", "-f", rsa_key])
        with open(rsa_key + ".pub") as f:
            self.host_pub_rsa = " ".join(f.read().split()[:2])
        self.wrong_pin = keygen(os.path.join(directory, "other_key"))  # a key the server does not have
        config = os.path.join(directory, "sshd_config")
        with open(config, "w") as f:
            f.write("".join("ListenAddress %s:%d\n" % a for a in listen) + f"""HostKey {host_key}
HostKey {rsa_key}
PidFile none
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
AllowUsers {user}
LogLevel VERBOSE
""")
        subprocess.run(["chmod", "-R", "a+rX", directory], check=True)
        for k in (host_key, rsa_key):
            os.chmod(k, 0o600)  # sshd reads it again for every connection, and refuses an open one
        os.chmod(self.user_key, 0o600)
        os.makedirs("/run/sshd", exist_ok=True)
        self.log = os.path.join(directory, "sshd.log")
        cmd = ["/usr/sbin/sshd", "-D", "-f", config, "-E", self.log]
        if netns:
            self.proc = netns.start(*cmd)
        else:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        scan = (["ip", "netns", "exec", netns.name] if netns else []) + ["ssh-keyscan", "-p", str(listen[0][1]), listen[0][0]]
        deadline = time.time() + 10
        while subprocess.run(scan, capture_output=True).returncode != 0:
            if time.time() > deadline:
                raise RuntimeError("sshd did not start: " + open(self.log).read())
            time.sleep(0.1)

    def log_size(self):
        return os.path.getsize(self.log)

    def log_since(self, offset):
        with open(self.log) as f:
            f.seek(offset)
            return f.read()

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.made_user:
            subprocess.run(["userdel", self.user], capture_output=True)
