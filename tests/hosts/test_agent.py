"""Conformance of `sluice agent claude|codex|opencode|pi`: the real hosts (the version this project
follows and the minimum of each), the host process itself inside one `sluice exec` boundary,
driven headlessly by the fake model server, which it reaches only through sluice's gateway under a name of its own
(model.test, pinned to 127.0.0.1). The key the test gives sluice never enters the boundary: the
gateway adds it to the model's requests. Run as root and as 65534."""
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

from netns_host import NetnsHostCase
from test_claude import (CACHE, CURRENT, MINIMUM, PYTHON, SLUICE, FakeModel, HostLoopback, free_port, full_matrix,
                         install_claude, prompt_for, server_cert)
from test_codex import CURRENT as CODEX_CURRENT, MINIMUM as CODEX_MINIMUM, install_codex
from test_opencode import CURRENT as OPENCODE_CURRENT, MINIMUM as OPENCODE_MINIMUM, QUIET, install_opencode
from test_pi import CURRENT as PI_CURRENT, MINIMUM as PI_MINIMUM, install_pi

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../integration"))
from git_sshd import GitSshd, agent_with_key  # noqa: E402
from page_driver import CHROMIUM, drive_page, start_chromium  # noqa: E402

KEY = "sk-test-REALKEY-5b1f0c"  # what sluice is given; the host inside must never see it


