"""What a sandboxed command may not leave behind for the tools that run after it, outside the sandbox:
shell and editor start-up files, Git configuration, hooks and hooks directories (wherever Git takes
them from), agent settings anywhere in the workspace, setuid and setgid files, and a way to the
caller's Unix sockets. A guarded name that exists at the start is read-only in the view; one the
command creates is moved to NAME.sluice-quarantine-ID when it ends (said on stderr and in the JSON
summary; the exit status stays the command's). Also the writable paths outside the workspace
(--allow-write, the trusted policy's `writable`) and the policy's own guarded names.

Run as root and again as an unprivileged user (65534), with real Git. Offline only: no network
namespace test host (this suite can run beside the exec suite's), so it keeps its own module
fixtures and borrows only the exec suite's test case helpers."""
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import unittest

import test_exec as base
from harness import PYTHON

M = base.M  # ExecCase reads its policy from test_exec's fixtures: this suite fills them in

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]

# The start-up and settings files other sandboxes guard (srt's list), files and directories.
SRT_FILES = [".bashrc", ".bash_profile", ".zshrc", ".zprofile", ".profile", ".gitconfig", ".gitmodules",
             ".ripgreprc"]
SRT_DIRS = {".vscode": "tasks.json", ".idea": "workspace.xml"}
# The agent hosts' settings, guarded before: name -> a file in it ("" for a file).
AGENT_NAMES = {".claude": "settings.json", ".codex": "config.toml", ".mcp.json": "", ".opencode": "opencode.json",
               ".pi": "settings.json", "opencode.json": ""}

BASE_POLICY = '[skills.default]\ndefault_profile = "offline"\n'
EROFS = "Read-only file system"
EPERM = "Operation not permitted"


def setUpModule():
    if os.geteuid() != 0:
        raise unittest.SkipTest("the guards suite runs as root and as 65534 (setpriv) and needs root")
    M["tmp"] = tempfile.mkdtemp(prefix="sluice-guards-test-")
    os.chmod(M["tmp"], 0o755)
    # The trusted policy in a directory of its own: --allow-write of that directory is refused.
    M["policy_dir"] = os.path.join(M["tmp"], "policy")
    os.makedirs(M["policy_dir"])
    os.chmod(M["policy_dir"], 0o755)
    M["policy"] = os.path.join(M["policy_dir"], "policy.toml")
    with open(M["policy"], "w") as f:
        f.write(BASE_POLICY)
    os.chmod(M["policy"], 0o644)


def tearDownModule():
    if "tmp" in M:
        shutil.rmtree(M["tmp"], ignore_errors=True)
    for k in ("tmp", "policy_dir", "policy"):
        M.pop(k, None)


