#pragma once
#include "filters/method_policy.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace sluice::exec {

// True for variable names that look like credentials: names containing TOKEN, SECRET, PASSWORD,
// PASSWD, PWD (but not PWD/OLDPWD), CREDENTIAL, API_KEY, PRIVATE_KEY, ACCESS_KEY, DSN, JWT, WEBHOOK,
// MASTER_KEY, PASSPHRASE, AUTH (not AUTHOR), and known ones (AWS_*, GITHUB_TOKEN, SSH_AUTH_SOCK, ...).
// Case-insensitive. Used to refuse --keep-env for them: a credential needs a skill's grant.
bool is_credential_name(std::string_view name);

// True for values that carry a secret whatever their name: a URL with a password in it
// (`scheme://user:pass@host`).
bool is_credential_value(std::string_view value);

// True for the names every command gets when the caller has them (the core of the allow-list):
// PATH, USER, LOGNAME, SHELL, TERM, COLORTERM, LANG, LANGUAGE, LC_*, TZ, COLUMNS, LINES, NO_COLOR,
// FORCE_COLOR, CLICOLOR, CI, DEBIAN_FRONTEND, EDITOR, VISUAL, PAGER. HOME, TMPDIR and PWD are
// sluice's own (the sandbox's home, private /tmp and working directory).
bool is_core_name(std::string_view name);

// What the child's environment is built from.
struct environment_spec {
  filters::profile mode = filters::profile::offline;
  unsigned proxy_port = 0;            // inside the sandbox, on 127.0.0.1
  std::string ca_file;                // per-command CA certificate (PEM), as the command sees it
  std::string java_truststore;        // PKCS12 trust store with the CA (the view's JVM cacerts)
  std::vector<std::string> grants;    // credential names kept (--allow-env, granted by the skill)
  std::vector<std::string> keep;      // other names kept (--keep-env, the skill's keep_env)
  std::vector<std::string> placeholders; // "VAR=sluice-credential-NAME": set last, over the parent's
  std::string home;                   // HOME inside
  std::string cwd;                    // PWD inside
};

// The child's environment by allow-list: the core names the parent has, the names granted or
// kept, HOME/TMPDIR/PWD of the sandbox, and sluice's proxy and trust variables (docs/architecture.md).
// `dropped` gets the names left out (never their values).
std::vector<std::string> child_environment(char **envp, const environment_spec &spec,
                                           std::vector<std::string> *dropped = nullptr);

} // namespace sluice::exec
