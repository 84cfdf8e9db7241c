// The scanner on the judging step (scan.hpp).
#include "gateway/exchange/scan.hpp"

#include <boost/beast/core/string.hpp>

#include <algorithm>

namespace sluice::gateway::exchange {
namespace {

scan::action action_of(std::string_view a) { return a == "report" ? scan::action::report : scan::action::block; }

// A credential's hosts as the scanner takes allowed hosts: names and "*.suffix" (a port dropped);
// a regex entry is left to the step, which asks the credential itself (scan_step::settle).
std::vector<std::string> allowed_hosts(const filters::credential_config &c) {
  std::vector<std::string> out;
  for (std::string h : c.hosts) {
    if (h.starts_with("re:") || h.find_first_of("/~^$()|\\") != std::string::npos) continue;
    if (auto colon = h.rfind(':'); colon != std::string::npos && h.find(']') == std::string::npos) h.resize(colon);
    std::transform(h.begin(), h.end(), h.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    out.push_back(std::move(h));
  }
  return out;
}

constexpr std::string_view credential_prefix = "credential:";

int rank(scan::kind k) {
  switch (k) {
  case scan::kind::canary: return 0;
  case scan::kind::own_secret: return 1;
  case scan::kind::custom: return 2;
  case scan::kind::format: return 3;
  }
  return 4;
}

scan::host_mode mode_of(filters::scan_hosts::mode m) {
  switch (m) {
  case filters::scan_hosts::mode::report: return scan::host_mode::report;
  case filters::scan_hosts::mode::off: return scan::host_mode::off;
  default: return scan::host_mode::enforce;
  }
}

} // namespace

scan::database_ptr compile_scan(const filters::policy &pol, const scan_inputs &in) {
  const auto &c = pol.cfg().scan;
  if (!c.enabled) return nullptr;
  scan::database_spec spec;
  auto action_for = [&](const std::string &id, std::string_view fallback) -> std::optional<scan::action> {
    auto it = c.actions.find(id);
    if (it == c.actions.end()) return action_of(fallback);
    if (it->second == "off") return std::nullopt;
    return action_of(it->second);
  };
  if (c.builtin_rules) {
    for (auto r : scan::builtin_rules()) {
      auto a = action_for(r.id, c.format);
      if (!a) continue;
      r.action = *a;
      spec.rules.push_back(std::move(r));
    }
  }
  for (const auto &r : c.rules) {
    auto a = action_for(r.id, r.action.empty() ? c.custom : r.action);
    if (!a) continue;
    spec.rules.push_back({r.id, r.pattern, scan::kind::custom, *a});
  }
  if (c.caller_secrets) {
    spec.own_secrets = in.own_secrets;
    pol.credentials().each([&](const filters::credential_config &cc) {
      // An OAuth2 access token is obtained by sluice and never was the caller's to hand out: the
      // command cannot hold it (and it changes every few minutes).
      if (cc.oauth2) return;
      std::string name = std::string(credential_prefix) + cc.name;
      auto host = allowed_hosts(cc);
      if (!cc.secret.empty()) spec.own_secrets.push_back({name, cc.secret, host});
      if (cc.aws && !cc.aws->session_token.empty()) spec.own_secrets.push_back({name, cc.aws->session_token, host});
    });
    spec.own_secret_action = action_of(c.own_secret);
  }
  if (c.canaries) {
    spec.canaries = in.canaries;
    spec.canary_action = action_of(c.canary);
  }
  // What the command holds instead of a credential looks like one by design: no finding.
  pol.credentials().each([&](const filters::credential_config &cc) {
    if (!cc.placeholder.empty()) spec.placeholders.push_back(cc.placeholder);
    if (cc.aws && !cc.aws->placeholder_secret.empty()) spec.placeholders.push_back(cc.aws->placeholder_secret);
  });
  if (spec.rules.empty() && spec.own_secrets.empty() && spec.canaries.empty()) return nullptr;
  spec.block_database = !in.one_run;
  spec.rules_cache_dir = in.rules_cache_dir;
  return scan::database::compile(std::move(spec));
}

std::size_t scan_inputs_hash(const filters::policy &pol, const scan_inputs &in) {
  const auto &c = pol.cfg().scan;
  std::string key;
  auto add = [&](std::string_view s) {
    key.append(std::to_string(s.size())).push_back(':');
    key.append(s);
  };
  add(c.enabled ? "1" : "0");
  add(c.canaries ? "1" : "0");
  add(c.caller_secrets ? "1" : "0");
  add(c.builtin_rules ? "1" : "0");
  add(in.one_run ? "1" : "0");
  for (const auto *a : {&c.format, &c.custom, &c.own_secret, &c.canary}) add(*a);
  for (const auto &[id, a] : c.actions) {
    add(id);
    add(a);
  }
  for (const auto &r : c.rules) {
    add(r.id);
    add(r.pattern);
    add(r.action);
  }
  pol.credentials().each([&](const filters::credential_config &cc) {
    add(cc.name);
    if (!cc.oauth2) add(cc.secret); // as compile_scan: an access token is no own secret
    add(cc.placeholder);
    for (const auto &h : cc.hosts) add(h);
    if (cc.aws) {
      add(cc.aws->session_token);
      add(cc.aws->placeholder_secret);
    }
  });
  for (const auto *list : {&in.own_secrets, &in.canaries}) {
    for (const auto &s : *list) {
      add(s.name);
      add(s.value);
    }
  }
  auto h = std::hash<std::string>{}(key);
  std::fill(key.begin(), key.end(), '\0'); // it held the secrets
  return h;
}

std::string_view scan_reason(const scan::finding &f) {
  return f.kind == scan::kind::canary ? "canary_detected" : "secret_detected";
}

// A gRPC message up to gRPC's own default limit on what a server receives is taken apart.
constexpr std::size_t grpc_fields_max = 4 * 1024 * 1024;

scan_step::scan_step(scan::database_ptr db, const filters::policy &pol, std::string_view host,
                     std::string_view scheme, unsigned port, outcome &o)
    : o_(o), pol_(pol), host_(host), scheme_(scheme), port_(port), scanner_(std::move(db), scan::scratch::this_thread(),
               scan::scanner_options{pol.credentials().empty(), std::string(host),
                                     mode_of(pol.scan_hosts().mode_for(host, scheme, port))}),
      max_decoded_(pol.cfg().scan.max_decoded_body_bytes) {}

std::string_view scan_step::head(std::string_view target, const field_list &fields) {
  scanner_.scan_target(target);
  bool proxy_auth = false;
  for (auto [name, value] : fields) {
    if (boost::beast::iequals(name, "content-encoding")) content_encoding_ = value;
    if (boost::beast::iequals(name, "grpc-encoding")) grpc_encoding_ = value;
    if (boost::beast::iequals(name, "content-type")) {
      form_ = value.size() >= 33 && boost::beast::iequals(value.substr(0, 33), "application/x-www-form-urlencoded");
      // gRPC and gRPC-Web's binary framing (not -web-text, which is base64 of it)
      const bool grpc = value.size() >= 16 && boost::beast::iequals(value.substr(0, 16), "application/grpc") &&
                        !(value.size() >= 25 && boost::beast::iequals(value.substr(16, 9), "-web-text"));
      if (grpc && !grpc_) grpc_ = std::make_unique<scan::grpc_messages>(grpc_fields_max);
    }
    proxy_auth = proxy_auth || boost::beast::iequals(name, "proxy-authorization");
  }
  if (!proxy_auth) {
    scanner_.scan_fields(fields);
  } else { // Proxy-Authorization is for sluice (a client's token under serve) and never leaves
    field_list leaving;
    for (auto f : fields) {
      if (!boost::beast::iequals(f.first, "proxy-authorization")) leaving.push_back(f);
    }
    scanner_.scan_fields(leaving);
  }
  return settle();
}

std::string_view scan_step::body(std::string_view piece, bool last) {
  if (!refused_.empty()) return refused_;
  if (grpc_) {
    grpc_->feed(piece, [this](std::string_view m, bool compressed) { grpc_message(m, compressed); });
    if (!refused_.empty()) return refused_; // a compressed message past the decoded bound
  }
  if (!body_ && last && (content_encoding_.empty() || boost::beast::iequals(content_encoding_, "identity"))) {
    scanner_.scan_whole("body", piece); // a whole body in one piece: no stream, no decoder
    if (form_ && (piece.find('%') != std::string_view::npos || piece.find('+') != std::string_view::npos)) {
      scanner_.scan_whole("body:form", scan::percent_decode(piece, true));
    }
    return settle();
  }
  if (!body_) body_ = std::make_unique<scan::body_scan>(scanner_, content_encoding_, max_decoded_, "body", form_);
  auto st = piece.empty() ? body_->status() : body_->feed(piece);
  if (last) st = body_->finish();
  if (st == scan::body_status::decode_limit) {
    refused_ = "body_decode_limit";
    o_.scan_rule = "body_decode_limit";
    o_.scan_location = "body";
    return refused_;
  }
  return settle();
}

// One whole gRPC message: its fields each scanned as a value; a compressed one inflated first, the
// inflated bytes scanned as a stream too (what gzip or deflate cannot read, or a coding sluice does
// not decode, such as snappy, is scanned only as sent, as a body's is).
void scan_step::grpc_message(std::string_view message, bool compressed) {
  const auto fields = [this](std::string_view field) { scanner_.scan_whole("grpc:field", field); };
  if (!compressed) {
    scan::protobuf_fields(message, fields);
    return;
  }
  if (!boost::beast::iequals(grpc_encoding_, "gzip") && !boost::beast::iequals(grpc_encoding_, "deflate")) return;
  scan::body_scan inflated(scanner_, grpc_encoding_, max_decoded_, "grpc:message");
  std::string decoded;
  inflated.keep_decoded(&decoded, grpc_fields_max);
  inflated.feed(message);
  const auto st = inflated.finish();
  if (st == scan::body_status::decode_limit && refused_.empty()) {
    refused_ = "body_decode_limit";
    o_.scan_rule = "body_decode_limit";
    o_.scan_location = "grpc:message";
  }
  if (st == scan::body_status::ok && inflated.kept_whole()) scan::protobuf_fields(decoded, fields);
}

std::string_view scan_step::message(std::string_view piece, bool end) {
  if (!refused_.empty()) return refused_;
  std::string location = "message:" + std::to_string(messages_ + 1);
  if (!piece.empty()) scanner_.feed(location, piece);
  if (end) {
    scanner_.end(location);
    ++messages_;
  }
  return settle();
}

std::string_view scan_step::settle() {
  auto &o = o_;
  const auto &all = scanner_.findings();
  const scan::finding *decisive = nullptr, *reported = nullptr;
  for (; seen_ < all.size(); ++seen_) {
    const auto &f = all[seen_];
    // A credential's value on its way to its own hosts (asked only when one is found).
    if (f.kind == scan::kind::own_secret && f.name.starts_with(credential_prefix) &&
        pol_.credentials().belongs_to(std::string_view(f.name).substr(credential_prefix.size()), host_, scheme_,
                                      port_)) {
      continue;
    }
    if (f.kind == scan::kind::custom && pol_.scan_hosts().exempt(f.rule, host_, scheme_, port_)) continue;
    if (f.action == scan::action::block) {
      if (!decisive || rank(f.kind) < rank(decisive->kind)) decisive = &f;
    } else if (!reported) {
      reported = &f;
    }
  }
  const auto *f = decisive ? decisive : reported;
  if (!f || (!decisive && !o.scan_rule.empty())) return {};
  // A canary or an own secret is named by which one (the variable's or credential's name, never
  // its value); a format or custom rule by its id.
  o.scan_rule = f->name.empty() ? f->rule : f->rule + ":" + f->name;
  o.scan_location = f->location;
  if (f->location.starts_with("body") || f->location.starts_with("message")) {
    o.scan_location += "@" + std::to_string(f->offset);
  }
  o.scan_kind = scan::to_string(f->kind);
  o.scan_action = scan::to_string(f->action);
  if (decisive) refused_ = scan_reason(*decisive);
  return refused_;
}

} // namespace sluice::gateway::exchange
