// sluice extension for Pi: every `bash` tool call the model makes runs through `sluice exec`.
//
// The decision is sluice's own (`sluice hook pi`, the same hook as for Claude Code and Codex): this
// file only passes the call over and applies the answer. It fails closed: a missing sluice, a
// runner that is not ready, a bad answer or any error here blocks the call; nothing runs outside
// the sandbox. `sluice adapter install pi` writes this file and sluice-adapter.json beside it.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

interface AdapterConfig {
  sluice: string;
  skill?: string;
  policy?: string;
}

function here(): string {
  try {
    return dirname(fileURLToPath(import.meta.url));
  } catch {
    return __dirname; // loaded as CommonJS
  }
}

function readConfig(): AdapterConfig {
  const cfg = JSON.parse(readFileSync(join(here(), "sluice-adapter.json"), "utf8"));
  if (typeof cfg.sluice !== "string" || !cfg.sluice.startsWith("/")) {
    throw new Error("sluice-adapter.json names no absolute sluice path; run `sluice adapter install pi`");
  }
  return cfg;
}

function blocked(reason: string) {
  return { block: true, reason: `sluice: ${reason}` };
}

export default function (pi: any) {
  pi.on("tool_call", async (event: any, ctx: any) => {
    if (event.toolName !== "bash") return undefined; // read, write, edit: not a shell
    try {
      const cfg = readConfig();
      const args = ["hook", "pi"];
      if (cfg.skill) args.push("--skill", cfg.skill);
      if (cfg.policy) args.push("--policy", cfg.policy);
      const input = JSON.stringify({
        hook_event_name: "PreToolUse",
        tool_name: "bash",
        tool_input: event.input,
        cwd: process.cwd(),
      });
      const r = spawnSync(cfg.sluice, args, { input, encoding: "utf8", timeout: 60_000, maxBuffer: 1 << 20 });
      if (r.error) return blocked(`the hook could not run (${r.error.message}); the command was blocked, not run`);
      let out: any;
      try {
        out = JSON.parse(r.stdout).hookSpecificOutput;
      } catch {
        out = undefined;
      }
      const rewrite = typeof out?.updatedInput?.command === "string" ? out.updatedInput.command : undefined;
      if (r.status === 0 && out?.permissionDecision === "allow" && rewrite) {
        event.input.command = rewrite;
        return undefined;
      }
      // The command asks for more than the skill gives and the policy lets a person approve it:
      // ask through Pi's own dialog, for this one command. No UI (print or JSON mode): no person.
      if (r.status === 0 && out?.permissionDecision === "ask" && rewrite) {
        const question = String(out.permissionDecisionReason || "sluice: allow this command?").replace(/^sluice: /, "");
        if (!ctx?.hasUI || typeof ctx?.ui?.confirm !== "function") {
          return blocked(`no person to ask (Pi runs without a UI here), so nothing was run. The question was: ${question}`);
        }
        const yes = await ctx.ui.confirm("sluice: allow once?", `${question}\n\n${rewrite}`);
        if (yes !== true) return blocked(`the person declined, so nothing was run: ${question}`);
        event.input.command = rewrite;
        return undefined;
      }
      const why = out?.permissionDecisionReason || (r.stderr || "").trim() || `the hook exited with ${r.status}`;
      return blocked(why.replace(/^sluice: /, ""));
    } catch (e: any) {
      return blocked(`extension error (${e?.message ?? e}); the command was blocked, not run`);
    }
  });
}
