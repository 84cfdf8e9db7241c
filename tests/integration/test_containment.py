"""Containment of `sluice exec`: every route out that does not pass the gateway, tried as an attacker
would from inside, as root and again as an unprivileged user (65534). Each test also does the same
thing outside the sandbox where it can, to prove that the target exists and the test could fail.
Shares the exec suite's fixtures (a test host at 198.18.0.2, a policy, a host loopback service)."""
import fcntl
import json
import os
import pty
import shlex
import shutil
import socket
import subprocess
import termios
import threading
import time
import unittest

import test_exec as base
from harness import PYTHON, SLUICE

M = base.M
setUpModule = base.setUpModule
tearDownModule = base.tearDownModule


def unix_server(path, mode=0o666):
    """A listening Unix socket at `path` that answers every connection with "hello"."""
    if os.path.exists(path):
        os.unlink(path)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    os.chmod(path, mode)
    s.listen(16)
    s.settimeout(0.2)
    stop = []

    def loop():
        while not stop:
            try:
                c, _ = s.accept()
                c.sendall(b"hello")
                c.close()
            except OSError:
                pass
    threading.Thread(target=loop, daemon=True).start()

    def close():
        stop.append(1)
        s.close()
        if os.path.exists(path):
            os.unlink(path)
    return close


