"""Conformance of the Pi adapter: the real host from the npm registry (the version this project
follows and the minimum whose rewrite holds), `pi -p` against the fake model server (Chat
Completions), configured only by `sluice adapter install pi` (sluice's extension, which asks
`sluice hook pi` about every bash call). Everything runs in a network namespace of the test's own
with loopback only. Run as root and as 65534."""
import json
import os
import shutil
import subprocess
import threading
import unittest

from netns_host import NetnsHostCase, npm_install
from test_claude import ARGS_CMD, CACHE, SLUICE, full_matrix, prompt_for, install_lock

CURRENT, MINIMUM = "0.73.1", "0.51.0"


@install_lock
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

    # --- approvals: what the policy lets a person approve goes to Pi's own dialog ---------------
    def ask_policy(self):
        self.sluice("adapter", "install", "pi", "--skill", "asker", "--policy", self.ask_policy_file())

    def pi_rpc(self, command, answer):
        """One turn in Pi's RPC mode, where extension dialogs reach the client: answers every
        confirm with `answer`; returns (the tool result the model saw, the dialogs shown)."""
        proc = subprocess.Popen(self.prefix() + ["pi", "--mode", "rpc", "--no-session", "--provider", "fake",
                                                 "--model", "fake-model"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=self.env(), cwd=self.proj)
        timer = threading.Timer(180, proc.kill)
        timer.start()
        dialogs = []
        try:
            proc.stdin.write((json.dumps({"id": "t1", "type": "prompt",
                                          "message": prompt_for("bash", {"command": command})}) + "\n").encode())
            proc.stdin.flush()
            for line in proc.stdout:
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if ev.get("type") == "extension_ui_request" and ev.get("method") == "confirm":
                    dialogs.append(ev)
                    proc.stdin.write((json.dumps({"type": "extension_ui_response", "id": ev["id"],
                                                  "confirmed": answer}) + "\n").encode())
                    proc.stdin.flush()
                if ev.get("type") == "agent_end":
                    break
            proc.stdin.close()
            proc.wait(timeout=30)
        finally:
            timer.cancel()
            proc.kill()
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        results, _ = self.run_host(["true"])
        self.assertEqual(len(results), 1, "the model saw no tool result")
        return results[0]["content"], dialogs

    def test_an_approved_domain_holds_for_that_command_only(self):
        self.ask_policy()
        port = self.service_port
        command = ("sluice exec --allow-domain api.ask.test:%d -- sh -c 'curl -s -m 5 http://api.ask.test:%d/; "
                   "echo; curl -s -m 5 -o /dev/null -w other=%%{http_code} http://other.ask.test:%d/'" % (port, port, port))
        out, dialogs = self.pi_rpc(command, True)
        self.assertEqual(len(dialogs), 1, out)
        self.assertIn("network access to api.ask.test:%d" % port, dialogs[0]["message"])
        self.assertIn("HOSTREPLY", out)  # the approved name, through sluice's gateway
        self.assertIn("other=403", out)  # and nothing else
        # The next command does not keep it, and asks nothing.
        out, dialogs = self.pi_rpc("curl -s -m 5 -o /dev/null -w again=%%{http_code} http://api.ask.test:%d/" % port, True)
        self.assertEqual(dialogs, [])
        self.assertIn("again=403", out)

    def test_a_declined_or_unattended_approval_runs_nothing(self):
        self.ask_policy()
        marker = os.path.join(self.proj, "ran")
        command = "sluice exec --allow-domain api.ask.test:%d -- touch %s" % (self.service_port, marker)
        out, dialogs = self.pi_rpc(command, False)
        self.assertEqual(len(dialogs), 1)
        self.assertIn("declined", out)
        self.assertFalse(os.path.exists(marker))
        out = self.pi(command)  # print mode: no UI, no person
        self.assertIn("no person to ask", out)
        self.assertFalse(os.path.exists(marker))
        # What ask_domains does not list is refused without a question.
        out, dialogs = self.pi_rpc("sluice exec --allow-domain evil.test -- touch %s" % marker, True)
        self.assertEqual(dialogs, [])
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


@full_matrix
class PiMinimumAsRoot(PiCurrentAsRoot):
    version = MINIMUM


class PiMinimumAsNobody(PiCurrentAsRoot):
    version = MINIMUM
    user = 65534


if __name__ == "__main__":
    unittest.main()
