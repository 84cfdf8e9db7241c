// The decider's question and answer (protocol.hpp).
#include "gateway/decider/protocol.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/json/serialize.hpp>
#include <openssl/evp.h>

#include <algorithm>
#include <cctype>

namespace sluice::gateway::decider {
namespace js = boost::json;
using boost::beast::iequals;

namespace {

void add_asker(js::object &q, const asker &who) {
  if (!who.client.empty()) q["client"] = who.client;
  if (!who.role.empty()) q["role"] = who.role;
  if (!who.skill.empty()) q["skill"] = who.skill;
  if (!who.command_id.empty()) q["command_id"] = who.command_id;
  q["profile"] = who.profile;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto &c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A field a decider may set or take off: a token, and not one that frames the message, names its
// origin or belongs to the hop (those are sluice's to keep consistent).
bool settable(std::string_view name) {
  if (name.empty() || name.size() > 256) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos)) {
      return false;
    }
  }
  for (std::string_view no : {"host", "content-length", "transfer-encoding", "connection", "upgrade", "te",
                              "trailer", "keep-alive", "expect"}) {
    if (iequals(name, no)) return false;
  }
  return !(name.size() > 6 && iequals(name.substr(0, 6), "proxy-"));
}

bool clean_value(std::string_view v) {
  return v.size() <= 8192 && std::none_of(v.begin(), v.end(), [](char c) { return c == '\r' || c == '\n' || c == '\0'; });
}

// RFC 3629: well-formed UTF-8 (no overlongs, no surrogates, nothing past U+10FFFF).
bool utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : 9;
    if (n == 9 || s.size() - i <= n) return n == 0;
    std::uint32_t cp = n == 0 ? c : c & (0x3f >> n);
    for (std::size_t k = 1; k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b >> 6) != 2) return false;
      cp = (cp << 6) | (b & 0x3f);
    }
    static constexpr std::uint32_t least[] = {0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

answer unusable(std::string why) {
  answer a;
  a.kind = answer::unavailable;
  a.message = std::move(why);
  return a;
}

} // namespace

std::string_view to_string(answer::kind_t k) {
  switch (k) {
  case answer::allow: return "allow";
  case answer::deny: return "deny";
  case answer::ask: return "ask";
  case answer::timeout: return "timeout";
  case answer::body: return "body";
  default: return "unavailable";
  }
}

std::string_view refusal_of(answer::kind_t k) {
  switch (k) {
  case answer::deny: return "decider_denied";
  case answer::timeout: return "decider_timeout";
  case answer::unavailable: return "decider_unavailable";
  default: return {};
  }
}

js::object question(const exchange::request &r, const exchange::verdict &v, const exchange::outcome &o,
                    const asker &who) {
  js::object q;
  q["method"] = o.method;
  q["scheme"] = o.scheme;
  q["host"] = o.host;
  q["port"] = o.port;
  auto qm = o.target.find('?');
  q["path"] = std::string_view(o.target).substr(0, qm);
  q["query"] = qm == std::string::npos ? std::string_view() : std::string_view(o.target).substr(qm + 1);
  q["target"] = o.target;
  q["protocol"] = r.version == 20 ? (o.protocol == "grpc" ? "grpc" : "h2") : std::string(o.protocol);
  js::object fields;
  if (r.fields) {
    for (auto [n, value] : *r.fields) {
      if (iequals(n, "authorization") || iequals(n, "proxy-authorization") || iequals(n, "cookie")) continue;
      auto name = lower(n);
      if (auto *had = fields.if_contains(name)) {
        std::string joined(had->as_string());
        joined.append(", ").append(value);
        *had = joined;
      } else {
        fields[name] = value;
      }
    }
  }
  q["fields"] = std::move(fields);
  add_asker(q, who);
  js::object file;
  file["decision"] = v.reason.empty() ? "allow" : "deny";
  if (!v.reason.empty()) file["reason"] = v.reason;
  if (!v.rule.empty()) file["rule"] = v.rule;
  q["file"] = std::move(file);
  return q;
}

