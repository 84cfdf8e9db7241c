// Credentials read again while the gateway runs (gateway.hpp): those with a ttl, files that
// change, and OAuth2 tokens an API refused.
#include "gateway/gateway.hpp"
#include "filters/aws_sigv4.hpp"
#include "credentials/load.hpp"

#include <cstdio>

namespace sluice::gateway {

// Each round waits until the first credential is due (its ttl passed, or 80% of an OAuth2 token's
// life), reads or obtains every due one again and, where a value changed, swaps in a policy
// holding it, unless the policy was replaced meanwhile (a reload reads every source itself). A
// source that fails keeps its last value, logged and counted, and is tried again after its ttl
// (one without a ttl, an OAuth2 token or a credential_process's keys, after 5 s, while it may
// still be valid).
void gateway::refresh_credentials() {
  using steady = std::chrono::steady_clock;
  for (;;) {
    auto current = state_->policy.load();
    auto due = steady::time_point::max();
    for (const auto &c : current->cfg().credentials) {
      if (c.refresh_at != steady::time_point{}) due = std::min(due, c.refresh_at);
      // A file without a ttl is looked at every second, and read again once it changed.
      if (c.refresh_at == steady::time_point{} && !c.file_stamp.empty()) due = std::min(due, steady::now() + std::chrono::seconds(1));
    }
    // None due (a reload may bring some): look again in a minute.
    if (due == steady::time_point::max()) due = steady::now() + std::chrono::seconds(60);
    std::set<std::string> refused;
    {
      std::unique_lock lock(refresh_m_);
      refresh_cv_.wait_until(lock, due, [this] { return refresh_stop_ || !refused_.empty(); });
      if (refresh_stop_) return;
      refused.swap(refused_);
    }
    refresh_round(refused);
  }
}

// One round: every credential that is due, refused or whose file changed is read or obtained
// again; a policy holding the new values is swapped in, unless it was replaced meanwhile.
void gateway::refresh_round(const std::set<std::string> &refused) {
  using steady = std::chrono::steady_clock;
  auto current = state_->policy.load();
  auto cfg = current->cfg();
  bool changed = false;
  auto now = steady::now();
  for (auto &c : cfg.credentials) {
    // An OAuth2 token an API refused with 401 is obtained again now: once for each token (an API
    // that refuses every token does not make sluice ask the token endpoint for each request),
    // and at most every 10 s.
    bool refused_now = false;
    if (c.oauth2 && refused.count(c.name)) {
      auto token = filters::sigv4::sha256_hex(c.secret);
      auto &last = refused_last_[c.name];
      if (last.first != token && (last.second == steady::time_point{} || now - last.second >= std::chrono::seconds(10))) {
        last = {token, now};
        refused_now = true;
        std::fprintf(stderr, "sluice: credential '%s': the API answered 401; obtaining a new token\n", c.name.c_str());
      }
    }
    bool file_changed = c.refresh_at == steady::time_point{} && !c.file_stamp.empty() &&
                        credentials::file_stamp(c.source) != c.file_stamp;
    if (!refused_now && !file_changed &&
        (c.refresh_at == steady::time_point{} || c.refresh_at > now + std::chrono::milliseconds(50))) {
      continue;
    }
    auto last = c;
    try {
      credentials::load_credential(c, cfg);
    } catch (const std::exception &e) {
      std::fprintf(stderr, "sluice: %s; its last value stays in use\n", e.what());
      metrics_->credential_refresh_failures.Increment();
      c = std::move(last);
      if (file_changed) {
        c.file_stamp = credentials::file_stamp(c.source); // read again when it changes again
      } else {
        c.refresh_at = steady::now() + (c.ttl.count() > 0 ? c.ttl : std::chrono::milliseconds(5000));
      }
    }
    changed = true; // at least its next refresh moved
  }
  if (!changed) return;
  try {
    filters::policy_ptr next = std::make_shared<const filters::policy>(std::move(cfg));
    // The new values are own secrets too: the scanner follows once the policy is in force.
    if (state_->policy.compare_exchange_strong(current, next)) refresh_scan(*next);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "sluice: credentials read again, but the policy could not be rebuilt: %s\n", e.what());
  }
}

} // namespace sluice::gateway
