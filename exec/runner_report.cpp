#include "exec/runner_impl.hpp"
#include "gateway/exchange/limits_report.hpp"
#include "gateway/gateway.hpp"
#include "metrics/textfile.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sys/stat.h>

// After the command: the journal's run applied or staged, what the command left under a guarded
// name moved aside, one line per distinct denial with what would allow it, the --json-summary
// file and the textfile collector's metrics.
namespace sluice::exec::detail {
namespace {

boost::json::array own_secret_names(const exec_plan &plan) {
  boost::json::array a;
  for (const auto &s : plan.own_secrets) a.emplace_back(s.name);
  return a;
}


// The escalation that would have let a denied request through, for the line on stderr.
// The tcp entries and host services in force for the run.
boost::json::array tcp_grants(const exec_plan &plan) {
  boost::json::array out;
  for (const auto &r : plan.policy->cfg().tcp) {
    if (r.profiles.empty() || std::find(r.profiles.begin(), r.profiles.end(), plan.mode) != r.profiles.end()) {
      out.push_back(boost::json::string(r.text));
    }
  }
  return out;
}
boost::json::array host_service_grants(const exec_plan &plan) {
  boost::json::array out;
  for (const auto &s : plan.policy->cfg().host_services) {
    out.push_back({{"name", std::string(filters::host_service_name)}, {"port", s.port}, {"tcp", s.tcp}});
  }
  return out;
}

std::string hint(const std::string &host, unsigned port, const std::string &reason) {
  if (reason == "host_not_allowlisted") {
    // The pattern without a port covers 443 and 80 only: name any other port.
    bool v6 = host.find(':') != std::string::npos;
    std::string h = v6 ? "[" + host + "]" : host;
    return "to allow it: --allow-domain " + (port && port != 443 && port != 80 ? h + ":" + std::to_string(port) : h);
  }
  if (reason == "method_not_allowed" || reason == "body_on_read_method" ||
      reason == "method_override_refused") {
    return "writes need --sandbox-profile publish --confirm-external-side-effects";
  }
  if (reason == "destination_address_denied") {
    return "the name resolves to a private or special address; list it in upstream.allow_addresses";
  }
  if (reason == "host_denied") return "a deny rule in the policy matches it";
  if (reason == "rate_limited") {
    return "a [[limits.budget]] rate or its exchanges at once were exceeded; the response's Retry-After says when "
           "to try again (--json-summary lists the budgets)";
  }
  if (reason == "budget_exhausted") {
    return "a [[limits.budget]] byte budget is spent; the response names it and when it refills (--json-summary "
           "lists what is left)";
  }
  if (reason == "route_denied") return "a deny route in the policy matches its method and path";
  if (reason == "route_not_allowed") {
    return "the skill allows this host only on the methods and paths of its routes (allow_domains)";
  }
  if (reason == "ambiguous_path") return "routes compare paths one way only: no '//', ';' or dot segments";
  if (reason == "route_needs_termination") return "a route's methods and paths need network-read or publish";
  if (reason == "dns_error") {
    return "DNS has no address for it; sluice does not read /etc/hosts: pin the name with "
           "[upstream.resolve] in the policy";
  }
  if (reason == "git_push_refused") {
    return "pushing writes to the remote: it needs --sandbox-profile publish --confirm-external-side-effects";
  }
  if (reason == "git_request_refused") {
    return "only fetch negotiation may go to git-upload-pack in network-read";
  }
  if (reason == "credential_host_mismatch") {
    return "a credential's placeholder went to a host the credential does not belong to";
  }
  if (reason == "tls_required") return "only TLS can pass a CONNECT tunnel in this profile";
  if (reason == "non_http_protocol" || reason == "tcp_not_allowed") {
    return "TCP that is not HTTP passes only to a name and port a skill's tcp entry grants: "
           "tcp = [{ host = \"" + host + "\", port = " + std::to_string(port) + " }] (trusted policy)";
  }
  if (reason == "host_service_not_granted") {
    return "the host's port " + std::to_string(port) + " is not granted: host_services = [{ port = " +
           std::to_string(port) + " }] in the skill (trusted policy)";
  }
  if (reason == "tcp_connection_limit") return "too many relayed TCP connections at once ([limits] max_tcp_connections)";
  if (reason == "decider_denied") return "the policy's decider ([decider]) refused it; its reason is in the response";
  if (reason == "decider_timeout" || reason == "decider_unavailable") {
    return "the policy's decider ([decider]) did not answer; sluice refuses what it cannot get an answer for";
  }
  return "see the access log (--access-log) for details";
}

// What an agent host's settings gained while it ran: a settings file or hooks directory that did not
// exist at the start is moved aside, as the workspace guard does (it would take effect the next time
// the host runs outside sluice).
boost::json::array quarantine_settings(const exec_plan &plan) {
  boost::json::array out;
  for (const auto &p : plan.absent_settings) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) continue;
    std::string to = p + ".sluice-quarantine-" + plan.command_id;
    bool moved = ::rename(p.c_str(), to.c_str()) == 0;
    std::fprintf(stderr, "sluice: the agent created %s, settings the host would read outside the sandbox; %s\n",
                 p.c_str(), moved ? ("moved it to " + to + ": review it, and move it back if you want it").c_str()
                                  : "it could not be moved aside: check it before the host runs again");
    out.push_back({{"path", p}, {"movedTo", moved ? to : std::string()}});
  }
  return out;
}

