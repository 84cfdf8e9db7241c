#include "filters/policy_loader.hpp"
#include "filters/client_identity.hpp"

#include <charconv>
#include <fstream>
#include <set>
#include <sstream>
#include <toml++/toml.h>

namespace sluice::filters {
namespace {

// A credential's value comes from "env:VAR", "file:/path" or "command:PROGRAM ARGS...".
bool is_credential_source(const std::string &v) {
  return v.rfind("env:", 0) == 0 || v.rfind("file:", 0) == 0 || (v.rfind("command:", 0) == 0 && !command_argv(v).empty());
}

// Carries the file name so that every message starts with "FILE:LINE:".
struct loader {
  std::string source;

  [[noreturn]] void fail(const toml::node &n, const std::string &msg) const {
    auto line = n.source().begin.line;
    throw config_error(source + ":" + std::to_string(line) + ": " + msg);
  }
  [[noreturn]] void fail_at(const toml::table &t, std::string_view key, const std::string &msg) {
    if (auto *n = t.get(key)) fail(*n, msg);
    throw config_error(source + ": " + msg);
  }

  void check_keys(const toml::table &t, const std::string &where,
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

  std::string string_of(const toml::table &t, std::string_view key, const std::string &where,
                        std::string def) const {
    auto *n = t.get(key);
    if (!n) return def;
    if (auto s = n->value<std::string>()) return *s;
    fail(*n, where + "." + std::string(key) + " must be a string");
  }

  bool bool_of(const toml::table &t, std::string_view key, const std::string &where, bool def) const {
    auto *n = t.get(key);
    if (!n) return def;
    if (auto b = n->value<bool>()) return *b;
    fail(*n, where + "." + std::string(key) + " must be true or false");
  }

  std::int64_t int_of(const toml::table &t, std::string_view key, const std::string &where,
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
  std::chrono::milliseconds duration_within(const toml::table &t, std::string_view key, std::chrono::milliseconds def,
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

  std::chrono::milliseconds duration_of(const toml::table &t, std::string_view key,
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

  std::vector<std::string> strings_of(const toml::table &t, std::string_view key,
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

  profile profile_of(const toml::node &n, const std::string &what) const {
    auto s = n.value<std::string>();
    auto p = s ? parse_profile(*s) : std::nullopt;
    if (!p) {
      fail(n, what + " must be one of offline, network-read, publish, allowlist");
    }
    return *p;
  }

  void check_patterns(const toml::table &t, std::string_view key, const std::string &where) const {
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
  void entries_of(const toml::table &t, std::string_view key, const std::string &where,
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
        if (k.str() != "host" && k.str() != "methods" && k.str() != "paths" && k.str() != "websocket") {
          fail(v, at + ": a route has host, methods, paths and websocket only, not '" + std::string(k.str()) + "'");
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

  void check_readable(const toml::table &t, std::string_view key, const std::string &path) const {
    if (path.empty()) return;
    std::ifstream f(path);
    if (!f) {
      fail(*t.get(key), "cannot read file '" + path + "' for " + std::string(key) +
                            "; check the path and its permissions");
    }
  }

  // `ssh = [{ host = "github.com", paths = ["org/*"], port = 22, user = "git",
  // identity = "ssh-agent" | "file:PATH", host_key = "TYPE BASE64" }]`: Git over SSH hosts.
  void ssh_entries_of(const toml::table &t, const std::string &where, std::vector<ssh_rule> &out) {
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
  void check_credential_names(const toml::table &t, const std::string &where,
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

  static bool is_name(std::string_view n) {
    return !n.empty() && n.size() <= 64 &&
           n.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
               std::string_view::npos;
  }

  // [roles.NAME] and [clients.NAME] (serve's client identity and per-client policy).
  void load_roles(const toml::table &root, config &c) {
    if (auto *n = root.get("roles"); n && !n->as_table()) fail(*n, "roles must be a table of [roles.NAME] sections");
    if (auto *n = root.get("clients"); n && !n->as_table()) fail(*n, "clients must be a table of [clients.NAME] sections");
    if (auto *t = root["roles"].as_table()) {
      for (auto &&[k, v] : *t) {
        role_config r;
        r.name = std::string(k.str());
        std::string where = "[roles." + r.name + "]";
        auto *rt = v.as_table();
        if (!rt) fail(v, "roles." + r.name + " must be a table");
        if (!is_name(r.name)) fail(v, where + ": a role name uses letters, digits, '.', '-' and '_' only");
        check_keys(*rt, where, {"profile", "mode", "allow", "deny", "credentials",
                                "requests_per_second", "bytes_per_second", "approvals"});
        r.approvals_set = rt->get("approvals") != nullptr;
        check_patterns(*rt, "approvals", "roles." + r.name);
        r.approvals = strings_of(*rt, "approvals", "roles." + r.name);
        if (!r.approvals.empty() && !root.get("approvals")) {
          fail_at(*rt, "approvals", where + " approvals needs an [approvals] table as well: how long a request "
                                    "waits and where a person decides (timeout, token_file)");
        }
        if (auto *p = rt->get("profile")) {
          r.mode = profile_of(*p, where + " profile");
          r.mode_set = true;
        }
        auto mode = string_of(*rt, "mode", where, "enforce");
        if (mode != "enforce" && mode != "report") {
          fail_at(*rt, "mode", where + " mode must be \"enforce\" or \"report\" (report lets through "
                               "what enforce would refuse and logs it as would_deny)");
        }
        r.report = mode == "report";
        r.allow_set = rt->get("allow") != nullptr;
        entries_of(*rt, "allow", "roles." + r.name, r.allow, r.allow_routes);
        entries_of(*rt, "deny", "roles." + r.name, r.deny, r.deny_routes);
        r.credentials = strings_of(*rt, "credentials", "roles." + r.name);
        check_credential_names(*rt, where, r.credentials, c);
        if (auto *n = rt->get("requests_per_second")) {
          auto d = n->value<double>();
          if (!d || !(*d > 0) || *d > 1e6) fail(*n, where + " requests_per_second must be a number above 0 (at most 1000000)");
          r.requests_per_second = *d;
        }
        r.bytes_per_second = static_cast<std::uint64_t>(
            int_of(*rt, "bytes_per_second", where, 0, 1024, INT64_MAX));
        c.roles[r.name] = std::move(r);
      }
    }
    std::map<std::string, std::string> by_hash, by_certificate;
    if (auto *t = root["clients"].as_table()) {
      for (auto &&[k, v] : *t) {
        client_config cl;
        cl.name = std::string(k.str());
        std::string where = "[clients." + cl.name + "]";
        auto *ct = v.as_table();
        if (!ct) fail(v, "clients." + cl.name + " must be a table with token_sha256 and role");
        if (!is_name(cl.name)) {
          fail(v, where + ": a client name uses letters, digits, '.', '-' and '_' only (it is the "
                          "user name of Basic proxy credentials, NAME:TOKEN)");
        }
        check_keys(*ct, where, {"token_sha256", "certificate", "role"});
        cl.certificate = string_of(*ct, "certificate", where, "");
        if (!cl.certificate.empty()) {
          if (!cl.certificate_is_uri()) {
            auto h = parse_host(cl.certificate);
            if (!h.host || h.host->ip) {
              fail_at(*ct, "certificate", where + " certificate = \"" + cl.certificate +
                                              "\" is neither a URI (a SPIFFE ID such as "
                                              "\"spiffe://example.org/ns/agents/sa/builder\") nor a DNS "
                                              "name: it names the certificate's subjectAltName");
            }
            cl.certificate = h.host->name;
          } else if (cl.certificate.find_first_of(" \t\r\n") != std::string::npos ||
                     cl.certificate.front() == ':') {
            fail_at(*ct, "certificate", where + " certificate = \"" + cl.certificate +
                                            "\" is not a URI; write the URI SAN exactly, e.g. "
                                            "\"spiffe://example.org/ns/agents/sa/builder\"");
          }
          if (c.client_ca.empty()) {
            fail_at(*ct, "certificate", where + " identifies by certificate, but [tls] client_ca is not "
                                            "set: give the PEM bundle of the CAs that issue client "
                                            "certificates, and listen.proxy_tls for the HTTPS proxy listener");
          }
          if (auto [it, fresh] = by_certificate.emplace(cl.certificate, cl.name); !fresh) {
            fail_at(*ct, "certificate", where + " has the same certificate identity as [clients." +
                                            it->second + "]; give every client an identity of its own");
          }
        }
        if (ct->get("token_sha256") || cl.certificate.empty()) {
          auto hex = string_of(*ct, "token_sha256", where, "");
          cl.token_sha256 = from_hex(hex);
          if (cl.token_sha256.size() != 32) {
            if (!ct->get("token_sha256")) {
              fail(v, where + " needs token_sha256 = \"HEX\" (the SHA-256 of the client's token: `sluice "
                              "policy token NAME --role ROLE` makes a token and prints the section) or "
                              "certificate = \"URI or DNS name\" (its client certificate's identity)");
            }
            fail_at(*ct, "token_sha256", where + " token_sha256 must be 64 hex digits, the SHA-256 of the "
                                         "token (printf %s TOKEN | sha256sum), never the token itself");
          }
          if (auto [it, fresh] = by_hash.emplace(cl.token_sha256, cl.name); !fresh) {
            fail_at(*ct, "token_sha256", where + " has the same token as [clients." + it->second +
                                         "]; give every client a token of its own");
          }
        }
        cl.role = string_of(*ct, "role", where, "");
        if (cl.role.empty()) fail(v, where + " needs role = \"ROLE\", one of the [roles.NAME] sections");
        if (!c.roles.count(cl.role)) {
          fail_at(*ct, "role", where + " role = \"" + cl.role + "\": no [roles." + cl.role +
                               "] in this file; define it or pick another");
        }
        c.clients[cl.name] = std::move(cl);
      }
    }
  }

  config load(const toml::table &root) {
    config c;
    c.source = source;
    check_keys(root, "the top level",
               {"profile", "listen", "policy", "tls", "upstream", "timeouts", "limits", "log",
                "skills", "default_skill", "sandbox", "credentials", "roles", "clients", "approvals"});
    if (auto *n = root.get("profile")) c.mode = profile_of(*n, "profile");
    c.default_skill = string_of(root, "default_skill", "", c.default_skill);

    if (auto *t = root["listen"].as_table()) {
      check_keys(*t, "[listen]", {"proxy", "proxy_tls", "admin", "agents"});
      c.proxy_listen = string_of(*t, "proxy", "listen", c.proxy_listen);
      c.proxy_tls_listen = string_of(*t, "proxy_tls", "listen", c.proxy_tls_listen);
      c.admin_listen = string_of(*t, "admin", "listen", c.admin_listen);
      for (auto key : {"proxy", "proxy_tls", "admin"}) {
        auto v = string_of(*t, key, "listen", "");
        if (!v.empty() && !parse_listen_address(v)) {
          fail(*t->get(key), std::string("listen.") + key + " = '" + v +
                                 "' is not ADDRESS:PORT; write e.g. \"127.0.0.1:3128\"");
        }
      }
      if (auto *agents = (*t)["agents"].as_table()) {
        for (auto &&[k, v] : *agents) {
          agent_listener a;
          a.name = std::string(k.str());
          std::string where = "[listen.agents." + a.name + "]";
          auto *at = v.as_table();
          if (!at) fail(v, "listen.agents." + a.name + " must be a table with address and uids");
          check_keys(*at, where, {"address", "uids"});
          if (a.name.empty() || a.name.size() > 64 ||
              a.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") != std::string::npos) {
            fail(v, where + ": an agent name uses lower-case letters, digits, '-' and '_' only");
          }
          a.address = string_of(*at, "address", where, "");
          auto parsed = parse_listen_address(a.address);
          if (!parsed || !parsed->ip.is_loopback()) {
            fail(v, where + " address = '" + a.address + "' must be a loopback ADDRESS:PORT such as "
                            "\"127.0.0.1:3129\": the users allowed to connect are checked on this machine");
          }
          auto *uids = at->get("uids");
          auto *arr = uids ? uids->as_array() : nullptr;
          if (!arr || arr->empty()) {
            fail(v, where + " needs uids = [...]: the users whose processes may use this listener "
                            "(id -u of the user who runs the agent)");
          }
          for (auto &&e : *arr) {
            auto n = e.value<std::int64_t>();
            if (!n || *n < 0 || *n > 4'294'967'294LL) fail(e, where + " uids must be user ids (integers)");
            a.uids.push_back(static_cast<unsigned>(*n));
          }
          c.agents.push_back(std::move(a));
        }
      } else if (t->get("agents")) {
        fail(*t->get("agents"), "listen.agents must be a table of [listen.agents.NAME] sections");
      }
    }
    if (auto *t = root["policy"].as_table()) {
      check_keys(*t, "[policy]", {"allow", "deny"});
      entries_of(*t, "allow", "policy", c.allow, c.allow_routes);
      entries_of(*t, "deny", "policy", c.deny, c.deny_routes);
    }
    if (auto *t = root["tls"].as_table()) {
      check_keys(*t, "[tls]", {"ca_cert", "ca_key", "upstream_ca_bundle", "system_trust",
                               "leaf_validity_hours", "proxy_cert", "proxy_key", "client_ca", "h2"});
      c.ca_cert = string_of(*t, "ca_cert", "tls", "");
      c.ca_key = string_of(*t, "ca_key", "tls", "");
      if (c.ca_cert.empty() != c.ca_key.empty()) {
        fail_at(*t, c.ca_cert.empty() ? "ca_key" : "ca_cert",
                "tls.ca_cert and tls.ca_key go together; set both, or neither for an ephemeral CA");
      }
      check_readable(*t, "ca_cert", c.ca_cert);
      check_readable(*t, "ca_key", c.ca_key);
      c.upstream_ca_bundle = string_of(*t, "upstream_ca_bundle", "tls", "");
      check_readable(*t, "upstream_ca_bundle", c.upstream_ca_bundle);
      c.upstream_system_trust = bool_of(*t, "system_trust", "tls", true);
      c.offer_h2 = bool_of(*t, "h2", "tls", true);
      c.leaf_validity = std::chrono::hours(int_of(*t, "leaf_validity_hours", "tls", 24, 1, 24 * 30));
      c.proxy_cert = string_of(*t, "proxy_cert", "tls", "");
      c.proxy_key = string_of(*t, "proxy_key", "tls", "");
      c.client_ca = string_of(*t, "client_ca", "tls", "");
      check_readable(*t, "proxy_cert", c.proxy_cert);
      check_readable(*t, "proxy_key", c.proxy_key);
      check_readable(*t, "client_ca", c.client_ca);
      if (c.proxy_cert.empty() != c.proxy_key.empty()) {
        fail_at(*t, c.proxy_cert.empty() ? "proxy_key" : "proxy_cert",
                "tls.proxy_cert and tls.proxy_key go together: the HTTPS proxy listener's certificate "
                "chain and its key");
      }
    }
    // The HTTPS proxy listener and its certificate come together.
    if (c.proxy_tls_listen.empty() != c.proxy_cert.empty()) {
      if (c.proxy_cert.empty()) {
        fail_at(*root["listen"].as_table(), "proxy_tls",
                "listen.proxy_tls needs [tls] proxy_cert and proxy_key: the certificate (chain, PEM) "
                "the HTTPS proxy listener shows its clients, for the name they dial, and its key");
      }
      fail_at(*root["tls"].as_table(), "proxy_cert",
              "tls.proxy_cert is for the HTTPS proxy listener; set listen.proxy_tls = \"ADDRESS:PORT\" too, "
              "or remove it");
    }
    if (!c.client_ca.empty() && c.proxy_tls_listen.empty()) {
      fail_at(*root["tls"].as_table(), "client_ca",
              "tls.client_ca is the trust for client certificates on the HTTPS proxy listener; set "
              "listen.proxy_tls and tls.proxy_cert/proxy_key too, or remove it");
    }
    if (auto *t = root["upstream"].as_table()) {
      check_keys(*t, "[upstream]", {"allow_addresses", "dns_servers", "resolve"});
      c.allow_address_text = strings_of(*t, "allow_addresses", "upstream");
      if (auto *arr = (*t)["allow_addresses"].as_array()) {
        for (auto &&e : *arr) {
          auto text = e.value<std::string>();
          if (!text) fail(e, "upstream.allow_addresses must contain only strings");
          try {
            c.allow_addresses.push_back(parse_address_range(*text));
          } catch (const std::invalid_argument &err) {
            fail(e, std::string("upstream.allow_addresses: ") + err.what());
          }
        }
      }
      c.dns_servers = strings_of(*t, "dns_servers", "upstream");
      if (auto *r = (*t)["resolve"].as_table()) {
        for (auto &&[k, v] : *r) {
          auto host = parse_host(k.str());
          if (!host.host || host.host->ip) {
            fail(v, "upstream.resolve: '" + std::string(k.str()) + "' is not a DNS name");
          }
          std::vector<std::string> texts;
          if (auto s = v.value<std::string>()) {
            texts.push_back(*s);
          } else if (auto *arr = v.as_array()) {
            for (auto &&e : *arr) {
              if (auto s2 = e.value<std::string>()) texts.push_back(*s2);
            }
          }
          if (texts.empty()) {
            fail(v, "upstream.resolve.\"" + std::string(k.str()) +
                        "\" must be an address string or an array of them");
          }
          for (auto &text : texts) {
            boost::system::error_code ec;
            auto a = boost::asio::ip::make_address(text, ec);
            if (ec) {
              fail(v, "upstream.resolve.\"" + std::string(k.str()) + "\" = '" + text +
                          "' is not an IP address; write e.g. \"198.18.0.2\"");
            }
            c.pins[host.host->name].push_back(a);
          }
        }
      }
    }
    if (auto *t = root["timeouts"].as_table()) {
      check_keys(*t, "[timeouts]", {"connect", "tls_handshake", "header_read", "idle", "io",
                                    "tunnel_idle", "dns", "drain", "drain_delay", "request"});
      auto &to = c.timeouts;
      to.connect = duration_of(*t, "connect", "timeouts", to.connect);
      to.tls_handshake = duration_of(*t, "tls_handshake", "timeouts", to.tls_handshake);
      to.header_read = duration_of(*t, "header_read", "timeouts", to.header_read);
      to.idle = duration_of(*t, "idle", "timeouts", to.idle);
      to.io = duration_of(*t, "io", "timeouts", to.io);
      to.tunnel_idle = duration_of(*t, "tunnel_idle", "timeouts", to.tunnel_idle);
      to.dns = duration_of(*t, "dns", "timeouts", to.dns);
      to.drain = duration_of(*t, "drain", "timeouts", to.drain);
      to.drain_delay = duration_of(*t, "drain_delay", "timeouts", to.drain_delay);
      to.request = duration_of(*t, "request", "timeouts", to.request);
    }
    if (auto *t = root["limits"].as_table()) {
      check_keys(*t, "[limits]", {"max_header_bytes", "max_body_bytes", "max_response_body_bytes",
                                  "max_websocket_message_bytes", "max_connections",
                                  "max_requests_per_connection", "pool_idle_per_host",
                                  "pool_idle_total", "pool_idle_timeout"});
      auto &l = c.limits;
      l.max_header_bytes = int_of(*t, "max_header_bytes", "limits", l.max_header_bytes, 1024, 1 << 20);
      l.max_body_bytes = int_of(*t, "max_body_bytes", "limits", 0, 0, INT64_MAX);
      l.max_response_body_bytes = int_of(*t, "max_response_body_bytes", "limits", 0, 0, INT64_MAX);
      l.max_websocket_message_bytes = int_of(*t, "max_websocket_message_bytes", "limits",
                                             static_cast<std::int64_t>(l.max_websocket_message_bytes), 0, INT64_MAX);
      l.max_connections = int_of(*t, "max_connections", "limits", l.max_connections, 1, 1'000'000);
      l.max_requests_per_connection = int_of(*t, "max_requests_per_connection", "limits",
                                             l.max_requests_per_connection, 1, 1'000'000'000);
      l.pool_idle_per_host = int_of(*t, "pool_idle_per_host", "limits", l.pool_idle_per_host, 0, 10'000);
      l.pool_idle_total = int_of(*t, "pool_idle_total", "limits", l.pool_idle_total, 0, 1'000'000);
      l.pool_idle_timeout = duration_of(*t, "pool_idle_timeout", "limits", l.pool_idle_timeout);
    }
    if (auto *t = root["log"].as_table()) {
      check_keys(*t, "[log]", {"access_log", "redact_query", "format"});
      c.access_log = string_of(*t, "access_log", "log", "");
      c.access_log_format = string_of(*t, "format", "log", "json");
      if (c.access_log_format != "json" && c.access_log_format != "ocsf") {
        fail(*t->get("format"), "[log] format must be \"json\" (sluice's access log line) or \"ocsf\" "
                                    "(OCSF 1.8 HTTP and Network Activity events)");
      }
      c.redact_query = bool_of(*t, "redact_query", "log", true);
    }
    if (auto *t = root["sandbox"].as_table()) {
      check_keys(*t, "[sandbox]", {"require_landlock", "credential_files", "max_workspace_entries",
                                   "guarded_names", "caches", "nested_userns", "journal", "journal_max_age",
                                   "journal_max_size"});
      c.journal = bool_of(*t, "journal", "sandbox", false);
      c.journal_max_age = duration_within(*t, "journal_max_age", c.journal_max_age, std::chrono::hours(1),
                                          std::chrono::hours(24 * 3650),
                                          "[sandbox] journal_max_age must be a duration of an hour or more (\"14d\", "
                                          "\"72h\"): how long runs stay undoable");
      c.journal_max_bytes = static_cast<std::uint64_t>(int_of(*t, "journal_max_size", "sandbox",
                                                              static_cast<std::int64_t>(c.journal_max_bytes >> 20), 16,
                                                              1024 * 1024)) << 20;
      c.require_landlock = bool_of(*t, "require_landlock", "sandbox", false);
      c.nested_userns = bool_of(*t, "nested_userns", "sandbox", false);
      c.credential_files = strings_of(*t, "credential_files", "sandbox");
      c.max_workspace_entries = int_of(*t, "max_workspace_entries", "sandbox", c.max_workspace_entries,
                                       1, 100'000'000);
      c.guarded_names = strings_of(*t, "guarded_names", "sandbox");
      for (const auto &n : c.guarded_names) {
        auto slash = n.find('/');
        if (n.empty() || n[0] == '/' || n.back() == '/' || n.find("..") != std::string::npos ||
            (slash != std::string::npos && n.find('/', slash + 1) != std::string::npos)) {
          fail_at(*t, "guarded_names", "[sandbox] guarded_names: \"" + n + "\" must be a name (a glob "
                  "such as \"Makefile.local\" or \"*.code-workspace\") or DIR/NAME, not a path");
        }
      }
      c.caches = strings_of(*t, "caches", "sandbox");
    }
    if (auto *n = root.get("approvals")) {
      auto *t = n->as_table();
      if (!t) fail(*n, "approvals must be a table: [approvals] with hosts = [...]");
      check_keys(*t, "[approvals]", {"hosts", "timeout", "max_pending", "token_file", "webhook", "webhook_secret",
                                     "allowed"});
      check_patterns(*t, "hosts", "approvals");
      c.approvals.hosts = strings_of(*t, "hosts", "[approvals]");
      // [[approvals.allowed]]: what a person allowed always (sluice appends these blocks itself).
      if (auto *a = t->get("allowed")) {
        const std::string what = "[[approvals.allowed]] tables, each with host = \"NAME\" (a host a person allowed always)";
        auto *arr = a->as_array();
        if (!arr) fail(*a, "approvals.allowed must be " + what);
        for (auto &&e : *arr) {
          auto *et = e.as_table();
          if (!et) fail(e, "approvals.allowed must be " + what);
          check_keys(*et, "[[approvals.allowed]]", {"host"});
          auto host = (*et)["host"].value<std::string>();
          if (!host) fail(e, "[[approvals.allowed]] needs host = \"NAME\" (an allowlist host pattern)");
          try {
            host_matcher m({*host});
            require_constrainable(parse_host_pattern(*host));
          } catch (const pattern_error &err) {
            fail(e, "[[approvals.allowed]] host: " + std::string(err.what()));
          }
          c.approvals.allowed.push_back(*host);
        }
      }
      c.approvals.timeout = duration_within(*t, "timeout", c.approvals.timeout, std::chrono::seconds(1),
                                            std::chrono::minutes(10),
                                            "[approvals] timeout must be a duration from \"1s\" to \"10m\" (how long "
                                            "a request waits for a person)");
      if (auto *m = t->get("max_pending")) {
        auto v = m->value<std::int64_t>();
        if (!v || *v < 1 || *v > 1000) fail(*m, "[approvals] max_pending must be a number from 1 to 1000");
        c.approvals.max_pending = static_cast<std::size_t>(*v);
      }
      c.approvals.token_file = string_of(*t, "token_file", "approvals", "");
      c.approvals.webhook = string_of(*t, "webhook", "approvals", "");
      c.approvals.webhook_secret = string_of(*t, "webhook_secret", "approvals", "");
      if (!c.approvals.webhook.empty() && c.approvals.webhook.rfind("https://", 0) != 0) {
        fail_at(*t, "webhook", "[approvals] webhook must be an https:// URL (where held requests are posted)");
      }
      if (c.approvals.webhook.empty() != c.approvals.webhook_secret.empty() ||
          (!c.approvals.webhook_secret.empty() && !is_credential_source(c.approvals.webhook_secret))) {
        fail(*n, "[approvals] webhook and webhook_secret go together; webhook_secret is a source: \"env:VAR\", "
                 "\"file:/path\" or \"command:PROGRAM ARGS...\" (the key both sides sign with)");
      }
    }
    if (auto *t = root["credentials"].as_table()) {
      for (auto &&[k, v] : *t) {
        auto *ct = v.as_table();
        std::string where = "[credentials." + std::string(k.str()) + "]";
        if (!ct) fail(v, "credentials." + std::string(k.str()) + " must be a table");
        check_keys(*ct, where, {"source", "hosts", "header", "format", "env", "ttl", "placeholder",
                                "placeholder_length", "oauth2", "aws"});
        credential_config cc;
        cc.name = std::string(k.str());
        if (cc.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") !=
            std::string::npos) {
          fail(v, where + ": a credential name uses letters, digits, '-' and '_' only");
        }
        cc.source = string_of(*ct, "source", where, "");
        if (auto *o = ct->get("oauth2")) {
          auto *ot = o->as_table();
          std::string at = where + " oauth2";
          if (!ot) fail(*o, at + " must be a table: [credentials." + cc.name + ".oauth2] with token_url, client_id, client_secret");
          if (!cc.source.empty()) fail_at(*ct, "source", where + ": an OAuth2 credential takes its value from oauth2, not source");
          check_keys(*ot, at, {"token_url", "client_id", "client_secret", "refresh_token", "scopes"});
          oauth2_config oc;
          oc.token_url = string_of(*ot, "token_url", at, "");
          if (oc.token_url.rfind("https://", 0) != 0 || oc.token_url.size() <= 8) {
            fail(*o, at + " token_url must be an https:// URL (the token endpoint)");
          }
          oc.client_id = string_of(*ot, "client_id", at, "");
          if (oc.client_id.empty()) fail(*o, at + " needs client_id = \"...\"");
          oc.client_secret_source = string_of(*ot, "client_secret", at, "");
          if (!is_credential_source(oc.client_secret_source)) {
            fail(*o, at + " client_secret must be a source: \"env:VAR\", \"file:/path\" or \"command:PROGRAM ARGS...\"");
          }
          oc.refresh_token_source = string_of(*ot, "refresh_token", at, "");
          if (!oc.refresh_token_source.empty() && !is_credential_source(oc.refresh_token_source)) {
            fail(*o, at + " refresh_token must be a source: \"env:VAR\", \"file:/path\" or \"command:PROGRAM ARGS...\"");
          }
          oc.scopes = strings_of(*ot, "scopes", at);
          cc.oauth2 = std::move(oc);
          cc.source = "oauth2";
        } else if (auto *a = ct->get("aws")) {
          auto *at_ = a->as_table();
          std::string at = where + " aws";
          if (!at_) fail(*a, at + " must be a table: [credentials." + cc.name + ".aws] with process = \"aws configure "
                              "export-credentials --format process\", or access_key_id and secret_access_key");
          if (!cc.source.empty()) fail_at(*ct, "source", where + ": an AWS credential takes its key pair from aws, not source");
          for (const char *k : {"header", "format", "env", "placeholder", "placeholder_length"}) {
            if (ct->get(k)) fail_at(*ct, k, where + " " + k + ": an AWS credential signs requests (SigV4); the command "
                                                      "gets AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY placeholders");
          }
          check_keys(*at_, at, {"process", "access_key_id", "secret_access_key", "session_token"});
          aws_config ac;
          ac.process = string_of(*at_, "process", at, "");
          ac.access_key_id_source = string_of(*at_, "access_key_id", at, "");
          ac.secret_access_key_source = string_of(*at_, "secret_access_key", at, "");
          ac.session_token_source = string_of(*at_, "session_token", at, "");
          bool pair = !ac.access_key_id_source.empty() || !ac.secret_access_key_source.empty() ||
                      !ac.session_token_source.empty();
          if (ac.process.empty() == !pair) {
            fail(*a, at + " needs either process = \"PROGRAM ARGS...\" (a credential_process, such as \"aws configure "
                          "export-credentials --format process\") or access_key_id and secret_access_key sources");
          }
          if (!ac.process.empty()) {
            ac.process = "command:" + ac.process;
            if (command_argv(ac.process).empty()) fail(*a, at + " process needs a program");
          } else {
            for (auto *src : {&ac.access_key_id_source, &ac.secret_access_key_source, &ac.session_token_source}) {
              if (src == &ac.session_token_source && src->empty()) continue;
              if (!is_credential_source(*src)) {
                fail(*a, at + " access_key_id, secret_access_key and session_token must be sources: \"env:VAR\", "
                              "\"file:/path\" or \"command:PROGRAM ARGS...\"");
              }
            }
          }
          cc.aws = std::move(ac);
          cc.source = "aws";
          cc.placeholder_shape = "aws-access-key-id";
        } else if (cc.source.rfind("command:", 0) == 0 && command_argv(cc.source).empty()) {
          fail_at(*ct, "source", where + " source \"command:\" needs a program: \"command:gh auth token\"");
        } else if (!is_credential_source(cc.source)) {
          fail_at(*ct, "source", where + " source must be \"env:VAR\", \"file:/path\" or \"command:PROGRAM ARGS...\" "
                                          "(\"command:gh auth token\")");
        }
        if (auto *t = ct->get("ttl")) {
          auto text = t->value<std::string>();
          if (!text) fail(*t, where + " ttl must be a duration such as \"50m\" or \"3600s\"");
          try {
            cc.ttl = parse_duration(*text);
          } catch (const std::exception &) {
            fail(*t, where + " ttl must be a duration such as \"50m\" or \"3600s\" (got '" + *text + "')");
          }
          if (cc.ttl < std::chrono::seconds(1)) fail(*t, where + " ttl must be at least 1s");
          if (cc.oauth2) fail(*t, where + " ttl: an OAuth2 token is obtained again before it expires");
          if (cc.aws && !cc.aws->process.empty()) {
            fail(*t, where + " ttl: a credential_process's keys are obtained again before their Expiration");
          }
          if (cc.source.rfind("env:", 0) == 0) {
            fail(*t, where + " ttl needs a source that can change: \"file:\" or \"command:\" (an environment "
                            "variable is read once)");
          }
        }
        check_patterns(*ct, "hosts", "credentials." + cc.name);
        cc.hosts = strings_of(*ct, "hosts", where);
        if (cc.hosts.empty()) fail(v, where + " needs hosts = [...], the hosts the credential belongs to");
        cc.header = string_of(*ct, "header", where, cc.header);
        if (cc.header.empty() ||
            cc.header.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") !=
                std::string::npos) {
          fail_at(*ct, "header", where + " header must be a header name such as Authorization");
        }
        cc.format = string_of(*ct, "format", where, cc.format);
        if (cc.format.rfind("basic:", 0) != 0 && cc.format.find("{}") == std::string::npos) {
          fail_at(*ct, "format", where + " format must hold {} for the secret (\"Bearer {}\") or "
                                          "be \"basic:USER\"");
        }
        cc.env = string_of(*ct, "env", where, cc.source.rfind("env:", 0) == 0 ? cc.source.substr(4) : "");
        cc.placeholder_shape = string_of(*ct, "placeholder", where, cc.placeholder_shape);
        bool kind = false;
        for (const auto &k : placeholder_kinds()) kind |= k.name == cc.placeholder_shape;
        if (!cc.placeholder_shape.empty() && !kind) {
          std::string kinds;
          for (const auto &k : placeholder_kinds()) kinds += (kinds.empty() ? "" : ", ") + std::string(k.name);
          if (cc.placeholder_shape.size() > 32 ||
              cc.placeholder_shape.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") !=
                  std::string::npos) {
            fail_at(*ct, "placeholder", where + " placeholder must be a kind (" + kinds +
                                            ") or a token prefix of letters, digits, '_', '-' and '.' such as \"ghp_\"");
          }
        }
        if (auto *n = ct->get("placeholder_length")) {
          auto v = n->value<std::int64_t>();
          if (!v || kind || cc.placeholder_shape.empty() || *v < static_cast<std::int64_t>(cc.placeholder_shape.size()) + 16 ||
              *v > 256) {
            fail(*n, where + " placeholder_length goes with a placeholder prefix, and leaves at least 16 random "
                             "characters after it (at most 256 in all)");
          }
          cc.placeholder_length = static_cast<unsigned>(*v);
        } else if (!kind && cc.placeholder_shape.size() + 16 > cc.placeholder_length) {
          cc.placeholder_length = static_cast<unsigned>(cc.placeholder_shape.size()) + 16;
        }
        c.credentials.push_back(std::move(cc));
      }
    }
    load_roles(root, c);
    if (auto *n = root.get("approvals"); n && c.approvals.allowed.empty() && !c.asks()) {
      fail(*n, "[approvals] needs hosts = [...]: the host patterns a person may let through while a command runs");
    }
    if (auto *t = root["skills"].as_table()) {
      for (auto &&[k, v] : *t) {
        auto *s = v.as_table();
        std::string where = "[skills." + std::string(k.str()) + "]";
        if (!s) fail(v, "skills." + std::string(k.str()) + " must be a table");
        check_keys(*s, where, {"default_profile", "escalations", "allow_domains", "grants",
                               "keep_env", "filesystem", "filesystem_escalations", "credentials",
                               "writable", "ask_domains", "ask_profiles", "nested_userns", "ssh", "journal"});
        skill_config sk;
        sk.name = std::string(k.str());
        if (auto *p = s->get("default_profile")) sk.default_profile = profile_of(*p, where + " default_profile");
        if (auto *arr = (*s)["escalations"].as_array()) {
          for (auto &&e : *arr) sk.escalations.push_back(profile_of(e, where + " escalations"));
        }
        entries_of(*s, "allow_domains", "skills." + sk.name, sk.allow_domains, sk.allow_routes);
        ssh_entries_of(*s, where, sk.ssh);
        sk.grants = strings_of(*s, "grants", "skills." + sk.name);
        sk.keep_env = strings_of(*s, "keep_env", "skills." + sk.name);
        sk.credentials = strings_of(*s, "credentials", "skills." + sk.name);
        sk.writable = strings_of(*s, "writable", "skills." + sk.name);
        if (s->get("nested_userns")) sk.nested_userns = bool_of(*s, "nested_userns", "skills." + sk.name, false);
        if (s->get("journal")) sk.journal = bool_of(*s, "journal", "skills." + sk.name, false);
        check_patterns(*s, "ask_domains", "skills." + sk.name);
        sk.ask_domains = strings_of(*s, "ask_domains", "skills." + sk.name);
        if (auto *n = s->get("ask_profiles")) {
          auto *arr = n->as_array();
          if (!arr) fail(*n, where + " ask_profiles must be an array of profiles");
          for (auto &&e : *arr) {
            auto p = profile_of(e, where + " ask_profiles");
            if (p == profile::offline) fail(e, where + " ask_profiles: offline needs no approval; leave it out");
            sk.ask_profiles.push_back(p);
          }
        }
        for (const auto &w : sk.writable) {
          if (w.empty() || (w[0] != '/' && w.rfind("~/", 0) != 0)) {
            fail_at(*s, "writable", where + " writable: \"" + w + "\" must be an absolute path or ~/PATH");
          }
        }
        check_credential_names(*s, where, sk.credentials, c);
        auto fs_of = [&](const toml::node &n, const std::string &what) {
          auto v = n.value<std::string>();
          if (!v || (*v != "read-only" && *v != "workspace-write")) {
            fail(n, what + " must be \"read-only\" or \"workspace-write\"");
          }
          return *v == "read-only";
        };
        if (auto *f = s->get("filesystem")) sk.read_only_workspace = fs_of(*f, where + " filesystem");
        sk.may_write_workspace = !sk.read_only_workspace;
        if (auto *arr = (*s)["filesystem_escalations"].as_array()) {
          for (auto &&e : *arr) {
            if (!fs_of(e, where + " filesystem_escalations")) sk.may_write_workspace = true;
          }
        }
        c.skills[sk.name] = std::move(sk);
      }
    }
    // A host a person allowed always is on every allowlist of the file: [policy], each role that
    // has its own, each skill's allow_domains. Deny entries, profiles and routes still apply.
    for (const auto &h : c.approvals.allowed) {
      c.allow.push_back(h);
      for (auto &[name, r] : c.roles) {
        if (r.allow_set) r.allow.push_back(h);
      }
      for (auto &[name, sk] : c.skills) sk.allow_domains.push_back(h);
    }
    return c;
  }
};

} // namespace

std::chrono::milliseconds parse_duration(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  if (i == 0 || i > 12) throw std::invalid_argument("bad duration");
  std::int64_t n = 0;
  std::from_chars(text.data(), text.data() + i, n);
  auto unit = text.substr(i);
  if (unit.empty() || unit == "s") return std::chrono::seconds(n);
  if (unit == "ms") return std::chrono::milliseconds(n);
  if (unit == "m") return std::chrono::minutes(n);
  if (unit == "h") return std::chrono::hours(n);
  if (unit == "d") return std::chrono::hours(24 * n);
  throw std::invalid_argument("bad duration unit");
}

config load_config_string(std::string_view text, const std::string &source_name) {
  toml::table root;
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error &e) {
    throw config_error(source_name + ":" + std::to_string(e.source().begin.line) + ": " +
                       std::string(e.description()) + "; fix the TOML syntax");
  }
  loader l{source_name};
  return l.load(root);
}

config load_config_file(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    throw config_error(path + ": cannot open the config file; check the path and its permissions");
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return load_config_string(ss.str(), path);
}

config builtin_config() {
  config c;
  c.source = "built-in";
  c.mode = profile::offline;
  skill_config s;
  s.name = "default";
  s.default_profile = profile::offline;
  s.escalations = {profile::network_read, profile::allowlist, profile::publish};
  s.grants = {"*"}; // the built-in policy trusts its caller; a policy file narrows this per skill
  s.credentials = {"*"};
  c.skills["default"] = s;
  return c;
}

} // namespace sluice::filters
