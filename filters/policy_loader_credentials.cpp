// The loader's [credentials.NAME] tables: where each secret comes from (a source, OAuth2 or an AWS
// key pair) and how the gateway sends it (header, format, placeholder).
#include "filters/policy_loader_detail.hpp"

namespace sluice::filters::loading {

void loader::load_credentials(const toml::table &root, config &c) const {
  auto *t = root["credentials"].as_table();
  if (!t) return;
  for (auto &&[k, v] : *t) c.credentials.push_back(credential_of(std::string(k.str()), v));
}

// [credentials.NAME]: where its value comes from, how long it lasts, the hosts it belongs to and
// how it is sent.
credential_config loader::credential_of(const std::string &name, const toml::node &v) const {
  auto *ct = v.as_table();
  std::string where = "[credentials." + name + "]";
  if (!ct) fail(v, "credentials." + name + " must be a table");
  check_keys(*ct, where, {"source", "hosts", "header", "format", "env", "ttl", "placeholder",
                          "placeholder_length", "oauth2", "aws"});
  credential_config cc;
  cc.name = name;
  if (cc.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") !=
      std::string::npos) {
    fail(v, where + ": a credential name uses letters, digits, '-' and '_' only");
  }
  credential_source_of(*ct, where, cc);
  if (auto *t = ct->get("ttl")) {
    auto text = t->value<std::string>();
    if (!text) fail(*t, where + " ttl must be a duration such as \"50m\" or \"3600s\"");
    try {
      cc.ttl = parse_duration(*text);
    } catch (const std::exception &) {
      fail(*t, where + " ttl must be a duration such as \"50m\" or \"3600s\" (got '" + *text + "')");
    }
    if (cc.ttl < std::chrono::seconds(1)) fail(*t, where + " ttl must be at least 1s");
    if (cc.oauth2) fail(*t, where + " ttl: an OAuth2 token is obtained again before it expires");
    if (cc.aws && !cc.aws->process.empty()) {
      fail(*t, where + " ttl: a credential_process's keys are obtained again before their Expiration");
    }
    if (cc.source.rfind("env:", 0) == 0) {
      fail(*t, where + " ttl needs a source that can change: \"file:\" or \"command:\" (an environment "
                      "variable is read once)");
    }
  }
  check_patterns(*ct, "hosts", "credentials." + cc.name);
  cc.hosts = strings_of(*ct, "hosts", where);
  if (cc.hosts.empty()) fail(v, where + " needs hosts = [...], the hosts the credential belongs to");
  cc.header = string_of(*ct, "header", where, cc.header);
  if (cc.header.empty() ||
      cc.header.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") !=
          std::string::npos) {
    fail_at(*ct, "header", where + " header must be a header name such as Authorization");
  }
  cc.format = string_of(*ct, "format", where, cc.format);
  if (cc.format.rfind("basic:", 0) != 0 && cc.format.find("{}") == std::string::npos) {
    fail_at(*ct, "format", where + " format must hold {} for the secret (\"Bearer {}\") or "
                                    "be \"basic:USER\"");
  }
  cc.env = string_of(*ct, "env", where, cc.source.rfind("env:", 0) == 0 ? cc.source.substr(4) : "");
  cc.placeholder_shape = string_of(*ct, "placeholder", where, cc.placeholder_shape);
  bool kind = false;
  for (const auto &k : placeholder_kinds()) kind |= k.name == cc.placeholder_shape;
  if (!cc.placeholder_shape.empty() && !kind) {
    std::string kinds;
    for (const auto &k : placeholder_kinds()) kinds += (kinds.empty() ? "" : ", ") + std::string(k.name);
    if (cc.placeholder_shape.size() > 32 ||
        cc.placeholder_shape.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") !=
            std::string::npos) {
      fail_at(*ct, "placeholder", where + " placeholder must be a kind (" + kinds +
                                      ") or a token prefix of letters, digits, '_', '-' and '.' such as \"ghp_\"");
    }
  }
  if (auto *n = ct->get("placeholder_length")) {
    auto v = n->value<std::int64_t>();
    if (!v || kind || cc.placeholder_shape.empty() || *v < static_cast<std::int64_t>(cc.placeholder_shape.size()) + 16 ||
        *v > 256) {
      fail(*n, where + " placeholder_length goes with a placeholder prefix, and leaves at least 16 random "
                       "characters after it (at most 256 in all)");
    }
    cc.placeholder_length = static_cast<unsigned>(*v);
  } else if (!kind && cc.placeholder_shape.size() + 16 > cc.placeholder_length) {
    cc.placeholder_length = static_cast<unsigned>(cc.placeholder_shape.size()) + 16;
  }
  return cc;
}

// source = "env:VAR" | "file:/path" | "command:PROGRAM ARGS...", or an oauth2 or aws table.
void loader::credential_source_of(const toml::table &ct, const std::string &where, credential_config &cc) const {
  cc.source = string_of(ct, "source", where, "");
  if (auto *o = ct.get("oauth2")) {
    auto *ot = o->as_table();
    std::string at = where + " oauth2";
    if (!ot) fail(*o, at + " must be a table: [credentials." + cc.name + ".oauth2] with token_url, client_id, client_secret");
    if (!cc.source.empty()) fail_at(ct, "source", where + ": an OAuth2 credential takes its value from oauth2, not source");
    check_keys(*ot, at, {"token_url", "client_id", "client_secret", "refresh_token", "scopes"});
    oauth2_config oc;
    oc.token_url = string_of(*ot, "token_url", at, "");
    if (oc.token_url.rfind("https://", 0) != 0 || oc.token_url.size() <= 8) {
      fail(*o, at + " token_url must be an https:// URL (the token endpoint)");
    }
    oc.client_id = string_of(*ot, "client_id", at, "");
    if (oc.client_id.empty()) fail(*o, at + " needs client_id = \"...\"");
    oc.client_secret_source = string_of(*ot, "client_secret", at, "");
    if (!is_credential_source(oc.client_secret_source)) {
      fail(*o, at + " client_secret must be a source: \"env:VAR\", \"file:/path\" or \"command:PROGRAM ARGS...\"");
    }
    oc.refresh_token_source = string_of(*ot, "refresh_token", at, "");
    if (!oc.refresh_token_source.empty() && !is_credential_source(oc.refresh_token_source)) {
      fail(*o, at + " refresh_token must be a source: \"env:VAR\", \"file:/path\" or \"command:PROGRAM ARGS...\"");
    }
    oc.scopes = strings_of(*ot, "scopes", at);
    cc.oauth2 = std::move(oc);
    cc.source = "oauth2";
  } else if (auto *a = ct.get("aws")) {
    auto *at_ = a->as_table();
    std::string at = where + " aws";
    if (!at_) fail(*a, at + " must be a table: [credentials." + cc.name + ".aws] with process = \"aws configure "
                        "export-credentials --format process\", or access_key_id and secret_access_key");
    if (!cc.source.empty()) fail_at(ct, "source", where + ": an AWS credential takes its key pair from aws, not source");
    for (const char *k : {"header", "format", "env", "placeholder", "placeholder_length"}) {
      if (ct.get(k)) fail_at(ct, k, where + " " + k + ": an AWS credential signs requests (SigV4); the command "
                                                "gets AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY placeholders");
    }
    check_keys(*at_, at, {"process", "access_key_id", "secret_access_key", "session_token"});
    aws_config ac;
    ac.process = string_of(*at_, "process", at, "");
    ac.access_key_id_source = string_of(*at_, "access_key_id", at, "");
    ac.secret_access_key_source = string_of(*at_, "secret_access_key", at, "");
    ac.session_token_source = string_of(*at_, "session_token", at, "");
    bool pair = !ac.access_key_id_source.empty() || !ac.secret_access_key_source.empty() ||
                !ac.session_token_source.empty();
    if (ac.process.empty() == !pair) {
      fail(*a, at + " needs either process = \"PROGRAM ARGS...\" (a credential_process, such as \"aws configure "
                    "export-credentials --format process\") or access_key_id and secret_access_key sources");
    }
    if (!ac.process.empty()) {
      ac.process = "command:" + ac.process;
      if (command_argv(ac.process).empty()) fail(*a, at + " process needs a program");
    } else {
      for (auto *src : {&ac.access_key_id_source, &ac.secret_access_key_source, &ac.session_token_source}) {
        if (src == &ac.session_token_source && src->empty()) continue;
        if (!is_credential_source(*src)) {
          fail(*a, at + " access_key_id, secret_access_key and session_token must be sources: \"env:VAR\", "
                        "\"file:/path\" or \"command:PROGRAM ARGS...\"");
        }
      }
    }
    cc.aws = std::move(ac);
    cc.source = "aws";
    cc.placeholder_shape = "aws-access-key-id";
  } else if (cc.source.rfind("command:", 0) == 0 && command_argv(cc.source).empty()) {
    fail_at(ct, "source", where + " source \"command:\" needs a program: \"command:gh auth token\"");
  } else if (!is_credential_source(cc.source)) {
    fail_at(ct, "source", where + " source must be \"env:VAR\", \"file:/path\" or \"command:PROGRAM ARGS...\" "
                                    "(\"command:gh auth token\")");
  }
}

} // namespace sluice::filters::loading
