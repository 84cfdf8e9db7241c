// MCP routes (gateway/exchange/mcp.hpp, filters/mcp_rule.hpp): the loader's table, the judge's
// verdict on an MCP route, and the JSON-RPC bodies judged call by call, a batch whole.
#include "filters/mcp_rule.hpp"
#include "filters/policy_loader.hpp"
#include "gateway/exchange/body.hpp"
#include "gateway/exchange/judge.hpp"
#include "gateway/exchange/mcp.hpp"

#include <boost/json.hpp>
#include <catch2/catch.hpp>

using namespace sluice;
using gateway::exchange::field_list;
using gateway::exchange::outcome;
using gateway::exchange::verdict;

namespace {

std::shared_ptr<const filters::policy> policy_of(const std::string &toml) {
  return std::make_shared<const filters::policy>(filters::load_config_string(toml, "mcp_test.toml"));
}

const std::string route = "{ host = \"mcp.example.com\", paths = [\"/mcp\"], mcp = { allow_tools = [\"echo\", "
                          "\"read_*\"], deny_tools = [\"read_secret*\"], allow_methods = [\"resources/list\"] } }";

std::string policy_text(std::string_view profile) {
  return "profile = \"" + std::string(profile) + "\"\n[policy]\nallow = [\"plain.example.com\", " + route + "]\n";
}

struct judged {
  verdict v;
  outcome o;
};

judged judge_post(const filters::policy &pol, std::string_view method, const std::string &host, const std::string &path,
                  field_list fields = {}) {
  fields.emplace_back("host", host);
  fields.emplace_back("content-type", "application/json");
  gateway::exchange::tunnel_target t{host, 443, "https"};
  gateway::exchange::request r;
  r.method = method;
  r.target = path;
  r.fields = &fields;
  gateway::exchange::judging j{pol};
  j.tunnel = &t;
  judged out;
  out.v = gateway::exchange::judge(r, j, out.o);
  return out;
}

std::string call(int id, const std::string &tool) {
  return R"({"jsonrpc":"2.0","id":)" + std::to_string(id) + R"(,"method":"tools/call","params":{"name":")" + tool +
         R"(","arguments":{}}})";
}

} // namespace

TEST_CASE("mcp patterns: '*' is any run, names compare whole and with case", "[filters][mcp]") {
  using filters::mcp_pattern_matches;
  CHECK(mcp_pattern_matches("echo", "echo"));
  CHECK_FALSE(mcp_pattern_matches("echo", "echo2"));
  CHECK_FALSE(mcp_pattern_matches("echo", "Echo"));
  CHECK(mcp_pattern_matches("read_*", "read_file"));
  CHECK(mcp_pattern_matches("read_*", "read_"));
  CHECK_FALSE(mcp_pattern_matches("read_*", "xread_file"));
  CHECK(mcp_pattern_matches("*_file", "write_file"));
  CHECK(mcp_pattern_matches("a*b*c", "aXXbYYbc"));
  CHECK_FALSE(mcp_pattern_matches("a*b*c", "aXXbYY"));
  CHECK(mcp_pattern_matches("*", ""));
  filters::mcp_rule r{{"echo", "read_*"}, {"read_secret*"}, {"resources/*"}};
  CHECK(r.judge_tool("echo") == "");
  CHECK(r.judge_tool("read_file") == "");
  CHECK(r.judge_tool("read_secret_key") == "mcp_tool_denied");
  CHECK(r.judge_tool("write_file") == "mcp_tool_not_allowed");
  CHECK(r.judge_method("initialize") == "");
  CHECK(r.judge_method("notifications/initialized") == "");
  CHECK(r.judge_method("tools/list") == "");
  CHECK(r.judge_method("resources/read") == "");
  CHECK(r.judge_method("prompts/get") == "mcp_method_not_allowed");
  // Labels: exact names as they are, pattern matches as the pattern, the rest "other".
  CHECK(r.tool_label("echo") == "echo");
  CHECK(r.tool_label("read_file") == "read_*");
  CHECK(r.tool_label("read_secret_x") == "read_secret*");
  CHECK(r.tool_label("anything_else") == "other");
}

