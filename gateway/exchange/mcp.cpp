// MCP routes: the JSON-RPC calls of a POST, judged one by one (mcp.hpp).
#include "gateway/exchange/mcp.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/json.hpp>

#include <algorithm>

namespace sluice::gateway::exchange {
namespace {

namespace json = boost::json;

// One element of the body (the body itself, or an element of a batch), as judged.
struct call {
  const json::value *id = nullptr; // the request's id; null for a notification or a response
  std::string method, tool;        // tool: of a tools/call
  std::string_view reason;         // why it is refused; empty: it passes
};

// What the client reads in the error: the reason, the rule, and how to allow it.
std::string refusal_message(const call &c, const std::string &rule) {
  std::string what = c.method == "tools/call" ? "tools/call of tool '" + c.tool + "'" : "method '" + c.method + "'";
  std::string msg = "sluice refused " + what + " (" + std::string(c.reason) + ", rule " + rule + "): ";
  if (c.reason == "mcp_tool_denied") {
    msg += "a deny_tools pattern of the route's mcp table names this tool; deny_tools beat allow_tools.";
  } else if (c.reason == "mcp_tool_not_allowed") {
    msg += "the route allows only the tools its mcp table's allow_tools names; to allow it, add \"" + c.tool +
           "\" to allow_tools in the trusted policy.";
  } else {
    msg += "an MCP route passes initialize, ping, tools/list, notifications and tools/call of allowed tools; to "
           "allow this method, add \"" + c.method + "\" to allow_methods of the route's mcp table in the trusted policy.";
  }
  return msg;
}

json::object error_object(const json::value &id, int code, std::string message, std::string_view reason,
                          const std::string &rule, std::string_view tool) {
  json::object data{{"reason", reason}, {"rule", rule}};
  if (!tool.empty()) data["tool"] = tool;
  return json::object{{"jsonrpc", "2.0"},
                      {"id", id},
                      {"error", json::object{{"code", code}, {"message", std::move(message)}, {"data", json::object{{"sluice", std::move(data)}}}}}};
}

// A body that is not JSON-RPC (not JSON, not an object or a non-empty array of them, no "2.0"):
// refused whole, answered with id null as JSON-RPC answers what it cannot read.
body_refusal malformed(int code, std::string why, const std::string &rule) {
  static const json::value null_id;
  std::string message = "sluice refused the request body (mcp_body_refused, rule " + rule + "): " + why +
                        ". An MCP route carries JSON-RPC 2.0 only: one request or a batch, as JSON, not compressed.";
  return {"mcp_body_refused", rule,
          json::serialize(error_object(null_id, code, std::move(message), "mcp_body_refused", rule, {}))};
}

// Reads one element; false where it is not JSON-RPC 2.0.
bool read_call(const json::value &v, const filters::mcp_rule &rule, call &c) {
  const auto *obj = v.if_object();
  if (!obj) return false;
  const auto *version = obj->if_contains("jsonrpc");
  if (!version || !version->is_string() || version->get_string() != "2.0") return false;
  const auto *method = obj->if_contains("method");
  if (!method) {
    // A response (the client answering the server's request: sampling, roots, elicitation).
    return obj->contains("id") && (obj->contains("result") || obj->contains("error"));
  }
  if (!method->is_string()) return false;
  c.method = std::string(method->get_string());
  if (const auto *id = obj->if_contains("id")) c.id = id;
  c.reason = rule.judge_method(c.method);
  if (c.method == "tools/call") {
    const auto *params = obj->if_contains("params");
    const auto *name = params && params->is_object() ? params->get_object().if_contains("name") : nullptr;
    if (!name || !name->is_string()) return false; // a call of no tool is not MCP
    c.tool = std::string(name->get_string());
    c.reason = rule.judge_tool(c.tool);
  }
  return true;
}

std::string joined(const std::vector<call> &calls, std::string call::*part) {
  std::string out;
  for (const auto &c : calls) {
    if ((c.*part).empty()) continue;
    if (!out.empty()) out += ',';
    out += c.*part;
  }
  return out;
}

// The answer to a refused body: an error for every request with an id (the refused ones with
// their reason, the others refused with the batch), an array for a batch; a refused notification
// alone is answered with id null, so that the client sees why all the same.
std::string refusal_reply(const std::vector<call> &calls, bool batch, const call &first, const std::string &rule) {
  json::array out;
  for (const auto &c : calls) {
    if (!c.id || c.id->is_null()) continue;
    if (!c.reason.empty()) {
      out.push_back(error_object(*c.id, mcp_refused_code, refusal_message(c, rule), c.reason, rule, c.tool));
    } else {
      std::string message = "sluice refused this call with its batch: " + refusal_message(first, rule) +
                            " One refused call refuses the whole batch; send the allowed calls on their own.";
      out.push_back(error_object(*c.id, mcp_refused_code, std::move(message), "mcp_batch_refused", rule, c.tool));
    }
  }
  if (out.empty()) {
    static const json::value null_id;
    out.push_back(error_object(null_id, mcp_refused_code, refusal_message(first, rule), first.reason, rule, first.tool));
  }
  if (!batch) return json::serialize(out.front());
  return json::serialize(out);
}

} // namespace

body_refusal judge_mcp(const filters::mcp_rule &rule, outcome &o, const filters::policy &pol,
                       const field_list &fields, std::string_view body) {
  for (auto [n, value] : fields) {
    // A compressed body cannot be judged as it is sent; refused, never passed unread.
    if (boost::beast::iequals(n, "content-encoding") && !boost::beast::iequals(value, "identity")) {
      return malformed(-32600, "it is compressed (Content-Encoding: " + std::string(value) + ")", o.rule);
    }
  }
  if (body.size() > max_mcp_body_bytes) return {"body_too_large", o.rule, {}};
  boost::system::error_code ec;
  json::value doc = json::parse(body, ec);
  if (ec) return malformed(-32700, "it is not JSON (" + ec.message() + ")", o.rule);
  const bool batch = doc.is_array();
  std::vector<call> calls;
  if (batch) {
    if (doc.get_array().empty()) return malformed(-32600, "it is an empty batch", o.rule);
    calls.resize(doc.get_array().size());
    for (std::size_t i = 0; i < calls.size(); ++i) {
      if (!read_call(doc.get_array()[i], rule, calls[i])) {
        return malformed(-32600, "element " + std::to_string(i) + " of the batch is not a JSON-RPC 2.0 message", o.rule);
      }
    }
  } else {
    calls.resize(1);
    if (!read_call(doc, rule, calls[0])) return malformed(-32600, "it is not a JSON-RPC 2.0 message", o.rule);
  }
  o.mcp_method = joined(calls, &call::method);
  o.mcp_tool = joined(calls, &call::tool);
  o.mcp_tool_labels.clear();
  const call *refused = nullptr;
  for (const auto &c : calls) {
    if (!c.tool.empty()) o.mcp_tool_labels.emplace_back(rule.tool_label(c.tool));
    if (!refused && !c.reason.empty()) refused = &c;
  }
  if (!refused) return {};
  if (pol.cfg().report) { // a role in report mode: let through, logged as what enforce would refuse
    if (o.would_deny.empty()) o.would_deny = refused->reason;
    return {};
  }
  return {refused->reason, o.rule, refusal_reply(calls, batch, *refused, o.rule)};
}

mcp_messages::judged mcp_messages::judge(std::string_view message) {
  // One message's judging writes into an outcome of its own; the connection's keeps what every
  // message named, once each, and the first would_deny.
  outcome one;
  one.rule = o_.rule;
  static const field_list no_fields;
  judged out;
  out.refusal = judge_mcp(rule_, one, pol_, no_fields, message);
  if (!out.refusal.reason.empty() && out.refusal.jsonrpc.empty()) {
    out.refusal = malformed(-32600, "it is over " + std::to_string(max_mcp_body_bytes >> 20) + " MiB", o_.rule);
  }
  out.decision = !out.refusal.reason.empty() ? "deny" : !one.would_deny.empty() ? "would_deny" : "allow";
  if (o_.would_deny.empty()) o_.would_deny = one.would_deny;
  out.tool_labels = std::move(one.mcp_tool_labels);
  if (!out.refusal.reason.empty()) ++o_.mcp_refused;
  remember(methods_, one.mcp_method, o_.mcp_method);
  remember(tools_, one.mcp_tool, o_.mcp_tool);
  return out;
}

void mcp_messages::remember(std::vector<std::string> &seen, const std::string &joined, std::string &out) {
  constexpr std::size_t most = 32;
  std::string_view rest = joined;
  while (!rest.empty()) {
    auto comma = rest.find(',');
    std::string_view name = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (name.empty() || std::find(seen.begin(), seen.end(), name) != seen.end()) continue;
    if (seen.size() == most) {
      if (!out.ends_with(",...")) out += ",...";
      return;
    }
    seen.emplace_back(name);
    if (!out.empty()) out += ',';
    out += name;
  }
}

} // namespace sluice::gateway::exchange
