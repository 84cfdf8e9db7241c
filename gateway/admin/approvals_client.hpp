#pragma once
// `sluice approvals` (list what waits), `sluice approve ID [--run | --always]` and `sluice deny
// ID`: the client of the admin listener's approvals API (server.hpp), with the token from
// `token_file` or SLUICE_APPROVALS_TOKEN. --always shows what it adds to the policy file and asks
// first.
#include <cstdint>
#include <string>

namespace sluice::gateway {

struct approvals_options {
  std::string action; // "list", "once", "run", "always" or "deny"
  std::uint64_t id = 0;
  bool yes = false;   // --always without asking
  std::string admin;      // HOST:PORT; default SLUICE_ADMIN
  std::string token_file;
};
int run_approvals(const approvals_options &o);

} // namespace sluice::gateway
