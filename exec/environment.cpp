#include "exec/environment.hpp"

#include <algorithm>
#include <cctype>

namespace sluice::exec {
namespace {

std::string upper(std::string_view s) {
  std::string out(s);
  for (auto &c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// Variables sluice sets itself; whatever the parent had under these names is dropped first.
const char *const managed[] = {
    "HTTP_PROXY",        "HTTPS_PROXY",        "ALL_PROXY",        "NO_PROXY",
    "FTP_PROXY",         "SSL_CERT_FILE",      "SSL_CERT_DIR",     "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO",  "GIT_SSL_CAPATH",
    "PIP_CERT",          "CARGO_HTTP_CAINFO",  "AWS_CA_BUNDLE",    "DENO_CERT",
    "NPM_CONFIG_CAFILE", "NPM_CONFIG_PROXY",   "NPM_CONFIG_HTTPS_PROXY", "JAVA_TOOL_OPTIONS",
    "GIT_PROXY_COMMAND", "GRPC_PROXY",         "SLUICE_PROXY",
    "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", "CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE", "HTTPLIB2_CA_CERTS",
    "NIX_SSL_CERT_FILE", "BUNDLE_SSL_CA_CERT", "HEX_CACERTS_PATH", "UV_NATIVE_TLS",
};

} // namespace

bool is_credential_name(std::string_view name) {
  std::string n = upper(name);
  if (n == "PWD" || n == "OLDPWD") return false;
  for (auto part : {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "PWD", "CREDENTIAL", "API_KEY", "APIKEY",
                    "PRIVATE_KEY", "ACCESS_KEY", "SESSION_KEY", "DSN", "JWT", "WEBHOOK",
                    "MASTER_KEY", "PASSPHRASE", "COOKIE"}) {
    if (n.find(part) != std::string::npos) return true;
  }
  if (n.find("AUTH") != std::string::npos && n.find("AUTHOR") == std::string::npos) return true;
  for (auto prefix : {"AWS_", "AZURE_", "GOOGLE_APPLICATION_CREDENTIALS", "VAULT_", "OP_", "BW_",
                      "GIT_CONFIG_", "NPM_CONFIG__"}) {
    if (n.rfind(prefix, 0) == 0) return true;
  }
  for (auto exact : {"GITHUB_TOKEN", "GH_TOKEN", "NPM_TOKEN", "SSH_AUTH_SOCK", "GPG_AGENT_INFO",
                     "NETRC", "KUBECONFIG", "DOCKER_AUTH_CONFIG", "PGPASSFILE", "DATABASE_URL",
                     "HF_TOKEN", "CI_JOB_JWT", "REDIS_URL", "MONGODB_URI", "DOCKER_HOST"}) {
    if (n == exact) return true;
  }
  return false;
}

bool is_credential_value(std::string_view v) {
  // scheme://user:password@host: the userinfo ends at the first '@' before any '/'.
  for (auto at = v.find("://"); at != std::string_view::npos; at = v.find("://", at + 3)) {
    auto rest = v.substr(at + 3);
    auto end = rest.find_first_of("/?#");
    auto authority = rest.substr(0, end);
    auto amp = authority.rfind('@');
    if (amp != std::string_view::npos && authority.substr(0, amp).find(':') != std::string_view::npos) {
      return true;
    }
  }
  return false;
}

bool is_core_name(std::string_view name) {
  for (auto exact : {"PATH", "USER", "LOGNAME", "SHELL", "TERM", "COLORTERM", "LANG", "LANGUAGE",
                     "TZ", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "CLICOLOR",
                     "CLICOLOR_FORCE", "CI", "DEBIAN_FRONTEND", "EDITOR", "VISUAL", "PAGER"}) {
    if (name == exact) return true;
  }
  return name.rfind("LC_", 0) == 0;
}

std::vector<std::string> child_environment(char **envp, const environment_spec &spec,
                                           std::vector<std::string> *dropped) {
  std::vector<std::string> out;
  auto listed = [](const std::vector<std::string> &v, const std::string &n) {
    return std::find(v.begin(), v.end(), n) != v.end();
  };
  for (char **e = envp; e && *e; ++e) {
    std::string_view kv(*e);
    auto eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    std::string name(kv.substr(0, eq));
    std::string up = upper(name);
    bool is_managed = std::any_of(std::begin(managed), std::end(managed),
                                  [&](const char *m) { return up == m; });
    bool own = up == "HOME" || up == "TMPDIR" || up == "PWD";
    bool placeholder = std::any_of(spec.placeholders.begin(), spec.placeholders.end(),
                                   [&](const std::string &p) { return p.compare(0, name.size() + 1, name + "=") == 0; });
    if (is_managed || own || placeholder) continue;
    if (is_core_name(name) || listed(spec.grants, name) || listed(spec.keep, name)) {
      out.emplace_back(kv);
      continue;
    }
    if (dropped) dropped->push_back(name);
  }
  if (!spec.home.empty()) out.push_back("HOME=" + spec.home);
  out.push_back("TMPDIR=/tmp");
  out.push_back("GIT_CONFIG_NOSYSTEM=1"); // the host's /etc/gitconfig is not the command's to use
  for (auto &p : spec.placeholders) out.push_back(p);
  if (!spec.cwd.empty()) out.push_back("PWD=" + spec.cwd);
  if (spec.mode == filters::profile::offline || spec.proxy_port == 0) {
    return out; // no route at all: no proxy to point at
  }
  std::string proxy = "http://127.0.0.1:" + std::to_string(spec.proxy_port);
  for (auto name : {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                    "all_proxy", "NPM_CONFIG_PROXY", "NPM_CONFIG_HTTPS_PROXY"}) {
    out.push_back(std::string(name) + "=" + proxy);
  }
  // Nothing bypasses the proxy: inside the namespace there is nothing else to reach.
  out.push_back("NO_PROXY=");
  out.push_back("no_proxy=");
  if (filters::terminates_tls(spec.mode) && !spec.ca_file.empty()) {
    for (auto name : {"SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
                      "GIT_SSL_CAINFO", "PIP_CERT", "CARGO_HTTP_CAINFO", "AWS_CA_BUNDLE",
                      "DENO_CERT", "NPM_CONFIG_CAFILE", "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH",
                      "CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE", "HTTPLIB2_CA_CERTS", "NIX_SSL_CERT_FILE",
                      "BUNDLE_SSL_CA_CERT", "HEX_CACERTS_PATH"}) {
      out.push_back(std::string(name) + "=" + spec.ca_file);
    }
  }
  // Nothing for the JVM: its connections are captured (it honours no proxy variable without
  // JAVA_TOOL_OPTIONS, whose mere presence makes every `java` print a line on stderr), and its
  // system trust store (/etc/ssl/certs/java/cacerts) is the per-command CA in the view.
  return out;
}

} // namespace sluice::exec
