// The judging step every protocol shares (judge.hpp).
#include "gateway/exchange/judge.hpp"

#include "filters/git_upload_pack.hpp"
#include "filters/host_name.hpp"
#include "filters/request_hygiene.hpp"
#include "gateway/exchange/scan.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/url/parse.hpp>

namespace sluice::gateway::exchange {
namespace {

using boost::beast::iequals;

struct refusal {
  std::string_view reason;
  bool close = true;
};

// IPv6 literals are judged and logged in brackets, as parse_host takes them.
std::string bracketed(const std::string &host) {
  return host.find(':') != std::string::npos && host.front() != '[' ? "[" + host + "]" : host;
}

// The origin the request names, worked out and cross-checked with the tunnel it came in. Sets
// o.target to the origin-form target, o.scheme when the request names one, o.host and o.port.
// `host` is the host as parse_host took it.
std::optional<refusal> find_origin(const request &r, const tunnel_target *tunnel, outcome &o,
                                   filters::host_parse_result &host) {
  std::string &target = o.target; // the target as judged is the one logged: no copy of it
  target.assign(r.target);
  std::string scheme(r.scheme), authority(r.authority);
  if (!target.empty() && target.front() != '/' && target != "*") {
    // Absolute-form: the scheme and authority come out of the target, which becomes origin-form.
    auto url = boost::urls::parse_absolute_uri(target);
    if (!url || url->has_fragment() || !url->has_authority()) return refusal{"ambiguous_target"};
    if (url->has_userinfo()) return refusal{"userinfo_in_target", false};
    scheme = std::string(url->scheme());
    if (scheme != "http" && scheme != "https") return refusal{"unsupported_scheme", false};
    authority = std::string(url->encoded_host_and_port());
    std::string path(url->encoded_path());
    target = (path.empty() ? "/" : path) + (url->has_query() ? "?" + std::string(url->encoded_query()) : "");
  }
  std::string raw_host;
  unsigned port = 0;
  if (!authority.empty()) {
    std::string_view host_part;
    if (!filters::split_authority(authority, host_part, port)) {
      o.host = authority;
      return refusal{"invalid_host"};
    }
    if (port == 0) port = scheme == "https" ? 443 : 80;
    raw_host = host_part;
    o.scheme = scheme;
  } else if (tunnel) {
    raw_host = bracketed(tunnel->host);
    port = tunnel->port;
    o.scheme = tunnel->scheme;
  } else {
    return refusal{"not_a_proxy_request"};
  }
  o.port = port;
  host = filters::parse_host(raw_host);
  o.host = host.host ? host.host->name : raw_host;
  if (tunnel && (!host.host || host.host->name != tunnel->host || port != tunnel->port ||
                 (!authority.empty() && scheme != tunnel->scheme))) {
    return refusal{"host_mismatch"};
  }
  if (!host.host) return refusal{host.reason};
  return std::nullopt;
}

// HTTP/1.1's Host must name the same origin as the target (or the tunnel). h2's host field was
// checked against :authority when its block was translated, and is not among the fields.
std::optional<refusal> check_host_field(const request &r, const outcome &o) {
  std::string_view host_field;
  for (auto [name, value] : *r.fields) {
    if (iequals(name, "host")) host_field = value;
  }
  if (host_field.empty()) {
    if (r.version == 11) return refusal{"bad_host_header"};
    return std::nullopt;
  }
  std::string_view hh;
  unsigned hp = 0;
  bool ok = filters::split_authority(host_field, hh, hp);
  auto hparsed = ok ? filters::parse_host(hh) : filters::host_parse_result{};
  if (hp == 0) hp = o.scheme == "https" ? 443 : 80;
  if (!hparsed.host || hparsed.host->name != o.host || hp != o.port) return refusal{"host_mismatch"};
  return std::nullopt;
}

std::string_view field(const request &r, std::string_view name) {
  std::string_view value;
  for (auto [n, v] : *r.fields) {
    if (iequals(n, name)) value = v;
  }
  return value;
}

} // namespace

verdict judge(const request &r, const judging &j, outcome &o) {
  const auto &pol = j.policy;
  verdict v;
  auto refuse = [&](std::string_view reason, bool close = true, std::string rule = {}) {
    v.reason = reason;
    v.close = close;
    v.rule = std::move(rule);
    return std::move(v);
  };
  o.method = std::string(r.method);
  filters::host_parse_result parsed;
  if (auto no = find_origin(r, j.tunnel, o, parsed)) return refuse(no->reason, no->close);
  if (auto no = check_host_field(r, o)) return refuse(no->reason, no->close);
  v.ip = parsed.host->ip;
  const std::string &target = o.target;
  const unsigned port = o.port;

  filters::request_view view{r.method, target, *r.fields, {}};
  pol.credentials().header_names(view.guarded);
  if (auto why = filters::check_request(view, pol.mode()); !why.empty()) return refuse(why);
  v.websocket = filters::is_websocket_upgrade(view);
  v.bodyless = pol.mode() == filters::profile::network_read &&
               (r.method == "GET" || r.method == "HEAD" || r.method == "OPTIONS");
  if (v.websocket && r.version != 11) return refuse("upgrade_refused"); // RFC 6455: an HTTP/1.1 GET
  // What leaves ([scan]): the target and fields as the command sent them, before the policy's
  // decision, so that a canary is refused (and shows) whatever host it was sent to.
  if (j.scan && *j.scan) {
    v.scan = std::make_shared<scan_step>(*j.scan, pol, o.host, o.scheme, port, o);
    if (auto why = v.scan->head(target, *r.fields); !why.empty()) return refuse(why, false, "scan:" + o.scan_rule);
  }
  // Read-only Git over smart HTTP: in network-read a fetch's POST to git-upload-pack is a read
  // once its whole body (bounded) shows nothing but negotiation; a push is refused by name.
  if (pol.mode() == filters::profile::network_read && r.method == "POST") {
    std::string_view path = std::string_view(target).substr(0, target.find('?'));
    if (filters::is_git_receive_pack(target)) {
      if (!pol.cfg().report) return refuse("git_push_refused");
      o.would_deny = "git_push_refused"; // a role in report mode: let through, logged
    } else {
      v.git_read = filters::is_git_upload_pack("POST", path, field(r, "content-type"));
    }
  }
  std::string_view method = v.git_read ? std::string_view("GET") : r.method;
  auto d = pol.decide(method, o.scheme, *parsed.host, port, target);
  if (!d.allowed && d.reason == "host_not_allowlisted") {
    // A host a person allowed: for this tunnel or connection, this one request, or the run.
    bool approved = j.approved_next || (j.approved_port == port && j.approved_host == o.host) ||
                    (j.for_run && j.for_run->allowed_for_run(o.host, port));
    if (approved) {
      d = pol.decide_approved(method, o.scheme, *parsed.host, port, target);
    } else {
      v.ask = r.can_hold && pol.askable(o.host, o.scheme, port);
      v.decide = pol.cfg().decider.configured(); // [decider]: what the file leaves undecided
    }
  }
  if (!d.allowed) return refuse(d.reason, v.git_read, d.rule);
  v.decide = pol.cfg().decider.all; // [decider] when = "all": it may narrow what the file allows
  o.rule = d.rule;
  if (d.would_deny && o.would_deny.empty()) o.would_deny = d.reason;
  // An MCP route: its POSTs pass as their calls do (mcp.hpp), whichever entry allowed them; over a
  // WebSocket, where the route says MCP runs there (websocket = true), each client message does
  // (mcp_messages). An upgrade on a route that does not say so is refused: it would pass unread.
  const filters::route_rule *ws_mcp = nullptr;
  if (v.websocket) {
    ws_mcp = pol.mcp_route(o.scheme, *parsed.host, port, target, true);
    if (!ws_mcp) {
      if (const auto *mr = pol.mcp_route(o.scheme, *parsed.host, port, target)) {
        return refuse("mcp_websocket_refused", false, mr->text);
      }
    }
  } else if (r.method == "POST") {
    if (const auto *mr = pol.mcp_route(o.scheme, *parsed.host, port, target)) {
      v.mcp = mr->mcp;
      o.rule = mr->text;
    }
  }
  if (v.websocket) {
    // The GET passed; the upgrade needs the profile's or a route's leave (publish, or a trusted
    // route with websocket = true under network-read).
    auto w = pol.decide_websocket(o.scheme, *parsed.host, port, target, d.rule);
    if (!w.allowed) return refuse(w.reason, false, w.rule);
    o.rule = ws_mcp ? ws_mcp->text : w.rule;
    if (ws_mcp) o.mcp_messages = ws_mcp->mcp;
    if (w.would_deny && o.would_deny.empty()) o.would_deny = w.reason;
    o.protocol = "websocket";
  }
  if (!pol.credentials().empty()) {
    // Credentials: a placeholder bound for another host is refused; for the credential's own
    // hosts the gateway puts the secret in (the command never held it).
    auto cr = pol.credentials().apply(*r.fields, target, o.host, o.scheme, port, r.method);
    if (!cr.reason.empty()) return refuse(cr.reason, false, "credential:" + cr.credential);
    v.set = std::move(cr.set);
    if (!v.set.empty()) o.credential = cr.credential;
    v.aws_body = cr.aws_needs_body;
    if (v.aws_body) v.aws_credential = cr.credential;
  }
  v.rule = o.rule;
  return v;
}

} // namespace sluice::gateway::exchange
