#pragma once
#include <iosfwd>
#include <string>

namespace sluice::gateway {

// `sluice policy suggest`: reads a JSON access log and prints, per role (or for one client), the
// narrowest allow entries that would have admitted what the policy's lists, profile or routes
// refused (decision deny) or would have refused (would_deny, report mode): a route with the methods
// and paths seen where requests were seen, a host entry where only a CONNECT was. Refusals a list
// entry cannot lift (address classes, deny entries, malformed requests) are counted, not suggested.
// Returns 0; throws with the file named when it cannot be read.
int run_policy_suggest(const std::string &access_log, const std::string &client, std::ostream &out);

// `sluice policy token NAME --role ROLE`: a new random token and the [clients.NAME] section that
// holds its hash.
int run_policy_token(const std::string &name, const std::string &role, std::ostream &out);

} // namespace sluice::gateway
