"""The workspace boundary of `sluice exec`: what a command can read and write of the caller's files,
with real Git repositories (nested directories, a linked worktree, a submodule) and real tools, as
root and again as an unprivileged user (65534). Every escape is also tried outside the sandbox where
that proves the target exists. Shares the exec suite's fixtures."""
import json
import os
import shutil
import subprocess
import unittest

import test_exec as base
from harness import PYTHON, SLUICE
from harness import log_records

M = base.M
setUpModule = base.setUpModule
tearDownModule = base.tearDownModule

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main",
       "-c", "protocol.file.allow=always"]


class WorkspaceAsRoot(base.ExecCase):

    def own(self, *paths):
        """Gives paths to the test's user: Git refuses repositories other users own."""
        if self.user is not None:
            for p in paths:
                subprocess.run(["chown", "-R", "%d:%d" % (self.user, self.user), p], check=True)

    def write(self, path, text, mode=0o644):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)

    def run_in(self, cwd, *argv, **kw):
        return self.sx("--sandbox-profile", "offline", "--", *argv, cwd=cwd, **kw)

    def repo(self, path):
        subprocess.run(GIT + ["init", "-q", path], check=True)
        self.write(os.path.join(path, "README"), "readme\n")
        subprocess.run(GIT + ["-C", path, "add", "README"], check=True)
        subprocess.run(GIT + ["-C", path, "commit", "-qm", "first"], check=True)
        return path

    # --- the home ---------------------------------------------------------------------------
    def test_home_is_empty_and_keys_unreachable(self):
        self.write(os.path.join(self.home, ".ssh", "id_ed25519"), "PRIVATE KEY\n", 0o600)
        self.own(self.home)
        outside = subprocess.run(self.prefix() + ["sh", "-c", "cat ~/.ssh/id_*"], env=self.env(), capture_output=True)
        self.assertEqual(outside.stdout, b"PRIVATE KEY\n")
        p = self.run_in(self.work, "sh", "-c", "ls -A ~; cat ~/.ssh/id_* 2>&1; echo rc=$?")
        self.assertEqual(p.returncode, 0, p.stderr)
        out = p.stdout.decode()
        self.assertNotIn("PRIVATE KEY", out)
        self.assertNotIn(".ssh", out.split("rc=")[0].split("cat:")[0])
        self.assertIn("rc=1", out)

    # --- Git layouts --------------------------------------------------------------------------
    def test_git_status_in_repository_worktree_and_submodule(self):
        repo = self.repo(os.path.join(self.work, "repo"))
        os.makedirs(os.path.join(repo, "deep", "er"))
        sub_src = self.repo(os.path.join(self.work, "subsrc"))
        subprocess.run(GIT + ["-C", repo, "submodule", "add", "-q", sub_src, "sub"], check=True, capture_output=True)
        subprocess.run(GIT + ["-C", repo, "commit", "-qm", "sub"], check=True)
        wt = os.path.join(self.work, "wt")
        subprocess.run(GIT + ["-C", repo, "worktree", "add", "-q", wt], check=True, capture_output=True)
        self.write(os.path.join(repo, "deep", "new.txt"), "new\n")
        self.own(self.work)
        for cwd, want in ((os.path.join(repo, "deep", "er"), "?? ../"), (wt, ""),
                          (os.path.join(repo, "sub"), ""), (repo, "?? deep/")):
            p = self.run_in(cwd, "git", "status", "--short")
            self.assertEqual(p.returncode, 0, (cwd, p.stderr))
            self.assertEqual(p.stdout.decode().strip(), want, cwd)
            p = self.run_in(cwd, "git", "log", "--oneline", "-1")
            self.assertEqual(p.returncode, 0, (cwd, p.stderr))
        # A linked worktree's Git metadata outside the workspace is there, read-only.
        p = self.run_in(wt, "sh", "-c", "git diff --stat HEAD; touch \"$(git rev-parse --git-common-dir)/x\" 2>&1")
        self.assertIn(b"Read-only file system", p.stdout)

    def test_hooks_and_git_config_cannot_be_planted(self):
        repo = self.repo(os.path.join(self.work, "repo"))
        self.own(self.work)
        marker = os.path.join(self.work, "hook-ran")
        hook = os.path.join(repo, ".git", "hooks", "pre-commit")
        p = self.run_in(repo, "sh", "-c",
                        "printf '#!/bin/sh\\ntouch %s\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; "
                        "git config core.hooksPath /tmp; echo change >> README; git -c user.name=t -c user.email=t@t "
                        "commit -qam inside; exit 0" % marker)
        self.assertFalse(os.path.exists(hook))
        self.assertFalse(os.path.exists(marker))
        self.assertNotIn("hooksPath", open(os.path.join(repo, ".git", "config")).read())
        # The commit itself may be made: the workspace is writable, its Git objects too.
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_agent_and_sluice_settings_read_only(self):
        repo = self.repo(os.path.join(self.work, "repo"))
        for rel in (".claude/settings.json", ".sluice/policy.toml", "opencode.json"):
            self.write(os.path.join(repo, rel), "{}\n" if rel.endswith("json") else "[policy]\ndeny = []\n", 0o666)
        self.own(self.work)
        for rel in (".claude/settings.json", ".sluice/policy.toml", "opencode.json"):
            p = self.run_in(repo, "sh", "-c", "echo changed > " + rel)
            self.assertNotEqual(p.returncode, 0, rel)
            self.assertIn(b"Read-only file system", p.stderr)
            self.assertNotIn("changed", open(os.path.join(repo, rel)).read())
        p = self.run_in(repo, "sh", "-c", "echo x > .claude/new.json")
        self.assertNotEqual(p.returncode, 0)

    def test_settings_and_credentials_created_by_the_command_are_moved_aside(self):
        """A command that creates agent settings (.claude/settings.json with a hook, .mcp.json), the
        repository's .sluice/ or an exact credential name (.env, .npmrc, .docker/config.json) where
        none was at its start, anywhere in the workspace, finds them moved
        to NAME.sluice-quarantine-ID when it ends: a hook or MCP server it planted never reaches the
        agent host, which runs them unsandboxed. Said on stderr and in the JSON summary; the exit
        status is the command's. Other new files stay; names that existed keep their protection."""
        repo = self.repo(os.path.join(self.work, "repo"))
        sub = os.path.join(repo, "pkg")
        os.makedirs(sub)
        self.write(os.path.join(repo, ".env.example"), "A=\n")  # present at start: untouched
        self.own(self.work)
        summary = os.path.join(self.work, "summary.json")
        planted = {".claude/settings.json": '{"hooks": {"PreToolUse": []}}', ".mcp.json": "{}",
                   ".sluice/policy.toml": "[sandbox]", ".env": "TOKEN=planted", ".npmrc": "registry=x",
                   ".docker/config.json": "{}"}
        script = "; ".join("mkdir -p $(dirname %s) && echo '%s' > %s" % (rel, text, rel)
                           for rel, text in planted.items())
        script += "; echo '{}' > pkg/.mcp.json; echo kept > notes.txt; echo new > .env.example2; exit 3"
        p = self.sx("--sandbox-profile", "offline", "--json-summary", summary, "--", "sh", "-c", script,
                    cwd=repo)
        self.assertEqual(p.returncode, 3, p.stderr)
        err = p.stderr.decode()
        moved = {m["path"]: m["movedTo"] for m in json.load(open(summary))["quarantined"]}
        cid = json.load(open(summary))["commandId"]
        for rel, text in planted.items():
            top = rel if rel.startswith(".docker") else rel.split("/")[0]
            path = os.path.join(repo, top)
            self.assertFalse(os.path.exists(path), rel)
            self.assertEqual(moved.get(path), path + ".sluice-quarantine-" + cid, (rel, moved))
            self.assertIn("created %s" % path, err)
            aside = os.path.join(repo, rel.replace(top, top + ".sluice-quarantine-" + cid, 1))
            self.assertEqual(open(aside).read().strip(), text, rel)
        # Other new files stay; a guarded name in another directory is moved aside too (agent
        # hosts and editors take settings from whatever directory they are started in).
        for rel in ("notes.txt", ".env.example2", ".env.example"):
            self.assertTrue(os.path.exists(os.path.join(repo, rel)), rel)
        self.assertEqual(moved.get(os.path.join(repo, "pkg", ".mcp.json")),
                         os.path.join(repo, "pkg", ".mcp.json.sluice-quarantine-" + cid))
        # In the working directory too, when it is below the root.
        p = self.sx("--sandbox-profile", "offline", "--json-summary", summary, "--", "sh", "-c",
                    "mkdir .codex && echo x > .codex/config.toml && echo S=1 > .env", cwd=sub)
        self.assertEqual(p.returncode, 0, p.stderr)
        cid = json.load(open(summary))["commandId"]
        for name in (".codex", ".env"):
            self.assertFalse(os.path.exists(os.path.join(sub, name)), name)
            self.assertTrue(os.path.exists(os.path.join(sub, name + ".sluice-quarantine-" + cid)), name)

    def test_submodule_config_and_hooks_cannot_be_planted(self):
        """A submodule's config and hooks live in the superproject's .git/modules/NAME: Git outside
        the sandbox reads them (`git status` runs in every submodule), so they are read-only too."""
        repo = self.repo(os.path.join(self.work, "repo"))
        sub_src = self.repo(os.path.join(self.work, "subsrc"))
        subprocess.run(GIT + ["-C", repo, "submodule", "add", "-q", sub_src, "lib/sub"], check=True,
                       capture_output=True)
        subprocess.run(GIT + ["-C", repo, "commit", "-qm", "sub"], check=True)
        self.own(self.work)
        moddir = os.path.join(repo, ".git", "modules", "lib", "sub")
        self.assertTrue(os.path.isfile(os.path.join(moddir, "config")), os.listdir(os.path.join(repo, ".git", "modules")))
        before = open(os.path.join(moddir, "config")).read()
        p = self.run_in(repo, "sh", "-c",
                        "git -C lib/sub config core.fsmonitor 'touch /tmp/x' 2>&1; "
                        "echo '#!/bin/sh' > .git/modules/lib/sub/hooks/post-checkout 2>&1; git status --short; exit 0")
        self.assertIn(b"could not write config file", p.stdout)  # git's rename onto the mount: EBUSY
        self.assertIn(b"Read-only file system", p.stderr)  # the hook
        self.assertEqual(open(os.path.join(moddir, "config")).read(), before)
        self.assertFalse(os.path.exists(os.path.join(moddir, "hooks", "post-checkout")))

    def test_new_repository_with_programs_in_its_config_is_moved_aside(self):
        """A repository the command creates (git init, git clone .) stays when its config holds only
        what git init and git clone write and its hooks only the samples; one that would run a
        program when Git runs there outside (core.fsmonitor, an alias with !, a hook) is moved to
        .git.sluice-quarantine-ID."""
        summary = os.path.join(self.work, "summary.json")
        for name, extra, kept in (("plain", "git remote add origin https://example.test/r.git; git config user.name me", True),
                                  ("fsmonitor", "git config core.fsmonitor 'touch /tmp/x'", False),
                                  ("alias", "git config alias.st '!touch /tmp/x'", False),
                                  ("include", "git config include.path /tmp/other", False),
                                  ("hook", "printf '#!/bin/sh\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit", False)):
            d = os.path.join(self.work, name)
            os.makedirs(d)
            self.own(d)
            p = self.sx("--sandbox-profile", "offline", "--json-summary", summary, "--", "sh", "-c",
                        "git init -q . && " + extra + " && git -c user.name=t -c user.email=t@t commit -q "
                        "--allow-empty -m x", cwd=d)
            self.assertEqual(p.returncode, 0, (name, p.stderr))
            cid = json.load(open(summary))["commandId"]
            self.assertEqual(os.path.isdir(os.path.join(d, ".git")), kept, name)
            self.assertEqual(os.path.isdir(os.path.join(d, ".git.sluice-quarantine-" + cid)), not kept, name)
            if not kept:
                self.assertIn(b"/.git, a Git repository whose configuration or hooks would run programs", p.stderr)
                self.assertEqual(json.load(open(summary))["quarantined"][0]["path"], os.path.join(d, ".git"))

    # --- credentials in the workspace ---------------------------------------------------------
    def test_credential_files_hidden(self):
        files = {".env": "A=1", ".env.local": "B=2", "src/deep/server.pem": "PEM", "keys/id_rsa": "RSA",
                 ".npmrc": "//r/:_authToken=t", ".aws/credentials": "[default]", "secrets.tfvars": "x=1",
                 "notes.txt": "plain"}
        for rel, text in files.items():
            self.write(os.path.join(self.work, rel), text + "\n", 0o644)
        policy = os.path.join(self.work, "..", os.path.basename(self.work) + "-policy.toml")
        policy = os.path.realpath(policy)
        with open(policy, "w") as f:
            f.write(open(M["policy"]).read() + '\n[sandbox]\ncredential_files = ["*.tfvars"]\n')
        os.chmod(policy, 0o644)
        self.own(self.work)
        summary = os.path.join(self.work, "summary.json")
        try:
            script = "; ".join("cat %s 2>/dev/null; echo '|'" % rel for rel in files)
            p = self.sx("--policy", policy, "--sandbox-profile", "offline", "--json-summary", summary, "--",
                        "sh", "-c", script + "; echo leaked > .env 2>&1; exit 0", policy=False)
            self.assertEqual(p.returncode, 0, p.stderr)
            out = p.stdout.decode()
            for rel, text in files.items():
                if rel == "notes.txt":
                    self.assertIn(text, out)
                else:
                    self.assertNotIn(text, out, rel)
            self.assertEqual(open(os.path.join(self.work, ".env")).read(), "A=1\n")
            hidden = json.load(open(summary))["workspaceHidden"]
            for rel in (".env", ".env.local", "src/deep/server.pem", "keys/id_rsa", ".npmrc", ".aws", "secrets.tfvars"):
                self.assertIn(os.path.join(self.work, rel), hidden)
        finally:
            os.unlink(policy)

    def test_hard_link_to_outside_refused(self):
        outside = os.path.join(M["tmp"], "linked-secret-%s" % self.user)
        with open(outside, "w") as f:
            f.write("outside\n")
        link = os.path.join(self.work, "innocent.txt")
        os.link(outside, link)
        try:
            marker = os.path.join(self.work, "ran")
            p = self.sx("--sandbox-profile", "offline", "--", "touch", marker)
            self.assertEqual(p.returncode, 125)
            self.assertIn(link, p.stderr.decode())
            self.assertIn("hard link", p.stderr.decode())
            self.assertFalse(os.path.exists(marker))
        finally:
            os.unlink(link)
            os.unlink(outside)
        # Two links that are both inside are fine.
        a = os.path.join(self.work, "a.txt")
        self.write(a, "a\n")
        os.link(a, os.path.join(self.work, "b.txt"))
        self.assertEqual(self.sx("--sandbox-profile", "offline", "--", "true").returncode, 0)

    # --- escapes --------------------------------------------------------------------------------
    def test_symlinks_and_traversal_lead_nowhere(self):
        secret_dir = os.path.join(M["tmp"], "outside-dir-%s" % self.user)
        os.makedirs(secret_dir, exist_ok=True)
        secret = os.path.join(secret_dir, "secret.txt")
        self.write(secret, "TOPSECRET\n")
        subprocess.run(["chmod", "-R", "a+rX", secret_dir], check=True)
        rel = os.path.relpath(secret, self.work)
        os.symlink(secret, os.path.join(self.work, "abs-link"))
        os.symlink(rel, os.path.join(self.work, "rel-link"))
        os.symlink(secret_dir, os.path.join(self.work, "dir-link"))
        outside = subprocess.run(self.prefix() + ["cat", os.path.join(self.work, "abs-link")], capture_output=True)
        self.assertEqual(outside.stdout, b"TOPSECRET\n")  # the links work outside
        attempts = ["cat abs-link", "cat rel-link", "cat dir-link/secret.txt", "cat " + rel, "cat " + secret,
                    "env cat " + secret, "echo " + secret + " | xargs cat",
                    "find " + secret_dir + " -name secret.txt -exec cat {} +",
                    PYTHON + " -c \"print(open('" + secret + "').read())\"",
                    "cd dir-link && cat secret.txt"]
        if shutil.which("busybox"):  # one binary, many applets: none of them sees more
            attempts += ["busybox cat " + secret, "busybox sh -c 'cat " + secret + "'",
                         "busybox find " + secret_dir + " -exec busybox cat {} +"]
        for cmd in attempts:
            p = self.run_in(self.work, "sh", "-c", cmd)
            self.assertNotIn(b"TOPSECRET", p.stdout, cmd)
            self.assertNotEqual(p.returncode, 0, cmd)
        shutil.rmtree(secret_dir)

    def test_startup_file_indirection_dropped(self):
        marker = os.path.join(self.work, "indirect")
        script = os.path.join(self.work, "rc.sh")
        self.write(script, "touch %s\n" % marker, 0o755)
        p = self.run_in(self.work, "bash", "-c", "env | grep -E '^(LD_PRELOAD|BASH_ENV|ENV)=' ; sh -i -c true; exit 0",
                        env={"BASH_ENV": script, "ENV": script, "LD_PRELOAD": "/nonexistent.so"})
        self.assertEqual(p.stdout, b"")
        self.assertFalse(os.path.exists(marker))

    def test_helpers_cannot_write_outside(self):
        """A package-manager helper (an npm `prepare`, a build backend) runs with the workspace
        writable and nothing else of the host: its writes to the home or system paths go nowhere."""
        self.write(os.path.join(self.home, ".bashrc"), "# mine\n", 0o666)
        self.own(self.home)
        helper = ("echo evil >> ~/.bashrc; mkdir -p ~/.config/autostart && echo x > ~/.config/autostart/x; "
                  "echo x > /usr/local/bin/sluice-planted 2>/dev/null; echo x > /etc/profile.d/planted.sh 2>/dev/null; "
                  "echo built > artifact; exit 0")
        p = self.run_in(self.work, "sh", "-c", helper)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(open(os.path.join(self.home, ".bashrc")).read(), "# mine\n")
        self.assertFalse(os.path.exists(os.path.join(self.home, ".config", "autostart")))
        self.assertFalse(os.path.exists("/usr/local/bin/sluice-planted"))
        self.assertFalse(os.path.exists("/etc/profile.d/planted.sh"))
        self.assertEqual(open(os.path.join(self.work, "artifact")).read(), "built\n")

    def test_npm_prepare_script_cannot_write_outside(self):
        """A real npm lifecycle script (`prepare`, run by `npm install`) inside the sandbox: it builds
        in the workspace, and its writes to the home and system paths go nowhere."""
        if not shutil.which("npm"):
            self.skipTest("no npm on this machine")
        self.write(os.path.join(self.home, ".bashrc"), "# mine\n", 0o666)
        self.own(self.home)
        script = ("echo evil >> $HOME/.bashrc; mkdir -p /usr/local/lib/sluice-planted 2>/dev/null; "
                  "echo x > /etc/sluice-planted 2>/dev/null; echo built > built.txt")
        self.write(os.path.join(self.work, "package.json"),
                   json.dumps({"name": "probe", "version": "1.0.0", "scripts": {"prepare": script}}))
        self.own(self.work)
        p = self.run_in(self.work, "npm", "install", "--offline", "--no-audit", "--no-fund",
                        "--update-notifier=false", timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(open(os.path.join(self.work, "built.txt")).read(), "built\n")
        self.assertEqual(open(os.path.join(self.home, ".bashrc")).read(), "# mine\n")
        self.assertFalse(os.path.exists("/usr/local/lib/sluice-planted"))
        self.assertFalse(os.path.exists("/etc/sluice-planted"))

    def test_pip_build_backend_cannot_write_outside(self):
        """A real build backend (setuptools, run by `pip wheel --no-build-isolation`) executes the
        project's setup.py inside the sandbox: the wheel is built in the workspace, while its writes to
        the home and system paths and its read of a file outside go nowhere."""
        secret = os.path.join(M["tmp"], "backend-secret-%s.txt" % self.user)
        self.write(secret, "TOPSECRET\n")
        outside = subprocess.run(self.prefix() + ["cat", secret], capture_output=True)
        self.assertEqual(outside.stdout, b"TOPSECRET\n")  # readable outside: the test can fail
        self.write(os.path.join(self.home, ".bashrc"), "# mine\n", 0o666)
        self.own(self.home)
        setup = f"""import os
from setuptools import setup
leak = ""
try:
    leak = open({secret!r}).read()
except OSError as e:
    leak = "unreadable"
open("leak.txt", "w").write(leak)
for path in (os.path.expanduser("~/.bashrc"), "/etc/sluice-planted", "/usr/local/lib/sluice-planted"):
    try:
        with open(path, "a") as f:
            f.write("evil\\n")
    except OSError:
        pass
setup(name="probe", version="1.0", py_modules=["probe"])
"""
        self.write(os.path.join(self.work, "setup.py"), setup)
        self.write(os.path.join(self.work, "probe.py"), "VALUE = 1\n")
        self.own(self.work)
        p = self.run_in(self.work, PYTHON, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
                        "--no-cache-dir", "--disable-pip-version-check", "-w", "dist", ".", timeout=180)
        self.assertEqual(p.returncode, 0, p.stdout.decode() + p.stderr.decode())
        self.assertTrue([n for n in os.listdir(os.path.join(self.work, "dist")) if n.endswith(".whl")])
        self.assertEqual(open(os.path.join(self.work, "leak.txt")).read(), "unreadable")
        self.assertEqual(open(os.path.join(self.home, ".bashrc")).read(), "# mine\n")
        self.assertFalse(os.path.exists("/etc/sluice-planted"))
        self.assertFalse(os.path.exists("/usr/local/lib/sluice-planted"))
        os.unlink(secret)

    def test_read_only_profile_and_skill_defaults(self):
        p = self.run_in(self.work, "touch", "x")
        self.assertEqual(p.returncode, 0)
        p = self.sx("--sandbox-profile", "offline", "--filesystem", "read-only", "--", "touch", "y")
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"Read-only file system", p.stderr)
        pol = os.path.join(M["tmp"], "fs-policy-%s.toml" % self.user)
        with open(pol, "w") as f:
            f.write('[skills.reader]\ndefault_profile = "offline"\nfilesystem = "read-only"\n'
                    '[skills.builder]\ndefault_profile = "offline"\nfilesystem = "read-only"\n'
                    'filesystem_escalations = ["workspace-write"]\n')
        os.chmod(pol, 0o644)
        p = self.sx("--policy", pol, "--skill", "reader", "--", "touch", "z", policy=False)
        self.assertNotEqual(p.returncode, 0)
        p = self.sx("--policy", pol, "--skill", "reader", "--filesystem", "workspace-write", "--", "true", policy=False)
        self.assertEqual(p.returncode, 125)
        self.assertIn("filesystem_escalations", p.stderr.decode())
        p = self.sx("--policy", pol, "--skill", "builder", "--filesystem", "workspace-write", "--", "touch", "z",
                    policy=False)
        self.assertEqual(p.returncode, 0, p.stderr)
        # A repository may narrow to read-only, never widen.
        self.write(os.path.join(self.work, ".sluice", "policy.toml"), 'filesystem = "read-only"\n')
        p = self.sx("--sandbox-profile", "offline", "--", "touch", "w")
        self.assertNotEqual(p.returncode, 0)
        self.assertFalse(os.path.exists(os.path.join(self.work, "w")))
        os.unlink(pol)

    # --- tool caches ----------------------------------------------------------------------------
    def npm_registry(self):
        """A one-package npm registry on the test origin (static files under its /files/): the
        packument and the tarball it names, with the integrity npm checks."""
        import base64, hashlib, io, tarfile
        name = "sluice-probe-pkg"
        reg = os.path.join(M["tmp"], "www", "npmreg")
        os.makedirs(os.path.join(reg, "tarballs"), exist_ok=True)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as t:
            data = json.dumps({"name": name, "version": "1.0.0", "main": "index.js"}).encode()
            for member, body in (("package/package.json", data), ("package/index.js", b"module.exports = 42;\n")):
                info = tarfile.TarInfo(member)
                info.size = len(body)
                info.mode = 0o644
                t.addfile(info, io.BytesIO(body))
        tgz = buf.getvalue()
        tar_path = "/files/npmreg/tarballs/%s-1.0.0.tgz" % name
        with open(os.path.join(reg, "tarballs", name + "-1.0.0.tgz"), "wb") as f:
            f.write(tgz)
        dist = {"tarball": "https://origin.test:8443" + tar_path,
                "integrity": "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode(),
                "shasum": hashlib.sha1(tgz).hexdigest()}
        with open(os.path.join(reg, name), "w") as f:
            json.dump({"name": name, "dist-tags": {"latest": "1.0.0"},
                       "versions": {"1.0.0": {"name": name, "version": "1.0.0", "dist": dist}}}, f)
        subprocess.run(["chmod", "-R", "a+rX", reg], check=True)
        return name, tar_path

    def test_npm_cache_persists_between_runs_outside_the_real_home(self):
        """--cache npm: a second `npm install` of the same registry package in a new project asks
        the registry for no tarball (the access log), the cache is sluice's directory under
        ~/.cache/sluice, and the real ~/.npm is never made; without --cache the tarball is fetched
        again."""
        if not shutil.which("npm"):
            self.skipTest("no npm on this machine")
        name, tar_path = self.npm_registry()
        # Every directory above the cache must be the user's or root's and not open to others
        # (the scratch workspace is 0777): give it to the user.
        self.own(self.work)

        def install(project, *extra):
            d = os.path.join(self.work, project)
            os.makedirs(d)
            self.write(os.path.join(d, "package.json"), json.dumps({"name": project, "version": "1.0.0"}))
            self.own(d)
            log = os.path.join(self.work, project + ".log")
            p = self.sx("--sandbox-profile", "network-read", "--access-log", log, *extra, "--", "npm", "install",
                        name, "--registry", "https://origin.test:8443/files/npmreg/", "--no-audit", "--no-fund",
                        "--update-notifier=false", cwd=d, timeout=180)
            self.assertEqual(p.returncode, 0, p.stdout.decode() + p.stderr.decode())
            self.assertTrue(os.path.isfile(os.path.join(d, "node_modules", name, "index.js")))
            lines = log_records(open(log))
            return sum(1 for x in lines if x["path"] == tar_path and x["decision"] == "allow")

        self.assertEqual(install("first", "--cache", "npm"), 1)
        self.assertEqual(install("second", "--cache", "npm"), 0)  # from the cache
        self.assertEqual(install("uncached"), 1)  # no cache: fetched again
        cache = os.path.join(self.home, ".cache", "sluice", "caches", "npm", ".npm")
        self.assertTrue(os.path.isdir(os.path.join(cache, "_cacache")), os.listdir(cache))
        self.assertFalse(os.path.exists(os.path.join(self.home, ".npm")))
        # A name sluice does not know is refused before anything runs.
        p = self.sx("--sandbox-profile", "offline", "--cache", "npmm", "--", "touch", "ran")
        self.assertEqual(p.returncode, 125)
        self.assertIn("--cache npmm: no such cache", p.stderr.decode())
        self.assertFalse(os.path.exists(os.path.join(self.work, "ran")))


class WorkspaceAsNobody(WorkspaceAsRoot):
    """The same suite as an unprivileged user, through user namespaces."""
    user = 65534


if __name__ == "__main__":
    unittest.main()