class AgentClaudeCurrentAsRoot(unittest.TestCase):
    version = CURRENT
    user = None

    @classmethod
    def setUpClass(cls):
        cls.bindir = install_claude(cls.version)
        cls.tmp = tempfile.mkdtemp(prefix="sluice-agent-")
        os.chmod(cls.tmp, 0o755)
        # The model endpoint speaks HTTPS, as a real one does, with a certificate for model.test
        # from a CA of the test's that the policy gives the gateway.
        cert, key, cls.model_ca = server_cert(cls.tmp, "model.test")
        cls.model = FakeModel(cls.tmp, (cert, key))
        cls.model_url = "https://model.test:%d" % cls.model.port
        cls.web = HostLoopback()  # "web.test": an allowed host
        # The same over HTTPS, for Claude's WebFetch (it upgrades http:// URLs).
        wcert, wkey, web_ca = server_cert(cls.tmp, "web.test")
        cls.secure_web = HostLoopback((wcert, wkey))
        bundle = os.path.join(cls.tmp, "upstream-ca.pem")
        with open(bundle, "w") as out:
            for ca in (cls.model_ca, web_ca):
                with open(ca) as f:
                    out.write(f.read())
        os.chmod(bundle, 0o644)
        cls.policy = os.path.join(cls.tmp, "policy.toml")
        with open(cls.policy, "w") as f:
            f.write('[skills.default]\ndefault_profile = "network-read"\nallow_domains = ["web.test:%d", "web.test:%d"]\n'
                    '[upstream]\nallow_addresses = ["127.0.0.1/32"]\n[upstream.resolve]\n"model.test" = "127.0.0.1"\n'
                    '"web.test" = "127.0.0.1"\n"other.test" = "127.0.0.1"\n[tls]\nupstream_ca_bundle = "%s"\n'
                    % (cls.web.port, cls.secure_web.port, bundle))
        os.chmod(cls.policy, 0o644)
        cls.outside = os.path.join(cls.tmp, "outside.txt")  # readable by every user, outside the workspace
        with open(cls.outside, "w") as f:
            f.write("OUTSIDE-THE-WORKSPACE\n")
        os.chmod(cls.outside, 0o644)

    @classmethod
    def tearDownClass(cls):
        cls.model.close()
        cls.web.close()
        cls.secure_web.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="case-", dir=self.tmp)
        self.home = os.path.join(self.work, "home")
        self.proj = os.path.join(self.work, "proj")
        os.makedirs(os.path.join(self.home, ".ssh"))
        os.makedirs(self.proj)
        with open(os.path.join(self.home, ".ssh", "id_ed25519"), "w") as f:
            f.write("SECRETKEY\n")
        with open(os.path.join(self.proj, "notes.txt"), "w") as f:
            f.write("IN-THE-WORKSPACE\n")
        if self.user is not None:
            subprocess.run(["chown", "-R", "%d:%d" % (self.user, self.user), self.work], check=True)
        os.chmod(self.work, 0o755)
        self.model.take()
        if os.path.exists(self.model.requests):
            os.unlink(self.model.requests)

    def prefix(self):
        if self.user is None:
            return []
        return ["setpriv", "--reuid=%d" % self.user, "--regid=%d" % self.user, "--clear-groups"]

    def env(self):
        return {"PATH": self.bindir + ":/usr/local/bin:/usr/bin:/bin", "HOME": self.home, "LANG": "C.UTF-8",
                "ANTHROPIC_API_KEY": KEY, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}

    def agent(self, tool, tool_input, host_args=(), policy=None, env=None, sluice_args=()):
        """One headless turn of Claude inside `sluice agent`; returns (the tool results the model
        saw, the process)."""
        argv = self.prefix() + [SLUICE, "agent", "claude", "--model-url", self.model_url,
                                "--policy", policy or self.policy, *sluice_args, "--", "-p", prompt_for(tool, tool_input),
                                "--output-format", "stream-json", "--verbose",
                                "--dangerously-skip-permissions"] + list(host_args)
        p = subprocess.run(argv, capture_output=True, env=dict(self.env(), **(env or {})), cwd=self.proj, timeout=180)
        return self.model.take(), p

    def bash(self, command, host_args=(), policy=None, env=None, sluice_args=()):
        results, p = self.agent("Bash", {"command": command, "description": "conformance"}, host_args, policy, env,
                                sluice_args)
        self.assertEqual(len(results), 1, "the model saw no tool result: %s %s" % (p.stdout[-2000:], p.stderr[-2000:]))
        return results[0]["content"], p

    def model_requests(self):
        with open(self.model.requests) as f:
            return [json.loads(l) for l in f if l.strip()]

    def test_a_turn_completes_with_the_key_added_outside(self):
        out, p = self.bash("echo key=$ANTHROPIC_API_KEY; readlink /proc/self/ns/net; cat /.sluice/agent")
        self.assertEqual(p.returncode, 0, p.stderr.decode()[-2000:])
        self.assertIn("key=sluice-credential-", out)  # the placeholder
        inner = [l for l in out.splitlines() if l.startswith("net:[")]
        self.assertTrue(inner and inner[0] != os.readlink("/proc/self/ns/net"), out)
        self.assertIn("claude", out)
        requests = self.model_requests()
        self.assertTrue(requests)
        for r in requests:  # every request reached the model with the key sluice added
            self.assertEqual(r["headers"].get("x-api-key"), KEY)

    def test_file_tools_see_only_the_workspace(self):
        for path, secret in ((os.path.join(self.home, ".ssh", "id_ed25519"), "SECRETKEY"),
                             (self.outside, "OUTSIDE-THE-WORKSPACE")):
            results, p = self.agent("Read", {"file_path": path})
            self.assertEqual(len(results), 1, p.stderr.decode()[-2000:])
            self.assertNotIn(secret, results[0]["content"])
        results, _ = self.agent("Read", {"file_path": os.path.join(self.proj, "notes.txt")})
        self.assertIn("IN-THE-WORKSPACE", results[0]["content"])  # the test can fail: Read works
        with open(self.outside) as f:  # and the file is there, outside
            self.assertIn("OUTSIDE", f.read())

    def test_the_hosts_network_and_its_mcp_servers_go_through_the_policy(self):
        port = self.web.port
        out, _ = self.bash("curl -s -m 5 http://web.test:%d/; echo; "
                           "curl -s -m 5 -o /dev/null -w post=%%{http_code} -X POST -d x http://web.test:%d/; echo; "
                           "curl -s -m 5 -o /dev/null -w other=%%{http_code} http://other.test:%d/" % (port, port, port))
        self.assertIn("HOSTREPLY", out)  # an allowed host
        self.assertIn("post=403", out)   # network-read: no POST there
        self.assertIn("other=403", out)  # nor any other host
        # The server's script is in the workspace (the host starts it inside, where /work is not).
        script = os.path.join(self.proj, "fetch_mcp.py")
        for name in ("fetch_mcp.py", "mcp_stdio.py"):
            shutil.copy(os.path.join(HERE, name), os.path.join(self.proj, name))
            os.chmod(os.path.join(self.proj, name), 0o644)
        mcp = json.dumps({"mcpServers": {"net": {"command": PYTHON, "args": [script]}}})
        hits = self.web.hits
        seen = {}
        for name, url in (("allowed", "http://web.test:%d/" % port), ("other", "http://other.test:%d/" % port),
                          ("host", "http://127.0.0.1:%d/" % port)):
            results, p = self.agent("mcp__net__fetch", {"url": url}, ["--mcp-config", mcp])
            self.assertEqual(len(results), 1, p.stdout.decode()[-2000:])
            seen[name] = results[0]["content"]
        self.assertIn("status=200 body=HOSTREPLY", seen["allowed"])
        self.assertIn("status=403", seen["other"])
        self.assertNotIn("HOSTREPLY", seen["host"])  # the host's loopback is not the sandbox's
        # The refused fetches (another host, the host's loopback) must not reach the server: at most
        # the allowed one did. (Under CI load the count was twice seen one short although the allowed
        # page had arrived; the cause is not found, and fewer connections breach nothing.)
        self.assertLessEqual(self.web.hits, hits + 1, self.web.requests)

    def test_web_fetch_goes_through_the_policy(self):
        """Claude's WebFetch, its domain check with claude.ai skipped as the user's settings say
        (skipWebFetchPreflight): the allowed host's page reaches the model (Claude has it summarised
        in a second model call), another host's does not."""
        claude_dir = os.path.join(self.home, ".claude")
        os.makedirs(claude_dir, exist_ok=True)
        with open(os.path.join(claude_dir, "settings.json"), "w") as f:
            json.dump({"skipWebFetchPreflight": True}, f)
        if self.user is not None:
            subprocess.run(["chown", "-R", "%d:%d" % (self.user, self.user), claude_dir], check=True)
        port = self.secure_web.port
        results, p = self.agent("WebFetch", {"url": "https://web.test:%d/" % port, "prompt": "What does it say?"})
        self.assertEqual(len(results), 1, p.stderr.decode()[-2000:])
        self.assertIn("HOSTREPLY", json.dumps(self.model_requests()), results)
        os.unlink(self.model.requests)
        results, p = self.agent("WebFetch", {"url": "https://other.test:%d/" % port, "prompt": "What does it say?"})
        self.assertEqual(len(results), 1, p.stderr.decode()[-2000:])
        self.assertNotIn("HOSTREPLY", json.dumps(self.model_requests()))
        self.assertRegex(results[0]["content"], "403|refused")  # sluice refused the CONNECT

    def test_an_askable_host_waits_for_a_person_on_the_page(self):
        """[approvals] around the whole agent: Claude's WebFetch of a host a person may allow waits;
        the person allows it once on the run's live page (headless Chromium, the address and token
        from the caller's state directory), and the page's text reaches the model."""
        if self.version != CURRENT:
            self.skipTest("the approvals loop is the gateway's; one Claude version carries it")
        if not os.path.exists(CHROMIUM):
            self.skipTest("chromium is not installed")
        claude_dir = os.path.join(self.home, ".claude")
        os.makedirs(claude_dir, exist_ok=True)
        with open(os.path.join(claude_dir, "settings.json"), "w") as f:
            json.dump({"skipWebFetchPreflight": True}, f)
        with open(self.policy) as f:
            policy_text = f.read().replace('"web.test:%d", "web.test:%d"' % (self.web.port, self.secure_web.port),
                                           '"web.test:%d"' % self.web.port)
        policy = os.path.join(self.work, "approvals.toml")
        with open(policy, "w") as f:
            f.write(policy_text + '[approvals]\nhosts = ["web.test:%d"]\ntimeout = "120s"\n' % self.secure_web.port)
        if self.user is not None:
            subprocess.run(["chown", "-R", "%d:%d" % (self.user, self.user), self.work], check=True)
        url = "https://web.test:%d/" % self.secure_web.port
        argv = self.prefix() + [SLUICE, "agent", "claude", "--model-url", self.model_url, "--policy", policy, "--",
                                "-p", prompt_for("WebFetch", {"url": url, "prompt": "What does it say?"}),
                                "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions"]
        agent = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env(), cwd=self.proj)
        browsers = []
        self.addCleanup(lambda: [b.kill() or b.wait() for b in browsers])
        try:
            state = os.path.join(self.home, ".local", "state", "sluice", "approvals")
            held, deadline = [], time.time() + 90
            while not held and time.time() < deadline and agent.poll() is None:
                time.sleep(0.2)
                runs = os.listdir(state) if os.path.isdir(state) else []
                if not runs:
                    continue
                with open(os.path.join(state, runs[0])) as f:
                    words = f.read().split()
                if len(words) < 2:  # a run's file from before sluice wrote it whole by renaming
                    continue
                admin, token = words[:2]
                req = urllib.request.Request("http://%s/api/approvals" % admin, headers={"Authorization": "Bearer " + token})
                with urllib.request.urlopen(req, timeout=10) as r:
                    held = json.load(r)["pending"]
            self.assertTrue(held, "no request waited for a decision (the agent: %s)" % agent.poll())
            self.assertEqual((held[0]["host"], held[0]["port"]), ("web.test", self.secure_web.port))
            clicked = asyncio.run(drive_page(start_chromium(browsers, self), "http://%s/#token=%s" % (admin, token),
                                             held[0]["id"]))
            self.assertTrue(clicked, "the page never showed the held request")
            out, err = agent.communicate(timeout=180)
        finally:
            if agent.poll() is None:
                agent.kill()
                agent.communicate()
        results = self.model.take()
        self.assertEqual(agent.returncode, 0, err.decode()[-2000:])
        self.assertEqual(len(results), 1, out.decode()[-2000:])
        self.assertIn("HOSTREPLY", json.dumps(self.model_requests()), results)

    def test_a_staged_session_is_reviewed_before_it_reaches_the_workspace(self):
        """`sluice agent claude --stage`: the host's Write tool and its shell change the project on a
        layer of the run's own; the next turn (--stage-run) sees the earlier one's work; nothing is
        in the project until `sluice apply` brings part of it, and `sluice discard` drops the rest."""
        if self.version != CURRENT:
            self.skipTest("staging is the sandbox's; one Claude version carries it")
        with open(os.path.join(self.proj, "gone.txt"), "w") as f:
            f.write("delete me\n")
        if self.user is not None:
            subprocess.run(["chown", "%d:%d" % (self.user, self.user), os.path.join(self.proj, "gone.txt")], check=True)
        new = os.path.join(self.proj, "new.txt")
        results, p = self.agent("Write", {"file_path": new, "content": "written by the host's Write tool\n"},
                                sluice_args=["--stage"])
        self.assertEqual(p.returncode, 0, p.stderr.decode()[-2000:])
        self.assertEqual(len(results), 1, p.stdout.decode()[-2000:])
        self.assertFalse(os.path.exists(new))   # staged, not in the project
        sluice = lambda *a: subprocess.run(self.prefix() + [SLUICE, *a], capture_output=True, env=self.env(),
                                           cwd=self.proj, timeout=60)
        runs = json.loads(sluice("runs", "--json").stdout)
        self.assertEqual(runs[0]["state"], "staged")
        rid = runs[0]["id"]
        out, p = self.bash("cat new.txt; echo changed > notes.txt; rm gone.txt", sluice_args=["--stage-run", rid])
        self.assertIn("written by the host's Write tool", out)
        with open(os.path.join(self.proj, "notes.txt")) as f:
            self.assertEqual(f.read(), "IN-THE-WORKSPACE\n")
        self.assertTrue(os.path.exists(os.path.join(self.proj, "gone.txt")))
        d = sluice("diff", rid)
        for line in (b"A new.txt", b"M notes.txt", b"D gone.txt", b"+changed"):
            self.assertIn(line, d.stdout, d.stdout.decode()[-2000:])
        a = sluice("apply", rid, "new.txt")
        self.assertEqual(a.returncode, 0, a.stderr)
        with open(new) as f:
            self.assertEqual(f.read(), "written by the host's Write tool\n")
        self.assertEqual(sluice("discard", rid).returncode, 0)
        with open(os.path.join(self.proj, "notes.txt")) as f:
            self.assertEqual(f.read(), "IN-THE-WORKSPACE\n")
        self.assertTrue(os.path.exists(os.path.join(self.proj, "gone.txt")))

    def test_the_key_never_appears_inside(self):
        # A key Claude stored in ~/.claude.json (a console login) stays out of the copy inside.
        stored = "sk-ant-stored-" + "9d41e07a"
        with open(os.path.join(self.home, ".claude.json"), "w") as f:
            json.dump({"hasCompletedOnboarding": True, "primaryApiKey": stored}, f)
        if self.user is not None:
            os.chown(os.path.join(self.home, ".claude.json"), self.user, self.user)
        out, _ = self.bash("cat ~/.claude.json; echo")
        self.assertIn("hasCompletedOnboarding", out)
        self.assertNotIn(stored, out)
        # The key is searched for in two halves joined by the shell, so that the command's own text
        # (in its command line and the transcript) does not hold it.
        out, _ = self.bash("env; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < $f; done; "
                           "a=%s; b=%s; grep -rsl -- \"$a$b\" ~ /tmp /.sluice /proc/self/ 2>/dev/null; "
                           "echo scanned" % (KEY[:10], KEY[10:]))
        self.assertIn("scanned", out)
        self.assertIn("ANTHROPIC_API_KEY=sluice-credential-", out)
        self.assertNotIn(KEY, out)
        for root, _, files in os.walk(self.home):  # transcripts and state the host wrote
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    self.assertNotIn(KEY.encode(), f.read(), os.path.join(root, name))

    def test_git_over_ssh_with_the_key_outside(self):
        """The host's shell fetches over SSH from a Git host on loopback (git.test): sluice logs in
        upstream with the caller's ssh-agent, which stays outside the boundary with the key."""
        d = tempfile.mkdtemp(dir=self.tmp)
        os.chmod(d, 0o755)
        port = free_port()
        sshd = GitSshd(d, "sluiceagentgit", [("127.0.0.1", port)], large=False)
        uid = self.user if self.user is not None else 0
        keys = tempfile.mkdtemp(dir=d)
        key = os.path.join(keys, "id")
        shutil.copy(sshd.user_key, key)
        for p in (keys, key):
            os.chown(p, uid, uid)
        os.chmod(key, 0o600)
        sock = os.path.join(keys, "agent.sock")
        agent = agent_with_key(self.prefix(), sock, key)
        try:
            known = os.path.join(self.home, ".ssh", "known_hosts")
            with open(known, "w") as f:
                f.write("[git.test]:%d %s\n" % (port, sshd.host_pub))
            os.chown(known, uid, uid)
            with open(self.policy) as f:
                text = f.read()
            text = text.replace('default_profile = "network-read"\n', 'default_profile = "network-read"\n'
                                'ssh = [{ host = "git.test", port = %d, user = "sluiceagentgit" }]\n' % port, 1)
            text = text.replace('[upstream.resolve]\n', '[upstream.resolve]\n"git.test" = "127.0.0.1"\n', 1)
            policy = os.path.join(d, "policy.toml")
            with open(policy, "w") as f:
                f.write(text)
            os.chmod(policy, 0o644)
            out, p = self.bash("git ls-remote ssh://sluiceagentgit@git.test:%d/~/org/repo.git; "
                               "echo sock=${SSH_AUTH_SOCK:-none}; ls %s 2>&1 | grep -c 'No such file'" % (port, keys),
                               policy=policy, env={"SSH_AUTH_SOCK": sock})
            self.assertIn("refs/heads/main", out, p.stderr.decode()[-2000:])
            # No agent socket inside (an older Claude Code's shell sets the variable empty).
            self.assertRegex(out, r"sock=(none)?\n1")
            self.assertIn("Accepted publickey for sluiceagentgit", sshd.log_since(0))
        finally:
            agent.kill()
            agent.wait()
            sshd.close()

    def test_settings_and_hooks_stay_read_only(self):
        claude_dir = os.path.join(self.home, ".claude")
        os.makedirs(claude_dir)
        with open(os.path.join(claude_dir, "settings.json"), "w") as f:
            f.write('{"theme": "dark"}\n')
        if self.user is not None:
            subprocess.run(["chown", "-R", "%d:%d" % (self.user, self.user), self.home], check=True)
        out, _ = self.bash("echo '{\"hooks\": {}}' > ~/.claude/settings.json; echo settings=$?; "
                           "echo evil > ~/.claude/hooks/h.sh; echo hooks=$?; "
                           "echo '{}' > ~/.claude/settings.local.json; echo local=$?; "
                           "echo note > ~/.claude/todo-state; echo state=$?")
        self.assertNotIn("settings=0", out)
        self.assertNotIn("hooks=0", out)
        self.assertIn("state=0", out)  # the host's own state is writable
        with open(os.path.join(claude_dir, "settings.json")) as f:
            self.assertEqual(f.read(), '{"theme": "dark"}\n')
        self.assertFalse(os.path.exists(os.path.join(claude_dir, "hooks", "h.sh")))
        # A settings file that did not exist is moved aside when the host ends.
        self.assertFalse(os.path.exists(os.path.join(claude_dir, "settings.local.json")))
        self.assertTrue([n for n in os.listdir(claude_dir) if n.startswith("settings.local.json.sluice-quarantine-")])
        with open(os.path.join(claude_dir, "todo-state")) as f:
            self.assertEqual(f.read(), "note\n")

    def test_exit_status_and_refusals(self):
        bad = subprocess.run(self.prefix() + ["claude", "--no-such-option"], capture_output=True, env=self.env(),
                             cwd=self.proj, timeout=60)
        self.assertNotEqual(bad.returncode, 0)
        p = subprocess.run(self.prefix() + [SLUICE, "agent", "claude", "--model-url", self.model_url,
                                            "--policy", self.policy, "--", "--no-such-option"],
                           capture_output=True, env=self.env(), cwd=self.proj, timeout=60)
        self.assertEqual(p.returncode, bad.returncode, p.stderr.decode()[-2000:])
        env = self.env()
        del env["ANTHROPIC_API_KEY"]
        p = subprocess.run(self.prefix() + [SLUICE, "agent", "claude", "--policy", self.policy, "--", "-p", "hi"],
                           capture_output=True, env=env, cwd=self.proj, timeout=60)
        self.assertEqual(p.returncode, 125)
        self.assertIn("ANTHROPIC_API_KEY", p.stderr.decode())


