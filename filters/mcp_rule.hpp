#pragma once
// `mcp = { allow_tools = [...], deny_tools = [...], allow_methods = [...] }` on an allow route: the
// route carries MCP (JSON-RPC over HTTP POST), and its calls are judged one by one by tool name
// (docs/policy.md, "MCP routes"). Pure: no I/O, no JSON; gateway/exchange/mcp.cpp reads the bodies.
#include <string>
#include <string_view>
#include <vector>

namespace sluice::filters {

// What an MCP route lets through. Patterns are names with '*' for any run of characters
// ("read_*", "*"); a name is compared whole and with case.
struct mcp_rule {
  std::vector<std::string> allow_tools;   // tools/call of a tool one of these names; empty: none
  std::vector<std::string> deny_tools;    // beat allow_tools
  std::vector<std::string> allow_methods; // methods besides those every MCP session needs

  // "" when a request (a JSON-RPC call or notification) of `method` may pass on its method alone:
  // initialize, ping, tools/list, notifications/*, tools/call (judged next by its tool), and what
  // allow_methods names; "mcp_method_not_allowed" otherwise.
  std::string_view judge_method(std::string_view method) const;
  // "" when tools/call of `tool` may pass; "mcp_tool_denied" (a deny_tools pattern) or
  // "mcp_tool_not_allowed" (no allow_tools pattern).
  std::string_view judge_tool(std::string_view tool) const;
  // The metric label of a tool: the tool itself where a pattern of the rule names it exactly, the
  // pattern that matches it where one with '*' does, "other" otherwise: as many values as the
  // policy has patterns, whatever names a client sends.
  std::string_view tool_label(std::string_view tool) const;
};

// Whether `name` matches `pattern` ('*': any run of characters, none included).
bool mcp_pattern_matches(std::string_view pattern, std::string_view name);

// Checks one pattern of an mcp table; "" when it is good, else what is wrong with it.
std::string mcp_pattern_problem(std::string_view pattern);

} // namespace sluice::filters
