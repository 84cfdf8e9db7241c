"""The workspace journal (`sluice exec --journal`, `sluice runs`, `sluice undo`, `sluice diff`): real
commands (sh, coreutils, git) change a workspace in every way a command can, and `sluice undo` puts
it back byte for byte, modes, links and file times included; a path changed again afterwards is a
conflict; two journaled runs on one workspace do not overlap; sluice killed in the middle of applying
or undoing leaves a record that `sluice undo --recover` finishes; without RUN, undo, diff, apply and
discard take the newest run. As root and as 65534."""
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
import unittest

from harness import SLUICE

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]


def snapshot(root):
    """Every entry under `root`: type, mode, contents (or link target) and, for files, mtime."""
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                with open(p, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
                out[rel] = ("file", stat.S_IMODE(st.st_mode), digest, st.st_mtime_ns)
    return out


class JournalAsRoot(unittest.TestCase):
    user = None

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sluice-journal-")
        os.chmod(self.tmp, 0o755)
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.ws = os.path.join(self.tmp, "ws")
        self.home = os.path.join(self.tmp, "home")
        os.makedirs(self.ws)
        os.makedirs(self.home)
        self.runs = os.path.join(self.home, ".local", "state", "sluice", "runs")

    def own(self):
        if self.user is not None:
            subprocess.run(["chown", "-R", "%d:%d" % (self.user, self.user), self.tmp], check=True)

    def prefix(self):
        if self.user is None:
            return []
        return ["setpriv", "--reuid=%d" % self.user, "--regid=%d" % self.user, "--clear-groups"]

    def env(self):
        return {"PATH": "/usr/bin:/bin", "HOME": self.home, "LANG": "C.UTF-8"}

    def sluice(self, *args, timeout=120, **kw):
        return subprocess.run(self.prefix() + [SLUICE, *args], capture_output=True, env=self.env(), cwd=self.ws,
                              timeout=timeout, **kw)

    def journaled(self, script, **kw):
        return self.sluice("exec", "--journal", "--sandbox-profile", "offline", "--", "sh", "-c", script, **kw)

    def write(self, rel, data, mode=0o644):
        p = os.path.join(self.ws, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
        os.chmod(p, mode)

    def read(self, rel):
        with open(os.path.join(self.ws, rel)) as f:
            return f.read()

    def runs_json(self):
        p = self.sluice("runs", "--json", "--files")
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def test_undo_puts_back_every_kind_of_change(self):
        for i in range(20):
            self.write("src/pkg/m%d.py" % i, b"print(%d)\n" % i)
        self.write("over.txt", b"before\n")
        self.write("trunc.txt", os.urandom(100000))
        self.write("append.log", b"line 1\n")
        self.write("mode.sh", b"#!/bin/sh\n", 0o755)
        self.write("old.txt", b"renamed file\n")
        self.write("olddir/inner/x.txt", b"renamed dir\n")
        self.write("target.txt", b"target\n")
        os.symlink("target.txt", os.path.join(self.ws, "link"))
        os.symlink("gone", os.path.join(self.ws, "dangling"))
        self.own()
        before = snapshot(self.ws)
        p = self.journaled("set -e; rm -rf src; echo after > over.txt; : > trunc.txt; echo 'line 2' >> append.log; "
                           "chmod 600 mode.sh; mv old.txt new.txt; mv olddir newdir; rm link; echo file > link; "
                           "rm dangling; echo fresh > fresh.txt; mkdir -p gen/a/b; echo deep > gen/a/b/c.txt")
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertIn(b"sluice undo", p.stderr)
        after = snapshot(self.ws)
        self.assertNotIn("src", after)
        self.assertEqual(self.read("over.txt"), "after\n")
        self.assertEqual(os.path.getsize(os.path.join(self.ws, "trunc.txt")), 0)
        self.assertEqual(after["mode.sh"][1], 0o600)
        self.assertEqual(after["newdir/inner/x.txt"][2], before["olddir/inner/x.txt"][2])
        self.assertEqual(after["link"][0], "file")
        self.assertEqual(after["gen/a/b/c.txt"][0], "file")
        # Nothing of the overlay's own attributes is left on what was applied.
        attrs = [(d, a) for d, dirs, files in os.walk(self.ws) for n in [""] + dirs + files
                 for a in os.listxattr(os.path.join(d, n), follow_symlinks=False)]
        self.assertFalse([x for x in attrs if "overlay" in x[1]], attrs)
        run = self.runs_json()[0]
        self.assertEqual(run["state"], "applied")
        # The layer is gone once applied (the overlay's work directory, mode 0, too).
        self.assertEqual(sorted(os.listdir(os.path.join(self.runs, run["id"]))), ["before", "meta.json"])
        changed = {o["path"] for o in run["ops"] if o["op"] == "r"}
        self.assertTrue({"src", "over.txt", "trunc.txt", "new.txt", "old.txt", "newdir", "olddir", "link",
                         "fresh.txt", "gen"} <= changed, changed)
        diff = self.sluice("diff", run["id"])
        self.assertEqual(diff.returncode, 0, diff.stderr)
        self.assertIn(b"-before\n+after\n", diff.stdout)
        self.assertIn(b"D src\n", diff.stdout)
        u = self.sluice("undo", run["id"])
        self.assertEqual(u.returncode, 0, u.stderr.decode())
        self.assertEqual(snapshot(self.ws), before)
        self.assertEqual(self.runs_json()[0]["state"], "undone")
        again = self.sluice("undo", run["id"])
        self.assertEqual(again.returncode, 1)
        self.assertIn(b"undone already", again.stderr)

    def test_git_reset_hard_of_uncommitted_work_is_undone(self):
        run = lambda *a: subprocess.run(GIT + list(a), cwd=self.ws, check=True, capture_output=True)
        run("init", "-q", ".")
        self.write("app.py", b"v1\n")
        run("add", "app.py")
        run("commit", "-qm", "one")
        self.write("app.py", b"v1\nuncommitted work\n")   # what Git cannot bring back
        self.write("notes.md", b"untracked\n")
        self.own()
        before = snapshot(self.ws)
        p = self.journaled("git reset -q --hard && git clean -qfd")
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(self.read("app.py"), "v1\n")
        self.assertFalse(os.path.exists(os.path.join(self.ws, "notes.md")))
        u = self.sluice("undo")
        self.assertEqual(u.returncode, 0, u.stderr.decode())
        self.assertEqual(snapshot(self.ws), before)

    def test_a_path_changed_after_the_run_is_a_conflict(self):
        self.write("a.txt", b"one\n")
        self.write("b.txt", b"bee\n")
        self.own()
        before = snapshot(self.ws)
        p = self.journaled("echo two > a.txt; echo new > c.txt")
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        rid = self.runs_json()[0]["id"]
        self.write("a.txt", b"a person's later edit\n")
        u = self.sluice("undo", rid)
        self.assertEqual(u.returncode, 1)
        self.assertIn(os.path.join(self.ws, "a.txt").encode(), u.stderr)
        self.assertIn(b"--force", u.stderr)
        self.assertEqual(self.read("a.txt"), "a person's later edit\n")  # untouched
        self.assertTrue(os.path.exists(os.path.join(self.ws, "c.txt")))
        u = self.sluice("undo", "--force", rid)
        self.assertEqual(u.returncode, 0, u.stderr.decode())
        now = snapshot(self.ws)
        self.assertEqual(now["a.txt"][2], before["a.txt"][2])
        self.assertNotIn("c.txt", now)

    def test_two_journaled_runs_on_one_workspace_do_not_overlap(self):
        self.own()
        first = subprocess.Popen(self.prefix() + [SLUICE, "exec", "--journal", "--sandbox-profile", "offline", "--",
                                                  "sh", "-c", "echo started; sleep 3; echo one > one.txt"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env(), cwd=self.ws)
        self.addCleanup(first.stdout.close)
        self.addCleanup(first.stderr.close)
        self.assertEqual(first.stdout.readline(), b"started\n")
        second = self.journaled("echo two > two.txt")
        self.assertEqual(second.returncode, 125)
        self.assertIn(b"another journaled run", second.stderr)
        first.communicate(timeout=60)
        self.assertEqual(first.returncode, 0)
        self.assertFalse(os.path.exists(os.path.join(self.ws, "two.txt")))
        self.assertEqual(self.journaled("echo two > two.txt").returncode, 0)
        self.assertTrue(os.path.exists(os.path.join(self.ws, "two.txt")))

    def kill_when(self, proc, state, path, text):
        """SIGKILL `proc` once the run's record says `state` and `path` holds `text` (its first step
        taken); True when it was caught there."""
        deadline = time.time() + 60
        while time.time() < deadline and proc.poll() is None:
            for rid in os.listdir(self.runs) if os.path.isdir(self.runs) else []:
                try:
                    with open(os.path.join(self.runs, rid, "meta.json")) as f:
                        if json.load(f).get("state") != state:
                            continue
                    with open(os.path.join(self.ws, path)) as f:
                        if f.read() != text:
                            continue
                except (OSError, ValueError):
                    continue
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return True
            time.sleep(0.001)
        proc.wait()
        return False

    def test_killed_while_applying_or_undoing_then_recovered(self):
        for i in range(3000):
            self.write("files/f%04d.txt" % i, b"before %d\n" % i)
        self.own()
        before = snapshot(self.ws)
        apply = subprocess.Popen(self.prefix() + [SLUICE, "exec", "--journal", "--sandbox-profile", "offline", "--",
                                                  "sh", "-c", "for f in files/*; do echo after >> $f; done"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env(), cwd=self.ws)
        self.assertTrue(self.kill_when(apply, "applying", "files/f0000.txt", "before 0\nafter\n"),
                        "apply was never seen under way")
        with open(os.path.join(self.ws, "files/f2999.txt")) as f:
            self.assertEqual(f.read(), "before 2999\n")   # killed part of the way through
        self.assertEqual(self.runs_json()[0]["state"], "applying")
        self.assertEqual(self.sluice("undo", "--recover").returncode, 0)
        self.assertEqual(self.runs_json()[0]["state"], "applied")
        for i in range(0, 3000, 250):
            with open(os.path.join(self.ws, "files/f%04d.txt" % i)) as f:
                self.assertEqual(f.read(), "before %d\nafter\n" % i)
        undo = subprocess.Popen(self.prefix() + [SLUICE, "undo"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=self.env(), cwd=self.ws)
        self.assertTrue(self.kill_when(undo, "undoing", "files/f2999.txt", "before 2999\n"),
                        "undo was never seen under way")
        with open(os.path.join(self.ws, "files/f0000.txt")) as f:
            self.assertEqual(f.read(), "before 0\nafter\n")
        self.assertEqual(self.runs_json()[0]["state"], "undoing")
        # The next journaled run on the workspace finishes it first.
        p = self.journaled("true")
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertIn(b"finished undoing", p.stderr)
        self.assertEqual(snapshot(self.ws), before)

    def test_a_staged_run_is_diffed_applied_in_part_and_discarded(self):
        """--stage: nothing reaches the workspace; --stage-run goes on with the earlier changes in
        view; `sluice diff` shows them; `sluice apply RUN PATH` brings one, a guarded name is held
        back; `sluice discard` drops the rest, and what was applied can still be undone."""
        self.write("keep.txt", b"original\n")
        self.write("edit.txt", b"v1\n")
        self.write("gone.txt", b"to be deleted\n")
        self.own()
        before = snapshot(self.ws)
        p = self.sluice("exec", "--stage", "--sandbox-profile", "offline", "--", "sh", "-c",
                        "echo v2 > edit.txt; rm gone.txt; echo fresh > new.txt; echo 'alias ls=rm' > .bashrc")
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(snapshot(self.ws), before)   # nothing reached the workspace
        run = self.runs_json()[0]
        self.assertEqual(run["state"], "staged")
        go_on = self.sluice("exec", "--stage-run", run["id"], "--sandbox-profile", "offline", "--", "sh", "-c",
                            "cat edit.txt; ls; echo more >> new.txt")
        self.assertEqual(go_on.returncode, 0, go_on.stderr.decode())
        self.assertEqual(go_on.stdout.decode().split(), ["v2", "edit.txt", "keep.txt", "new.txt"])
        self.assertEqual(snapshot(self.ws), before)
        d = self.sluice("diff", run["id"])
        self.assertEqual(d.returncode, 0, d.stderr)
        for line in (b"M edit.txt", b"D gone.txt", b"A new.txt", b"-v1\n+v2", b"+fresh\n+more"):
            self.assertIn(line, d.stdout)
        a = self.sluice("apply", run["id"], "new.txt")
        self.assertEqual(a.returncode, 0, a.stderr)
        self.assertEqual(self.read("new.txt"), "fresh\nmore\n")
        self.assertEqual(self.read("edit.txt"), "v1\n")
        a = self.sluice("apply", run["id"])
        self.assertEqual(a.returncode, 0, a.stderr)
        self.assertIn(b"held back: .bashrc", a.stdout)
        self.assertEqual(self.read("edit.txt"), "v2\n")
        self.assertFalse(os.path.exists(os.path.join(self.ws, "gone.txt")))
        self.assertFalse(os.path.exists(os.path.join(self.ws, ".bashrc")))
        self.assertEqual(self.runs_json()[0]["state"], "staged")   # .bashrc waits
        self.assertEqual(self.sluice("discard", run["id"]).returncode, 0)
        self.assertFalse(os.path.exists(os.path.join(self.ws, ".bashrc")))
        u = self.sluice("undo", run["id"])
        self.assertEqual(u.returncode, 0, u.stderr.decode())
        self.assertEqual(snapshot(self.ws), before)

    def test_without_run_diff_apply_and_discard_take_the_newest(self):
        """RUN left out: `sluice diff`, `apply` and `discard` take the newest run, as `sluice undo`
        does, and say which; a newest run that is not staged is refused by name."""
        self.write("a.txt", b"a1\n")
        self.own()
        before = snapshot(self.ws)
        for i, script in enumerate(("echo a2 > a.txt", "echo b > b.txt")):
            if i:
                time.sleep(1.1)   # runs are ordered by when they started, in seconds
            p = self.sluice("exec", "--stage", "--sandbox-profile", "offline", "--", "sh", "-c", script)
            self.assertEqual(p.returncode, 0, p.stderr.decode())
        newer, older = [r["id"] for r in self.runs_json()]
        d = self.sluice("diff")
        self.assertEqual(d.returncode, 0, d.stderr)
        self.assertIn(b"A b.txt", d.stdout)
        self.assertNotIn(b"a.txt", d.stdout)
        p = self.sluice("discard")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(("run %s discarded" % newer).encode(), p.stdout)
        self.assertEqual([r["id"] for r in self.runs_json()], [older])
        d = self.sluice("diff")
        self.assertIn(b"M a.txt", d.stdout)
        self.assertIn(b"-a1\n+a2", d.stdout)
        a = self.sluice("apply")
        self.assertEqual(a.returncode, 0, a.stderr)
        self.assertIn(("run %s: 0 created, 1 modified" % older).encode(), a.stdout)
        self.assertEqual(self.read("a.txt"), "a2\n")
        self.assertFalse(os.path.exists(os.path.join(self.ws, "b.txt")))
        again = self.sluice("discard")   # the newest is applied now: nothing of it is staged
        self.assertEqual(again.returncode, 1)
        self.assertIn(("run %s is applied, not staged" % older).encode(), again.stderr)
        u = self.sluice("undo")
        self.assertEqual(u.returncode, 0, u.stderr.decode())
        self.assertEqual(snapshot(self.ws), before)

    def test_a_skill_of_the_trusted_policy_journals_every_run(self):
        """journal = true under [skills.NAME]: that skill's runs are journaled without --journal."""
        policy = os.path.join(self.tmp, "policy.toml")
        with open(policy, "w") as f:
            f.write('default_skill = "agent"\n[skills.agent]\ndefault_profile = "offline"\njournal = true\n'
                    '[skills.plain]\ndefault_profile = "offline"\n')
        self.write("a.txt", b"keep me\n")
        self.own()
        p = self.sluice("exec", "--policy", policy, "--", "rm", "a.txt")
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(self.sluice("undo").returncode, 0)
        self.assertEqual(self.read("a.txt"), "keep me\n")
        p = self.sluice("exec", "--policy", policy, "--skill", "plain", "--", "rm", "a.txt")
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(len(self.runs_json()), 1)   # the plain skill's run is not journaled

    def test_refused_where_it_cannot_layer(self):
        """A workspace path the overlay's options cannot name is refused before anything runs."""
        odd = os.path.join(self.tmp, "a,b")
        os.makedirs(odd)
        self.own()
        p = subprocess.run(self.prefix() + [SLUICE, "exec", "--journal", "--sandbox-profile", "offline", "--",
                                            "touch", "x"], capture_output=True, env=self.env(), cwd=odd, timeout=60)
        self.assertEqual(p.returncode, 125)
        self.assertIn(b"',', ':' or '\\'", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(odd, "x")))


class JournalAsNobody(JournalAsRoot):
    user = 65534


if __name__ == "__main__":
    unittest.main()