class NetnsAgentCase(NetnsHostCase):
    """What the Codex, OpenCode and Pi whole-agent suites share: the fake model behind HTTPS as
    model.test, the files the boundary must keep out or let in, and the policy."""
    model_tls = True

    def plant(self, mcp=False):
        """A private key in the home, a file outside the workspace and one inside (with mcp, the
        MCP server's script too), and the policy: network-read, web.test allowed."""
        os.makedirs(os.path.join(self.home, ".ssh"))
        with open(os.path.join(self.home, ".ssh", "id_ed25519"), "w") as f:
            f.write("SECRETKEY\n")
        self.outside = os.path.join(self.work, "outside.txt")
        with open(self.outside, "w") as f:
            f.write("OUTSIDE-THE-WORKSPACE\n")
        with open(os.path.join(self.proj, "notes.txt"), "w") as f:
            f.write("IN-THE-WORKSPACE\n")
        if mcp:
            for name in ("fetch_mcp.py", "mcp_stdio.py"):
                shutil.copy(os.path.join(HERE, name), os.path.join(self.proj, name))
        self.policy = os.path.join(self.work, "policy.toml")
        with open(self.policy, "w") as f:
            f.write('[skills.default]\ndefault_profile = "network-read"\nallow_domains = ["web.test:%d"]\n'
                    '[upstream]\nallow_addresses = ["127.0.0.1/32"]\n[upstream.resolve]\n"model.test" = "127.0.0.1"\n'
                    '"web.test" = "127.0.0.1"\n"other.test" = "127.0.0.1"\n[tls]\nupstream_ca_bundle = "%s"\n'
                    % (self.service_port, self.model_ca))

    def assert_key_not_in_home(self):
        """The key is in none of the files the host wrote in its home (sessions, state)."""
        for root, _, files in os.walk(self.home):
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    self.assertNotIn(KEY.encode(), f.read(), os.path.join(root, name))


