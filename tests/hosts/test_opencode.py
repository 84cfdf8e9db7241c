"""Conformance of the OpenCode adapter: the real host from the npm registry (the version this project
follows and the minimum whose rewrite holds), `opencode run` against the fake model server (Chat
Completions through @ai-sdk/openai-compatible), configured only by `sluice adapter install opencode`
(sluice's plugin, listed in opencode.json, which asks `sluice hook opencode` about every bash call).
OpenCode installs @opencode-ai/plugin for any configured plugin and waits for the registry when
offline: the test puts it in place beforehand, from the npm registry, as a user's online first start
would. Everything else runs in a network namespace with loopback only. Run as root and as 65534."""
import json
import os
import shutil
import subprocess
import unittest

from netns_host import HERE, NetnsHostCase, npm_install
from test_claude import ARGS_CMD, CACHE, PYTHON, SLUICE, free_port, full_matrix, prompt_for, install_lock

CURRENT, MINIMUM = "1.18.33", "1.3.2"
QUIET = {"OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1",
         "OPENCODE_DISABLE_LSP_DOWNLOAD": "1"}


@install_lock
def install_opencode(version):
    prefix = os.path.join(CACHE, "opencode-" + version)
    binary = os.path.join(prefix, "node_modules", "opencode-linux-x64", "bin", "opencode")
    if not os.path.exists(binary):
        npm_install(prefix, "opencode-ai@" + version)
    deps = os.path.join(CACHE, "opencode-plugin-" + version)
    if not os.path.exists(os.path.join(deps, "node_modules", "@opencode-ai", "plugin")):
        npm_install(deps, "@opencode-ai/plugin@" + version)
    bindir = os.path.join(prefix, "sluice-bin")
    os.makedirs(bindir, exist_ok=True)
    link = os.path.join(bindir, "opencode")
    if not os.path.islink(link):
        os.symlink(binary, link)
    subprocess.run(["chmod", "-R", "a+rX", prefix, deps], check=True)
    return bindir


