"""Conformance of the Codex adapter: the real host from the npm registry (the version this project
follows and the minimum whose rewrite holds), driven by `codex exec` against the fake model server,
configured only by `sluice adapter install codex` (hooks.json, the hook's trust by the hash Codex
reports, Codex's shell out of its own sandbox). Codex contacts the network when it starts, so host,
fake model and adapter run in a network namespace of the test's own with loopback only. Run as root
and as 65534."""
import json
import os
import shutil
import subprocess
import unittest

from netns_host import NetnsHostCase, npm_install
from test_claude import ARGS_CMD, CACHE, SLUICE, full_matrix, prompt_for, install_lock

CURRENT, MINIMUM = "0.171.0", "0.131.0"


@install_lock
def install_codex(version):
    prefix = os.path.join(CACHE, "codex-" + version)
    vendor = os.path.join(prefix, "node_modules", "@openai", "codex-linux-x64", "vendor", "x86_64-unknown-linux-musl")

    def find():
        for cand in (os.path.join(vendor, "bin", "codex"), os.path.join(vendor, "codex", "codex")):
            if os.path.exists(cand):
                return cand
        return None
    if not find():
        npm_install(prefix, "@openai/codex@" + version)
        if not find():
            raise AssertionError("npm installed Codex %s without its Linux binary" % version)
    bindir = os.path.join(prefix, "sluice-bin")
    os.makedirs(bindir, exist_ok=True)
    link = os.path.join(bindir, "codex")
    if not os.path.islink(link):
        os.symlink(find(), link)
    subprocess.run(["chmod", "-R", "a+rX", prefix], check=True)
    return bindir