class AgentCodexCurrentAsRoot(NetnsAgentCase):
    """`sluice agent codex`: Codex itself inside the boundary, in a network namespace with loopback
    only (Codex contacts the network when it starts), the fake model behind HTTPS as model.test."""
    host = "codex"
    version = CODEX_CURRENT

    @classmethod
    def install(cls, version):
        return install_codex(version)

    def configure(self):
        self.codex_home = os.path.join(self.home, ".codex")
        os.makedirs(self.codex_home)
        self.plant(mcp=True)
        with open(os.path.join(self.codex_home, "config.toml"), "w") as f:
            f.write('model_provider = "fake"\nmodel = "fake-model"\n\n[model_providers.fake]\nname = "fake"\n'
                    'base_url = "https://model.test:%d/v1"\nwire_api = "responses"\nenv_key = "FAKE_KEY"\n'
                    '\n[analytics]\nenabled = false\n\n[otel]\nmetrics_exporter = "none"\n'
                    '\n[mcp_servers.net]\ncommand = "%s"\nargs = ["%s"]\n'
                    % (self.model_port, PYTHON, os.path.join(self.proj, "fetch_mcp.py")))

    def host_env(self):
        return {"FAKE_KEY": KEY}

    def agent(self, command, host_args=()):
        results, p = self.run_host([SLUICE, "agent", "codex", "--policy", self.policy, "--", "exec",
                                    "--skip-git-repo-check", "--json", prompt_for("exec_command", {"cmd": command})]
                                   + list(host_args))
        self.assertEqual(len(results), 1, p.stdout.decode()[-2000:] + p.stderr.decode()[-2000:])
        return results[0]["content"], p

    def test_a_turn_completes_with_the_key_added_outside(self):
        out, p = self.agent("echo key=$FAKE_KEY; readlink /proc/self/ns/net; cat /.sluice/agent; echo hi > written.txt")
        self.assertEqual(p.returncode, 0, p.stderr.decode()[-2000:])
        self.assertIn("key=sluice-credential-", out)
        self.assert_inside_sluice(out)
        self.assertIn("codex", out)
        with open(os.path.join(self.proj, "written.txt")) as f:  # Codex's shell writes the workspace
            self.assertEqual(f.read(), "hi\n")
        with open(self.requests) as f:
            requests = [json.loads(l) for l in f if l.strip()]
        self.assertTrue(requests)
        for r in requests:
            self.assertEqual(r["headers"].get("authorization"), "Bearer " + KEY)

    def test_the_model_websocket_carries_a_turn_with_the_key_added_on_the_upgrade(self):
        """With supports_websockets (which Codex's built-in provider has), Codex opens the
        Responses WebSocket first: sluice allows it on the model route, adds the key on the
        upgrade, and a turn with a tool call completes over it, with no retry and no fallback."""
        if self.version != CODEX_CURRENT:
            self.skipTest("Codex %s predates the WebSocket transport's provider switch" % self.version)
        config = os.path.join(self.codex_home, "config.toml")
        with open(config) as f:
            text = f.read()
        with open(config, "w") as f:
            f.write(text.replace('env_key = "FAKE_KEY"\n', 'env_key = "FAKE_KEY"\nsupports_websockets = true\n'))
        out, p = self.agent("echo over-the-websocket")
        self.assertEqual(p.returncode, 0, p.stderr.decode()[-2000:])
        self.assertIn("over-the-websocket", out)
        with open(self.requests) as f:
            requests = [json.loads(l) for l in f if l.strip()]
        upgrades = [r for r in requests if r.get("websocket") and r["request"] is None]
        messages = [r for r in requests if r.get("websocket") and r["request"] is not None]
        self.assertEqual(len(upgrades), 1, [r["path"] for r in requests])  # opened once: no retry
        self.assertEqual(upgrades[0]["headers"].get("authorization"), "Bearer " + KEY)
        self.assertGreaterEqual(len(messages), 3)  # the prewarm, the turn, the tool's result
        self.assertFalse([r for r in requests if r.get("method") == "POST"])  # no fallback to HTTP
        self.assertNotIn(b"Reconnecting", p.stderr)

    def test_the_home_outside_the_workspace_and_the_key_stay_out(self):
        out, _ = self.agent("cat ~/.ssh/id_ed25519 %s; env; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done; "
                            "a=%s; b=%s; grep -rsl -- \"$a$b\" ~ /tmp /.sluice 2>/dev/null; echo scanned"
                            % (self.outside, KEY[:10], KEY[10:]))
        self.assertIn("scanned", out)
        self.assertNotIn("SECRETKEY", out)
        self.assertNotIn("OUTSIDE-THE-WORKSPACE", out)
        self.assertNotIn(KEY, out)
        self.assert_key_not_in_home()

    def test_the_hosts_network_and_its_mcp_servers_go_through_the_policy(self):
        port = self.service_port
        out, _ = self.agent("curl -s -m 5 http://web.test:%d/; echo; "
                            "curl -s -m 5 -o /dev/null -w post=%%{http_code} -X POST -d x http://web.test:%d/; echo; "
                            "curl -s -m 5 -o /dev/null -w other=%%{http_code} http://other.test:%d/" % (port, port, port))
        self.assertIn("HOSTREPLY", out)
        self.assertIn("post=403", out)
        self.assertIn("other=403", out)
        seen = {}
        for name, url in (("allowed", "http://web.test:%d/" % port), ("other", "http://other.test:%d/" % port)):
            results, p = self.run_host([SLUICE, "agent", "codex", "--policy", self.policy, "--", "exec",
                                        "--skip-git-repo-check", "--json",
                                        prompt_for("mcp__net__fetch", {"url": url})])
            self.assertEqual(len(results), 1, p.stdout.decode()[-3000:])
            seen[name] = results[0]["content"]
        self.assertIn("status=200 body=HOSTREPLY", seen["allowed"])
        self.assertIn("status=403", seen["other"])

    def test_settings_and_rules_stay_read_only(self):
        config = os.path.join(self.codex_home, "config.toml")
        with open(config) as f:
            before = f.read()
        out, _ = self.agent("echo 'x = 1' >> ~/.codex/config.toml; echo config=$?; "
                            "echo evil > ~/.codex/rules/default.rules; echo rules=$?; "
                            "echo '{}' > ~/.codex/hooks.json; echo hooks=$?")
        self.assertNotIn("config=0", out)
        self.assertNotIn("rules=0", out)
        with open(config) as f:
            self.assertEqual(f.read(), before)
        self.assertFalse(os.path.exists(os.path.join(self.codex_home, "rules", "default.rules")))
        self.assertFalse(os.path.exists(os.path.join(self.codex_home, "hooks.json")))  # moved aside
        self.assertTrue([n for n in os.listdir(self.codex_home) if n.startswith("hooks.json.sluice-quarantine-")])

    def test_exit_status(self):
        _, bad = self.run_host(["codex", "--no-such-option"])
        self.assertNotEqual(bad.returncode, 0)
        _, p = self.run_host([SLUICE, "agent", "codex", "--policy", self.policy, "--", "--no-such-option"])
        self.assertEqual(p.returncode, bad.returncode, p.stderr.decode()[-2000:])
        _, p = self.run_host([SLUICE, "agent", "codex", "--policy", self.policy, "--", "exec", "hi"],
                             env={"FAKE_KEY": ""})
        self.assertEqual(p.returncode, 125)
        self.assertIn("needs the model's key in FAKE_KEY", p.stderr.decode())


