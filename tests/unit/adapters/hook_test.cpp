#include "adapters/adapter.hpp"
#include "adapters/hook.hpp"

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cstdio>
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