class CodexCurrentAsRoot(NetnsHostCase):
    host = "codex"
    version = CURRENT

    @classmethod
    def install(cls, version):
        return install_codex(version)

    def configure(self):
        self.codex_home = os.path.join(self.home, ".codex")
        os.makedirs(self.codex_home)
        with open(os.path.join(self.codex_home, "config.toml"), "w") as f:
            f.write('model_provider = "fake"\nmodel = "fake-model"\n\n[model_providers.fake]\nname = "fake"\n'
                    'base_url = "http://127.0.0.1:%d/v1"\nwire_api = "responses"\nenv_key = "FAKE_KEY"\n'
                    # No telemetry: its export waits 5 s for the network at every exit.
                    '\n[analytics]\nenabled = false\n\n[otel]\nmetrics_exporter = "none"\n'
                    % self.model_port)

    def host_env(self):
        return {"CODEX_HOME": self.codex_home, "FAKE_KEY": "x"}

    def codex(self, command, env=None):
        results, p = self.run_host(["codex", "exec", "--skip-git-repo-check", "--json",
                                    prompt_for("exec_command", {"cmd": command})], env)
        events = [json.loads(l) for l in p.stdout.decode().splitlines() if l.startswith("{")]
        return results, events, p

    def test_shell_runs_inside_sluice_with_arguments_and_status(self):
        self.sluice("adapter", "install", "codex", "--skill", "default")
        results, events, p = self.codex("readlink /proc/self/ns/net; %s; exit 7" % ARGS_CMD)
        self.assertEqual(len(results), 1, p.stdout.decode()[-3000:] + p.stderr.decode()[-2000:])
        out = results[0]["content"]
        self.assertIn("exited with code 7", out)
        self.assertIn("""[a b][c"d][$HOME][it's][*]""", out)
        self.assert_inside_sluice(out)
        # The adapter installed sluice's agent skill where the host finds it: the model sees it.
        self.assertTrue(self.skill_advertised(), "no request to the model lists the sluice skill")
        commands = [e["item"]["command"] for e in events if e.get("type") == "item.completed"
                    and e.get("item", {}).get("type") == "command_execution"]
        self.assertTrue(commands and SLUICE + " exec --skill default -- " in commands[0], commands)

    def test_boundaries_through_the_host(self):
        self.sluice("adapter", "install", "codex", "--skill", "default")
        escape = os.path.join(self.home, "escape.txt")
        results, _, p = self.codex("echo inside > written.txt; echo x > %s; cat %s/config.toml; "
                                   "curl -sS --max-time 5 http://127.0.0.1:%d/; echo curl=$?"
                                   % (escape, self.codex_home, self.service_port))
        out = results[0]["content"]
        with open(os.path.join(self.proj, "written.txt")) as f:
            self.assertEqual(f.read(), "inside\n")
        self.assertFalse(os.path.exists(escape))
        self.assertNotIn("model_provider", out)  # the host's own configuration stays out of reach
        self.assert_service_out_of_reach(out)

    def test_escalation_is_the_policys_decision(self):
        self.sluice("adapter", "install", "codex", "--skill", "default")
        results, _, _ = self.codex("sluice exec --sandbox-profile network-read -- echo proxy=$HTTPS_PROXY")
        self.assertIn("proxy=http://", results[0]["content"])
        marker = os.path.join(self.proj, "ran")
        results, _, _ = self.codex("sluice exec --sandbox-profile publish -- touch %s" % marker)
        self.assertFalse(os.path.exists(marker))

    def test_what_needs_a_person_is_refused_with_the_policy_line(self):
        """Codex has no permission prompt a hook can use: a command the policy would let a person
        approve is refused, with the reason and the line that would admit it."""
        self.sluice("adapter", "install", "codex", "--skill", "asker", "--policy", self.ask_policy_file())
        marker = os.path.join(self.proj, "ran")
        results, _, p = self.codex("sluice exec --allow-domain api.ask.test:%d -- touch %s" % (self.service_port, marker))
        self.assertFalse(os.path.exists(marker))
        self.assertEqual(len(results), 1, p.stdout.decode()[-3000:])
        out = results[0]["content"]
        self.assertIn("Codex has no permission prompt", out)
        self.assertIn('allow_domains = ["api.ask.test:%d"] under [skills.asker]' % self.service_port, out)

    def test_not_ready_or_missing_sluice_refuses(self):
        copy = os.path.join(self.work, "sluice-copy")
        shutil.copy(SLUICE, copy)
        os.chmod(copy, 0o755)
        self.sluice("adapter", "install", "codex", "--skill", "default", binary=copy)
        marker = os.path.join(self.proj, "ran")
        self.codex("touch %s" % marker, env={"SLUICE_FAULT": "namespaces"})
        self.assertFalse(os.path.exists(marker))
        os.unlink(copy)
        self.codex("touch %s" % marker)
        self.assertFalse(os.path.exists(marker))
        # The same call with a working sluice does run: the test can fail.
        shutil.copy(SLUICE, copy)
        os.chmod(copy, 0o755)
        results, _, p = self.codex("touch %s" % marker)
        self.assertTrue(os.path.exists(marker), "%s %s" % (results, p.stderr.decode()[-2000:]))

    def test_trust_status_and_exact_removal(self):
        config = os.path.join(self.codex_home, "config.toml")
        with open(config) as f:
            before = f.read()
        self.sluice("adapter", "install", "codex", "--skill", "default")
        st = json.loads(self.sluice("adapter", "status", "codex", "--json").stdout)["adapters"][0]
        self.assertTrue(st["installed"] and st["hookVerified"] and st["atLeastMinimum"], st)
        self.assertEqual(st["version"], self.version)
        with open(config) as f:
            text = f.read()
        self.assertIn('sandbox_mode = "danger-full-access"', text)
        self.assertIn("trusted_hash = \"sha256:", text)
        self.sluice("adapter", "remove", "codex")
        with open(config) as f:
            self.assertEqual(f.read(), before)
        self.assertFalse(os.path.exists(os.path.join(self.codex_home, "hooks.json")))


class CodexCurrentAsNobody(CodexCurrentAsRoot):
    user = 65534


@full_matrix
class CodexMinimumAsRoot(CodexCurrentAsRoot):
    version = MINIMUM


class CodexMinimumAsNobody(CodexCurrentAsRoot):
    version = MINIMUM
    user = 65534


if __name__ == "__main__":
    unittest.main()
