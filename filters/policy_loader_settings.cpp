// The loader's settings tables: [timeouts], [limits], [log] and [sandbox].
#include "filters/policy_loader_detail.hpp"

namespace sluice::filters::loading {

void loader::load_timeouts(const toml::table &root, config &c) const {
  auto *t = root["timeouts"].as_table();
  if (!t) return;
  check_keys(*t, "[timeouts]", {"connect", "tls_handshake", "header_read", "idle", "io",
                                "tunnel_idle", "dns", "drain", "drain_delay", "request", "tcp"});
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
  to.tcp = duration_of(*t, "tcp", "timeouts", to.tcp);
}

void loader::load_limits(const toml::table &root, config &c) const {
  auto *t = root["limits"].as_table();
  if (!t) return;
  check_keys(*t, "[limits]", {"max_header_bytes", "max_body_bytes", "max_response_body_bytes",
                              "max_websocket_message_bytes", "max_connections", "max_tcp_connections",
                              "max_requests_per_connection", "pool_idle_per_host",
                              "pool_idle_total", "pool_idle_timeout", "budget", "shared"});
  auto &l = c.limits;
  if (auto *b = t->get("budget")) budgets_of(*b, root, c);
  if (auto *sh = t->get("shared")) shared_limits_of(*sh, c);
  l.max_header_bytes = int_of(*t, "max_header_bytes", "limits", l.max_header_bytes, 1024, 1 << 20);
  l.max_body_bytes = int_of(*t, "max_body_bytes", "limits", 0, 0, INT64_MAX);
  l.max_response_body_bytes = int_of(*t, "max_response_body_bytes", "limits", 0, 0, INT64_MAX);
  l.max_websocket_message_bytes = int_of(*t, "max_websocket_message_bytes", "limits",
                                         static_cast<std::int64_t>(l.max_websocket_message_bytes), 0, INT64_MAX);
  l.max_connections = int_of(*t, "max_connections", "limits", l.max_connections, 1, 1'000'000);
  l.max_tcp_connections = int_of(*t, "max_tcp_connections", "limits", l.max_tcp_connections, 1, 1'000'000);
  l.max_requests_per_connection = int_of(*t, "max_requests_per_connection", "limits",
                                         l.max_requests_per_connection, 1, 1'000'000'000);
  l.pool_idle_per_host = int_of(*t, "pool_idle_per_host", "limits", l.pool_idle_per_host, 0, 10'000);
  l.pool_idle_total = int_of(*t, "pool_idle_total", "limits", l.pool_idle_total, 0, 1'000'000);
  l.pool_idle_timeout = duration_of(*t, "pool_idle_timeout", "limits", l.pool_idle_timeout);
}

void loader::load_log(const toml::table &root, config &c) const {
  auto *t = root["log"].as_table();
  if (!t) return;
  check_keys(*t, "[log]", {"access_log", "redact_query", "format", "chain", "signing_key", "writer",
                          "checkpoint_interval"});
  c.access_log = string_of(*t, "access_log", "log", "");
  c.access_log_format = string_of(*t, "format", "log", "json");
  if (c.access_log_format != "json" && c.access_log_format != "ocsf") {
    fail(*t->get("format"), "[log] format must be \"json\" (sluice's access log line) or \"ocsf\" "
                                "(OCSF 1.8 HTTP and Network Activity events)");
  }
  c.redact_query = bool_of(*t, "redact_query", "log", true);
  c.log_chain = bool_of(*t, "chain", "log", true);
  c.log_signing_key = string_of(*t, "signing_key", "log", "");
  if (!c.log_signing_key.empty() && !is_credential_source(c.log_signing_key)) {
    fail(*t->get("signing_key"), "[log] signing_key must be a source of a PEM Ed25519 private key: \"file:/path\", "
                                 "\"env:VAR\" or \"command:PROGRAM ARGS...\" (openssl genpkey -algorithm ed25519)");
  }
  c.log_writer = string_of(*t, "writer", "log", "");
  if (c.log_writer.size() > 128 || c.log_writer.find_first_of("\"\\\n\r\t") != std::string::npos) {
    fail(*t->get("writer"), "[log] writer must be a name of at most 128 characters without quotes, backslashes "
                            "or line breaks (it names this replica's chain)");
  }
  c.log_checkpoint_interval = duration_within(*t, "checkpoint_interval", c.log_checkpoint_interval,
                                              std::chrono::seconds(1), std::chrono::hours(24),
                                              "[log] checkpoint_interval must be a duration from 1s to 24h (\"60s\"): "
                                              "how often the access log's chain is signed");
  if (!c.log_signing_key.empty() && !c.log_chain) {
    fail(*t->get("signing_key"), "[log] signing_key signs the chain's checkpoints, and chain = false turns the "
                                 "chain off: drop one of them");
  }
}

void loader::load_sandbox(const toml::table &root, config &c) const {
  auto *t = root["sandbox"].as_table();
  if (!t) return;
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

} // namespace sluice::filters::loading
