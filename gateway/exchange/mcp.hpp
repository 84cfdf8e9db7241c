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

// MCP over a message transport (a WebSocket on an MCP route with websocket = true): each message
// the client sends is one JSON-RPC body, judged as a POST's is. The connection's outcome names
// every method and tool seen, once each (at most 32 of each, then "..."), and counts what was
// refused. No I/O; the transport gathers each message (at most max_mcp_body_bytes) and holds it
// back until it is judged.
class mcp_messages {
public:
  mcp_messages(const filters::mcp_rule &rule, outcome &o, const filters::policy &pol) : rule_(rule), o_(o), pol_(pol) {}

  // What one message came to: a refusal (its JSON-RPC answer for the client in refusal.jsonrpc;
  // nothing of the message may go on), and each tools/call's metric label with the decision to
  // count it under (allow, deny, would_deny).
  struct judged {
    body_refusal refusal;
    std::vector<std::string> tool_labels;
    std::string_view decision;
  };
  judged judge(std::string_view message);

private:
  void remember(std::vector<std::string> &seen, const std::string &joined, std::string &out);

  const filters::mcp_rule &rule_;
  outcome &o_;
  const filters::policy &pol_;
  std::vector<std::string> methods_, tools_; // distinct, in the order first seen
};

} // namespace sluice::gateway::exchange
