#pragma once
#include "filters/method_policy.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace sluice::exec {

// True for variable names that look like credentials: names containing TOKEN, SECRET, PASSWORD,
// PASSWD, CREDENTIAL, API_KEY, APIKEY, PRIVATE_KEY, ACCESS_KEY, and known ones (AWS_*, GITHUB_TOKEN,
// GH_TOKEN, NPM_TOKEN, SSH_AUTH_SOCK, ...). Case-insensitive.
bool is_credential_name(std::string_view name);

// What the child's environment is built from.
struct environment_spec {
  filters::profile mode = filters::profile::offline;
  unsigned proxy_port = 0;            // inside the sandbox, on 127.0.0.1
  std::string ca_file;                // per-command CA certificate (PEM)
  std::string java_truststore;        // PKCS12 trust store with the CA, for JAVA_TOOL_OPTIONS
  std::vector<std::string> grants;    // credential names kept
};

// The child's environment: the parent's, less credentials not granted and less any proxy or trust
// variables it had, plus sluice's own proxy and trust variables (DESIGN section 4).
std::vector<std::string> child_environment(char **envp, const environment_spec &spec,
                                           std::vector<std::string> *removed = nullptr);

} // namespace sluice::exec
