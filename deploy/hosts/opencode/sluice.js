// sluice plugin for OpenCode: every `bash` tool call runs through `sluice exec`, for every agent.
//
// The decision is sluice's own (`sluice hook opencode`, the same hook as for Claude Code, Codex and
// Pi): this file passes the call over and applies the answer. It fails closed: a missing sluice, a
// runner that is not ready, a bad answer or any error here throws, and OpenCode does not run the
// command. `sluice adapter install opencode` writes this file and sluice-adapter.json beside it and
// lists it under "plugin" in opencode.json.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));

function readConfig() {
  const cfg = JSON.parse(readFileSync(join(here, "sluice-adapter.json"), "utf8"));
  if (typeof cfg.sluice !== "string" || !cfg.sluice.startsWith("/")) {
    throw new Error("sluice-adapter.json names no absolute sluice path; run `sluice adapter install opencode`");
  }
  return cfg;
}

export const SluicePlugin = async () => ({
  "tool.execute.before": async (input, output) => {
    if (input.tool !== "bash") return; // read, edit, write, ...: not a shell
    let cfg;
    try {
      cfg = readConfig();
    } catch (e) {
      throw new Error(`sluice: ${e.message}; the command was blocked, not run`);
    }
    const args = ["hook", "opencode"];
    if (cfg.skill) args.push("--skill", cfg.skill);
    if (cfg.policy) args.push("--policy", cfg.policy);
    const request = JSON.stringify({
      hook_event_name: "PreToolUse",
      tool_name: "bash",
      tool_input: output.args,
      cwd: output.args?.workdir || process.cwd(),
    });
    const r = spawnSync(cfg.sluice, args, { input: request, encoding: "utf8", timeout: 60000, maxBuffer: 1 << 20 });
    if (r.error) throw new Error(`sluice: the hook could not run (${r.error.message}); the command was blocked, not run`);
    let out;
    try {
      out = JSON.parse(r.stdout).hookSpecificOutput;
    } catch {
      out = undefined;
    }
    if (r.status === 0 && out?.permissionDecision === "allow" && typeof out?.updatedInput?.command === "string") {
      output.args.command = out.updatedInput.command;
      return;
    }
    const why = out?.permissionDecisionReason || (r.stderr || "").trim() || `the hook exited with ${r.status}`;
    throw new Error(`sluice: ${why.replace(/^sluice: /, "")}`);
  },
});