TEST_CASE("mcp tables load from route tables of the trusted policy only, and are checked", "[filters][mcp]") {
  auto pol = policy_of(policy_text("network-read"));
  REQUIRE(pol->cfg().allow_routes.size() == 1);
  const auto &r = pol->cfg().allow_routes[0];
  REQUIRE(r.mcp);
  CHECK(r.mcp->allow_tools == std::vector<std::string>{"echo", "read_*"});
  CHECK(r.text == "mcp.example.com * /mcp mcp");
  auto bad = [](const std::string &mcp) {
    return "[policy]\nallow = [{ host = \"a.example.com\", " + mcp + " }]\n";
  };
  CHECK_THROWS_WITH(filters::load_config_string(bad("mcp = { allow = [\"x\"] }"), "t"), Catch::Contains("allow_tools"));
  CHECK_THROWS_WITH(filters::load_config_string(bad("mcp = { allow_tools = \"x\" }"), "t"), Catch::Contains("list"));
  CHECK_THROWS_WITH(filters::load_config_string(bad("mcp = { allow_tools = [\"a b\"] }"), "t"), Catch::Contains("space"));
  CHECK_THROWS_WITH(filters::load_config_string(bad("methods = [\"GET\"], mcp = {}"), "t"), Catch::Contains("POST"));
  CHECK_NOTHROW(filters::load_config_string(bad("websocket = true, mcp = {}"), "t"));
  CHECK_NOTHROW(filters::load_config_string(bad("methods = [\"GET\"], websocket = true, mcp = {}"), "t"));
  CHECK_THROWS_WITH(filters::load_config_string("[policy]\ndeny = [{ host = \"a.example.com\", mcp = {} }]\n", "t"),
                    Catch::Contains("not 'mcp'"));
}

TEST_CASE("an MCP route: its POSTs are read whole and judged call by call, under network-read too", "[gateway][mcp]") {
  for (std::string_view profile : {"network-read", "publish"}) {
    INFO(profile);
    auto pol = policy_of(policy_text(profile));
    auto [v, o] = judge_post(*pol, "POST", "mcp.example.com", "/mcp");
    REQUIRE(v.reason == "");
    REQUIRE(v.mcp);
    CHECK(v.read_whole());
    CHECK(o.rule == "mcp.example.com * /mcp mcp");
    CHECK(gateway::exchange::whole_body_limit(v) == gateway::exchange::max_mcp_body_bytes);
    field_list fields{{"content-type", "application/json"}};
    auto body = [&](const std::string &b) { return gateway::exchange::judge_body(v, o, *pol, fields, "POST", b); };
    CHECK(body(call(1, "echo")).reason == "");
    CHECK(o.mcp_method == "tools/call");
    CHECK(o.mcp_tool == "echo");
    CHECK(body(R"({"jsonrpc":"2.0","id":0,"method":"initialize","params":{}})").reason == "");
    CHECK(body(R"({"jsonrpc":"2.0","method":"notifications/initialized"})").reason == "");
    CHECK(body(R"({"jsonrpc":"2.0","id":"s1","result":{}})").reason == ""); // a response to the server
    CHECK(body(R"({"jsonrpc":"2.0","id":2,"method":"resources/list"})").reason == "");
    auto no = body(call(7, "write_file"));
    CHECK(no.reason == "mcp_tool_not_allowed");
    auto err = boost::json::parse(no.jsonrpc).as_object();
    CHECK(err.at("id").as_int64() == 7);
    CHECK(err.at("error").at("code").as_int64() == gateway::exchange::mcp_refused_code);
    CHECK(std::string(err.at("error").at("message").as_string()).find("allow_tools") != std::string::npos);
    CHECK(err.at("error").at("data").at("sluice").at("tool").as_string() == "write_file");
    CHECK(body(call(8, "read_secret_key")).reason == "mcp_tool_denied");
    CHECK(body(R"({"jsonrpc":"2.0","id":3,"method":"prompts/get","params":{"name":"p"}})").reason ==
          "mcp_method_not_allowed");
    // A batch with one refused call is refused whole: an error for every request in it.
    auto batch = body("[" + call(1, "echo") + "," + call(2, "write_file") + R"(,{"jsonrpc":"2.0","method":"notifications/x"}])");
    CHECK(batch.reason == "mcp_tool_not_allowed");
    CHECK(o.mcp_tool == "echo,write_file");
    auto arr = boost::json::parse(batch.jsonrpc).as_array();
    REQUIRE(arr.size() == 2);
    CHECK(arr[0].at("error").at("data").at("sluice").at("reason").as_string() == "mcp_batch_refused");
    CHECK(arr[1].at("error").at("data").at("sluice").at("reason").as_string() == "mcp_tool_not_allowed");
    CHECK(body("[" + call(1, "echo") + "," + call(2, "read_x") + "]").reason == "");
    // What is not JSON-RPC is refused, never passed unread.
    for (std::string bad : {"not json", "[]", "{}", R"({"jsonrpc":"1.0","id":1,"method":"ping"})",
                            R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}})", "[1]"}) {
      INFO(bad);
      auto b = body(bad);
      CHECK(b.reason == "mcp_body_refused");
      CHECK(boost::json::parse(b.jsonrpc).at("id").is_null());
    }
    field_list gz{{"content-encoding", "gzip"}};
    CHECK(gateway::exchange::judge_body(v, o, *pol, gz, "POST", call(1, "echo")).reason == "mcp_body_refused");
    CHECK(body(std::string(gateway::exchange::max_mcp_body_bytes + 1, ' ')).reason == "body_too_large");
  }
}

