"""Conformance of the Pi adapter: the real host from the npm registry (the version this project
follows and the minimum whose rewrite holds), `pi -p` against the fake model server (Chat
Completions), configured only by `sluice adapter install pi` (sluice's extension, which asks
`sluice hook pi` about every bash call). Everything runs in a network namespace of the test's own
with loopback only. Run as root and as 65534."""
import json
import os
import shutil
import subprocess
import unittest

from netns_host import NetnsHostCase, npm_install
from test_claude import ARGS_CMD, CACHE, SLUICE, prompt_for

CURRENT, MINIMUM = "0.73.1", "0.51.0"


def install_pi(version):
    prefix = os.path.join(CACHE, "pi-" + version)
    binary = os.path.join(prefix, "node_modules", ".bin", "pi")
    if not os.path.exists(binary):
        npm_install(prefix, "@mariozechner/pi-coding-agent@" + version)
    subprocess.run(["chmod", "-R", "a+rX", prefix], check=True)
    return os.path.dirname(binary)


class PiCurrentAsRoot(NetnsHostCase):
    host = "pi"
    version = CURRENT

    @classmethod
    def install(cls, version):
        return install_pi(version)

    def configure(self):
        self.agent = os.path.join(self.home, ".pi", "agent")
        os.makedirs(self.agent)
        with open(os.path.join(self.agent, "models.json"), "w") as f:
            json.dump({"providers": {"fake": {
                "baseUrl": "http://127.0.0.1:%d/v1" % self.model_port, "api": "openai-completions", "apiKey": "x",
                "models": [{"id": "fake-model", "name": "fake", "contextWindow": 100000, "maxTokens": 4096,
                            "input": ["text"], "reasoning": False,
                            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}}]}}}, f)

    def host_env(self):
        return {"PI_OFFLINE": "1", "PI_TELEMETRY": "0"}

    def pi(self, command, env=None):
        results, p = self.run_host(["pi", "-p", "--provider", "fake", "--model", "fake-model", "--mode", "json",
                                    prompt_for("bash", {"command": command})], env)
        self.assertEqual(len(results), 1, p.stdout.decode()[-3000:] + p.stderr.decode()[-2000:])
        return results[0]["content"]

    def test_shell_runs_inside_sluice_with_arguments_and_status(self):
        self.sluice("adapter", "install", "pi", "--skill", "default")
        out = self.pi("readlink /proc/self/ns/net; %s; exit 7" % ARGS_CMD)
        self.assertIn("exited with code 7", out)
        self.assertIn("""[a b][c"d][$HOME][it's][*]""", out)
        self.assert_inside_sluice(out)
        # The adapter installed sluice's agent skill where the host finds it: the model sees it.
        self.assertTrue(self.skill_advertised(), "no request to the model lists the sluice skill")

    def test_boundaries_and_escalation(self):
        self.sluice("adapter", "install", "pi", "--skill", "default")
        escape = os.path.join(self.home, "escape.txt")
        out = self.pi("echo inside > written.txt; echo x > %s; cat %s/models.json; echo proxy=${HTTPS_PROXY:-none}; "
                      "curl -sS --max-time 5 http://127.0.0.1:%d/; echo curl=$?" % (escape, self.agent, self.service_port))
        self.assert_service_out_of_reach(out)
        with open(os.path.join(self.proj, "written.txt")) as f:
            self.assertEqual(f.read(), "inside\n")
        self.assertFalse(os.path.exists(escape))
        self.assertNotIn("baseUrl", out)
        self.assertIn("proxy=none", out)
        out = self.pi("sluice exec --sandbox-profile network-read -- echo proxy=$HTTPS_PROXY")
        self.assertIn("proxy=http://", out)
        marker = os.path.join(self.proj, "ran")
        out = self.pi("sluice exec --allow-domain evil.test -- touch %s" % marker)
        self.assertIn("cannot be chosen by the agent", out)
        self.assertFalse(os.path.exists(marker))

    def test_not_ready_or_missing_sluice_refuses(self):
        copy = os.path.join(self.work, "sluice-copy")
        shutil.copy(SLUICE, copy)
        os.chmod(copy, 0o755)
        self.sluice("adapter", "install", "pi", "--skill", "default", binary=copy)
        marker = os.path.join(self.proj, "ran")
        out = self.pi("touch %s" % marker, env={"SLUICE_FAULT": "namespaces"})
        self.assertIn("cannot sandbox", out)
        self.assertFalse(os.path.exists(marker))
        os.unlink(copy)
        out = self.pi("touch %s" % marker)
        self.assertIn("blocked", out)
        self.assertFalse(os.path.exists(marker))
        with open(copy, "w") as f:
            f.write("#!/bin/sh\nkill -SEGV $$\n")
        os.chmod(copy, 0o755)
        self.pi("touch %s" % marker)
        self.assertFalse(os.path.exists(marker))

    def test_status_and_removal(self):
        self.sluice("adapter", "install", "pi", "--skill", "default")
        st = json.loads(self.sluice("adapter", "status", "pi", "--json").stdout)["adapters"][0]
        self.assertTrue(st["installed"] and st["hookVerified"] and st["atLeastMinimum"], st)
        self.assertEqual(st["version"], self.version)
        self.sluice("adapter", "remove", "pi")
        self.assertTrue(os.path.exists(os.path.join(self.agent, "models.json")))  # the user's own file stays
        self.assertFalse(os.path.exists(os.path.join(self.agent, "extensions")))


class PiCurrentAsNobody(PiCurrentAsRoot):
    user = 65534


class PiMinimumAsRoot(PiCurrentAsRoot):
    version = MINIMUM


class PiMinimumAsNobody(PiCurrentAsRoot):
    version = MINIMUM
    user = 65534


if __name__ == "__main__":
    unittest.main()