class AgentPiCurrentAsRoot(NetnsAgentCase):
    """`sluice agent pi`: Pi itself inside the boundary (its Node fetch ignores the proxy variables:
    sluice's capture takes its connections), in a loopback-only network namespace, the fake model
    behind HTTPS as model.test. Pi has no MCP client of its own."""
    host = "pi"
    version = PI_CURRENT

    @classmethod
    def install(cls, version):
        return install_pi(version)

    def configure(self):
        self.agent_dir = os.path.join(self.home, ".pi", "agent")
        os.makedirs(self.agent_dir)
        self.plant()
        with open(os.path.join(self.agent_dir, "models.json"), "w") as f:
            json.dump({"providers": {"fake": {
                "baseUrl": "https://model.test:%d/v1" % self.model_port, "api": "openai-completions", "apiKey": "FAKE_KEY",
                "models": [{"id": "fake-model", "name": "fake", "contextWindow": 100000, "maxTokens": 4096,
                            "input": ["text"], "reasoning": False,
                            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}}]}}}, f)

    def host_env(self):
        return {"FAKE_KEY": KEY, "PI_OFFLINE": "1", "PI_TELEMETRY": "0"}

    def agent(self, tool, tool_input):
        results, p = self.run_host([SLUICE, "agent", "pi", "--policy", self.policy, "--", "-p", "--provider", "fake",
                                    "--model", "fake-model", "--mode", "json", prompt_for(tool, tool_input)])
        self.assertEqual(len(results), 1, p.stdout.decode()[-2000:] + p.stderr.decode()[-2000:])
        return results[0]["content"], p

    def test_a_turn_completes_with_the_key_added_outside(self):
        out, p = self.agent("bash", {"command": "echo key=$FAKE_KEY; readlink /proc/self/ns/net; cat /.sluice/agent"})
        self.assertEqual(p.returncode, 0, p.stderr.decode()[-2000:])
        self.assertIn("key=sluice-credential-", out)
        self.assert_inside_sluice(out)
        with open(self.requests) as f:
            requests = [json.loads(l) for l in f if l.strip()]
        self.assertTrue(requests)
        for r in requests:
            self.assertEqual(r["headers"].get("authorization"), "Bearer " + KEY)

    def test_file_tools_see_only_the_workspace(self):
        for path, secret in ((os.path.join(self.home, ".ssh", "id_ed25519"), "SECRETKEY"),
                             (self.outside, "OUTSIDE-THE-WORKSPACE")):
            out, _ = self.agent("read", {"path": path})
            self.assertNotIn(secret, out)
        out, _ = self.agent("read", {"path": os.path.join(self.proj, "notes.txt")})
        self.assertIn("IN-THE-WORKSPACE", out)

    def test_network_and_the_key(self):
        port = self.service_port
        out, _ = self.agent("bash", {"command": "curl -s -m 5 http://web.test:%d/; echo; "
                                                "curl -s -m 5 -o /dev/null -w post=%%{http_code} -X POST -d x http://web.test:%d/; echo; "
                                                "curl -s -m 5 -o /dev/null -w other=%%{http_code} http://other.test:%d/; echo; "
                                                "env; a=%s; b=%s; grep -rsl -- \"$a$b\" ~ /tmp /.sluice 2>/dev/null; echo scanned"
                                                % (port, port, port, KEY[:10], KEY[10:])})
        self.assertIn("HOSTREPLY", out)
        self.assertIn("post=403", out)
        self.assertIn("other=403", out)
        self.assertIn("scanned", out)
        self.assertNotIn(KEY, out)
        self.assert_key_not_in_home()

    def test_settings_stay_read_only_and_a_written_key_is_refused(self):
        models = os.path.join(self.agent_dir, "models.json")
        with open(models) as f:
            before = f.read()
        out, _ = self.agent("bash", {"command": "echo x >> ~/.pi/agent/models.json; echo models=$?; "
                                                "echo evil > ~/.pi/agent/extensions/x.ts; echo ext=$?"})
        self.assertNotIn("models=0", out)
        self.assertNotIn("ext=0", out)
        with open(models) as f:
            self.assertEqual(f.read(), before)
        self.assertFalse(os.path.exists(os.path.join(self.agent_dir, "extensions", "x.ts")))
        # A key written into models.json would be read inside: refused, with the fix.
        with open(models, "w") as f:
            f.write(before.replace('"FAKE_KEY"', '"%s"' % KEY))
        _, p = self.run_host([SLUICE, "agent", "pi", "--policy", self.policy, "--", "-p", "--provider", "fake", "hi"])
        self.assertEqual(p.returncode, 125)
        self.assertIn("apiKey must name an environment variable", p.stderr.decode())
        # A state directory that holds the trusted policy's directory (~/.config/sluice) is refused.
        config = os.path.join(self.home, ".config")
        os.makedirs(config, exist_ok=True)
        with open(os.path.join(config, "models.json"), "w") as f:
            f.write(before)
        if self.user is not None:
            subprocess.run(["chown", "-R", "%d:%d" % (self.user, self.user), config], check=True)
        _, p = self.run_host([SLUICE, "agent", "pi", "--policy", self.policy, "--", "-p", "--provider", "fake", "hi"],
                             env={"PI_CODING_AGENT_DIR": config})
        self.assertEqual(p.returncode, 125)
        self.assertIn("holds the trusted policy directory", p.stderr.decode())


