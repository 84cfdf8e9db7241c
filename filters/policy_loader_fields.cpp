// The loader's readers of single fields: every value in a config is read through one of these, so
// that every message starts with "FILE:LINE:", names the key and says what to write instead.
#include "filters/policy_loader_detail.hpp"
#include "filters/credentials.hpp"

#include <fstream>

namespace sluice::filters::loading {

// A credential's value comes from "env:VAR", "file:/path" or "command:PROGRAM ARGS...".
bool is_credential_source(const std::string &v) {
  return v.rfind("env:", 0) == 0 || v.rfind("file:", 0) == 0 || (v.rfind("command:", 0) == 0 && !command_argv(v).empty());
}

void loader::fail(const toml::node &n, const std::string &msg) const {
  auto line = n.source().begin.line;
  throw config_error(source + ":" + std::to_string(line) + ": " + msg);
}

void loader::fail_at(const toml::table &t, std::string_view key, const std::string &msg) const {
  if (auto *n = t.get(key)) fail(*n, msg);
  throw config_error(source + ": " + msg);
}

void loader::check_keys(const toml::table &t, const std::string &where,
                        std::initializer_list<std::string_view> known) const {
  for (auto &&[k, v] : t) {
    bool ok = false;
    for (auto name : known) ok = ok || k.str() == name;
    if (!ok) {
      std::string list;
      for (auto name : known) list += (list.empty() ? "" : ", ") + std::string(name);
      fail(v, "unknown key '" + std::string(k.str()) + "' in " + where + "; known keys: " + list);
    }
  }
}

std::string loader::string_of(const toml::table &t, std::string_view key, const std::string &where,
                              std::string def) const {
  auto *n = t.get(key);
  if (!n) return def;
  if (auto s = n->value<std::string>()) return *s;
  fail(*n, where + "." + std::string(key) + " must be a string");
}

bool loader::bool_of(const toml::table &t, std::string_view key, const std::string &where, bool def) const {
  auto *n = t.get(key);
  if (!n) return def;
  if (auto b = n->value<bool>()) return *b;
  fail(*n, where + "." + std::string(key) + " must be true or false");
}

std::int64_t loader::int_of(const toml::table &t, std::string_view key, const std::string &where,
                            std::int64_t def, std::int64_t min, std::int64_t max) const {
  auto *n = t.get(key);
  if (!n) return def;
  auto i = n->value<std::int64_t>();
  if (!i || *i < min || *i > max) {
    fail(*n, where + "." + std::string(key) + " must be an integer from " + std::to_string(min) +
                 " to " + std::to_string(max));
  }
  return *i;
}

// A duration written as text ("90s", "14d") within [min, max]; else `message` at its line.
std::chrono::milliseconds loader::duration_within(const toml::table &t, std::string_view key, std::chrono::milliseconds def,
                                                  std::chrono::milliseconds min, std::chrono::milliseconds max,
                                                  const std::string &message) const {
  auto *d = t.get(key);
  if (!d) return def;
  auto text = d->value<std::string>();
  std::chrono::milliseconds ms{0};
  try {
    if (text) ms = parse_duration(*text);
  } catch (const std::exception &) {
    text.reset();
  }
  if (!text || ms < min || ms > max) fail(*d, message);
  return ms;
}

std::chrono::milliseconds loader::duration_of(const toml::table &t, std::string_view key,
                                              const std::string &where,
                                              std::chrono::milliseconds def) const {
  auto *n = t.get(key);
  if (!n) return def;
  std::string text;
  if (auto i = n->value<std::int64_t>()) {
    text = std::to_string(*i);
  } else if (auto s = n->value<std::string>()) {
    text = *s;
  } else {
    fail(*n, where + "." + std::string(key) + " must be a duration such as \"30s\" or 30");
  }
  try {
    auto d = parse_duration(text);
    if (d.count() <= 0) throw std::invalid_argument("zero");
    return d;
  } catch (const std::exception &) {
    fail(*n, where + "." + std::string(key) + " = '" + text +
                 "' is not a positive duration; write e.g. \"500ms\", \"30s\", \"5m\"");
  }
}

std::vector<std::string> loader::strings_of(const toml::table &t, std::string_view key,
                                            const std::string &where) const {
  std::vector<std::string> out;
  auto *n = t.get(key);
  if (!n) return out;
  auto *arr = n->as_array();
  if (!arr) fail(*n, where + "." + std::string(key) + " must be an array of strings");
  for (auto &&e : *arr) {
    auto s = e.value<std::string>();
    if (!s) fail(e, where + "." + std::string(key) + " must contain only strings");
    out.push_back(*s);
  }
  return out;
}

profile loader::profile_of(const toml::node &n, const std::string &what) const {
  auto s = n.value<std::string>();
  auto p = s ? parse_profile(*s) : std::nullopt;
  if (!p) {
    fail(n, what + " must be one of offline, network-read, publish, allowlist");
  }
  return *p;
}

void loader::check_patterns(const toml::table &t, std::string_view key, const std::string &where) const {
  auto *n = t.get(key);
  if (!n || !n->as_array()) return;
  for (auto &&e : *n->as_array()) {
    auto text = e.value<std::string>();
    if (!text) fail(e, where + "." + std::string(key) + " must contain only strings");
    try {
      host_matcher m({*text});
      if (key != "deny") require_constrainable(parse_host_pattern(*text));
    } catch (const pattern_error &err) {
      fail(e, where + "." + std::string(key) + ": " + err.what());
    }
  }
}

// An allow or deny list whose entries are host patterns or route tables
// ({ host = PATTERN, methods = [...] | "read-only", paths = [...] }).
void loader::entries_of(const toml::table &t, std::string_view key, const std::string &where,
                        std::vector<std::string> &hosts, std::vector<route_rule> &routes) const {
  auto *n = t.get(key);
  if (!n) return;
  auto *arr = n->as_array();
  if (!arr) fail(*n, where + "." + std::string(key) + " must be an array of host patterns and route tables");
  const bool deny = key == "deny";
  for (auto &&e : *arr) {
    std::string at = where + "." + std::string(key);
    auto check_host = [&](const toml::node &node, const std::string &text) {
      try {
        host_matcher m({text});
        if (!deny) require_constrainable(parse_host_pattern(text));
      } catch (const pattern_error &err) {
        fail(node, at + ": " + err.what());
      }
    };
    if (auto text = e.value<std::string>()) {
      check_host(e, *text);
      hosts.push_back(*text);
      continue;
    }
    auto *rt = e.as_table();
    if (!rt) fail(e, at + " must contain host patterns (strings) or route tables { host = ..., methods = [...], paths = [...] }");
    for (auto &&[k, v] : *rt) {
      if (k.str() != "host" && k.str() != "methods" && k.str() != "paths" && k.str() != "websocket" &&
          (deny || k.str() != "mcp")) {
        fail(v, at + ": a route has host, methods, paths, websocket" + std::string(deny ? "" : " and mcp") +
                    " only, not '" + std::string(k.str()) + "'");
      }
    }
    route_rule r;
    auto host = (*rt)["host"].value<std::string>();
    if (!host) fail(e, at + ": a route needs host = \"PATTERN\"");
    check_host(*rt->get("host"), *host);
    r.host = *host;
    if (auto *m = rt->get("methods")) {
      if (auto word = m->value<std::string>()) {
        if (*word != "read-only") fail(*m, at + ": methods must be a list of methods or \"read-only\"");
        r.methods = {"GET", "HEAD", "OPTIONS"};
      } else if (auto *list = m->as_array()) {
        for (auto &&x : *list) {
          auto v = x.value<std::string>();
          if (!v) fail(x, at + ": methods must be strings such as \"POST\"");
          r.methods.push_back(*v);
        }
        if (r.methods.empty()) fail(*m, at + ": methods = [] allows nothing; leave it out for the profile's methods");
      } else {
        fail(*m, at + ": methods must be a list of methods or \"read-only\"");
      }
    }
    if (auto *ws = rt->get("websocket")) {
      auto b = ws->value<bool>();
      if (!b) fail(*ws, at + ": websocket must be true or false");
      r.websocket = *b;
    }
    if (auto *m = rt->get("mcp")) r.mcp = mcp_of(*m, at);
    if (auto *ps = rt->get("paths")) {
      auto *list = ps->as_array();
      if (!list || list->empty()) fail(*ps, at + ": paths must be a non-empty list such as [\"/graphql\", \"/repos/*\"]");
      for (auto &&x : *list) {
        auto v = x.value<std::string>();
        if (!v) fail(x, at + ": paths must be strings such as \"/graphql\"");
        r.paths.push_back(*v);
      }
    }
    try {
      r.text = describe_route(r);
    } catch (const pattern_error &err) {
      fail(e, at + ": " + err.what());
    }
    routes.push_back(std::move(r));
  }
}

std::shared_ptr<const mcp_rule> loader::mcp_of(const toml::node &n, const std::string &at) const {
  auto *t = n.as_table();
  if (!t) fail(n, at + ": mcp must be a table such as { allow_tools = [\"search\", \"read_*\"] }");
  auto rule = std::make_shared<mcp_rule>();
  for (auto &&[k, v] : *t) {
    std::vector<std::string> *list = k.str() == "allow_tools"     ? &rule->allow_tools
                                     : k.str() == "deny_tools"    ? &rule->deny_tools
                                     : k.str() == "allow_methods" ? &rule->allow_methods
                                                                  : nullptr;
    if (!list) fail(v, at + ": mcp has allow_tools, deny_tools and allow_methods only, not '" + std::string(k.str()) + "'");
    auto *arr = v.as_array();
    if (!arr) fail(v, at + ": mcp." + std::string(k.str()) + " must be a list of names (\"*\" for any run of characters)");
    for (auto &&x : *arr) {
      auto name = x.value<std::string>();
      if (!name) fail(x, at + ": mcp." + std::string(k.str()) + " must hold strings");
      if (auto why = mcp_pattern_problem(*name); !why.empty()) fail(x, at + ": mcp." + std::string(k.str()) + ": " + why);
      list->push_back(*name);
    }
  }
  return rule;
}

void loader::check_readable(const toml::table &t, std::string_view key, const std::string &path) const {
  if (path.empty()) return;
  std::ifstream f(path);
  if (!f) {
    fail(*t.get(key), "cannot read file '" + path + "' for " + std::string(key) +
                          "; check the path and its permissions");
  }
}

// `ssh = [{ host = "github.com", paths = ["org/*"], port = 22, user = "git",
// identity = "ssh-agent" | "file:PATH", host_key = "TYPE BASE64" }]`: Git over SSH hosts.
void loader::ssh_entries_of(const toml::table &t, const std::string &where, std::vector<ssh_rule> &out) const {
  auto *node = t.get("ssh");
  if (!node) return;
  auto *arr = node->as_array();
  std::string at = where + " ssh";
  if (!arr) fail(*node, at + " must be a list of tables { host = \"HOST\", paths = [\"org/*\"] }");
  for (auto &&e : *arr) {
    auto *rt = e.as_table();
    if (!rt) fail(e, at + " must hold tables such as { host = \"github.com\", paths = [\"org/*\"] }");
    check_keys(*rt, at + " entry", {"host", "port", "paths", "user", "identity", "host_key"});
    ssh_rule r;
    auto host = (*rt)["host"].value<std::string>();
    if (!host) fail(e, at + ": an entry needs host = \"HOST\" (a name, exact)");
    auto parsed = parse_host(*host);
    if (!parsed.host || parsed.host->ip || parsed.host->name != *host) {
      fail(*rt->get("host"), at + ": host must be a host name in lower case, no port or pattern (got '" + *host + "')");
    }
    r.host = *host;
    if (auto *p = rt->get("port")) {
      auto n = p->value<std::int64_t>();
      if (!n || *n < 1 || *n > 65535) fail(*p, at + ": port must be a number 1-65535");
      r.port = static_cast<unsigned>(*n);
    }
    if (auto *ps = rt->get("paths")) {
      auto *list = ps->as_array();
      if (!list || list->empty()) fail(*ps, at + ": paths must be a non-empty list such as [\"org/*\", \"org/repo.git\"]");
      for (auto &&x : *list) {
        auto v = x.value<std::string>();
        if (!v || v->empty()) fail(x, at + ": paths must be repository names such as \"org/repo.git\" or \"org/*\"");
        r.paths.push_back(*v);
      }
    }
    r.user = string_of(*rt, "user", at, r.user);
    if (r.user.empty() || r.user.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
                              std::string::npos) {
      fail_at(*rt, "user", at + ": user must be a login name such as \"git\"");
    }
    r.identity = string_of(*rt, "identity", at, r.identity);
    if (r.identity != "ssh-agent" && (r.identity.rfind("file:", 0) != 0 || r.identity.size() <= 5)) {
      fail_at(*rt, "identity", at + ": identity must be \"ssh-agent\" (the caller's SSH_AUTH_SOCK) or "
                                    "\"file:PATH\" (a private key without a passphrase)");
    }
    r.host_key = string_of(*rt, "host_key", at, "");
    if (!r.host_key.empty() && r.host_key.find(' ') == std::string::npos) {
      fail_at(*rt, "host_key", at + ": host_key is a known_hosts key: \"ssh-ed25519 AAAA...\"");
    }
    r.text = "ssh://" + r.host + (r.port == 22 ? "" : ":" + std::to_string(r.port));
    for (std::size_t i = 0; i < r.paths.size(); ++i) r.text += (i ? "," : " ") + r.paths[i];
    out.push_back(std::move(r));
  }
}

// A skill's or a role's `credentials`: each a [credentials.NAME] of this file, or "*".
void loader::check_credential_names(const toml::table &t, const std::string &where,
                                    const std::vector<std::string> &names, const config &c) const {
  for (const auto &name : names) {
    bool known = name == "*";
    for (const auto &cc : c.credentials) known = known || cc.name == name;
    if (!known) {
      fail(*t.get("credentials"), where + " credentials: no [credentials." + name +
                                      "] in this file; define it or drop the name");
    }
  }
}

bool loader::is_name(std::string_view n) {
  return !n.empty() && n.size() <= 64 &&
         n.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
             std::string_view::npos;
}

} // namespace sluice::filters::loading