TEST_CASE("an MCP route: only its path, only POSTs; no WebSocket; report mode lets calls through as would_deny",
          "[gateway][mcp]") {
  auto pol = policy_of(policy_text("network-read"));
  CHECK(judge_post(*pol, "POST", "mcp.example.com", "/other").v.reason == "method_not_allowed");
  CHECK(judge_post(*pol, "POST", "plain.example.com", "/mcp").v.reason == "method_not_allowed");
  auto get = judge_post(*pol, "GET", "mcp.example.com", "/mcp");
  CHECK(get.v.reason == "");
  CHECK_FALSE(get.v.read_whole());
  CHECK(judge_post(*pol, "DELETE", "mcp.example.com", "/mcp").v.reason == "method_not_allowed");
  field_list ws{{"connection", "Upgrade"}, {"upgrade", "websocket"}, {"sec-websocket-version", "13"},
                {"sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="}};
  auto pub = policy_of(policy_text("publish"));
  auto up = judge_post(*pub, "GET", "mcp.example.com", "/mcp", ws);
  CHECK(up.v.reason == "mcp_websocket_refused");
  // publish with a plain entry for the same host: the MCP route still judges its path's POSTs.
  auto both = policy_of("profile = \"publish\"\n[policy]\nallow = [\"mcp.example.com\", " + route + "]\n");
  auto b = judge_post(*both, "POST", "mcp.example.com", "/mcp");
  CHECK(b.v.mcp);
  CHECK(b.o.rule == "mcp.example.com * /mcp mcp");
  CHECK_FALSE(judge_post(*both, "POST", "mcp.example.com", "/other").v.mcp);

  auto top = policy_of(policy_text("network-read") + "[roles.r]\nmode = \"report\"\n");
  const auto &report = top->role_policies().at("r");
  auto [v, o] = judge_post(*report, "POST", "mcp.example.com", "/mcp");
  REQUIRE(v.mcp);
  field_list fields;
  CHECK(gateway::exchange::judge_body(v, o, *report, fields, "POST", call(1, "write_file")).reason == "");
  CHECK(o.would_deny == "mcp_tool_not_allowed");
  CHECK(o.mcp_tool == "write_file");
  CHECK(o.mcp_tool_labels == std::vector<std::string>{"other"});
}

