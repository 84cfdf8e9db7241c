#pragma once
// `sluice approvals` is the admin listener's client (admin/approvals_client.hpp), not serve's: it is
// included here only for cli/cmd_approvals.cpp, which reaches run_approvals through this header.
#include "gateway/admin/approvals_client.hpp"

#include <string>
#include <vector>

namespace sluice::gateway {

struct serve_options {
  std::string config_file;
  std::string ca_out; // where to write an ephemeral CA's certificate, if set
  // Where to write the system roots plus sluice's CA: one file for clients that replace their
  // trust store with a bundle (SSL_CERT_FILE, NODE_EXTRA_CA_CERTS...), rewritten at every start.
  std::string ca_bundle_out;
  unsigned threads = 0;
};

// `sluice serve`: loads the config, listens, then waits for signals: SIGHUP reloads the policy (a bad
// file keeps the old one and says why), as does a change of the file's text (checked every second);
// SIGTERM/SIGINT turn /readyz false for [timeouts] drain_delay, then drain and return 0. Throws on
// start-up errors.
int run_serve(const serve_options &options);

// `sluice check`: judges METHOD URL under a policy without sending anything. Prints one line:
// "ALLOW rule=..." or "DENY reason=... [rule=...]" ("WOULD_DENY ..." for a role in report mode).
// Returns 0 for allow (and would_deny), 1 for deny. `client`: judge as that [clients] entry's role.
// The request's target, its --header fields and --body are scanned ([scan]) as the gateway does.
// An ssh:// URL with a Git program as METHOD is judged by the ssh entries of `skill` ("default"
// when empty), under its default profile unless `profile` is given.
struct check_request {
  std::string config_file, profile;
  std::vector<std::string> allow, deny;
  std::string method, url, client, skill;
  // [scan]: fields ("Name: value") and a body (a file) the sample request carries, scanned as the
  // gateway scans what a command sends.
  std::vector<std::string> headers;
  std::string body_file;
};
int run_check(const check_request &c);

} // namespace sluice::gateway
