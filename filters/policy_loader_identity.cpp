// The loader's [roles.NAME] and [clients.NAME] tables: serve's client identity (a token's hash or a
// client certificate) and the per-client policy of each role.
#include "filters/client_identity.hpp"
#include "filters/policy_loader_detail.hpp"

#include <map>

namespace sluice::filters::loading {

// [roles.NAME], then [clients.NAME] (each client names a role).
void loader::load_roles(const toml::table &root, config &c) const {
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
  load_clients(root, c);
}

void loader::load_clients(const toml::table &root, config &c) const {
  auto *t = root["clients"].as_table();
  if (!t) return;
  std::map<std::string, std::string> by_hash, by_certificate;
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

} // namespace sluice::filters::loading
