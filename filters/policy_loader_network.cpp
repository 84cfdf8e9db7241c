// The loader's network tables: [listen] (the listeners), [policy] (serve's allow and deny lists),
// [tls] (the CA, upstream trust, the HTTPS proxy listener's certificate) and [upstream] (which
// addresses may be dialled, DNS servers, pinned names).
#include "filters/policy_loader_detail.hpp"

namespace sluice::filters::loading {

void loader::load_listen(const toml::table &root, config &c) const {
  auto *t = root["listen"].as_table();
  if (!t) return;
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

void loader::load_policy(const toml::table &root, config &c) const {
  auto *t = root["policy"].as_table();
  if (!t) return;
  check_keys(*t, "[policy]", {"allow", "deny", "tcp"});
  entries_of(*t, "allow", "policy", c.allow, c.allow_routes);
  entries_of(*t, "deny", "policy", c.deny, c.deny_routes);
  tcp_entries_of(*t, "[policy]", c.tcp);
}

void loader::load_tls(const toml::table &root, config &c) const {
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
}

void loader::load_upstream(const toml::table &root, config &c) const {
  auto *t = root["upstream"].as_table();
  if (!t) return;
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

} // namespace sluice::filters::loading
