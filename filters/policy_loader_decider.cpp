// The loader's [decider] table: which decider is asked (a program, or an HTTPS endpoint), about
// which requests, within which deadline, and how long its answers may be kept.
#include "filters/policy_loader_detail.hpp"

namespace sluice::filters::loading {

void loader::load_decider(const toml::table &root, config &c) const {
  auto *n = root.get("decider");
  if (!n) return;
  auto *t = n->as_table();
  if (!t) fail(*n, "decider must be a table: [decider] with command = \"PROGRAM ARGS\" or url = \"https://...\"");
  check_keys(*t, "[decider]", {"command", "url", "when", "timeout", "max_in_flight", "cache_seconds", "cache_entries",
                                   "max_body_bytes"});
  auto &d = c.decider;
  d.command_text = string_of(*t, "command", "decider", "");
  d.url = string_of(*t, "url", "decider", "");
  if (d.command_text.empty() == d.url.empty()) {
    fail(*n, "[decider] needs exactly one of command = \"PROGRAM ARGS\" (a program sluice starts) and "
             "url = \"https://...\" (an endpoint such as OPA's /v1/data/PATH)");
  }
  if (!d.command_text.empty()) {
    d.command = command_argv("command:" + d.command_text);
    if (d.command.empty()) fail_at(*t, "command", "[decider] command names no program: command = \"PROGRAM ARGS\"");
  }
  if (!d.url.empty() && d.url.rfind("https://", 0) != 0) {
    fail_at(*t, "url", "[decider] url must be an https:// URL (reached as any origin is, its certificate "
                       "verified with [tls]); for a local program use command = \"PROGRAM ARGS\"");
  }
  auto when = string_of(*t, "when", "decider", "undecided");
  if (when != "undecided" && when != "all") {
    fail_at(*t, "when", "[decider] when must be \"undecided\" (what the allowlist does not name) or \"all\" "
                        "(every request the file allows too)");
  }
  d.all = when == "all";
  d.timeout = duration_within(*t, "timeout", d.timeout, std::chrono::milliseconds(10), std::chrono::seconds(60),
                              "[decider] timeout must be a duration from \"10ms\" to \"60s\" (how long a request "
                              "waits for the decider's answer before it is refused)");
  d.max_in_flight = static_cast<std::size_t>(int_of(*t, "max_in_flight", "decider", 64, 1, 10000));
  d.cache_seconds = std::chrono::seconds(int_of(*t, "cache_seconds", "decider", 60, 0, 86400));
  d.cache_entries = static_cast<std::size_t>(int_of(*t, "cache_entries", "decider", 10000, 1, 1000000));
  d.max_body_bytes = static_cast<std::size_t>(int_of(*t, "max_body_bytes", "decider", 1 << 20, 1, 32 << 20));
}

} // namespace sluice::filters::loading