class ContainmentAsRoot(base.ExecCase):

    def inside(self, profile, *args, **kw):
        return self.sx("--sandbox-profile", profile, "--", PYTHON, base.PROBE, *args, **kw)

    # 1 --------------------------------------------------------------------------------------
    def test_host_sysctls_and_system_files_unwritable(self):
        """Root inside is not host root: /proc/sys, the sysrq trigger and system files are
        read-only, /etc/shadow shows nothing, /root is absent, UTS and cgroup are unshared."""
        knobs = {"/proc/sys/kernel/core_pattern": "|/tmp/h.sh\n", "/proc/sys/kernel/hostname": "evil\n",
                 "/proc/sys/kernel/randomize_va_space": "0\n", "/proc/sysrq-trigger": "h"}
        before = {k: open(k).read() for k in knobs if k != "/proc/sysrq-trigger"}
        for path, value in knobs.items():
            p = self.inside("offline", "write", path, value)
            self.assertEqual(p.returncode, 1, (path, p.stdout))
        self.assertEqual({k: open(k).read() for k in before}, before)
        for path in ("/etc/passwd", "/usr/bin/sluice-test-marker", "/root/.bashrc"):
            self.assertEqual(self.inside("offline", "write", path).returncode, 1, path)
        self.assertFalse(os.path.exists("/usr/bin/sluice-test-marker"))
        self.assertEqual(self.inside("offline", "read", "/etc/shadow").returncode, 1)
        if self.user is None:  # root outside reads it: the test could fail
            self.assertEqual(self.outside("read", "/etc/shadow").returncode, 0)
        p = self.sx("--sandbox-profile", "offline", "--", "sh", "-c",
                    "test -e /root && echo ROOT; readlink /proc/self/ns/uts /proc/self/ns/cgroup; "
                    "hostname sluice-evil 2>/dev/null && echo RENAMED; exit 0")
        out = p.stdout.decode()
        self.assertNotIn("ROOT", out)
        self.assertNotIn("RENAMED", out)
        self.assertNotIn(os.readlink("/proc/self/ns/uts"), out)
        self.assertNotIn(os.readlink("/proc/self/ns/cgroup"), out)
        self.assertIn("uts:[", out)

    def test_no_capability_to_remount(self):
        """No capability, and no mount call even in a nested user namespace: the read-only view
        cannot be made writable."""
        p = self.sx("--sandbox-profile", "offline", "--", "sh", "-c",
                    "mount -o remount,rw /usr 2>&1; unshare -Urm sh -c 'mount -o remount,rw /usr && "
                    "touch /usr/sluice-remounted' 2>&1; grep ^CapEff /proc/self/status; exit 0")
        self.assertFalse(os.path.exists("/usr/sluice-remounted"))
        self.assertIn(b"CapEff:\t0000000000000000", p.stdout)

    def test_view_is_built_not_inherited(self):
        """Only the system paths, the workspace and private directories exist inside."""
        p = self.sx("--sandbox-profile", "offline", "--", "sh", "-c",
                    "ls -A /; echo HOME; ls -A $HOME; echo TMP; ls -A /tmp; echo END")
        self.assertEqual(p.returncode, 0, p.stderr)
        out = p.stdout.decode()
        top = set(out.split("HOME")[0].split())
        self.assertLessEqual(top, {".sluice", "bin", "dev", "etc", "lib", "lib32", "lib64", "libx32",
                                   "proc", "sbin", "sys", "tmp", "usr"})
        for absent in ("run", "var", "root", "home", "mnt", "media", "opt", "srv", "boot"):
            self.assertNotIn(absent, top)
        self.assertEqual(out.split("HOME")[1].split("TMP")[0].split(), [])  # an empty home
        # The workspace shows at its own path inside the private /tmp, and nothing else of it.
        self.assertEqual(out.split("TMP")[1].split("END")[0].split(), [os.path.basename(self.work)])

    # 2 --------------------------------------------------------------------------------------
    def test_trusted_policy_unchangeable_from_inside(self):
        cfg = os.path.join(self.home, ".config", "sluice")
        os.makedirs(cfg)
        trusted = os.path.join(cfg, "policy.toml")
        shutil.copy(M["policy"], trusted)
        subprocess.run(["chmod", "-R", "a+rwX", os.path.join(self.home, ".config")], check=True)
        original = open(trusted).read()
        evil = '[skills.default]\ndefault_profile = "allowlist"\nallow_domains = ["re:.*\\\\.test"]\n'
        p = self.sx("--sandbox-profile", "offline", "--", "sh", "-c",
                    'mkdir -p "$HOME/.config/sluice" && printf %s "$0" > "$HOME/.config/sluice/policy.toml"; '
                    'ls -A "$HOME/.config/sluice"', evil, policy=False)
        self.assertEqual(open(trusted).read(), original)
        # The later run still obeys the original policy (offline default, allowlist is an escalation).
        p = self.sx("--", "sh", "-c", "env | grep -c PROXY; exit 0", policy=False)
        self.assertEqual(p.stdout.strip(), b"0")
        # A --policy file inside the workspace is read-only inside.
        wpol = os.path.join(self.work, "policy.toml")
        shutil.copy(M["policy"], wpol)
        os.chmod(wpol, 0o666)
        p = self.sx("--policy", wpol, "--sandbox-profile", "offline", "--", PYTHON, base.PROBE,
                    "write", wpol, evil, policy=False)
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertEqual(open(wpol).read(), open(M["policy"]).read())
        # A trusted policy directory inside the workspace, even without a file yet, is refused.
        xdg = os.path.join(self.work, "xdg")
        os.makedirs(xdg)
        p = self.sx("--", "true", env={"XDG_CONFIG_HOME": xdg}, policy=False)
        self.assertEqual(p.returncode, 125)
        self.assertIn("trusted policy directory", p.stderr.decode())

    # 3 --------------------------------------------------------------------------------------
    def _on_terminal(self, argv):
        """Runs argv with a new pseudo-terminal as its controlling terminal and stdin."""
        master, slave = pty.openpty()

        def make_ctty():
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        try:
            p = subprocess.run(argv, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               preexec_fn=make_ctty, env=self.env(), cwd=self.work, timeout=60)
            os.set_blocking(master, False)
            try:
                echoed = os.read(master, 4096)
            except OSError:
                echoed = b""
            return p, echoed
        finally:
            os.close(master)
            os.close(slave)

    def test_no_terminal_injection(self):
        cmd = self.prefix() + [SLUICE, "exec", "--policy", M["policy"], "--sandbox-profile", "offline",
                               "--", PYTHON, base.PROBE]
        p, echoed = self._on_terminal(cmd + ["tiocsti"])
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn(b"TIOCSTI", p.stdout)
        self.assertNotIn(b"INJECTED", echoed)
        if self.user is None:  # outside, the same process types into its terminal: the test can fail
            q, echoed = self._on_terminal(self.prefix() + [PYTHON, base.PROBE, "tiocsti"])
            self.assertEqual(q.returncode, 0, q.stdout)
            self.assertIn(b"INJECTED", echoed)
        # No controlling terminal inside, a session of its own; stdin is still the terminal.
        p, _ = self._on_terminal(cmd + ["ctty"])
        info = json.loads(p.stdout)
        self.assertFalse(info["ctty"], info)
        self.assertTrue(info["sid_is_self"], info)
        p, _ = self._on_terminal(self.prefix() + [SLUICE, "exec", "--policy", M["policy"], "--sandbox-profile",
                                                  "offline", "--", "sh", "-c", "test -t 0 && echo TTY"])
        self.assertEqual(p.stdout, b"TTY\n")

    # 4 --------------------------------------------------------------------------------------
    def test_inherited_descriptors_closed(self):
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        port = srv.getsockname()[1]

        def echo():
            while True:
                try:
                    c, _ = srv.accept()
                except OSError:
                    return
                c.sendall(c.recv(100))
                c.close()
        threading.Thread(target=echo, daemon=True).start()

        def run(args, inside=True):
            conn = socket.create_connection(("127.0.0.1", port))
            fd = conn.fileno()
            try:
                base_cmd = (self.prefix() + [SLUICE, "exec", "--policy", M["policy"], "--sandbox-profile", "offline"]
                            + args + ["--", PYTHON, base.PROBE, "fd-talk", str(fd)]) if inside else \
                    self.prefix() + [PYTHON, base.PROBE, "fd-talk", str(fd)]
                return subprocess.run(base_cmd, pass_fds=(fd,), capture_output=True, env=self.env(),
                                      cwd=self.work, timeout=30)
            finally:
                conn.close()
        try:
            self.assertEqual(run([], inside=False).returncode, 0)  # the descriptor works outside
            p = run([])
            self.assertEqual(p.returncode, 1, p.stdout)
            self.assertIn(b"Bad file descriptor", p.stdout)
            conn = socket.create_connection(("127.0.0.1", port))
            fd = conn.fileno()
            p = subprocess.run(self.prefix() + [SLUICE, "exec", "--policy", M["policy"], "--sandbox-profile",
                                                "offline", "--pass-fd", str(fd), "--", PYTHON, base.PROBE,
                                                "fd-talk", str(fd)],
                               pass_fds=(fd,), capture_output=True, env=self.env(), cwd=self.work, timeout=30)
            conn.close()
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)  # named with --pass-fd: passed
            p = self.sx("--sandbox-profile", "offline", "--pass-fd", "77", "--", "true")
            self.assertEqual(p.returncode, 125)
            self.assertIn("--pass-fd 77", p.stderr.decode())
        finally:
            srv.close()

    # 5 --------------------------------------------------------------------------------------
    def test_host_unix_sockets_absent(self):
        uid = self.user if self.user is not None else 0
        ssh_dir = "/tmp/ssh-sluicetest%d" % os.getpid()
        os.makedirs(ssh_dir, exist_ok=True)
        os.chmod(ssh_dir, 0o777)
        paths = [os.path.join(M["tmp"], "relay.sock"), os.path.join(self.home, "relay.sock"),
                 os.path.join(ssh_dir, "agent.1")]
        run_user = "/run/user/%d" % uid
        made_run_user = False
        if not os.path.exists(run_user + "/bus"):
            made_run_user = not os.path.exists(run_user)
            os.makedirs(run_user, exist_ok=True)
            os.chmod(run_user, 0o777)
            paths.append(run_user + "/bus")
        closers = [unix_server(p) for p in paths]
        try:
            for path in paths:
                self.assertEqual(self.outside("unix", path).returncode, 0, path)
                p = self.inside("network-read", "unix", path)
                self.assertEqual(p.returncode, 1, (path, p.stdout))
            # Globbing finds nothing either: the places do not exist inside.
            p = self.sx("--sandbox-profile", "offline", "--", "sh", "-c", "ls /tmp/ssh-* /run/user 2>&1; exit 0")
            self.assertNotIn(b"agent", p.stdout)
            # A daemon that re-creates its socket after the sandbox started: still absent inside.
            late = "/run/sluice-late-%d.sock" % os.getpid()
            proc = subprocess.Popen(self.prefix() + [SLUICE, "exec", "--policy", M["policy"], "--sandbox-profile",
                                                     "offline", "--", "sh", "-c",
                                                     "sleep 1.5; %s %s unix %s" % (PYTHON, base.PROBE, late)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env(), cwd=self.work)
            time.sleep(0.5)
            closers.append(unix_server(late))
            out, err = proc.communicate(timeout=30)
            self.assertEqual(proc.returncode, 1, out + err)
            self.assertEqual(self.outside("unix", late).returncode, 0)
        finally:
            for c in closers:
                c()
            shutil.rmtree(ssh_dir, ignore_errors=True)
            if made_run_user:
                shutil.rmtree(run_user, ignore_errors=True)

    # 6 --------------------------------------------------------------------------------------
    def test_signals_stay_inside(self):
        for inner, want in (("kill -USR1 0", 138), ("kill -KILL 0", 137), ("sleep 30 & kill -TERM -1; wait $!", 143)):
            cmd = shlex.join(self.prefix() + [SLUICE, "exec", "--policy", M["policy"], "--sandbox-profile",
                                              "offline", "--", "sh", "-c", inner])
            outer = subprocess.run(["sh", "-c", 'trap "echo CAUGHT" USR1; %s; echo "STATUS $?"; echo SURVIVED' % cmd],
                                   capture_output=True, start_new_session=True, env=self.env(), cwd=self.work,
                                   timeout=60)
            out = outer.stdout.decode()
            self.assertIn("SURVIVED", out, (inner, out, outer.stderr))
            self.assertNotIn("CAUGHT", out, inner)
            self.assertIn("STATUS %d" % want, out, inner)

    # 7 --------------------------------------------------------------------------------------
    def test_secret_variables_never_enter(self):
        secrets = {"MYSQL_PWD": "sekrit-1", "REDIS_URL": "redis://u:sekrit-2@h:6379", "MONGODB_URI": "mongodb://u:sekrit-3@h",
                   "SENTRY_DSN": "https://sekrit-4@sentry.example/1", "SLACK_WEBHOOK_URL": "https://hooks.example/sekrit-5",
                   "BW_SESSION": "sekrit-6", "OP_SESSION_team": "sekrit-7", "GIT_CONFIG_VALUE_0": "sekrit-8",
                   "PIP_INDEX_URL": "https://u:sekrit-9@pypi.example/simple", "NPM_CONFIG__AUTH": "sekrit-10",
                   "CI_JOB_JWT_V2": "sekrit-11", "RAILS_MASTER_KEY": "sekrit-12", "GPG_PASSPHRASE": "sekrit-13",
                   "LD_PRELOAD": "/sekrit-14.so", "BASH_ENV": "/sekrit-15", "MY_SETTING": "kept"}
        summary = os.path.join(self.work, "summary.json")
        p = self.sx("--sandbox-profile", "network-read", "--keep-env", "MY_SETTING", "--json-summary", summary,
                    "--", PYTHON, base.PROBE, "env", env=secrets)
        self.assertEqual(p.returncode, 0, p.stderr)
        env = json.loads(p.stdout)
        for name, value in secrets.items():
            if name == "MY_SETTING":
                self.assertEqual(env.get(name), "kept")
                continue
            self.assertNotIn(name, env)
            self.assertFalse(any(value in v for v in env.values()), name)
        s = json.load(open(summary))
        self.assertLessEqual(set(secrets) - {"MY_SETTING"}, set(s["environmentDropped"]))
        text = open(summary).read()
        for name, value in secrets.items():
            if name != "MY_SETTING":
                self.assertNotIn(value, text)
        for name in ("MYSQL_PWD", "REDIS_URL"):
            p = self.sx("--sandbox-profile", "offline", "--keep-env", name, "--", "true", env=secrets)
            self.assertEqual(p.returncode, 125, name)
            self.assertIn("--allow-env " + name, p.stderr.decode())

    # 8 --------------------------------------------------------------------------------------
    def test_regex_allow_entries_constrain_the_ca(self):
        p = self.sx("--sandbox-profile", "network-read", "--allow-domain", r"re:(a|b)\.origin\.test:8443", "--",
                    "sh", "-c", 'openssl x509 -in "$SSL_CERT_FILE" -noout -ext nameConstraints')
        self.assertEqual(p.returncode, 0, p.stderr)
        out = p.stdout.decode()
        self.assertIn("Permitted", out)
        self.assertIn("DNS:origin.test", out)
        for pattern in ("re:.*", r"re:.*\.(com|org)", "re:[a-z]+"):
            p = self.sx("--sandbox-profile", "network-read", "--allow-domain", pattern, "--", "true")
            self.assertEqual(p.returncode, 125, pattern)
            self.assertIn("'%s'" % pattern, p.stderr.decode())
            self.assertIn("literal domain suffix", p.stderr.decode())

    # 9 --------------------------------------------------------------------------------------
    def test_socket_families_and_syscalls_refused(self):
        EAFNOSUPPORT, EPERM = 97, 1
        for family, kind in ((40, 1), (17, 3), (5, 2), (38, 5)):  # VSOCK, PACKET, APPLETALK, ALG
            p = self.inside("network-read", "family", str(family), str(kind))
            self.assertEqual(p.stdout.strip(), b"ERRNO %d" % EAFNOSUPPORT, (family, p.stdout))
        for family, kind in ((1, 1), (2, 1), (10, 1), (16, 3)):  # UNIX, INET, INET6, NETLINK
            self.assertEqual(self.inside("network-read", "family", str(family), str(kind)).returncode, 0, family)
        for nr in (425, 321, 250, 323):  # io_uring_setup, bpf, keyctl, userfaultfd
            p = self.inside("network-read", "syscall", str(nr))
            self.assertEqual(p.stdout.strip(), b"ERRNO %d" % EPERM, (nr, p.stdout))
        self.assertNotEqual(self.outside("syscall", "425").stdout.strip(), b"ERRNO %d" % EPERM)

    # Nested namespaces ----------------------------------------------------------------------------
    NEST_C = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
/* clone(CLONE_NEWUSER) and clone3 with the flag, by raw syscall (libc's wrappers would fall back). */
static void report(const char *what, long pid) {
  if (pid == 0) _exit(0);
  if (pid > 0) { waitpid((pid_t)pid, 0, 0); printf("%s ok\n", what); }
  else printf("%s %d\n", what, errno);
}
int main(void) {
  report("clone", syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0));
  struct clone_args a;
  memset(&a, 0, sizeof a);
  a.flags = CLONE_NEWUSER;
  a.exit_signal = SIGCHLD;
  report("clone3", syscall(SYS_clone3, &a, sizeof a));
  return 0;
}
"""
    # Each namespace flag alone through unshare(2), then setns(2) into the command's own network
    # namespace: what ctypes sees, one line each.
    NEST_PY = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "flags = {'mnt': 0x20000, 'uts': 0x04000000, 'ipc': 0x08000000, 'net': 0x40000000,\n"
        "         'pid': 0x20000000, 'cgroup': 0x02000000, 'time': 0x80}\n"
        "for name, flag in flags.items():\n"
        "    rc = libc.unshare(flag)\n"
        "    print(name, 'ok' if rc == 0 else ctypes.get_errno())\n"
        "fd = os.open('/proc/self/ns/net', os.O_RDONLY)\n"
        "rc = libc.setns(fd, 0x40000000)\n"
        "print('setns', 'ok' if rc == 0 else ctypes.get_errno())\n"
        "rc = libc.unshare(0x10000000)\n"  # last: once in a new user namespace, the rest would pass
        "print('user', 'ok' if rc == 0 else ctypes.get_errno())\n")

    def nest_program(self):
        """The C program, built outside where the command can run it (the workspace)."""
        if not shutil.which("gcc"):
            self.skipTest("no C compiler on this machine")
        src = os.path.join(self.work, "nest.c")
        with open(src, "w") as f:
            f.write(self.NEST_C)
        exe = os.path.join(self.work, "nest")
        subprocess.run(["gcc", "-O0", "-o", exe, src], check=True)
        os.chmod(exe, 0o755)
        return exe

    def nest_policy(self):
        """The suite's policy with a skill `nest` whose commands may nest namespaces."""
        path = os.path.join(self.work, "nest-policy.toml")
        with open(M["policy"]) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text + '\n[skills.nest]\ndefault_profile = "network-read"\n'
                           'allow_domains = ["origin.test:8443"]\nnested_userns = true\n')
        os.chmod(path, 0o644)
        return path

    def test_nested_user_namespaces_refused(self):
        """By default nothing inside creates a user namespace (or any other): unshare(1), Python's
        unshare through libc, clone and clone3 by raw syscall; so no nested network namespace
        whose nf_tables the command would administer. Each also runs outside, where it works."""
        EPERM, ENOSYS = 1, 38
        summary = os.path.join(self.work, "summary.json")
        p = self.sx("--sandbox-profile", "network-read", "--json-summary", summary, "--", "sh", "-c",
                    "unshare -U true; echo U=$?; unshare -Urn true; echo URN=$?; "
                    "unshare -Urn /usr/sbin/nft list ruleset; echo NFT=$?; "
                    "cat /proc/sys/user/max_user_namespaces")
        out = p.stdout.decode()
        self.assertEqual(p.returncode, 0, p.stderr)
        for marker in ("U=", "URN=", "NFT="):
            self.assertNotIn(marker + "0", out)
        self.assertIn("Operation not permitted", p.stderr.decode())
        self.assertTrue(out.rstrip().endswith("\n0"), out)  # the sandbox's own limit
        with open(summary) as f:
            s = json.load(f)
        self.assertEqual(s["nestedUserNamespaces"], "refused")
        self.assertTrue(s["userNamespaceLimit"])
        # Outside, the same attempt makes a network namespace and lists its (empty) ruleset.
        if os.path.exists("/usr/sbin/nft"):
            o = subprocess.run(self.prefix() + ["unshare", "-Urn", "/usr/sbin/nft", "list", "ruleset"],
                               capture_output=True)
            self.assertEqual(o.returncode, 0, o.stderr)

        p = self.sx("--sandbox-profile", "offline", "--", PYTHON, "-c", self.NEST_PY)
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = dict(l.split() for l in p.stdout.decode().splitlines())
        self.assertEqual(lines, {k: str(EPERM) for k in ("user", "mnt", "uts", "ipc", "net", "pid", "cgroup",
                                                       "time", "setns")})
        o = subprocess.run(self.prefix() + [PYTHON, "-c", "import ctypes\nlibc = ctypes.CDLL(None)\n"
                                            "print(libc.unshare(0x10000000))"], capture_output=True)
        self.assertEqual(o.stdout.strip(), b"0")  # outside: the call itself works

        exe = self.nest_program()
        p = self.sx("--sandbox-profile", "offline", "--", exe)
        self.assertEqual(p.stdout.decode().split("\n")[:2], ["clone %d" % EPERM, "clone3 %d" % ENOSYS])
        o = subprocess.run(self.prefix() + [exe], capture_output=True)
        self.assertEqual(o.stdout.decode().split("\n")[:2], ["clone ok", "clone3 ok"])
        # Threads and children still start: libc's clone3 falls back to clone.
        p = self.sx("--sandbox-profile", "offline", "--", PYTHON, "-c",
                    "import threading, subprocess, sys\nt = threading.Thread(target=print, args=('thread',))\n"
                    "t.start(); t.join(); sys.stdout.flush()\nsubprocess.run(['echo', 'child'])")
        self.assertEqual(p.stdout, b"thread\nchild\n", p.stderr)

    def test_nested_user_namespaces_opt_out_from_trusted_policy_only(self):
        """A trusted skill with nested_userns = true: unshare -U works, the other namespace calls
        still need capabilities the command lacks, and the sandbox's network and filesystem
        promises hold from inside the nested namespace. A repository cannot ask for it."""
        policy = self.nest_policy()
        summary = os.path.join(self.work, "summary.json")
        cmd = self.prefix() + [SLUICE, "exec", "--policy", policy, "--skill", "nest", "--json-summary",
                               summary, "--"]
        p = subprocess.run(cmd + ["sh", "-c", "unshare -U true && echo NESTED; "
                                  "unshare -Ur sh -c 'touch /usr/sluice-nested; mount -o remount,rw /usr' 2>&1; "
                                  "cat /proc/sys/user/max_user_namespaces"],
                           capture_output=True, env=self.env(), cwd=self.work, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        out = p.stdout.decode()
        self.assertIn("NESTED", out)
        self.assertNotEqual(out.rstrip().rsplit("\n", 1)[-1], "0")
        self.assertFalse(os.path.exists("/usr/sluice-nested"))
        with open(summary) as f:
            s = json.load(f)
        self.assertEqual(s["nestedUserNamespaces"], "allowed")
        self.assertFalse(s["userNamespaceLimit"])
        # Namespaces other than the user's still need capabilities.
        p = subprocess.run(cmd + [PYTHON, "-c", self.NEST_PY], capture_output=True, env=self.env(),
                           cwd=self.work, timeout=60)
        lines = dict(l.split() for l in p.stdout.decode().splitlines())
        self.assertEqual(lines.pop("user"), "ok")
        self.assertEqual(set(lines.values()), {"1"}, lines)
        # From a nested user and network namespace: still no route, neither to a test host nor
        # through the gateway (the nested namespace has no listener).
        p = subprocess.run(cmd + ["unshare", "-Urn", PYTHON, base.PROBE, "tcp", "198.18.0.2", "9000"],
                           capture_output=True, env=self.env(), cwd=self.work, timeout=60)
        self.assertEqual(p.returncode, 1, p.stdout)
        p = subprocess.run(cmd + ["unshare", "-Ur", PYTHON, base.PROBE, "tcp", "198.18.0.2", "9000"],
                           capture_output=True, env=self.env(), cwd=self.work, timeout=60)
        self.assertEqual(p.returncode, 1, p.stdout)
        # Only the trusted side: a repository's policy cannot set it.
        repo = os.path.join(self.work, "repo")
        os.makedirs(os.path.join(repo, ".sluice"))
        with open(os.path.join(repo, ".sluice", "policy.toml"), "w") as f:
            f.write("[sandbox]\nnested_userns = true\n")
        subprocess.run(["chmod", "-R", "a+rwX", repo])
        p = self.sx("--sandbox-profile", "network-read", "--", "unshare", "-U", "true", cwd=repo)
        self.assertEqual(p.returncode, 125)
        self.assertIn("not allowed here", p.stderr.decode())

    # Landlock and doctor ------------------------------------------------------------------------
    def test_landlock_layer(self):
        summary = os.path.join(self.work, "summary.json")
        p = self.sx("--sandbox-profile", "offline", "--json-summary", summary, "--", "true")
        self.assertEqual(p.returncode, 0, p.stderr)
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        abi = max(libc.syscall(444, None, 0, 1), 0)  # landlock_create_ruleset(VERSION)
        self.assertEqual(json.load(open(summary))["landlockAbi"], abi)
        # A descriptor's own file stays writable through /dev/stdout (Landlock has a rule for it).
        out = os.path.join(self.work, "out.txt")
        with open(out, "wb") as f:
            os.chmod(out, 0o666)  # reopening checks permissions: the file must be the user's to write
            q = subprocess.run(self.prefix() + [SLUICE, "exec", "--policy", M["policy"], "--sandbox-profile",
                                                "offline", "--", "sh", "-c", "echo via-dev-stdout > /dev/stdout"],
                               stdout=f, stderr=subprocess.PIPE, env=self.env(), cwd=self.work)
        self.assertEqual(q.returncode, 0, q.stderr)
        self.assertEqual(open(out).read(), "via-dev-stdout\n")
        # Missing Landlock: reported, not fatal, unless the policy requires it.
        p = self.sx("--sandbox-profile", "offline", "--", "true", env={"SLUICE_FAULT": "landlock_missing"})
        self.assertEqual(p.returncode, 0, p.stderr)
        strict = os.path.join(self.work, "strict.toml")
        with open(strict, "w") as f:
            f.write(open(M["policy"]).read() + "\n[sandbox]\nrequire_landlock = true\n")
        os.chmod(strict, 0o644)
        p = self.sx("--policy", strict, "--sandbox-profile", "offline", "--", "true",
                    env={"SLUICE_FAULT": "landlock_missing"}, policy=False)
        self.assertEqual(p.returncode, 125)
        self.assertIn("require_landlock", p.stderr.decode())
        cfg = os.path.join(self.home, ".config", "sluice")
        os.makedirs(cfg)
        shutil.copy(strict, os.path.join(cfg, "policy.toml"))
        subprocess.run(["chmod", "-R", "a+rwX", os.path.join(self.home, ".config")], check=True)
        d = subprocess.run(self.prefix() + [SLUICE, "doctor", "--json"], capture_output=True,
                           env=self.env({"SLUICE_FAULT": "landlock_missing"}))
        doc = json.loads(d.stdout)
        self.assertFalse(doc["runnerReady"])
        self.assertFalse([c for c in doc["checks"] if c["name"] == "landlock"][0]["ok"])

    def test_read_only_filesystem_profile(self):
        p = self.sx("--sandbox-profile", "offline", "--filesystem", "read-only", "--", "touch", "x")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"Read-only file system", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.work, "x")))
        p = self.sx("--sandbox-profile", "offline", "--", "touch", "x")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(os.path.exists(os.path.join(self.work, "x")))


    def test_files_in_etc_others_may_not_read_stay_closed(self):
        """A file or directory in /etc that others may not read stays closed to the command, also
        for a root caller (whose uid owns it): as root, /etc is an id-mapped mount on which no file is
        root's, so a file that appears while the command runs is closed too; where that mount cannot
        be made (SLUICE_FAULT=idmap_etc), a walk of /etc at the start masks what it finds. /etc's
        other files read as before."""
        tag = "/etc/sluice-test-%d-%s" % (os.getpid(), self.user)
        secret, secret_dir, late = tag + ".conf", tag + ".d", tag + ".late"
        try:
            with open(secret, "w") as f:
                f.write("TOP-SECRET\n")
            os.chmod(secret, 0o600)
            os.mkdir(secret_dir, 0o700)
            with open(secret_dir + "/inner", "w") as f:
                f.write("TOP-SECRET\n")
            os.chmod(secret_dir + "/inner", 0o644)
            if self.user is None:  # root outside reads them: the test could fail
                self.assertEqual(self.outside("read", secret).returncode, 0)
            script = ("head -c 4 /etc/passwd; echo; cat %s %s/inner 2>/dev/null; echo STARTED; "
                      "i=0; while [ ! -e %s ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; "
                      "echo i=$i; ls /etc/ | grep sluice-test; cat %s; echo DONE") % (secret, secret_dir, late, late)
            for fault in ("", "idmap_etc"):
                cmd = self.prefix() + [SLUICE, "exec", "--policy", M["policy"], "--sandbox-profile",
                                       "offline", "--", "sh", "-c", script]
                env = self.env({"SLUICE_FAULT": fault} if fault else None)
                p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=self.work)
                try:
                    first = p.stdout.readline() + p.stdout.readline()
                    self.assertEqual(first, b"root\nSTARTED\n", fault)
                    with open(late + ".tmp", "w") as f:  # appears, whole, while the command runs
                        f.write("LATE-SECRET\n")
                    os.chmod(late + ".tmp", 0o600)
                    os.replace(late + ".tmp", late)
                    out, err = p.communicate(timeout=30)
                finally:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
                os.unlink(late)
                self.assertEqual(p.returncode, 0, err)
                self.assertNotIn(b"TOP-SECRET", out, fault)
                if not fault or self.user is not None:  # the walk sees only what exists at the start
                    self.assertNotIn(b"LATE-SECRET", out, fault)
                self.assertIn(b"DONE", out)
        finally:
            for path in (secret, secret_dir + "/inner", late, late + ".tmp"):
                if os.path.exists(path):
                    os.unlink(path)
            if os.path.isdir(secret_dir):
                os.rmdir(secret_dir)


class ContainmentAsNobody(ContainmentAsRoot):
    """The same suite as an unprivileged user, through user namespaces."""
    user = 65534


if __name__ == "__main__":
    unittest.main()
