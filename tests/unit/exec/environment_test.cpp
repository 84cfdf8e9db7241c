#include "exec/environment.hpp"

#include <algorithm>
#include <catch2/catch.hpp>

using namespace sluice::exec;

namespace {
bool has(const std::vector<std::string> &v, const std::string &s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}
bool has_name(const std::vector<std::string> &env, const std::string &name) {
  return std::any_of(env.begin(), env.end(), [&](const std::string &kv) { return kv.rfind(name + "=", 0) == 0; });
}
} // namespace

TEST_CASE("the environment is an allow-list: secrets of any name stay outside", "[exec][environment]") {
  std::vector<std::string> parent = {
      "PATH=/usr/bin:/bin", "LANG=C.UTF-8", "LC_ALL=C", "TERM=xterm", "HOME=/home/u", "TMPDIR=/var/x",
      "MYSQL_PWD=p", "REDIS_URL=redis://u:pw@h:6379", "MONGODB_URI=mongodb://u:pw@h",
      "SENTRY_DSN=https://k@sentry.io/1", "SLACK_WEBHOOK_URL=https://hooks.slack.com/x",
      "BW_SESSION=s", "OP_SESSION_abc=s", "GIT_CONFIG_VALUE_0=secret", "PIP_INDEX_URL=https://u:p@pypi",
      "NPM_CONFIG__AUTH=a", "CI_JOB_JWT_V2=j", "RAILS_MASTER_KEY=k", "GPG_PASSPHRASE=g",
      "LD_PRELOAD=/x.so", "BASH_ENV=/x", "HTTPS_PROXY=http://evil:1", "EDITOR_THEME=dark",
      "GITHUB_TOKEN=ghp", "MY_SETTING=1"};
  std::vector<char *> envp;
  for (auto &s : parent) envp.push_back(s.data());
  envp.push_back(nullptr);
  environment_spec spec;
  spec.mode = sluice::filters::profile::network_read;
  spec.proxy_port = 3128;
  spec.ca_file = "/.sluice/ca.pem";
  spec.home = "/home/u";
  spec.cwd = "/work/p";
  spec.grants = {"GITHUB_TOKEN"};
  spec.keep = {"MY_SETTING"};
  std::vector<std::string> dropped;
  auto env = child_environment(envp.data(), spec, &dropped);
  for (auto name : {"MYSQL_PWD", "REDIS_URL", "MONGODB_URI", "SENTRY_DSN", "SLACK_WEBHOOK_URL",
                    "BW_SESSION", "OP_SESSION_abc", "GIT_CONFIG_VALUE_0", "PIP_INDEX_URL",
                    "NPM_CONFIG__AUTH", "CI_JOB_JWT_V2", "RAILS_MASTER_KEY", "GPG_PASSPHRASE",
                    "LD_PRELOAD", "BASH_ENV", "EDITOR_THEME"}) {
    INFO(name);
    CHECK_FALSE(has_name(env, name));
    CHECK(has(dropped, name));
  }
  CHECK(has(env, "PATH=/usr/bin:/bin"));
  CHECK(has(env, "LC_ALL=C"));
  CHECK(has(env, "GITHUB_TOKEN=ghp"));
  CHECK(has(env, "MY_SETTING=1"));
  CHECK(has(env, "HOME=/home/u"));
  CHECK(has(env, "TMPDIR=/tmp"));
  CHECK(has(env, "PWD=/work/p"));
  CHECK(has(env, "HTTPS_PROXY=http://127.0.0.1:3128"));
  CHECK(has(env, "SSL_CERT_FILE=/.sluice/ca.pem"));
  CHECK_FALSE(has(dropped, "HTTPS_PROXY")); // replaced, not dropped
  for (auto &d : dropped) CHECK(d.find('=') == std::string::npos); // names only
}

TEST_CASE("credential names and values are recognised for --keep-env", "[exec][environment]") {
  for (auto n : {"GITHUB_TOKEN", "MYSQL_PWD", "SENTRY_DSN", "SLACK_WEBHOOK_URL", "BW_SESSION",
                 "OP_SESSION_x", "GIT_CONFIG_VALUE_0", "NPM_CONFIG__AUTH", "CI_JOB_JWT_V2",
                 "RAILS_MASTER_KEY", "GPG_PASSPHRASE", "REDIS_URL", "AWS_REGION"}) {
    INFO(n);
    CHECK(is_credential_name(n));
  }
  for (auto n : {"PWD", "GIT_AUTHOR_NAME", "NODE_ENV", "RUST_LOG", "PIP_INDEX_URL"}) {
    INFO(n);
    CHECK_FALSE(is_credential_name(n));
  }
  CHECK(is_credential_value("https://user:pass@pypi.example.com/simple"));
  CHECK(is_credential_value("x redis://:pw@h:6379/0"));
  CHECK_FALSE(is_credential_value("https://pypi.org/simple"));
  CHECK_FALSE(is_credential_value("https://host/path?a=b@c:d"));
  CHECK_FALSE(is_credential_value("user@example.com"));
}
