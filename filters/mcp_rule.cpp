#include "filters/mcp_rule.hpp"

namespace sluice::filters {

bool mcp_pattern_matches(std::string_view pattern, std::string_view name) {
  // Glob with '*' only, iterative with one backtrack point: linear enough for names of at most a
  // few hundred bytes, and no regex a policy author has to escape dots for.
  std::size_t p = 0, n = 0, star = std::string_view::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = n;
    } else if (p < pattern.size() && pattern[p] == name[n]) {
      ++p;
      ++n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::string mcp_pattern_problem(std::string_view pattern) {
  if (pattern.empty()) return "an empty name matches nothing";
  if (pattern.size() > 256) return "a name of more than 256 characters";
  for (char c : pattern) {
    auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) return "'" + std::string(pattern) + "' has a space or a character outside printable ASCII";
  }
  return {};
}

namespace {

bool any_matches(const std::vector<std::string> &patterns, std::string_view name) {
  for (const auto &p : patterns) {
    if (mcp_pattern_matches(p, name)) return true;
  }
  return false;
}

} // namespace

std::string_view mcp_rule::judge_method(std::string_view method) const {
  // What a client needs to start a session and learn the tools, and what carries no call.
  if (method == "initialize" || method == "ping" || method == "tools/list" || method == "tools/call" ||
      method.starts_with("notifications/")) {
    return {};
  }
  return any_matches(allow_methods, method) ? std::string_view{} : std::string_view("mcp_method_not_allowed");
}

std::string_view mcp_rule::judge_tool(std::string_view tool) const {
  if (any_matches(deny_tools, tool)) return "mcp_tool_denied";
  if (!any_matches(allow_tools, tool)) return "mcp_tool_not_allowed";
  return {};
}

std::string_view mcp_rule::tool_label(std::string_view tool) const {
  for (const auto *list : {&deny_tools, &allow_tools}) {
    for (const auto &p : *list) {
      if (p == tool) return p;
    }
  }
  for (const auto *list : {&deny_tools, &allow_tools}) {
    for (const auto &p : *list) {
      if (mcp_pattern_matches(p, tool)) return p;
    }
  }
  return "other";
}

} // namespace sluice::filters