void add_body(js::object &q, std::string_view body) {
  q["body_bytes"] = body.size();
  if (utf8(body)) {
    q["body"] = body;
    return;
  }
  std::string out(4 * ((body.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char *>(out.data()),
                                reinterpret_cast<const unsigned char *>(body.data()), static_cast<int>(body.size()));
  out.resize(static_cast<std::size_t>(n));
  q["body_base64"] = out;
}

js::object connect_question(const exchange::outcome &o, const asker &who, std::string_view protocol,
                            const std::string *allowed_by) {
  js::object q;
  q["method"] = "CONNECT";
  q["scheme"] = o.scheme;
  q["host"] = o.host;
  q["port"] = o.port;
  q["path"] = "";
  q["query"] = "";
  q["target"] = o.host + ":" + std::to_string(o.port);
  q["protocol"] = protocol;
  q["fields"] = js::object();
  add_asker(q, who);
  if (allowed_by) {
    q["file"] = js::object{{"decision", "allow"}, {"rule", *allowed_by}};
  } else {
    q["file"] = js::object{{"decision", "deny"}, {"reason", "host_not_allowlisted"}};
  }
  return q;
}

answer parse_result(const js::value &result) {
  if (result.is_bool()) {
    answer a;
    a.kind = result.as_bool() ? answer::allow : answer::deny;
    return a;
  }
  if (!result.is_object()) return unusable("the result is neither true, false nor an object");
  const auto &o = result.as_object();
  answer a;
  const auto *d = o.if_contains("decision");
  if (const auto *allow = o.if_contains("allow"); !d && allow && allow->is_bool()) {
    a.kind = allow->as_bool() ? answer::allow : answer::deny;
  } else if (!d || !d->is_string()) {
    return unusable("the result has no \"decision\" (\"allow\", \"deny\" or \"ask\")");
  } else if (d->as_string() == "allow") {
    a.kind = answer::allow;
  } else if (d->as_string() == "deny") {
    a.kind = answer::deny;
  } else if (d->as_string() == "ask") {
    a.kind = answer::ask;
  } else if (d->as_string() == "body") {
    a.kind = answer::body;
  } else {
    return unusable("decision \"" + std::string(d->as_string()) + "\" is none of allow, deny, ask, body");
  }
  if (const auto *m = o.if_contains("reason"); m && m->is_string()) {
    std::string_view text = m->as_string();
    a.message.assign(text.substr(0, 1024));
    std::replace_if(a.message.begin(), a.message.end(), [](char c) { return c == '\r' || c == '\n' || c == '\0'; }, ' ');
  }
  if (const auto *s = o.if_contains("status")) {
    if (!s->is_int64() || s->as_int64() < 400 || s->as_int64() > 499) {
      return unusable("status must be a number from 400 to 499");
    }
    a.status = static_cast<unsigned>(s->as_int64());
  }
  if (const auto *f = o.if_contains("set_fields")) {
    if (!f->is_object()) return unusable("set_fields must be an object of field names and values");
    for (const auto &[name, value] : f->as_object()) {
      if (!value.is_string() || !settable(name) || !clean_value(value.as_string())) {
        return unusable("set_fields may not set \"" + std::string(name) + "\" (a framing, hop or proxy field, "
                        "or a value with a line break)");
      }
      a.set.emplace_back(std::string(name), std::string(value.as_string()));
    }
  }
  if (const auto *f = o.if_contains("remove_fields")) {
    if (!f->is_array()) return unusable("remove_fields must be an array of field names");
    for (const auto &name : f->as_array()) {
      if (!name.is_string() || !settable(name.as_string())) {
        return unusable("remove_fields may not name a framing, hop or proxy field");
      }
      a.remove.emplace_back(name.as_string());
    }
  }
  if (const auto *c = o.if_contains("cache"); c && c->is_object()) {
    const auto &co = c->as_object();
    if (const auto *s = co.if_contains("seconds"); s && s->is_int64() && s->as_int64() > 0) {
      a.keep = std::chrono::seconds(std::min<std::int64_t>(s->as_int64(), 86400));
    }
    if (const auto *k = co.if_contains("keys"); k && k->is_array()) {
      for (const auto &key : k->as_array()) {
        if (key.is_string()) a.depends_on.emplace_back(key.as_string());
      }
      std::sort(a.depends_on.begin(), a.depends_on.end());
      a.depends_on.erase(std::unique(a.depends_on.begin(), a.depends_on.end()), a.depends_on.end());
    }
  }
  return a;
}

// The values of `keys` in the question ("fields.NAME" reaches into the fields), serialized: equal
// questions in those keys meet under one key.
std::string answer_cache::key_of(const std::vector<std::string> &keys, const js::object &q) {
  std::string key;
  for (const auto &k : keys) {
    const js::value *v = nullptr;
    if (k.rfind("fields.", 0) == 0) {
      if (const auto *f = q.if_contains("fields"); f && f->is_object()) v = f->as_object().if_contains(lower(k.substr(7)));
    } else {
      v = q.if_contains(k);
    }
    key += k;
    key += '=';
    key += v ? js::serialize(*v) : "-";
    key += '\n';
  }
  return key;
}

std::optional<answer> answer_cache::find(const js::object &q) {
  if (longest_.count() == 0) return std::nullopt;
  std::lock_guard lock(mutex_);
  auto now = clock::now();
  for (const auto &shape : shapes_) {
    auto it = kept_.find(key_of(shape, q));
    if (it == kept_.end()) continue;
    if (it->second.second <= now) {
      kept_.erase(it);
      continue;
    }
    answer a = it->second.first;
    a.cached = true;
    return a;
  }
  return std::nullopt;
}

void answer_cache::keep(const js::object &q, const answer &a) {
  // Only what the decider said may be kept, for as long as it said, and never an ask (a person's
  // answer is for one request) or a failure.
  if (longest_.count() == 0 || a.keep.count() == 0 || a.depends_on.empty() || a.kind == answer::ask ||
      a.kind == answer::timeout || a.kind == answer::unavailable || a.kind == answer::body) {
    return;
  }
  std::lock_guard lock(mutex_);
  if (std::find(shapes_.begin(), shapes_.end(), a.depends_on) == shapes_.end()) {
    if (shapes_.size() >= 16) return; // a decider naming ever new key sets is not cached further
    shapes_.push_back(a.depends_on);
  }
  auto now = clock::now();
  if (kept_.size() >= entries_) {
    std::erase_if(kept_, [now](const auto &e) { return e.second.second <= now; });
    if (kept_.size() >= entries_) kept_.clear(); // bounded: start over rather than grow
  }
  kept_[key_of(a.depends_on, q)] = {a, now + std::min(a.keep, longest_)};
}

} // namespace sluice::gateway::decider