TEST_CASE("MCP over a WebSocket: only on a route that says websocket = true; each message judged as a body",
          "[gateway][mcp]") {
  const std::string ws_route = "{ host = \"ws.example.com\", paths = [\"/mcp\"], methods = [\"GET\"], websocket = true, "
                               "mcp = { allow_tools = [\"echo\"], deny_tools = [\"write_*\"] } }";
  field_list upgrade{{"connection", "Upgrade"}, {"upgrade", "websocket"}, {"sec-websocket-version", "13"},
                     {"sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="}};
  for (std::string_view profile : {"network-read", "publish"}) {
    INFO(profile);
    auto pol = policy_of("profile = \"" + std::string(profile) + "\"\n[policy]\nallow = [" + route + ", " + ws_route + "]\n");
    auto up = judge_post(*pol, "GET", "ws.example.com", "/mcp", upgrade);
    REQUIRE(up.v.reason == "");
    CHECK(up.o.protocol == "websocket");
    CHECK(up.o.rule == "ws.example.com GET /mcp websocket mcp");
    REQUIRE(up.o.mcp_messages);
    CHECK(up.o.mcp_messages->allow_tools == std::vector<std::string>{"echo"});
    CHECK_FALSE(up.v.read_whole());
    // The POST-only route's path still opens no WebSocket; a plain GET there is no MCP message.
    CHECK(judge_post(*pol, "GET", "mcp.example.com", "/mcp", upgrade).v.reason == "mcp_websocket_refused");
    CHECK_FALSE(judge_post(*pol, "GET", "mcp.example.com", "/mcp").o.mcp_messages);
    // A POST to the WebSocket-only route is not MCP (the route's methods are GET): the profile judges it.
    auto post = judge_post(*pol, "POST", "ws.example.com", "/mcp");
    CHECK_FALSE(post.v.mcp);
    if (profile == "network-read") CHECK(post.v.reason == "method_not_allowed");

    outcome &o = up.o;
    gateway::exchange::mcp_messages messages(*up.o.mcp_messages, o, *pol);
    auto a = messages.judge(call(1, "echo"));
    CHECK(a.refusal.reason == "");
    CHECK(a.decision == "allow");
    CHECK(a.tool_labels == std::vector<std::string>{"echo"});
    auto b = messages.judge(call(2, "write_note"));
    CHECK(b.refusal.reason == "mcp_tool_denied");
    CHECK(b.decision == "deny");
    CHECK(boost::json::parse(b.refusal.jsonrpc).at("id").as_int64() == 2);
    messages.judge(call(3, "echo"));
    auto c = messages.judge("not json");
    CHECK(c.refusal.reason == "mcp_body_refused");
    CHECK(boost::json::parse(c.refusal.jsonrpc).at("error").at("code").as_int64() == -32700);
    // The connection's line names each method and tool once, and counts the refused messages.
    CHECK(o.mcp_method == "tools/call");
    CHECK(o.mcp_tool == "echo,write_note");
    CHECK(o.mcp_refused == 2);
    CHECK(o.mcp_tool_labels.empty()); // counted per message by the transport, not again at the end
    CHECK(o.would_deny.empty());
    for (int i = 0; i < 40; ++i) messages.judge(call(10 + i, "tool" + std::to_string(i)));
    CHECK(o.mcp_tool.ends_with(",..."));
    CHECK(o.mcp_tool.find("tool31") == std::string::npos);
  }
  auto top = policy_of("profile = \"network-read\"\n[policy]\nallow = [" + ws_route + "]\n[roles.r]\nmode = \"report\"\n");
  const auto &report = top->role_policies().at("r");
  auto up = judge_post(*report, "GET", "ws.example.com", "/mcp", upgrade);
  REQUIRE(up.o.mcp_messages);
  gateway::exchange::mcp_messages messages(*up.o.mcp_messages, up.o, *report);
  auto r = messages.judge(call(1, "write_note"));
  CHECK(r.refusal.reason == "");
  CHECK(r.decision == "would_deny");
  CHECK(up.o.would_deny == "mcp_tool_denied");
  CHECK(messages.judge(call(2, "echo")).decision == "allow");
}