class OpenCodeCurrentAsRoot(NetnsHostCase):
    host = "opencode"
    version = CURRENT

    @classmethod
    def install(cls, version):
        return install_opencode(version)

    def configure(self):
        self.config = os.path.join(self.home, ".config", "opencode")
        # What OpenCode installs for any plugin on its first (online) start, put there beforehand.
        shutil.copytree(os.path.join(CACHE, "opencode-plugin-" + self.version), self.config, symlinks=True)
        with open(os.path.join(self.proj, "opencode.json"), "w") as f:
            json.dump({"provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "fake",
                                             "options": {"baseURL": "http://127.0.0.1:%d/v1" % self.model_port,
                                                         "apiKey": "x"},
                                             "models": {"fake-model": {"name": "fake", "tool_call": True}}}},
                       "model": "fake/fake-model"}, f)

    def host_env(self):
        return QUIET

    def opencode(self, command, env=None, agent=None):
        argv = ["opencode", "run", "--format", "json"] + (["--agent", agent] if agent else []) + \
               [prompt_for("bash", {"command": command, "description": "conformance"})]
        results, p = self.run_host(argv, env)
        exits = []
        for line in p.stdout.decode().splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            part = ev.get("part") if isinstance(ev.get("part"), dict) else {}
            meta = part.get("state", {}).get("metadata", {}) if isinstance(part.get("state"), dict) else {}
            if isinstance(meta, dict) and "exit" in meta:
                exits.append(meta["exit"])
        self.assertEqual(len(results), 1, p.stdout.decode()[-3000:] + p.stderr.decode()[-2000:])
        return results[0]["content"], exits

    def test_shell_runs_inside_sluice_with_arguments_and_status(self):
        self.sluice("adapter", "install", "opencode", "--skill", "default")
        out, exits = self.opencode("readlink /proc/self/ns/net; %s; exit 7" % ARGS_CMD)
        self.assertIn("""[a b][c"d][$HOME][it's][*]""", out)
        self.assertEqual(exits, [7])
        self.assert_inside_sluice(out)
        # The adapter installed sluice's agent skill where the host finds it: the model sees it.
        self.assertTrue(self.skill_advertised(), "no request to the model lists the sluice skill")

    def test_every_agent_is_routed(self):
        # A permission rule for one agent would leave the others with a plain shell; the plugin
        # sees every bash call whichever agent makes it.
        self.sluice("adapter", "install", "opencode", "--skill", "default")
        out, _ = self.opencode("readlink /proc/self/ns/net", agent="plan")
        self.assert_inside_sluice(out)

    def test_boundaries_and_escalation(self):
        self.sluice("adapter", "install", "opencode", "--skill", "default")
        escape = os.path.join(self.home, "escape.txt")
        out, _ = self.opencode("echo inside > written.txt; echo x > %s; ls %s; echo proxy=${HTTPS_PROXY:-none}; "
                               "curl -sS --max-time 5 http://127.0.0.1:%d/; echo curl=$?"
                               % (escape, self.config, self.service_port))
        self.assert_service_out_of_reach(out)
        with open(os.path.join(self.proj, "written.txt")) as f:
            self.assertEqual(f.read(), "inside\n")
        self.assertFalse(os.path.exists(escape))
        self.assertNotIn("node_modules", out)
        self.assertIn("proxy=none", out)
        out, _ = self.opencode("sluice exec --sandbox-profile network-read -- echo proxy=$HTTPS_PROXY")
        self.assertIn("proxy=http://", out)

    # --- approvals: what the policy lets a person approve goes to OpenCode's own prompt ----------
    def serve(self, command, answer):
        """Runs `opencode serve` with opencode_serve.py as the person answering its permission
        requests; returns (the requests, the tool output the model saw, or None)."""
        port = free_port()
        server = subprocess.Popen(self.prefix() + ["opencode", "serve", "--hostname", "127.0.0.1", "--port", str(port)],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  env=self.env(), cwd=self.proj)
        try:
            p = subprocess.run(self.ns.prefix() + [PYTHON, os.path.join(HERE, "opencode_serve.py"), str(port),
                                                   prompt_for("bash", {"command": command, "description": "conformance"}),
                                                   answer], capture_output=True, timeout=300)
        finally:
            server.terminate()
            try:
                _, err = server.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                _, err = server.communicate()
        self.assertEqual(p.returncode, 0, p.stderr.decode() + err.decode()[-3000:])
        results = []
        if os.path.exists(self.results):
            with open(self.results) as f:
                results = [json.loads(l) for l in f if l.strip()]
            os.unlink(self.results)
        return json.loads(p.stdout), (results[0]["content"] if results else None)

    def test_an_approved_domain_holds_for_that_command_only(self):
        self.sluice("adapter", "install", "opencode", "--skill", "asker", "--policy", self.ask_policy_file())
        port = self.service_port
        command = ("sluice exec --allow-domain api.ask.test:%d -- sh -c 'curl -s -m 5 http://api.ask.test:%d/; "
                   "echo; curl -s -m 5 -o /dev/null -w other=%%{http_code} http://other.ask.test:%d/'" % (port, port, port))
        asked, out = self.serve(command, "once")
        self.assertEqual(len(asked), 1, asked)
        self.assertEqual(asked[0]["permission"], "bash")
        shown = " ".join(asked[0]["patterns"])
        self.assertIn(" exec --needs-approval --skill asker", shown)  # the rewrite is what is asked about
        self.assertIn("--allow-domain api.ask.test:%d" % port, shown)
        self.assertIn("HOSTREPLY", out or "")  # the approved name, through sluice's gateway
        self.assertIn("other=403", out)  # and nothing else
        # The next command does not keep it, and nothing is asked (`opencode run` would reject).
        out, _ = self.opencode("curl -s -m 5 -o /dev/null -w again=%%{http_code} http://api.ask.test:%d/" % port)
        self.assertIn("again=403", out)

    def test_a_declined_or_unattended_approval_runs_nothing(self):
        self.sluice("adapter", "install", "opencode", "--skill", "asker", "--policy", self.ask_policy_file())
        marker = os.path.join(self.proj, "ran")
        command = "sluice exec --allow-domain api.ask.test:%d -- touch %s" % (self.service_port, marker)
        asked, _ = self.serve(command, "reject")
        self.assertEqual(len(asked), 1, asked)
        self.assertFalse(os.path.exists(marker))
        # `opencode run` has no person: OpenCode rejects what it would ask about.
        _, p = self.run_host(["opencode", "run", "--format", "json",
                              prompt_for("bash", {"command": command, "description": "conformance"})])
        self.assertIn("auto-rejecting", (p.stdout + p.stderr).decode())
        self.assertFalse(os.path.exists(marker))
        # What ask_domains does not list is refused without a question.
        out, _ = self.opencode("sluice exec --allow-domain evil.test -- touch %s" % marker)
        self.assertIn("cannot be chosen by the agent", out)
        self.assertFalse(os.path.exists(marker))

    def test_a_rule_that_would_skip_the_prompt_refuses_the_approval(self):
        """Where OpenCode's configuration would run the rewrite without asking (a bash rule of an
        agent after sluice's), the plugin refuses the command instead of handing it on."""
        self.sluice("adapter", "install", "opencode", "--skill", "asker", "--policy", self.ask_policy_file())
        path = os.path.join(self.proj, "opencode.json")
        with open(path) as f:
            cfg = json.load(f)
        cfg["agent"] = {"build": {"permission": {"bash": {"*": "allow"}}}}
        with open(path, "w") as f:
            json.dump(cfg, f)
        marker = os.path.join(self.proj, "ran")
        out, _ = self.opencode("sluice exec --allow-domain api.ask.test:%d -- touch %s" % (self.service_port, marker))
        self.assertIn("would run it without asking", out)
        self.assertFalse(os.path.exists(marker))
        st = json.loads(self.sluice("adapter", "status", "opencode", "--json").stdout)["adapters"][0]
        self.assertEqual(st["warnings"], [], st)  # sluice's own file still holds the rule last

    def test_not_ready_or_missing_sluice_refuses(self):
        copy = os.path.join(self.work, "sluice-copy")
        shutil.copy(SLUICE, copy)
        os.chmod(copy, 0o755)
        self.sluice("adapter", "install", "opencode", "--skill", "default", binary=copy)
        marker = os.path.join(self.proj, "ran")
        out, _ = self.opencode("touch %s" % marker, env={"SLUICE_FAULT": "namespaces"})
        self.assertIn("cannot sandbox", out)
        self.assertFalse(os.path.exists(marker))
        os.unlink(copy)
        out, _ = self.opencode("touch %s" % marker)
        self.assertIn("blocked", out)
        self.assertFalse(os.path.exists(marker))

    def test_status_and_removal(self):
        path = os.path.join(self.config, "opencode.json")
        original = '{"theme": "system", "permission": "allow"}\n'
        with open(path, "w") as f:
            f.write(original)
        if self.user is not None:
            os.chown(path, self.user, self.user)
        self.sluice("adapter", "install", "opencode", "--skill", "default")
        with open(path) as f:
            installed = json.load(f)
        # The plain "allow" becomes the object form that means the same, with the ask rule last.
        self.assertEqual(list(installed["permission"]), ["*", "bash"])
        self.assertEqual(installed["permission"]["*"], "allow")
        self.assertEqual(list(installed["permission"]["bash"].values()), ["ask"])
        self.assertTrue(list(installed["permission"]["bash"])[0].endswith(" exec --needs-approval *"))
        st = json.loads(self.sluice("adapter", "status", "opencode", "--json").stdout)["adapters"][0]
        self.assertTrue(st["installed"] and st["hookVerified"] and st["atLeastMinimum"], st)
        self.assertEqual(st["version"], self.version)
        self.assertEqual(st["warnings"], [])
        # A rule added after sluice's would decide instead: status says so.
        installed["permission"]["bash"]["git *"] = "allow"
        with open(path, "w") as f:
            json.dump(installed, f)
        st = json.loads(self.sluice("adapter", "status", "opencode", "--json", check=False).stdout)["adapters"][0]
        self.assertTrue([w for w in st["warnings"] if "not the last under permission.bash" in w], st)
        with open(path, "w") as f:  # back as install left it: remove restores the original exactly
            f.write(json.dumps(installed).replace(', "git *": "allow"', ""))
        self.sluice("adapter", "remove", "opencode")
        with open(path) as f:
            after = json.load(f)
        self.assertEqual(after, json.loads(original))
        self.assertFalse(os.path.exists(os.path.join(self.config, "sluice")))


# OpenCode's suite is the longest (each `opencode run` starts the whole host): in CI it runs the
# current version as root and the minimum as 65534; SLUICE_HOSTS_FULL=1 adds the other two corners.
@full_matrix
class OpenCodeCurrentAsNobody(OpenCodeCurrentAsRoot):
    user = 65534


@full_matrix
class OpenCodeMinimumAsRoot(OpenCodeCurrentAsRoot):
    version = MINIMUM


class OpenCodeMinimumAsNobody(OpenCodeCurrentAsRoot):
    version = MINIMUM
    user = 65534


if __name__ == "__main__":
    unittest.main()