class AgentOpenCodeCurrentAsRoot(NetnsAgentCase):
    """`sluice agent opencode`: OpenCode itself inside the boundary, in a loopback-only network
    namespace, the fake model behind HTTPS as model.test, named by the user's own opencode.json."""
    host = "opencode"
    version = OPENCODE_CURRENT

    @classmethod
    def install(cls, version):
        return install_opencode(version)

    def configure(self):
        self.config = os.path.join(self.home, ".config", "opencode")
        os.makedirs(self.config)
        self.plant(mcp=True)
        self.settings = os.path.join(self.config, "opencode.json")
        with open(self.settings, "w") as f:
            json.dump({"provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "fake",
                                             "options": {"baseURL": "https://model.test:%d/v1" % self.model_port,
                                                         "apiKey": "{env:FAKE_KEY}"},
                                             "models": {"fake-model": {"name": "fake", "tool_call": True}}}},
                       "model": "fake/fake-model",
                       # OpenCode's own prompts let everything through: what holds is sluice's boundary.
                       "permission": {"external_directory": "allow", "bash": "allow", "read": "allow",
                                      "webfetch": "allow"},
                       "mcp": {"net": {"type": "local", "command": [PYTHON, os.path.join(self.proj, "fetch_mcp.py")]}}},
                      f, indent=2)

    def host_env(self):
        return dict(QUIET, FAKE_KEY=KEY)

    def agent(self, tool, tool_input, env=None):
        results, p = self.run_host([SLUICE, "agent", "opencode", "--policy", self.policy, "--", "run", "--format", "json",
                                    prompt_for(tool, tool_input)], env)
        self.assertEqual(len(results), 1, p.stdout.decode()[-2000:] + p.stderr.decode()[-3000:])
        return results[0]["content"], p

    def bash(self, command):
        return self.agent("bash", {"command": command, "description": "conformance"})

    def test_a_turn_completes_with_the_key_added_outside(self):
        out, p = self.bash("echo key=$FAKE_KEY; readlink /proc/self/ns/net; cat /.sluice/agent; echo hi > written.txt")
        self.assertEqual(p.returncode, 0, p.stderr.decode()[-2000:])
        self.assertIn("key=sluice-credential-", out)
        self.assert_inside_sluice(out)
        self.assertIn("opencode", out)
        with open(os.path.join(self.proj, "written.txt")) as f:
            self.assertEqual(f.read(), "hi\n")
        with open(self.requests) as f:
            requests = [json.loads(l) for l in f if l.strip()]
        self.assertTrue(requests)
        for r in requests:
            self.assertEqual(r["headers"].get("authorization"), "Bearer " + KEY)

    def test_file_tools_see_only_the_workspace(self):
        for path, secret in ((os.path.join(self.home, ".ssh", "id_ed25519"), "SECRETKEY"),
                             (self.outside, "OUTSIDE-THE-WORKSPACE")):
            out, _ = self.agent("read", {"filePath": path})
            self.assertNotIn(secret, out)
        out, _ = self.agent("read", {"filePath": os.path.join(self.proj, "notes.txt")})
        self.assertIn("IN-THE-WORKSPACE", out)

    def test_the_hosts_network_and_its_mcp_servers_go_through_the_policy(self):
        port = self.service_port
        out, _ = self.bash("curl -s -m 5 http://web.test:%d/; echo; "
                           "curl -s -m 5 -o /dev/null -w post=%%{http_code} -X POST -d x http://web.test:%d/; echo; "
                           "curl -s -m 5 -o /dev/null -w other=%%{http_code} http://other.test:%d/; echo; "
                           "env; a=%s; b=%s; grep -rsl -- \"$a$b\" ~ /tmp /.sluice 2>/dev/null; echo scanned"
                           % (port, port, port, KEY[:10], KEY[10:]))
        self.assertIn("HOSTREPLY", out)
        self.assertIn("post=403", out)
        self.assertIn("other=403", out)
        self.assertIn("scanned", out)
        self.assertNotIn(KEY, out)
        allowed, _ = self.agent("net_fetch", {"url": "http://web.test:%d/" % port})
        self.assertIn("status=200 body=HOSTREPLY", allowed)
        # Its own web fetch tool: the allowed host's page, not another host's.
        fetched, _ = self.agent("webfetch", {"url": "http://web.test:%d/" % port, "format": "text"})
        self.assertIn("HOSTREPLY", fetched)
        refused, _ = self.agent("webfetch", {"url": "http://other.test:%d/" % port, "format": "text"})
        self.assertNotIn("HOSTREPLY", refused)
        self.assertIn("403", refused)
        other, _ = self.agent("net_fetch", {"url": "http://other.test:%d/" % port})
        self.assertIn("status=403", other)
        self.assert_key_not_in_home()

    def test_settings_stay_read_only_and_a_written_key_is_refused(self):
        with open(self.settings) as f:
            before = f.read()
        out, _ = self.bash("echo x >> ~/.config/opencode/opencode.json; echo config=$?; "
                           "mkdir -p ~/.config/opencode/plugin; echo evil > ~/.config/opencode/plugin/x.js; echo plugin=$?")
        self.assertNotIn("config=0", out)
        self.assertNotIn("plugin=0", out)
        with open(self.settings) as f:
            self.assertEqual(f.read(), before)
        self.assertFalse(os.path.exists(os.path.join(self.config, "plugin", "x.js")))
        # A key written into opencode.json would be read inside: refused, with the fix.
        with open(self.settings, "w") as f:
            f.write(before.replace('"{env:FAKE_KEY}"', '"%s"' % KEY))
        _, p = self.run_host([SLUICE, "agent", "opencode", "--policy", self.policy, "--", "run", "hi"])
        self.assertEqual(p.returncode, 125)
        self.assertIn("must name an environment variable", p.stderr.decode())
        with open(self.settings, "w") as f:
            f.write(before)
        _, p = self.run_host([SLUICE, "agent", "opencode", "--policy", self.policy, "--", "run", "hi"],
                             env={"FAKE_KEY": ""})
        self.assertEqual(p.returncode, 125)
        self.assertIn("needs the model's key in FAKE_KEY", p.stderr.decode())


    def test_with_sluices_adapter_installed_the_shell_runs_as_it_is(self):
        """A user with sluice's OpenCode adapter installed runs the whole agent too: the plugin's
        `sluice hook` (this sluice, shown inside) lets the shell through, inside the boundary."""
        shutil.copytree(os.path.join(CACHE, "opencode-plugin-" + self.version), self.config, symlinks=True,
                        dirs_exist_ok=True)  # what OpenCode installs for a plugin on an online start
        if self.user is not None:
            subprocess.run(["chown", "-R", "%d:%d" % (self.user, self.user), self.config], check=True)
        self.sluice("adapter", "install", "opencode", "--skill", "default")
        out, p = self.bash("readlink /proc/self/ns/net; cat /.sluice/agent; echo proxy=${HTTPS_PROXY:-none}")
        self.assertEqual(p.returncode, 0, p.stderr.decode()[-2000:])
        self.assert_inside_sluice(out)
        self.assertIn("opencode", out)
        self.assertIn("proxy=http://", out)  # the boundary's own gateway, not a nested sandbox


