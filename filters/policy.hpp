#pragma once
#include "filters/address_class.hpp"
#include "filters/credentials.hpp"
#include "filters/decider_config.hpp"
#include "filters/decision.hpp"
#include "filters/host_matcher.hpp"
#include "filters/host_name.hpp"
#include "filters/limits_config.hpp"
#include "filters/method_policy.hpp"
#include "filters/route_matcher.hpp"
#include "filters/scan_policy.hpp"
#include "filters/ssh_command.hpp"

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sluice::filters {

// Deadlines for every socket operation, in the nghttpx manner: separate read/write/idle/connect.
struct timeouts_config {
  std::chrono::milliseconds connect{10'000};
  std::chrono::milliseconds tls_handshake{10'000};
  std::chrono::milliseconds header_read{30'000}; // a whole request head, first byte to last
  std::chrono::milliseconds idle{60'000};        // keep-alive between requests
  std::chrono::milliseconds io{60'000};          // any single body read or write, either side
  std::chrono::milliseconds tunnel_idle{300'000};
  std::chrono::milliseconds dns{5'000};
  std::chrono::milliseconds drain{10'000}; // SIGTERM: in-flight requests get this long
  // SIGTERM: /readyz fails this long before the listeners close (a load balancer's health check
  // period and then some); 0: drain at once.
  std::chrono::milliseconds drain_delay{0};
  std::chrono::milliseconds request{3'600'000}; // one request and its whole response, however it trickles
  std::chrono::milliseconds tcp{28'800'000};    // a relayed TCP connection, whole (idle: tunnel_idle)
};

struct limits_config {
  std::size_t max_header_bytes = 64 * 1024;
  std::uint64_t max_body_bytes = 0;          // request bodies; 0: no cap
  std::uint64_t max_response_body_bytes = 0; // response bodies; 0: no cap
  // One WebSocket data message, across its fragments, either way; 0: no cap. The relay holds no
  // message (it passes frames as they come): this bounds what a peer may send, not memory.
  std::uint64_t max_websocket_message_bytes = 64ull << 20;
  std::size_t max_connections = 10'000;
  std::size_t max_tcp_connections = 256; // relayed TCP connections at once (tcp, host_services)
  std::size_t max_requests_per_connection = 10'000;
  std::size_t pool_idle_per_host = 8;
  std::size_t pool_idle_total = 256;
  std::chrono::milliseconds pool_idle_timeout{30'000};
  std::vector<budget_rule> budgets; // [[limits.budget]]
  shared_limits_config shared;      // [limits.shared]
};

// `ssh = [{ host = ..., paths = [...] }]` in [skills.NAME]: Git over SSH to one host,
// terminated by sluice, which logs in upstream as the user (docs/policy.md, "Git over SSH").
// Trusted policy only.
struct ssh_rule {
  std::string host;                // a host name, lower case, exact
  unsigned port = 22;
  std::vector<std::string> paths;  // repositories ("org/*", "org/repo.git"); empty: every one
  std::string user = "git";        // the user sluice logs in as upstream
  std::string identity = "ssh-agent"; // "ssh-agent" (the caller's SSH_AUTH_SOCK) or "file:PATH"
  std::string host_key;            // "TYPE BASE64" pin; empty: the caller's known_hosts files
  std::string text;                // its name in logs: "ssh://HOST[:PORT] PATHS"
};

// `tcp = [{ host = "db.internal", port = 5432, profiles = [...] }]` in [skills.NAME] (and serve's
// [policy]): a TCP connection to that name and port passes as a relay, bytes untouched
// (docs/policy.md, "Beyond HTTP"). Trusted policy only.
struct tcp_rule {
  std::string host;              // a host name, lower case, exact (the name the client resolved)
  unsigned port = 0;
  std::vector<profile> profiles; // the profiles it applies in; empty: every one but offline
  std::string text;              // its name in logs: "tcp://HOST:PORT"
};

// `host_services = [{ port = 3000, tcp = false }]` in [skills.NAME]: a port of the host's loopback,
// reached inside as host_service_name; HTTP to it is judged as any HTTP, other TCP passes only
// with tcp = true.
struct host_service {
  unsigned port = 0;
  bool tcp = false;
  std::string text; // "host.sluice.internal:PORT"
};
inline constexpr std::string_view host_service_name = "host.sluice.internal";

// `unix_sockets = ["/path", { path = "/var/run/docker.sock", root_equivalent = true }]` in
// [skills.NAME]: one socket each shown in the exec view, nothing else of its directory (docs/policy.md,
// "Unix sockets"). A socket that gives root on the host is refused without root_equivalent = true.
// Trusted policy only.
struct unix_socket_rule {
  std::string path;             // absolute, or ~/PATH
  bool root_equivalent = false; // the person knows that it gives root on the host
};

// One skill of the exec policy: its default profile, the escalations it may ask for, and what it gets.
struct skill_config {
  std::string name;
  profile default_profile = profile::offline;
  std::vector<profile> escalations;
  std::vector<std::string> allow_domains;
  std::vector<route_rule> allow_routes; // allow_domains entries that are route tables
  std::vector<ssh_rule> ssh;            // Git over SSH hosts
  std::vector<tcp_rule> tcp;            // TCP to named services
  std::vector<host_service> host_services; // ports of the host's loopback
  std::vector<std::string> grants;   // credential variable names it may keep (--allow-env)
  std::vector<std::string> keep_env; // non-secret variable names its commands always keep
  bool read_only_workspace = false;  // filesystem = "read-only" (default "workspace-write")
  bool may_write_workspace = true;   // "workspace-write" is the default or a declared escalation
  std::vector<std::string> credentials; // [credentials.NAME] it may ask for (--credential); "*" any
  std::vector<std::string> writable; // directories its commands may write besides the workspace
  // What an agent may ask a person for through its host's permission prompt (one command at a
  // time): host patterns beyond allow_domains, and profiles beyond the escalations.
  std::vector<std::string> ask_domains;
  std::vector<profile> ask_profiles;
  // nested_userns for this skill's commands; unset: [sandbox] nested_userns.
  std::optional<bool> nested_userns;
  // journal for this skill's commands (`sluice undo`); unset: [sandbox] journal.
  std::optional<bool> journal;
  std::vector<unix_socket_rule> unix_sockets; // sockets shown in its commands' view
};

// [listen.agents.NAME] (serve): a proxy listener of one agent host. Its traffic is named in the
// access log and metrics, and only processes of the listed users may connect (loopback only).
struct agent_listener {
  std::string name;
  std::string address;      // loopback ADDRESS:PORT
  std::vector<unsigned> uids; // users whose sockets may connect
};

// [roles.NAME] (serve): what the clients of one role may do. Unset lists inherit [policy]; the
// [policy] deny list applies to every role besides its own.
struct role_config {
  std::string name;
  profile mode = profile::network_read;
  bool mode_set = false; // profile given; else the top-level profile
  bool report = false;   // mode = "report": what enforce would refuse is let through and logged
  bool allow_set = false;
  std::vector<std::string> allow, deny;
  std::vector<route_rule> allow_routes, deny_routes;
  std::vector<std::string> credentials; // [credentials.NAME] its requests get; "*" every one
  double requests_per_second = 0;       // per client; 0: no limit
  std::uint64_t bytes_per_second = 0;   // per client, both directions together; 0: no limit
  // approvals = [...]: the host patterns a person may allow for this role's clients, instead of
  // [approvals] hosts ([] : none); the rest of [approvals] (timeout, token, webhook) is shared.
  bool approvals_set = false;
  std::vector<std::string> approvals;
};

// [clients.NAME] (serve): one client of the proxy listener, known by a token (Proxy-Authorization
// Basic NAME:TOKEN or Bearer TOKEN, SOCKS5 username/password), judged by its role's policy.
struct client_config {
  std::string name;
  std::string role;
  std::string token_sha256; // 32 bytes, the SHA-256 of the token (the token itself is never kept)
  // A certificate identity on the HTTPS proxy listener: a URI SAN ("spiffe://example.org/ns/x/sa/y",
  // anything with a ':') or a DNS SAN (a host name, lower case). Empty: tokens only.
  std::string certificate;
  bool certificate_is_uri() const { return certificate.find(':') != std::string::npos; }
};

// The whole configuration, as plain structs: parsed once, validated, immutable after load.
struct config {
  std::string source = "built-in"; // file the config came from
  profile mode = profile::network_read;
  std::string proxy_listen = "127.0.0.1:3128";
  std::string admin_listen;         // empty: no admin listener
  // [approvals] (trusted policy only): requests to these hosts that the allowlist refuses wait for a
  // person's decision instead (gateway/approvals.hpp), at most `timeout`, `max_pending` at once;
  // decisions come with the token in `token_file` (serve; exec makes one for each run).
  struct approvals_config {
    std::vector<std::string> hosts;
    std::chrono::milliseconds timeout{60000};
    std::size_t max_pending = 16;
    std::string token_file;
    // A webhook for chat tools: each held request is POSTed there as JSON, signed
    // (X-Sluice-Signature: sha256=HMAC of the body) with the secret from `webhook_secret` (a source);
    // the answer comes back to the callback URL in it, signed the same way.
    std::string webhook, webhook_secret;
    // [[approvals.allowed]] host = ...: hosts a person allowed always (written by sluice on their
    // confirmation); the loader adds each to every allowlist of the file.
    std::vector<std::string> allowed;
  } approvals;
  // Whether any request may be held for a person: [approvals] hosts, or a role's approvals.
  bool asks() const {
    if (!approvals.hosts.empty()) return true;
    for (const auto &[name, r] : roles) {
      if (!r.approvals.empty()) return true;
    }
    return false;
  }
  std::string proxy_tls_listen;     // [listen] proxy_tls: the HTTPS proxy listener (serve); empty: none
  std::vector<agent_listener> agents; // [listen.agents.NAME]
  std::vector<std::string> allow;   // host patterns
  std::vector<std::string> deny;
  std::vector<route_rule> allow_routes, deny_routes; // entries with methods and paths (trusted files only)
  std::vector<ssh_rule> ssh;        // Git over SSH hosts (exec: the skill's)
  std::vector<tcp_rule> tcp;        // TCP to named services (exec: the skill's; serve: [policy] tcp)
  std::vector<host_service> host_services; // the host's loopback ports (exec: the skill's)
  std::string ca_cert, ca_key;      // empty: ephemeral CA
  std::string upstream_ca_bundle;   // extra trust besides the system store
  // The HTTPS proxy listener's own certificate chain and key (PEM), and the CAs whose client
  // certificates it trusts (empty: no certificates asked for; tokens only, inside TLS).
  std::string proxy_cert, proxy_key, client_ca;
  bool upstream_system_trust = true;
  bool offer_h2 = true; // [tls] h2: HTTP/2 offered to terminated clients in ALPN (start-up only)
  std::chrono::hours leaf_validity{24};
  std::vector<std::string> allow_address_text;
  std::vector<address_range> allow_addresses; // special-range addresses the policy permits
  std::map<std::string, std::vector<boost::asio::ip::address>> pins; // [upstream.resolve]
  std::vector<std::string> dns_servers; // "ip[:port]"; empty: /etc/resolv.conf
  timeouts_config timeouts;
  limits_config limits;
  std::string access_log; // "" none, "-" stderr, else a file path
  bool redact_query = true;
  std::string access_log_format = "json"; // [log] format: "json" (sluice's line) or "ocsf"
  // [log] the access log's tamper-evident chain (docs/metrics.md): every record's seq and
  // prev_hash, and checkpoints every interval and at exit, signed with signing_key (a source, as
  // for credentials; empty: serve's checkpoints are unsigned). writer names this process's chain
  // (empty: HOST:PID). exec signs with a key made for the run and ignores signing_key.
  bool log_chain = true;
  std::string log_signing_key;
  std::string log_writer;
  std::chrono::milliseconds log_checkpoint_interval{60'000};
  std::map<std::string, skill_config> skills;
  // [credentials.NAME]. serve injects every one; exec only those granted (resolve_exec), with their
  // secrets loaded (load_secret) before the policy is built.
  std::vector<credential_config> credentials;
  std::string default_skill = "default";
  bool require_landlock = false; // [sandbox] require_landlock: exec refuses without Landlock
  // [sandbox] nested_userns: exec's commands may create user namespaces (a sandbox of their own:
  // Chromium's, bubblewrap, podman, sluice exec). Off by default.
  bool nested_userns = false;
  std::vector<std::string> credential_files; // [sandbox] more credential-shaped names to hide
  std::size_t max_workspace_entries = 200'000; // [sandbox] the workspace walk's bound
  // [sandbox] journal: every exec run's workspace changes are recorded for `sluice undo`
  // (exec/journal.hpp); runs older than journal_max_age go, and the oldest while all take more
  // than journal_max_size.
  bool journal = false;
  std::chrono::milliseconds journal_max_age{14LL * 24 * 3600 * 1000};
  std::uint64_t journal_max_bytes = 2ull << 30;
  std::vector<std::string> guarded_names; // [sandbox] more names guarded as guarded_names() are
  std::vector<std::string> caches;        // [sandbox] tool caches kept between runs (exec --cache)
  std::map<std::string, role_config> roles;     // [roles.NAME]
  std::map<std::string, client_config> clients; // [clients.NAME]
  scan_config scan; // [scan]: the secret scanner (filters/scan_policy.hpp)
  decider_config decider; // [decider]: an external decider (filters/decider_config.hpp)
  // Set in a role's own policy (policy::for_client): its name, and whether it only reports.
  std::string role;
  bool report = false;
};

class policy;
using policy_ptr = std::shared_ptr<const policy>;

// A loaded policy: the config plus the compiled matchers. Pure: const methods, no I/O.
class policy {
public:
  explicit policy(config cfg);

  const config &cfg() const { return cfg_; }
  profile mode() const { return cfg_.mode; }

  // Before resolution: host syntax, deny list and deny routes, allowlist with port, method by
  // profile, or an allow route for the method and the target's path. `target` is the request
  // target (origin form: path and query).
  decision decide(std::string_view method, std::string_view scheme, std::string_view raw_host,
                  unsigned port, std::string_view target = "/") const;
  // The same for a host parse_host has already normalized (the gateway's): not parsed again.
  decision decide(std::string_view method, std::string_view scheme, const host_name &host, unsigned port,
                  std::string_view target = "/") const;
  // The same for a host a person approved while the command runs ([approvals]): the host counts
  // as allowlisted (rule "approved"); its deny entries, methods and routes still apply.
  decision decide_approved(std::string_view method, std::string_view scheme, const host_name &host, unsigned port,
                           std::string_view target) const;
  decision decide_connect_approved(std::string_view raw_host, unsigned port) const;
  // [approvals]: whether a person may be asked about a request to this host that the allowlist
  // refuses (host_not_allowlisted).
  bool askable(std::string_view host, std::string_view scheme, unsigned port) const;
  // A WebSocket upgrade of a GET that decide() allowed: publish and allowlist let it through;
  // network-read only where an allow route with websocket = true covers the request
  // ("websocket_refused" otherwise). `rule` is the GET's.
  decision decide_websocket(std::string_view scheme, const host_name &host, unsigned port,
                            std::string_view target, std::string rule) const;
  // The MCP route (an allow route with an mcp table) covering this host and target's path, or
  // null: its POSTs pass only as their calls do, whichever entry allowed the request. With
  // `websocket`, only a route that also says websocket = true: the upgrade's messages are judged.
  const route_rule *mcp_route(std::string_view scheme, const host_name &host, unsigned port,
                              std::string_view target, bool websocket = false) const;
  // Git over SSH: whether this host and port is an SSH host of the policy (its rule, or null).
  const ssh_rule *ssh_host(std::string_view host, unsigned port) const;
  // One Git command over SSH to an SSH host: fetches (upload-pack, upload-archive) under
  // network-read, publish and allowlist; pushes (receive-pack) under publish and allowlist
  // ("git_push_refused" otherwise); the repository within the rule's paths
  // ("ssh_repository_not_allowed"); "ssh_host_not_allowed" for a host no rule names.
  decision decide_ssh(std::string_view host, unsigned port, git_ssh_service service,
                      std::string_view repository) const;
  // TCP to a named service: the tcp entry for this name and port that applies in the profile in
  // force, or null; and the host service on `port` (host_service_name), or null.
  const tcp_rule *tcp_entry(std::string_view host, unsigned port) const;
  const host_service *host_service_on(unsigned port) const;
  // Whether a connection to `host`:`port` is meant as relayed TCP: a tcp entry names it, or it is
  // a host service with tcp = true (decide_tcp then judges it, the deny list first).
  bool tcp_granted(std::string_view host, unsigned port) const;
  // A TCP connection (captured, or a CONNECT whose bytes are not TLS) to `host`:`port` relayed as
  // bytes: allowed by a tcp entry ("tcp://HOST:PORT") or a host service with tcp = true; refused
  // "offline", "host_service_not_granted" (no service on that port), "tcp_not_allowed" otherwise.
  decision decide_tcp(std::string_view host, unsigned port) const;
  // A CONNECT authority (method and route rules are applied per request inside the tunnel). Under
  // allowlist, which does not look inside, a host only routes name is refused.
  decision decide_connect(std::string_view raw_host, unsigned port) const;
  // After resolution: every address the gateway might dial.
  decision decide_address(const boost::asio::ip::address &addr,
                          const std::vector<boost::asio::ip::address> &own = {}) const;

  // Every allowed host pattern, routes' included (name constraints, capture ports).
  const host_matcher &allow_matcher() const { return allow_; }
  // [approvals] hosts (the per-command CA's name constraints include them: a person may allow them).
  const host_matcher &askable_matcher() const { return askable_; }
  const credential_injector &credentials() const { return credentials_; }
  // [scan] report_hosts and off_hosts, compiled: how a request to a host is scanned.
  const filters::scan_hosts &scan_hosts() const { return scan_hosts_; }

  // [clients]: once any client is named, the proxy listener serves only clients that identify
  // themselves.
  bool requires_identity() const { return !cfg_.clients.empty(); }
  const client_config *client(std::string_view name) const;
  // The policy a client's requests are judged by (its role's); null for a name not in [clients].
  policy_ptr for_client(std::string_view name) const;
  // Every role's policy, by role name.
  const std::map<std::string, std::shared_ptr<const policy>, std::less<>> &role_policies() const { return roles_; }
  // The limits of this policy's role (zero: none); set only in a role's policy.
  double requests_per_second() const { return rps_; }
  std::uint64_t bytes_per_second() const { return bps_; }
  // [[limits.budget]] entries that hold for this policy's clients (in a role's policy: those that
  // name no roles, or its role), by index into cfg().limits.budgets, with their hosts compiled.
  struct budget_entry {
    std::size_t index;
    host_matcher hosts; // empty: every host
  };
  const std::vector<budget_entry> &budgets() const { return budgets_; }
  // Appends to `out` the indices (into cfg().limits.budgets) of the budgets a request to
  // `host`:`port` falls under.
  void budgets_for(std::string_view host, std::string_view scheme, unsigned port,
                   std::vector<std::size_t> &out) const;

private:
  // Report mode: a refusal by the policy's lists, profile or routes is let through as would_deny.
  // Address classes, framing and protocol checks are never relaxed.
  decision reported(decision d) const;
  decision decide_rules(std::string_view method, std::string_view scheme, const host_name &host, unsigned port,
                        std::string_view target, bool approved = false) const;
  decision connect_rules(std::string_view raw_host, unsigned port, bool approved = false) const;
  // A raw host as decide() takes it: bracketed first if it is a bare IPv6 literal.
  static host_parse_result normalized(std::string_view raw_host);
  // `rule` points at the matching allowlist entry's text (the matcher's own).
  decision decide_host(std::string_view scheme, const host_name &host, unsigned port,
                       const std::string *&rule, bool approved = false) const;

  config cfg_;
  host_matcher allow_; // plain entries and routes' hosts
  host_matcher plain_; // plain entries only
  host_matcher deny_;
  host_matcher askable_; // [approvals] hosts
  route_matcher allow_routes_, deny_routes_;
  credential_injector credentials_;
  filters::scan_hosts scan_hosts_;
  std::map<std::string, std::shared_ptr<const policy>, std::less<>> roles_;
  double rps_ = 0;
  std::uint64_t bps_ = 0;
  std::vector<budget_entry> budgets_;
};

} // namespace sluice::filters
