#include "adapters/adapter.hpp"
#include "adapters/hook.hpp"

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <sys/stat.h>
#include <unistd.h>
#include <string>

using namespace sluice::adapters;

namespace {
// What /bin/sh makes of `printf '%s\n' WORD`: the quoting must give back the exact word.
std::string through_shell(const std::string &word) {
  std::string cmd = "printf '%s' " + shell_quote(word);
  FILE *p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[256];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

std::string decision(const hook_outcome &o) {
  auto v = boost::json::parse(o.out);
  return std::string(v.at("hookSpecificOutput").at("permissionDecision").as_string());
}
} // namespace

TEST_CASE("shell_quote survives the shell") {
  for (std::string w : {"plain", "a b", "it's", "c\"d", "$HOME", "*", "'", "''", "x\ny", "\\", ""}) {
    CHECK(through_shell(w) == w);
  }
  CHECK(shell_word("/usr/bin/sluice") == "/usr/bin/sluice");
  CHECK(shell_word("/opt/my tools/sluice") == "'/opt/my tools/sluice'");
}

TEST_CASE("an agent's own sluice exec prefix is split; anything else is not") {
  auto p = parse_sluice_prefix("sluice exec --sandbox-profile network-read -- curl -s 'https://x/?a=1&b'");
  REQUIRE(p);
  CHECK(p->options == std::vector<std::string>{"--sandbox-profile", "network-read"});
  CHECK(p->rest == "curl -s 'https://x/?a=1&b'");
  p = parse_sluice_prefix("  /usr/bin/sluice exec \"--filesystem\" 'read-only' --   ls");
  REQUIRE(p);
  CHECK(p->options == std::vector<std::string>{"--filesystem", "read-only"});
  CHECK(p->rest == "ls");
  CHECK_FALSE(parse_sluice_prefix("sluice exec --sandbox-profile network-read"));  // no --
  CHECK_FALSE(parse_sluice_prefix("sluice exec -- "));                              // nothing to run
  CHECK_FALSE(parse_sluice_prefix("sluice exec $(evil) -- ls"));                    // shell syntax
  CHECK_FALSE(parse_sluice_prefix("sluice exec --x;rm -- ls"));
  CHECK_FALSE(parse_sluice_prefix("sluicer exec -- ls"));
  CHECK_FALSE(parse_sluice_prefix("echo sluice exec -- ls"));
  CHECK_FALSE(parse_sluice_prefix("sluice exec 'unterminated -- ls"));
}

TEST_CASE("the hook denies what it cannot vouch for, with exit 2 and a JSON deny") {
  hook_options o;
  o.sluice_path = "/usr/bin/sluice";
  for (const char *input : {"", "not json", "[]", "{\"tool_name\":\"Edit\",\"tool_input\":{}}",
                            "{\"tool_name\":\"Bash\"}", "{\"tool_name\":\"Bash\",\"tool_input\":{}}",
                            "{\"tool_name\":\"Bash\",\"tool_input\":{\"command\":\"\"}}",
                            "{\"tool_name\":\"Bash\",\"tool_input\":{\"command\":7}}",
                            "{\"hook_event_name\":\"PostToolUse\",\"tool_name\":\"Bash\","
                            "\"tool_input\":{\"command\":\"ls\"}}"}) {
    auto out = run_hook(o, input);
    CHECK(out.exit_code == 2);
    CHECK(decision(out) == "deny");
    CHECK(out.err.rfind("sluice: ", 0) == 0);
  }
  auto d = hook_deny("why");
  CHECK(d.exit_code == 2);
  CHECK(decision(d) == "deny");
}

TEST_CASE("host versions compare numerically") {
  CHECK(version_at_least("2.1.332", "2.0.10"));
  CHECK(version_at_least("2.0.10", "2.0.10"));
  CHECK_FALSE(version_at_least("2.0.9", "2.0.10"));
  CHECK(version_at_least("v10.0", "9.99.99"));
  CHECK_FALSE(version_at_least("", "1.0"));
  CHECK_FALSE(version_at_least("1.9", "1.10"));
}

namespace {
struct hook_case {
  std::string policy, sluice, old_path;
  hook_case() {
    char dir[] = "/tmp/sluice-hook-test-XXXXXX";
    REQUIRE(::mkdtemp(dir));
    policy = std::string(dir) + "/policy.toml";
    // "sluice" on PATH is this file: the hook asks only for commands that name it.
    sluice = std::string(dir) + "/sluice";
    FILE *s = std::fopen(sluice.c_str(), "w");
    std::fclose(s);
    ::chmod(sluice.c_str(), 0755);
    old_path = std::getenv("PATH") ? std::getenv("PATH") : "";
    ::setenv("PATH", (std::string(dir) + ":" + old_path).c_str(), 1);
    FILE *f = std::fopen(policy.c_str(), "w");
    std::fputs("[skills.asker]\n"
               "default_profile = \"network-read\"\n"
               "allow_domains = [\"origin.test\"]\n"
               "ask_domains = [\"*.ask.test\", \"exact.example\"]\n"
               "ask_profiles = [\"allowlist\", \"publish\"]\n"
               "[skills.plain]\n"
               "default_profile = \"offline\"\n"
               "escalations = [\"network-read\", \"publish\"]\n",
               f);
    std::fclose(f);
  }
  ~hook_case() {
    ::setenv("PATH", old_path.c_str(), 1);
    std::remove(sluice.c_str());
    std::remove(policy.c_str());
    ::rmdir(policy.substr(0, policy.rfind('/')).c_str());
  }
  hook_outcome run(const std::string &host, const std::string &command, const std::string &skill = "asker") {
    hook_options o;
    o.host = host;
    o.skill = skill;
    o.policy_file = policy;
    o.sluice_path = sluice;
    boost::json::object in{{"hook_event_name", "PreToolUse"},
                           {"tool_name", host == "claude" || host == "codex" ? "Bash" : "bash"},
                           {"tool_input", boost::json::object{{"command", command}}},
                           {"cwd", "/"}};
    return run_hook(o, boost::json::serialize(in));
  }
};

std::string field(const hook_outcome &o, const char *key) {
  auto v = boost::json::parse(o.out).at("hookSpecificOutput");
  if (std::string_view(key) == "command") return std::string(v.at("updatedInput").at("command").as_string());
  return std::string(v.at(key).as_string());
}
} // namespace

TEST_CASE("what the skill lets a person approve is asked for; the rest is refused as before") {
  hook_case c;
  ::setenv("AI_AGENT", "claude-code_2-1-332_harness", 1);
  auto o = c.run("claude", "sluice exec --allow-domain api.ask.test -- curl -s http://api.ask.test/");
  CHECK(o.exit_code == 0);
  REQUIRE(decision(o) == "ask");
  // Marked, so that a host driven by its own permission rules (OpenCode) can be told to ask for it.
  CHECK(field(o, "command").rfind(c.sluice + " exec --needs-approval --skill asker --policy " + c.policy +
                                  " --allow-domain api.ask.test -- ", 0) == 0);
  CHECK(field(o, "permissionDecisionReason").find("network access to api.ask.test") != std::string::npos);
  CHECK(field(o, "permissionDecisionReason").find("this one command") != std::string::npos);

  // As written, or one name a pattern covers on its port; nothing else.
  CHECK(decision(c.run("claude", "sluice exec --allow-domain '*.ask.test' -- true")) == "ask");
  CHECK(decision(c.run("claude", "sluice exec --allow-domain=exact.example -- true")) == "ask");
  for (const char *d : {"evil.test", "api.ask.test:8443", "ask.test", "*.test", "re:.*"}) {
    auto refused = c.run("claude", std::string("sluice exec --allow-domain '") + d + "' -- true");
    CHECK(refused.exit_code == 2);
    CHECK(decision(refused) == "deny");
    // A pattern sluice would refuse anyway says why; the others say what the skill lets be asked.
    bool unconstrainable = std::string_view(d) == "*.test" || std::string_view(d) == "re:.*";
    CHECK((refused.err.find("ask_domains under [skills.asker]") != std::string::npos) != unconstrainable);
  }

  // Profiles: an escalation or the default runs; ask_profiles asks (publish with the confirmation);
  // a skill that does not list publish there refuses it.
  o = c.run("claude", "sluice exec --sandbox-profile network-read -- true");
  CHECK(decision(o) == "allow");
  CHECK(field(o, "command").find("--needs-approval") == std::string::npos);
  o = c.run("claude", "sluice exec --sandbox-profile allowlist -- true");
  CHECK(decision(o) == "ask");
  CHECK(field(o, "command").find("--sandbox-profile allowlist -- ") != std::string::npos);
  o = c.run("claude", "sluice exec --sandbox-profile publish -- true");
  CHECK(decision(o) == "ask");
  CHECK(field(o, "command").find("--sandbox-profile publish --confirm-external-side-effects -- ") !=
        std::string::npos);
  o = c.run("claude", "sluice exec --sandbox-profile publish -- true", "plain");
  CHECK(decision(o) == "deny");
  CHECK(o.err.find("ask_profiles under [skills.plain]") != std::string::npos);
  CHECK(decision(c.run("claude", "sluice exec --allow-domain api.ask.test -- true", "plain")) == "deny");
  CHECK(decision(c.run("claude", "curl -s http://api.ask.test/")) == "allow");

  // Pi's extension asks through Pi's UI, OpenCode's plugin through OpenCode's permission rules;
  // Codex and an old or unknown Claude cannot ask, so they refuse with the line the policy would need.
  CHECK(decision(c.run("pi", "sluice exec --allow-domain api.ask.test -- true")) == "ask");
  o = c.run("opencode", "sluice exec --allow-domain api.ask.test -- true");
  CHECK(decision(o) == "ask");
  CHECK(field(o, "command").rfind(approval_prefix(c.sluice), 0) == 0);
  o = c.run("codex", "sluice exec --allow-domain api.ask.test -- true");
  CHECK(decision(o) == "deny");
  CHECK(o.err.find("Codex has no permission prompt") != std::string::npos);
  CHECK(o.err.find("allow_domains = [\"api.ask.test\"] under [skills.asker]") != std::string::npos);
  ::setenv("AI_AGENT", "claude-code/2.1.120/harness", 1); // the form of 2.1.120 to 2.1.126
  CHECK(decision(c.run("claude", "sluice exec --sandbox-profile allowlist -- true")) == "ask");
  ::setenv("AI_AGENT", "claude-code_2-1-85_harness", 1);
  CHECK(decision(c.run("claude", "sluice exec --sandbox-profile allowlist -- true")) == "ask");
  // The first word must be this sluice: an old host may run the original command once approved.
  o = c.run("claude", "./sluice exec --sandbox-profile allowlist -- true");
  CHECK(decision(o) == "deny");
  CHECK(o.err.find("is not this sluice") != std::string::npos);
  for (const char *agent : {"claude-code_2-1-84_harness", "claude-code_2-0-10_harness", "claude-code/2.1.x/harness",
                            "something-else", ""}) {
    if (*agent) {
      ::setenv("AI_AGENT", agent, 1);
    } else {
      ::unsetenv("AI_AGENT");
    }
    o = c.run("claude", "sluice exec --sandbox-profile allowlist -- true");
    CHECK(decision(o) == "deny");
    CHECK(o.err.find("update Claude Code") != std::string::npos);
    CHECK(o.err.find("escalations = [\"allowlist\"]") != std::string::npos);
  }
  ::unsetenv("AI_AGENT");
}