def content(path):
    """A file's text, or None when there is none."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


class Run:
    """One sluice exec: its exit status, output, JSON summary, and the outcome of each case."""

    def __init__(self, proc, summary):
        self.rc = proc.returncode
        self.out = proc.stdout.decode(errors="replace")
        self.err = proc.stderr.decode(errors="replace")
        self.summary = summary
        self.cid = summary.get("commandId", "")
        self.moved = {m["path"]: m["movedTo"] for m in summary.get("quarantined", [])}
        self.cases = {}
        buf = []
        for line in self.out.splitlines():
            if line.startswith("@@ ") and " rc=" in line:
                label, rc = line[3:].rsplit(" rc=", 1)
                self.cases[label] = (int(rc), "\n".join(buf))
                buf = []
            else:
                buf.append(line)

    def __str__(self):
        return "exit %d\nstdout: %s\nstderr: %s" % (self.rc, self.out[-3000:], self.err[-3000:])


class GuardsAsRoot(base.ExecCase):

    def setUp(self):
        super().setUp()
        self.work = os.path.realpath(self.work)  # the paths sluice reports are resolved

    # --- helpers ---------------------------------------------------------------------------------
    def own(self, *paths):
        """Gives paths to the test's user (Git refuses repositories other users own)."""
        if self.user is not None:
            for p in paths or (self.work,):
                subprocess.run(["chown", "-R", "%d:%d" % (self.user, self.user), p], check=True)

    def write(self, rel, text, mode=0o666):
        """Writes a file below the workspace (its directories 0777): writable by the test's user
        outside, so that only the sandbox can stop a write."""
        path = os.path.join(self.work, rel)
        d = os.path.dirname(path)
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o777)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)
        return path

    def mkdir(self, rel, mode=0o777):
        path = os.path.join(self.work, rel)
        os.makedirs(path, exist_ok=True)
        os.chmod(path, mode)
        return path

    def p(self, rel):
        return os.path.join(self.work, rel)

    def repo(self, rel="repo"):
        path = self.p(rel)
        subprocess.run(GIT + ["init", "-q", path], check=True)
        with open(os.path.join(path, "README"), "w") as f:
            f.write("readme\n")
        subprocess.run(GIT + ["-C", path, "add", "README"], check=True)
        subprocess.run(GIT + ["-C", path, "commit", "-qm", "first"], check=True)
        return path

    def policy_file(self, name, extra):
        """A trusted policy in a directory of its own: the module's, plus `extra`."""
        d = os.path.join(M["tmp"], "%s-%s" % (name, self.user if self.user is not None else "root"))
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o755)
        path = os.path.join(d, "policy.toml")
        with open(path, "w") as f:
            f.write(BASE_POLICY + extra)
        os.chmod(path, 0o644)
        self.addCleanup(shutil.rmtree, d, True)
        return path

    def outside_dir(self, name):
        """A directory outside the workspace that the test's user may write to."""
        d = os.path.join(M["tmp"], "%s-%s" % (name, self.user if self.user is not None else "root"))
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o777)
        self.addCleanup(shutil.rmtree, d, True)
        return d

    def sandboxed(self, script, cwd=None, policy=None, extra=()):
        """Runs `sh -c script` under sluice exec (offline) with a JSON summary; the summary is {}
        when sluice wrote none."""
        summary = os.path.join(self.work, "summary.json")
        if os.path.exists(summary):
            os.unlink(summary)
        args = (["--policy", policy] if policy else []) + ["--sandbox-profile", "offline", "--json-summary",
                                                          summary] + list(extra) + ["--", "sh", "-c", script]
        proc = self.sx(*args, policy=policy is None, cwd=cwd or self.work, timeout=120)
        s = {}
        if os.path.exists(summary):
            with open(summary) as f:
                s = json.load(f)
            os.unlink(summary)
        return Run(proc, s)

    def run_cases(self, cases, cwd=None, policy=None, extra=()):
        """Runs each (label, shell command) in a subshell of one sandboxed command, its stderr with
        its stdout: the Run's `cases` holds (exit status, output) per label."""
        script = "\n".join('( %s ) 2>&1; rc=$?; echo; echo "@@ %s rc=$rc"' % (cmd, label) for label, cmd in cases)
        return self.sandboxed(script, cwd=cwd, policy=policy, extra=extra)

    def case(self, run, label):
        self.assertIn(label, run.cases, "case %s did not run: %s" % (label, run))
        return run.cases[label]

    def assertFailedWith(self, run, label, text):
        rc, out = self.case(run, label)
        self.assertNotEqual(rc, 0, "%s: the write succeeded: %s" % (label, out))
        self.assertIn(text, out, "%s: not %r: %s" % (label, text, out))

    def assertWritableOutside(self, *paths):
        """Outside the sandbox the test's user may write every path: only the sandbox stops it."""
        p = subprocess.run(self.prefix() + ["sh", "-c", 'for f; do test -w "$f" || echo "$f"; done', "sh"] +
                           list(paths), capture_output=True, env=self.env())
        self.assertEqual(p.stdout.decode(), "", "not writable outside the sandbox either")

    def assertMovedAside(self, run, path, case, inner="", text=None):
        """`path` (a host path the command created) was renamed to PATH.sluice-quarantine-ID, said on
        stderr and in the summary; what it held is still there (inner: a file in it, text: its text)."""
        self.assertTrue(run.cid, "%s: no JSON summary: %s" % (case, run))
        aside = path + ".sluice-quarantine-" + run.cid
        self.assertFalse(os.path.lexists(path), "%s: %s is still there: %s" % (case, path, run.err))
        self.assertTrue(os.path.lexists(aside), "%s: no %s" % (case, aside))
        self.assertEqual(run.moved.get(path), aside, "%s: not in the summary's quarantined: %s" % (case, run.moved))
        self.assertRegex(run.err, re.escape("created " + path) + r"(?![\w/-]|\.\w)", "%s: not said on stderr" % case)
        if text is not None:
            self.assertEqual(content(os.path.join(aside, inner) if inner else aside), text, case)

    # --- 1. srt's names: shell start-up files, Git's, ripgrep's, editors' project settings -----------
    def check_existing_names_read_only(self, prefix):
        """Every name in `prefix` (a directory below the workspace root, or "") exists at the start:
        no append, overwrite, rename over or unlink-and-recreate changes it."""
        files = {}  # rel -> text at the start
        cases = []
        for name in SRT_FILES:
            rel = prefix + name
            files[rel] = "orig %s\n" % rel
            self.write(rel, files[rel])
            cases += [("append:" + rel, "echo evil >> " + rel), ("overwrite:" + rel, "echo evil > " + rel),
                      ("rename-over:" + rel, "echo evil > %s.new && mv -f %s.new %s" % (rel, rel, rel)),
                      ("recreate:" + rel, "rm -f %s && echo evil > %s" % (rel, rel))]
        for name, inner in SRT_DIRS.items():
            d = prefix + name
            rel = d + "/" + inner
            files[rel] = "orig %s\n" % rel
            self.write(rel, files[rel])
            cases += [("append:" + rel, "echo evil >> " + rel), ("overwrite:" + rel, "echo evil > " + rel),
                      ("new-file:" + d, "echo evil > %s/new.json" % d),
                      ("replace-dir:" + d, "mv %s %s.old && mkdir %s && echo evil > %s" % (d, d, d, rel))]
        self.own()
        self.assertWritableOutside(*[self.p(r) for r in files])
        run = self.run_cases(cases)
        self.assertEqual(run.rc, 0, run)
        for label, _ in cases:
            kind, rel = label.split(":", 1)
            if kind in ("append", "overwrite", "new-file"):
                self.assertFailedWith(run, label, EROFS)
        for rel, text in files.items():
            self.assertEqual(content(self.p(rel)), text, "%s changed: %s" % (rel, run.out))
        for name in SRT_DIRS:
            self.assertFalse(os.path.exists(self.p(prefix + name + "/new.json")), prefix + name)
        self.assertEqual(run.moved, {}, "nothing was created")

    def test_existing_srt_names_at_the_root_are_read_only(self):
        self.check_existing_names_read_only("")

    def test_existing_srt_names_in_a_subdirectory_are_read_only(self):
        self.mkdir("pkg/sub")
        self.check_existing_names_read_only("pkg/sub/")

    def plant_srt_names(self, prefixes):
        """Shell that creates each of srt's names in each prefix, and the texts it writes."""
        steps, planted = [], {}
        for d in prefixes:
            for name in SRT_FILES:
                planted[(d, name)] = "planted %s%s" % (d, name)
                steps.append("echo '%s' > %s%s" % (planted[(d, name)], d, name))
            for name, inner in SRT_DIRS.items():
                planted[(d, name)] = "planted %s%s" % (d, name)
                steps.append("mkdir %s%s && echo '%s' > %s%s/%s" % (d, name, planted[(d, name)], d, name, inner))
        return steps, planted

    def check_planted(self, run, planted):
        for (d, name), text in planted.items():
            self.assertMovedAside(run, self.p(d + name), d + name, SRT_DIRS.get(name, ""), text + "\n")
        self.assertEqual(set(run.moved), {self.p(d + name) for d, name in planted},
                         "only the guarded names are moved aside")

    def test_created_srt_names_are_moved_aside(self):
        """Each of srt's names, absent at the start, created at the root and in subdirectories that
        were there (a/, a/b/): all moved aside; the exit status is the command's; others stay."""
        self.mkdir("a/b")
        self.own()
        steps, planted = self.plant_srt_names(["", "a/", "a/b/"])
        run = self.sandboxed("; ".join(steps) + "; echo kept > a/b/notes.txt; exit 3")
        self.assertEqual(run.rc, 3, run)
        self.check_planted(run, planted)
        self.assertEqual(content(self.p("a/b/notes.txt")), "kept\n")

    def test_created_srt_names_in_new_directories_are_moved_aside(self):
        """The same in directories the command made itself (new/, new/deep/): a guarded name is
        guarded wherever it lands, not only where a directory existed at the start."""
        self.own()
        steps, planted = self.plant_srt_names(["new/", "new/deep/"])
        run = self.sandboxed("mkdir -p new/deep; " + "; ".join(steps))
        self.assertEqual(run.rc, 0, run)
        self.check_planted(run, planted)
        self.assertTrue(os.path.isdir(self.p("new/deep")))

    def test_agent_settings_created_in_a_subdirectory_are_moved_aside(self):
        """The agent hosts' settings, created in pkg/ (neither the root nor the working directory):
        moved aside too."""
        self.mkdir("pkg")
        self.own()
        steps = []
        for name, inner in AGENT_NAMES.items():
            rel = "pkg/" + name
            steps.append("mkdir %s && echo '{}' > %s/%s" % (rel, rel, inner) if inner else "echo '{}' > " + rel)
        run = self.sandboxed("; ".join(steps))
        self.assertEqual(run.rc, 0, run)
        for name, inner in AGENT_NAMES.items():
            self.assertMovedAside(run, self.p("pkg/" + name), "pkg/" + name, inner, "{}\n")

    # --- 2. guarded names that are symlinks (targets in the workspace) ------------------------------
    def test_codex_symlink_to_a_directory_is_read_only(self):
        self.write("decoy-codex/config.toml", "model = 'x'\n")
        os.symlink("decoy-codex", self.p(".codex"))
        self.own()
        self.assertWritableOutside(self.p(".codex/config.toml"))
        run = self.run_cases([("through-link", "echo x >> .codex/config.toml"),
                              ("new-through-link", "echo x > .codex/other.toml"),
                              ("target", "echo x >> decoy-codex/config.toml")])
        for label in ("through-link", "new-through-link", "target"):
            self.assertFailedWith(run, label, EROFS)
        self.assertEqual(content(self.p("decoy-codex/config.toml")), "model = 'x'\n")
        self.assertFalse(os.path.exists(self.p("decoy-codex/other.toml")))
        self.assertEqual(os.readlink(self.p(".codex")), "decoy-codex")

    def test_dangling_claude_symlink_is_moved_aside_once_it_leads_somewhere(self):
        """.claude -> real-claude, absent at the start: the command makes real-claude and writes
        settings through the link; the link is moved aside (the agent host would follow it)."""
        os.symlink("real-claude", self.p(".claude"))
        self.own()
        run = self.sandboxed("mkdir real-claude && echo '{}' > .claude/settings.json")
        self.assertMovedAside(run, self.p(".claude"), ".claude -> real-claude")
        self.assertTrue(os.path.islink(self.p(".claude.sluice-quarantine-" + run.cid)))
        self.assertEqual(os.readlink(self.p(".claude.sluice-quarantine-" + run.cid)), "real-claude")

    def test_mcp_json_symlink_to_a_file_is_read_only(self):
        self.write("real-mcp.json", '{"mcpServers": {}}\n')
        os.symlink("real-mcp.json", self.p(".mcp.json"))
        self.own()
        self.assertWritableOutside(self.p(".mcp.json"))
        run = self.run_cases([("append-through-link", "echo x >> .mcp.json"),
                              ("overwrite-through-link", "echo x > .mcp.json"),
                              ("target", "echo x >> real-mcp.json")])
        for label in ("append-through-link", "overwrite-through-link", "target"):
            self.assertFailedWith(run, label, EROFS)
        self.assertEqual(content(self.p("real-mcp.json")), '{"mcpServers": {}}\n')

    def test_git_hooks_symlink_to_a_workspace_directory_is_read_only(self):
        repo = self.repo()
        shutil.rmtree(os.path.join(repo, ".git", "hooks"))
        self.mkdir("repo/.githooks")
        os.symlink("../.githooks", os.path.join(repo, ".git", "hooks"))
        self.own()
        self.assertWritableOutside(os.path.join(repo, ".githooks"))
        run = self.run_cases([("through-link", "printf '#!/bin/sh\\n' > .git/hooks/pre-commit"),
                              ("target", "printf '#!/bin/sh\\n' > .githooks/post-checkout")], cwd=repo)
        for label in ("through-link", "target"):
            self.assertFailedWith(run, label, EROFS)
        self.assertFalse(os.path.exists(os.path.join(repo, ".githooks", "pre-commit")))
        self.assertFalse(os.path.exists(os.path.join(repo, ".githooks", "post-checkout")))

    # --- 3. Git layouts ---------------------------------------------------------------------------
    def test_missing_git_hooks_directory_created_is_moved_aside(self):
        repo = self.repo()
        shutil.rmtree(os.path.join(repo, ".git", "hooks"))
        self.own()
        run = self.sandboxed("mkdir .git/hooks && printf '#!/bin/sh\\n' > .git/hooks/pre-commit && "
                             "chmod +x .git/hooks/pre-commit", cwd=repo)
        self.assertEqual(run.rc, 0, run)
        self.assertMovedAside(run, os.path.join(repo, ".git", "hooks"), ".git/hooks", "pre-commit", "#!/bin/sh\n")

    def test_separate_git_dir_config_and_hooks_are_read_only(self):
        """A .git file (gitdir: .repo-meta): the Git directory it names is protected as .git is."""
        repo = self.mkdir("repo", 0o755)
        subprocess.run(GIT + ["init", "-q", "--separate-git-dir=.repo-meta"], cwd=repo, check=True)
        with open(os.path.join(repo, "README"), "w") as f:
            f.write("readme\n")
        subprocess.run(GIT + ["add", "README"], cwd=repo, check=True)
        subprocess.run(GIT + ["commit", "-qm", "first"], cwd=repo, check=True)
        self.assertTrue(os.path.isfile(os.path.join(repo, ".git")))
        meta = os.path.join(repo, ".repo-meta")
        before = content(os.path.join(meta, "config"))
        self.own()
        run = self.run_cases([("hook", "printf '#!/bin/sh\\n' > .repo-meta/hooks/pre-commit"),
                              ("config-append", "echo '[core]' >> .repo-meta/config"),
                              ("git-config", "git config core.hooksPath x"),
                              ("status", "git status --short")], cwd=repo)
        self.assertFailedWith(run, "hook", EROFS)
        self.assertFailedWith(run, "config-append", EROFS)
        self.assertNotEqual(self.case(run, "git-config")[0], 0, "git config core.hooksPath succeeded")
        self.assertEqual(self.case(run, "status")[0], 0, "git status fails: %s" % run)
        self.assertEqual(content(os.path.join(meta, "config")), before)
        self.assertFalse(os.path.exists(os.path.join(meta, "hooks", "pre-commit")))

    def test_git_file_cannot_be_pointed_elsewhere(self):
        """The .git file names the Git directory: rewritten, it could send Git outside to another
        directory's config (one a command cannot write, but someone else prepared). It is
        read-only, and a .git file the command replaces the directory with is moved aside when the
        directory it names runs a program."""
        repo = self.mkdir("repo", 0o755)
        subprocess.run(GIT + ["init", "-q", "--separate-git-dir=.repo-meta"], cwd=repo, check=True)
        before = content(os.path.join(repo, ".git"))
        lib = self.mkdir("lib", 0o755)
        self.own()
        run = self.run_cases([("rewrite", "echo 'gitdir: /tmp/elsewhere' > .git")], cwd=repo)
        self.assertFailedWith(run, "rewrite", EROFS)
        self.assertEqual(content(os.path.join(repo, ".git")), before)
        # A new .git file in a directory without one, naming a Git directory that runs a program.
        run = self.sandboxed("mkdir evil && printf '[core]\\n\\tfsmonitor = touch /tmp/x\\n' > evil/config && "
                             "mkdir evil/hooks && echo 'gitdir: evil' > .git", cwd=lib)
        self.assertEqual(run.rc, 0, run)
        self.assertMovedAside(run, os.path.join(lib, ".git"), "new .git file naming a harmful Git directory")

    def test_symlink_pointed_outside_is_moved_aside(self):
        """.claude -> real-claude, absent at the start; the command makes real-claude a symlink to
        a directory outside the workspace (which someone else could have filled): the link now
        leads somewhere new and is moved aside."""
        os.symlink("real-claude", self.p(".claude"))
        outside = self.outside_dir("claude-elsewhere")
        self.own()
        run = self.sandboxed("ln -s %s real-claude" % outside)
        self.assertEqual(run.rc, 0, run)
        self.assertMovedAside(run, self.p(".claude"), ".claude -> real-claude -> outside")

    def test_guarded_name_made_a_fifo_is_moved_aside(self):
        """A guarded name the command makes a FIFO or a socket (`git submodule` outside would hang
        on a .gitmodules FIFO) is moved aside like a file."""
        self.own()
        run = self.sandboxed("mkfifo .gitmodules && " + PYTHON + " -c \"import socket; "
                             "socket.socket(socket.AF_UNIX).bind('.bashrc')\"")
        self.assertEqual(run.rc, 0, run)
        self.assertMovedAside(run, self.p(".gitmodules"), "fifo")
        self.assertMovedAside(run, self.p(".bashrc"), "socket")

    def test_nested_repository_config_and_hooks_are_read_only(self):
        """vendor/lib, a repository of its own inside the workspace's: Git outside reads its config
        and runs its hooks whenever someone works there."""
        repo = self.repo()
        lib = self.repo("repo/vendor/lib")
        before = content(os.path.join(lib, ".git", "config"))
        self.own()
        run = self.run_cases([("config-append", "echo '[core]' >> vendor/lib/.git/config"),
                              ("hook", "printf '#!/bin/sh\\n' > vendor/lib/.git/hooks/pre-commit"),
                              ("git-config", "git -C vendor/lib config core.fsmonitor 'touch /tmp/x'")], cwd=repo)
        self.assertFailedWith(run, "config-append", EROFS)
        self.assertFailedWith(run, "hook", EROFS)
        self.assertNotEqual(self.case(run, "git-config")[0], 0, "git config in vendor/lib succeeded")
        self.assertEqual(content(os.path.join(lib, ".git", "config")), before)
        self.assertFalse(os.path.exists(os.path.join(lib, ".git", "hooks", "pre-commit")))

    def test_hooks_path_directory_is_read_only(self):
        repo = self.repo()
        subprocess.run(["git", "-C", repo, "config", "core.hooksPath", ".githooks"], check=True)
        self.write("repo/.githooks/post-merge", "#!/bin/sh\n", 0o777)
        self.own()
        self.assertWritableOutside(os.path.join(repo, ".githooks"), os.path.join(repo, ".githooks", "post-merge"))
        run = self.run_cases([("new-hook", "printf '#!/bin/sh\\ntouch /tmp/x\\n' > .githooks/pre-commit"),
                              ("change-hook", "echo 'touch /tmp/x' >> .githooks/post-merge")], cwd=repo)
        self.assertFailedWith(run, "new-hook", EROFS)
        self.assertFailedWith(run, "change-hook", EROFS)
        self.assertFalse(os.path.exists(os.path.join(repo, ".githooks", "pre-commit")))
        self.assertEqual(content(os.path.join(repo, ".githooks", "post-merge")), "#!/bin/sh\n")

    def test_hooks_path_created_by_the_command_is_moved_aside(self):
        repo = self.repo()
        subprocess.run(["git", "-C", repo, "config", "core.hooksPath", "hooks-later"], check=True)
        self.own()
        run = self.sandboxed("mkdir hooks-later && printf '#!/bin/sh\\n' > hooks-later/pre-commit && "
                             "chmod +x hooks-later/pre-commit", cwd=repo)
        self.assertEqual(run.rc, 0, run)
        self.assertMovedAside(run, os.path.join(repo, "hooks-later"), "core.hooksPath hooks-later", "pre-commit",
                              "#!/bin/sh\n")

    # --- 4. setuid and setgid -------------------------------------------------------------------------
    def test_setuid_and_setgid_bits_cannot_be_set(self):
        """No file the command leaves has a setuid or setgid bit, whichever call sets it: as root
        that would be a setuid-root program for anyone on the machine."""
        self.own()
        py = PYTHON + ' -c "%s"'
        trap = ("import errno, os, sys\ntry:\n    %s\n    print('done')\nexcept OSError as e:\n"
                "    print(errno.errorcode[e.errno])")
        cases = [("chmod-u+s", "cp /bin/sh x-us && chmod u+s x-us"),
                 ("chmod-g+s", "cp /bin/sh x-gs && chmod g+s x-gs"),
                 ("chmod-4755", "cp /bin/sh x-4755 && chmod 4755 x-4755"),
                 ("chmod-6755", "cp /bin/sh x-6755 && chmod 6755 x-6755"),
                 ("os.open", py % (trap % "os.close(os.open('y', os.O_CREAT | os.O_WRONLY, 0o4755))")),
                 ("os.chmod", "cp /bin/sh x-chmod && " + py % (trap % "os.chmod('x-chmod', 0o2755)")),
                 ("os.fchmod", "cp /bin/sh x-fchmod && " +
                  py % (trap % "os.fchmod(os.open('x-fchmod', os.O_RDONLY), 0o4755)"))]
        files = {"chmod-u+s": "x-us", "chmod-g+s": "x-gs", "chmod-4755": "x-4755", "chmod-6755": "x-6755",
                 "os.open": "y", "os.chmod": "x-chmod", "os.fchmod": "x-fchmod"}
        setuid = next((f for f in ("/usr/bin/su", "/usr/bin/passwd", "/usr/bin/mount", "/bin/su")
                       if os.path.exists(f) and os.stat(f).st_mode & stat.S_ISUID), None)
        if setuid:  # a copy that keeps the mode
            cases.append(("cp-p", "cp -p %s x-cp" % setuid))
            files["cp-p"] = "x-cp"
        run = self.run_cases(cases)
        for label in ("chmod-u+s", "chmod-g+s", "chmod-4755", "chmod-6755"):
            self.assertFailedWith(run, label, EPERM)
        for label in ("os.chmod", "os.fchmod"):
            rc, out = self.case(run, label)
            self.assertIn("EPERM", out, label)
        for label, name in files.items():
            path = self.p(name)
            if label == "os.open" and not os.path.exists(path):
                continue  # refused outright: fine
            self.assertTrue(os.path.exists(path), "%s: no %s: %s" % (label, name, self.case(run, label)))
            self.assertEqual(os.stat(path).st_mode & 0o6000, 0,
                             "%s: %s has mode %o" % (label, name, os.stat(path).st_mode))

    def test_plain_chmod_still_works(self):
        self.own()
        run = self.run_cases([("chmod-755", "cp /bin/sh x && chmod 644 x && chmod 755 x"),
                              ("chmod+x", "printf '#!/bin/sh\\necho ran\\n' > s && chmod 644 s && chmod +x s && ./s"),
                              ("chmod-600", "echo a > p && chmod 600 p")])
        for label in ("chmod-755", "chmod+x", "chmod-600"):
            self.assertEqual(self.case(run, label)[0], 0, "%s: %s" % (label, self.case(run, label)[1]))
        self.assertEqual(stat.S_IMODE(os.stat(self.p("x")).st_mode), 0o755)
        self.assertEqual(os.stat(self.p("s")).st_mode & 0o111, 0o111)
        self.assertIn("ran", self.case(run, "chmod+x")[1])
        self.assertEqual(stat.S_IMODE(os.stat(self.p("p")).st_mode), 0o600)

    # --- 5. Unix sockets of processes outside ---------------------------------------------------------
    def serve_unix(self, rel):
        """A service outside the sandbox on a socket in the workspace: it answers "hello"."""
        path = self.p(rel)
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path)
        os.chmod(path, 0o777)
        srv.listen(8)
        srv.settimeout(0.2)
        stop = threading.Event()

        def loop():
            while not stop.is_set():
                try:
                    c, _ = srv.accept()
                except socket.timeout:
                    continue
                except OSError:
                    return
                with c:
                    try:
                        c.sendall(b"hello\n")
                    except OSError:
                        pass

        t = threading.Thread(target=loop, daemon=True)
        t.start()

        def close():
            stop.set()
            t.join(2)
            srv.close()
        self.addCleanup(close)
        return path

    CONNECT = ('import socket, sys\ns = socket.socket(socket.AF_UNIX)\ns.settimeout(5)\ns.connect(sys.argv[1])\n'
               'print(s.recv(100).decode().strip())')

    def test_unix_sockets_of_outside_services_unreachable(self):
        self.mkdir("run")
        socks = ["svc.sock", "run/svc.sock"]
        for rel in socks:
            self.serve_unix(rel)
        self.own()
        for rel in socks:  # reachable outside, by the test's user
            p = subprocess.run(self.prefix() + [PYTHON, "-c", self.CONNECT, self.p(rel)], capture_output=True,
                               env=self.env(), timeout=30)
            self.assertEqual(p.stdout, b"hello\n", (rel, p.stderr))
        for rel in socks:
            p = self.sx("--sandbox-profile", "offline", "--", PYTHON, "-c", self.CONNECT, rel)
            self.assertNotEqual(p.returncode, 0, "%s reached from inside: %s" % (rel, p.stdout))
            self.assertNotIn(b"hello", p.stdout + p.stderr, rel)

    # --- 6. writable paths outside the workspace ------------------------------------------------------
    def test_allow_write_grants_a_directory_outside(self):
        shared = self.outside_dir("shared")
        sibling = self.outside_dir("sibling")
        self.own()
        run = self.sandboxed("echo hi > %s/f" % shared)
        self.assertNotEqual(run.rc, 0, "written without --allow-write: %s" % run)
        self.assertFalse(os.path.exists(os.path.join(shared, "f")))
        run = self.run_cases([("granted", "echo hi > %s/f" % shared), ("sibling", "echo hi > %s/f" % sibling)],
                             extra=["--allow-write", shared])
        self.assertEqual(run.rc, 0, run)
        self.assertEqual(self.case(run, "granted")[0], 0, "--allow-write %s: %s" % (shared, run))
        self.assertEqual(content(os.path.join(shared, "f")), "hi\n")
        self.assertNotEqual(self.case(run, "sibling")[0], 0, "a directory not granted was written")
        self.assertFalse(os.path.exists(os.path.join(sibling, "f")))

    def test_allow_write_refuses_system_home_and_policy_paths(self):
        marker = self.p("ran")
        ok = self.outside_dir("acceptable")
        self.own()
        # A directory that may be granted is: the refusals below are about their paths.
        p = self.sx("--sandbox-profile", "offline", "--allow-write", ok, "--", "touch", marker)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(os.path.exists(marker))
        os.unlink(marker)
        for path in ("/etc", "/usr/lib", "/", self.home, M["policy_dir"], M["tmp"]):
            p = self.sx("--sandbox-profile", "offline", "--allow-write", path, "--", "touch", marker)
            err = p.stderr.decode()
            self.assertEqual(p.returncode, 125, "--allow-write %s: %s" % (path, err))
            self.assertTrue(path in err or os.path.realpath(path) in err, "--allow-write %s: %s" % (path, err))
            self.assertFalse(os.path.exists(marker), "--allow-write %s: the command ran" % path)

    def test_repository_policy_cannot_grant_writable_paths(self):
        shared = self.outside_dir("repo-granted")
        self.write(".sluice/policy.toml", 'writable = ["%s"]\n' % shared, 0o644)
        self.own()
        run = self.sandboxed("touch ran; echo hi > %s/f" % shared)
        self.assertEqual(run.rc, 125, run)
        self.assertIn("writable", run.err)
        self.assertFalse(os.path.exists(self.p("ran")))
        self.assertFalse(os.path.exists(os.path.join(shared, "f")))

    def test_trusted_policy_writable_grants_a_directory(self):
        shared = self.outside_dir("policy-granted")
        policy = self.policy_file("writable-policy", 'writable = ["%s"]\n' % shared)
        self.own()
        run = self.sandboxed("echo hi > %s/f" % shared, policy=policy)
        self.assertEqual(run.rc, 0, run)
        self.assertEqual(content(os.path.join(shared, "f")), "hi\n")

    # --- 7. the policy's guarded names ----------------------------------------------------------------
    def test_policy_guarded_names_extend_the_list(self):
        self.write("Makefile.local", "CFLAGS = -O2\n")
        self.mkdir("pkg")
        self.mkdir("other")
        self.own()
        # Not guarded by default: written and kept.
        run = self.sandboxed("echo ok > other/Makefile.local")
        self.assertEqual(run.rc, 0, run)
        self.assertEqual(content(self.p("other/Makefile.local")), "ok\n")
        policy = self.policy_file("guarded-policy", '[sandbox]\nguarded_names = ["Makefile.local"]\n')
        run = self.run_cases([("existing", "echo 'CC = evil' >> Makefile.local"),
                              ("created", "echo 'CC = evil' > pkg/Makefile.local")], policy=policy)
        self.assertEqual(run.rc, 0, run)
        self.assertFailedWith(run, "existing", EROFS)
        self.assertEqual(content(self.p("Makefile.local")), "CFLAGS = -O2\n")
        self.assertMovedAside(run, self.p("pkg/Makefile.local"), "pkg/Makefile.local", text="CC = evil\n")

    # --- 8. what keeps working ------------------------------------------------------------------------
    def test_ordinary_work_is_kept(self):
        """New ordinary files stay, and so do names close to guarded ones; a new plain repository in
        a subdirectory keeps its .git; nothing is moved aside; the exit status is the command's."""
        self.own()
        kept = ["notes.txt", "src/main.c", ".env.example", ".gitignore", ".bashrc.bak", "bashrc", "my.gitconfig",
                "vscode/tasks.json", ".vscode-notes", ".idea-old/x", "profile"]
        script = "; ".join("mkdir -p $(dirname %s) && echo made > %s" % (rel, rel) for rel in kept)
        script += ("; git init -q sub && git -C sub -c user.name=t -c user.email=t@t commit -q --allow-empty -m x"
                   "; exit 3")
        run = self.sandboxed(script)
        self.assertEqual(run.rc, 3, run)
        for rel in kept:
            self.assertEqual(content(self.p(rel)), "made\n", rel)
        self.assertTrue(os.path.isfile(self.p("sub/.git/HEAD")), run)
        self.assertTrue(os.path.isdir(self.p("sub/.git/hooks")), run)
        p = subprocess.run(["git", "-C", self.p("sub"), "-c", "safe.directory=*", "log", "--oneline"],
                           capture_output=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(run.summary.get("quarantined"), [], run)
        self.assertNotIn("created", run.err)


class GuardsAsNobody(GuardsAsRoot):
    """The same suite as an unprivileged user, through user namespaces."""
    user = 65534


if __name__ == "__main__":
    unittest.main()