// After the command, once it and all it started are gone (the PID namespace ended with init):
// what it left under a guarded name is moved aside, before a tool outside can read it, and said
// on stderr. Returns the summary's `quarantined` entries.
boost::json::array quarantine(workspace_guard &guard, const std::string &command_id) {
  boost::json::array out;
  for (auto &m : guard.quarantine(command_id)) {
    std::string fate = m.to.empty() ? "it could not be moved aside: check it before any tool reads it"
                                    : "moved it to " + m.to + ": review it, and move it back if you want it";
    const char *why = nullptr;
    switch (m.what) {
    case workspace_guard::moved::kind::repository:
      why = "a Git repository whose configuration or hooks would run programs when Git runs there "
            "outside the sandbox (only the keys git init and git clone write, and sample hooks, are kept)";
      break;
    case workspace_guard::moved::kind::git_metadata:
      why = "Git metadata (configuration, hooks, commondir) that would run programs when Git runs "
            "outside the sandbox";
      break;
    case workspace_guard::moved::kind::name:
      why = "which sandboxed commands may not create (shell, editor, Git and agent settings and "
            "credential files are read by tools outside the sandbox)";
      break;
    }
    std::fprintf(stderr, "sluice: the command created %s, %s; %s\n", m.path.c_str(), why, fate.c_str());
    out.push_back({{"path", m.path}, {"movedTo", m.to}});
  }
  if (!guard.complete()) {
    std::fprintf(stderr, "sluice: the workspace grew past what sluice walks after a command (4 x "
                         "[sandbox] max_workspace_entries); guarded names beyond that were not "
                         "checked: review new shell, editor, Git and agent settings before opening it\n");
  }
  return out;
}

} // namespace

// Adds one command's metrics to the textfile collector's file. A failure is reported, never turned
// into the command's exit status.
void write_textfile(const exec_options &opt, metrics::metrics &m, std::string_view profile,
                    std::string_view result, double seconds) {
  if (opt.metrics_textfile.empty()) return;
  try {
    m.exec_finished(profile, result, seconds, metrics::unix_now());
    metrics::merge_into_textfile(opt.metrics_textfile, m.serialize());
  } catch (const std::exception &e) {
    std::fprintf(stderr, "sluice: --metrics-textfile: %s (the command's exit status is kept)\n",
                 e.what());
  }
}

boost::json::value finish_journal(exec_plan &plan, int &status, std::string_view &result) {
  boost::json::value journaled;
  if (plan.journal.lock_fd < 0) return journaled;
  if (plan.staged) {
    try {
      auto c = journal::stage_end(plan.journal, status);
      journaled = boost::json::object{{"run", plan.journal.id}, {"staged", true}, {"created", c.created},
                                      {"modified", c.modified}, {"deleted", c.deleted}};
      std::fprintf(stderr, "sluice: run %s is staged (%zu created, %zu modified, %zu deleted; %s has none of it): "
                           "`sluice diff %s`, then `sluice apply %s [PATH...]` or `sluice discard %s`; "
                           "`--stage-run %s` goes on with it\n", plan.journal.id.c_str(), c.created, c.modified,
                   c.deleted, plan.ws.root.c_str(), plan.journal.id.c_str(), plan.journal.id.c_str(),
                   plan.journal.id.c_str(), plan.journal.id.c_str());
    } catch (const std::exception &e) {
      std::fprintf(stderr, "sluice: staged run %s could not be recorded: %s\n", plan.journal.id.c_str(), e.what());
      status = 125;
      result = "refused";
    }
  } else {
    try {
      auto c = journal::apply(plan.journal, status);
      journaled = boost::json::object{{"run", plan.journal.id}, {"created", c.created}, {"modified", c.modified},
                                      {"deleted", c.deleted}};
      if (c.created + c.modified + c.deleted > 0) {
        std::fprintf(stderr, "sluice: run %s: %zu created, %zu modified, %zu deleted in %s; `sluice undo %s` puts "
                             "them back\n", plan.journal.id.c_str(), c.created, c.modified, c.deleted,
                     plan.ws.root.c_str(), plan.journal.id.c_str());
      }
    } catch (const std::exception &e) {
      std::fprintf(stderr, "sluice: run %s's changes could not all be applied to %s: %s; `sluice undo --recover` "
                           "finishes them, `sluice runs --files` shows them\n", plan.journal.id.c_str(),
                   plan.ws.root.c_str(), e.what());
      status = 125;
      result = "refused";
    }
  }
  return journaled;
}