class AgentOpenCodeCurrentAsNobody(AgentOpenCodeCurrentAsRoot):
    user = 65534


@full_matrix
class AgentOpenCodeMinimumAsRoot(AgentOpenCodeCurrentAsRoot):
    version = OPENCODE_MINIMUM


class AgentOpenCodeMinimumAsNobody(AgentOpenCodeCurrentAsRoot):
    version = OPENCODE_MINIMUM
    user = 65534


class AgentPiCurrentAsNobody(AgentPiCurrentAsRoot):
    user = 65534


@full_matrix
class AgentPiMinimumAsRoot(AgentPiCurrentAsRoot):
    version = PI_MINIMUM


class AgentPiMinimumAsNobody(AgentPiCurrentAsRoot):
    version = PI_MINIMUM
    user = 65534


class AgentCodexCurrentAsNobody(AgentCodexCurrentAsRoot):
    user = 65534


@full_matrix
class AgentCodexMinimumAsRoot(AgentCodexCurrentAsRoot):
    version = CODEX_MINIMUM


class AgentCodexMinimumAsNobody(AgentCodexCurrentAsRoot):
    version = CODEX_MINIMUM
    user = 65534


class AgentClaudeCurrentAsNobody(AgentClaudeCurrentAsRoot):
    user = 65534


@full_matrix
class AgentClaudeMinimumAsRoot(AgentClaudeCurrentAsRoot):
    version = MINIMUM


class AgentClaudeMinimumAsNobody(AgentClaudeCurrentAsRoot):
    version = MINIMUM
    user = 65534


if __name__ == "__main__":
    unittest.main()
