// sluice plugin for OpenCode: every `bash` tool call runs through `sluice exec`, for every agent.
//
// The decision is sluice's own (`sluice hook opencode`, the same hook as for Claude Code, Codex and
// Pi): this file passes the call over and applies the answer. It fails closed: a missing sluice, a
// runner that is not ready, a bad answer or any error here throws, and OpenCode does not run the
// command. `sluice adapter install opencode` writes this file and sluice-adapter.json beside it and
// lists it under "plugin" in opencode.json.
//
// A command that needs a person's approval (the hook answers "ask") is rewritten to start with
// "SLUICE exec --needs-approval ", and the adapter's rule in opencode.json has OpenCode's own bash
// tool ask about every command that starts so: the person sees the rewrite in OpenCode's prompt and
// it runs only once allowed (`opencode run` rejects it: no person). Before such a rewrite is handed
// on, the configuration OpenCode runs with is checked to ask for it, for every agent; where a rule
// would let it through without asking, it is refused.
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

// OpenCode's wildcard match (permission patterns): * any text, ? one character, a trailing " *"
// also matches nothing, across lines.
function wildcard(text, pattern) {
  text = text.replaceAll("\\", "/");
  pattern = pattern.replaceAll("\\", "/");
  let re = pattern.replace(/[.+^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*").replace(/\?/g, ".");
  if (re.endsWith(" .*")) re = re.slice(0, -3) + "( .*)?";
  return new RegExp("^" + re + "$", "s").test(text);
}

// The rules of a "permission" value in configuration order: [permission, pattern, action].
function rulesOf(permission) {
  if (permission == null) return [];
  if (typeof permission === "string") return [["*", "*", permission]];
  return Object.entries(permission).flatMap(([name, v]) =>
    typeof v === "string" ? [[name, "*", v]] : Object.entries(v ?? {}).map(([pattern, action]) => [name, pattern, action]));
}

// Why OpenCode would not ask a person about `command`, or "" when it would: the last matching rule
// decides, the agent's own rules after the global ones (as OpenCode merges them).
async function whyNoPrompt(client, command) {
  const r = await client.config.get();
  const config = r?.data ?? r;
  if (!config || typeof config !== "object") return "OpenCode's configuration could not be read";
  const decide = (rules) => {
    let action = "ask";
    for (const [name, pattern, a] of rules) if (wildcard("bash", name) && wildcard(command, pattern)) action = a;
    return action;
  };
  const global = rulesOf(config.permission);
  // "deny" is OpenCode's own refusal, which is as safe as a person's no; only "allow" skips the person.
  if (decide(global) === "allow") return "a bash permission rule in OpenCode's configuration would run it without asking";
  for (const [name, agent] of Object.entries(config.agent ?? {})) {
    if (decide([...global, ...rulesOf(agent?.permission)]) === "allow") {
      return `agent "${name}" has a bash permission rule that would run it without asking`;
    }
  }
  return "";
}

export const SluicePlugin = async ({ client }) => ({
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
    if (r.status === 0 && out?.permissionDecision === "ask" && typeof out?.updatedInput?.command === "string") {
      const command = out.updatedInput.command;
      let why = typeof cfg.ask_prefix === "string" && command.startsWith(cfg.ask_prefix) ? "" :
        "the hook's rewrite does not start as the adapter's ask rule expects; reinstall with `sluice adapter install opencode`";
      if (!why) {
        try {
          why = await whyNoPrompt(client, command);
        } catch (e) {
          why = `OpenCode's configuration could not be read (${e.message})`;
        }
      }
      if (why) {
        throw new Error(`sluice: this command needs a person's approval, but ${why}; nothing was run. ` +
          `Remove that rule, or keep "${cfg.ask_prefix}*": "ask" as the last bash rule`);
      }
      output.args.command = command;
      output.args.description = (out.permissionDecisionReason || "").replace(/^sluice: /, "sluice asks: ");
      return;
    }
    const why = out?.permissionDecisionReason || (r.stderr || "").trim() || `the hook exited with ${r.status}`;
    throw new Error(`sluice: ${why.replace(/^sluice: /, "")}`);
  },
});