boost::json::array quarantine_all(workspace_guard &guard, const exec_plan &plan) {
  boost::json::array out = quarantine(guard, plan.command_id);
  for (auto &q : quarantine_settings(plan)) out.push_back(std::move(q));
  return out;
}

void report(const exec_options &opt, const exec_plan &plan, gateway::gateway *gw, int status,
            double seconds, int landlock, const workspace_scan &scan, const boost::json::array &quarantined,
            const boost::json::value &journaled) {
  const auto &resolved = plan.resolved;
  // One line per distinct denial, so that an agent sees why and what would allow it.
  std::map<gateway::request_summary::key, std::size_t> summary;
  if (gw) summary = gw->summary().snapshot();
  std::size_t allowed = 0, denied = 0;
  boost::json::array entries;
  for (auto &[k, n] : summary) {
    (k.decision == "allow" ? allowed : denied) += n;
    entries.push_back({{"host", k.host}, {"port", k.port}, {"method", k.method},
                       {"decision", k.decision}, {"reason", k.reason}, {"count", n}});
    if (k.decision != "allow") {
      std::fprintf(stderr, "sluice: %s %s %s %s (%zu request%s); %s\n",
                   k.decision == "deny" ? "denied" : "failed", k.method.c_str(), k.host.c_str(),
                   k.reason.c_str(), n, n == 1 ? "" : "s", hint(k.host, k.port, k.reason).c_str());
    }
  }
  if (!opt.json_summary.empty()) {
    boost::json::array caches;
    for (const auto &c : resolved.caches) caches.push_back(boost::json::string(c));
    boost::json::array sockets;
    for (const auto &g : resolved.unix_sockets) {
      sockets.push_back(boost::json::object{{"path", g.path}, {"resolved", g.resolved},
                                            {"rootEquivalent", g.root_equivalent}, {"grantedBy", g.origin}});
    }
    boost::json::object o{{"commandId", plan.command_id},
                          {"exitStatus", status},
                          {"durationSeconds", seconds},
                          {"profile", std::string(filters::to_string(plan.mode))},
                          {"skill", resolved.skill},
                          {"approvedInHostPrompt", opt.needs_approval},
                          {"policy", resolved.policy_source},
                          {"requestsAllowed", allowed},
                          {"requestsDenied", denied},
                          {"requests", entries},
                          {"workspace", plan.ws.root},
                          {"writable", boost::json::value_from(plan.so.view.writable)},
                          {"caches", caches},
                          {"unixSockets", sockets},
                          {"filesystem", resolved.read_only_workspace ? "read-only" : "workspace-write"},
                          {"landlockAbi", landlock},
                          {"nestedUserNamespaces", plan.so.nested_userns ? "allowed" : "refused"},
                          {"userNamespaceLimit", plan.userns_limit},
                          {"workspaceHidden", boost::json::value_from(scan.masks)},
                          {"workspaceProtected", boost::json::value_from(scan.protect)},
                          {"quarantined", quarantined},
                          {"journal", journaled},
                          {"environmentDropped", boost::json::value_from(plan.dropped)},
                          // [scan]: where the run's canaries lie, and the names (never the values)
                          // of the caller's own secrets a request may not carry.
                          {"canaries", boost::json::value_from(plan.canary_files)},
                          {"ownSecretsWatched", own_secret_names(plan)},
                          // Beyond HTTP: what the skill grants besides HTTP (docs/policy.md).
                          {"tcp", tcp_grants(plan)},
                          {"hostServices", host_service_grants(plan)}};
    if (gw) o["budgets"] = gateway::exchange::budgets_json(gw->budget_rows()); // [[limits.budget]]
    if (!plan.log_public_key.empty()) {
      // The access log's chain (docs/metrics.md): `sluice audit verify FILE --key PUBLICKEY`.
      o["accessLog"] = boost::json::object{{"file", opt.access_log},
                                           {"writer", plan.command_id},
                                           {"keyId", plan.log_key_id},
                                           {"publicKey", plan.log_public_key}};
    }
    std::ofstream f(opt.json_summary, std::ios::trunc);
    f << boost::json::serialize(o) << "\n";
    if (!f) std::fprintf(stderr, "sluice: cannot write --json-summary %s\n", opt.json_summary.c_str());
  }
}

} // namespace sluice::exec::detail
