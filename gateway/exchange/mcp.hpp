#pragma once
// MCP routes (docs/policy.md, "MCP routes"): a POST on a route with an mcp table carries JSON-RPC
// (one request or a batch); each call is judged by its method and, for tools/call, its tool name.
// One refused call refuses the whole body: nothing reaches the origin, and the client gets a
// JSON-RPC error object with sluice's reason for every request it must answer. No I/O.
#include "filters/mcp_rule.hpp"
#include "filters/policy.hpp"
#include "gateway/exchange/body.hpp"
#include "gateway/exchange/exchange.hpp"

#include <cstddef>

namespace sluice::gateway::exchange {

// The most body an MCP POST may have: bigger is refused (body_too_large) before it is parsed.
inline constexpr std::size_t max_mcp_body_bytes = 4u << 20;

// The JSON-RPC error code of a call sluice refused by policy (the implementation-defined server
// error range, -32000 to -32099); -32700 and -32600 for a body that is not JSON or not JSON-RPC.
inline constexpr int mcp_refused_code = -32001;

// Judges the whole body of a POST on an MCP route. Sets o.mcp_method, o.mcp_tool and
// o.mcp_tool_labels; in report mode a call the rule refuses passes, with o.would_deny set. A
// refusal carries the JSON-RPC answer in `jsonrpc` (and its reason: mcp_tool_denied,
// mcp_tool_not_allowed, mcp_method_not_allowed, mcp_body_refused).
body_refusal judge_mcp(const filters::mcp_rule &rule, outcome &o, const filters::policy &pol,
                       const field_list &fields, std::string_view body);

} // namespace sluice::gateway::exchange
