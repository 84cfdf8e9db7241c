// The judging step every protocol shares: an HTTP/1.1 request head or an HTTP/2 stream's header
// block, reduced to a request_in, is judged here and nowhere else. The origin is worked out and
// cross-checked with Host (or :authority) and the tunnel; hygiene, Git negotiation, WebSocket
// upgrades and credentials are checked; the decision is the policy's. No I/O: the caller answers.
#include "filters/git_upload_pack.hpp"
#include "filters/request_hygiene.hpp"
#include "gateway/session_impl.hpp"

#include <boost/url/parse.hpp>

namespace sluice::gateway::detail {

verdict session::judge(const request_in &r, const tunnel_target *tunnel, const filters::policy &pol,
                       outcome &o) {
  verdict v;
  auto refuse = [&](std::string_view reason, bool close = true, std::string rule = {}) {
    v.reason = reason;
    v.close = close;
    v.rule = std::move(rule);
    return std::move(v);
  };
  o.method = std::string(r.method);

  // Work out the origin the request is for, refusing every ambiguity.
  std::string &target = o.target; // the target as judged is the one logged: no copy of it
  target.assign(r.target);
  std::string raw_host;
  unsigned port = 0;
  if (r.h2) {
    // HTTP/2 names its origin in :scheme and :authority; inside the tunnel both must be its own.
    std::string_view host_part;
    unsigned p = 0;
    auto parsed = filters::split_authority(r.authority, host_part, p) ? filters::parse_host(host_part)
                                                                      : filters::host_parse_result{};
    if (p == 0) p = r.scheme == "https" ? 443 : 80;
    if (!parsed.host || !tunnel || parsed.host->name != tunnel->host || p != tunnel->port ||
        r.scheme != tunnel->scheme) {
      o.host = tunnel ? tunnel->host : std::string(r.authority);
      o.port = tunnel ? tunnel->port : p;
      return refuse("host_mismatch");
    }
    raw_host = tunnel->host;
    if (raw_host.find(':') != std::string::npos) raw_host = "[" + raw_host + "]"; // IPv6, normalized
    port = tunnel->port;
  } else if (!target.empty() && target.front() != '/' && target != "*") {
    auto url = boost::urls::parse_absolute_uri(target);
    if (!url || url->has_fragment() || !url->has_authority()) {
      return refuse("ambiguous_target");
    }
    if (url->has_userinfo()) {
      return refuse("userinfo_in_target", false);
    }
    std::string scheme(url->scheme());
    if (scheme != "http" && scheme != "https") {
      return refuse("unsupported_scheme", false);
    }
    o.scheme = scheme;
    raw_host = std::string(url->encoded_host());
    if (url->host_type() == boost::urls::host_type::ipv6 && raw_host.front() != '[') {
      raw_host = "[" + raw_host + "]"; // parse_host takes IPv6 literals in brackets
    }
    port = url->has_port() ? url->port_number() : (scheme == "https" ? 443 : 80);
    if (url->has_port() && port == 0) return refuse("invalid_host");
    std::string path(url->encoded_path());
    target = (path.empty() ? "/" : path) + (url->has_query() ? "?" + std::string(url->encoded_query()) : "");
    if (tunnel) {
      auto h = filters::parse_host(raw_host);
      if (!h.host || h.host->name != tunnel->host || port != tunnel->port || scheme != tunnel->scheme) {
        o.host = raw_host;
        return refuse("host_mismatch");
      }
    }
  } else if (tunnel) {
    raw_host = tunnel->host;
    if (raw_host.find(':') != std::string::npos) raw_host = "[" + raw_host + "]"; // IPv6, normalized
    port = tunnel->port;
  } else {
    return refuse("not_a_proxy_request");
  }
  o.port = port;
  auto parsed = filters::parse_host(raw_host);
  o.host = parsed.host ? parsed.host->name : raw_host;
  if (!parsed.host) return refuse(parsed.reason);
  v.ip = parsed.host->ip;

  // HTTP/1.1: Host must name the same origin as the target (or the CONNECT authority). (HTTP/2's
  // host field was checked against :authority when the block was translated.)
  if (!r.h2) {
    std::string_view host_field;
    for (auto [name, value] : *r.fields) {
      if (beast::iequals(name, "host")) host_field = value;
    }
    if (host_field.empty() && r.version >= 11) return refuse("bad_host_header");
    if (!host_field.empty()) {
      std::string_view hh;
      unsigned hp = 0;
      bool ok = filters::split_authority(host_field, hh, hp);
      auto hparsed = ok ? filters::parse_host(hh) : filters::host_parse_result{};
      if (hp == 0) hp = o.scheme == "https" ? 443 : 80;
      if (!hparsed.host || hparsed.host->name != o.host || hp != port) return refuse("host_mismatch");
    }
  }

  filters::request_view view{r.method, target, *r.fields, {}};
  pol.credentials().header_names(view.guarded);
  if (auto why = filters::check_request(view, pol.mode()); !why.empty()) return refuse(why);
  v.websocket = filters::is_websocket_upgrade(view);
  v.bodyless = pol.mode() == filters::profile::network_read &&
               (r.method == "GET" || r.method == "HEAD" || r.method == "OPTIONS");
  if (v.websocket && (r.h2 || r.version != 11)) return refuse("upgrade_refused"); // RFC 6455: an HTTP/1.1 GET
  // Read-only Git over smart HTTP: in network-read a fetch's POST to git-upload-pack is a read
  // once its whole body (bounded) shows nothing but negotiation; a push is refused by name.
  if (pol.mode() == filters::profile::network_read && r.method == "POST") {
    std::string_view path = std::string_view(target).substr(0, target.find('?'));
    if (filters::is_git_receive_pack(target)) {
      if (!pol.cfg().report) return refuse("git_push_refused");
      o.would_deny = "git_push_refused"; // a role in report mode: let through, logged
    } else {
      std::string_view content_type;
      for (auto [name, value] : *r.fields) {
        if (beast::iequals(name, "content-type")) content_type = value;
      }
      v.git_read = filters::is_git_upload_pack("POST", path, content_type);
    }
  }
  std::string_view method = v.git_read ? std::string_view("GET") : r.method;
  auto d = pol.decide(method, o.scheme, *parsed.host, port, target);
  if (!d.allowed && d.reason == "host_not_allowlisted") {
    // A host a person allowed: for this tunnel or connection, this one request, or the run.
    bool approved = approved_next_ || (approved_port_ == port && approved_host_ == o.host) ||
                    state_.held->allowed_for_run(o.host, port);
    approved_next_ = false;
    if (approved) {
      d = pol.decide_approved(method, o.scheme, *parsed.host, port, target);
    } else if (!r.h2 && pol.askable(o.host, o.scheme, port)) {
      v.ask = true;
    }
  }
  if (!d.allowed) return refuse(d.reason, v.git_read, d.rule);
  o.rule = d.rule;
  if (d.would_deny && o.would_deny.empty()) o.would_deny = d.reason;
  if (v.websocket) {
    // The GET passed; the upgrade needs the profile's or a route's leave (publish, or a trusted
    // route with websocket = true under network-read).
    auto w = pol.decide_websocket(o.scheme, *parsed.host, port, target, d.rule);
    if (!w.allowed) return refuse(w.reason, false, w.rule);
    o.rule = w.rule;
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

} // namespace sluice::gateway::detail
