// The loader's [approvals] table: which hosts a person may let through while a command runs, how
// long a request waits, where the decision is made, and the hosts a person allowed always.
#include "filters/policy_loader_detail.hpp"

namespace sluice::filters::loading {

void loader::load_approvals(const toml::table &root, config &c) const {
  auto *n = root.get("approvals");
  if (!n) return;
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

// After [roles] (a role may ask about hosts of its own): [approvals] must name hosts to ask about.
void loader::require_approvals_hosts(const toml::table &root, const config &c) const {
  if (auto *n = root.get("approvals"); n && c.approvals.allowed.empty() && !c.asks()) {
    fail(*n, "[approvals] needs hosts = [...]: the host patterns a person may let through while a command runs");
  }
}

void loader::add_allowed_always(config &c) {
  // A host a person allowed always is on every allowlist of the file: [policy], each role that
  // has its own, each skill's allow_domains. Deny entries, profiles and routes still apply.
  for (const auto &h : c.approvals.allowed) {
    c.allow.push_back(h);
    for (auto &[name, r] : c.roles) {
      if (r.allow_set) r.allow.push_back(h);
    }
    for (auto &[name, sk] : c.skills) sk.allow_domains.push_back(h);
  }
}

} // namespace sluice::filters::loading
