// sluice's rule set of documented secret formats (docs/policy.md, "What leaves"). Every pattern is
// written from the provider's own description of its tokens, is valid in both Hyperscan and RE2,
// and is anchored on a word boundary and the documented length, so that the prefix alone ("sk-",
// "ghp_") or a random string of the right alphabet does not match. Each has a positive and a
// near-miss vector in tests/unit/scan/rules_test.cpp. Ids are stable: the access log, metrics,
// refusals and `[scan] actions` name them.
#include "scan/rule.hpp"

namespace sluice::scan {

std::string_view to_string(kind k) {
  switch (k) {
  case kind::format: return "format";
  case kind::canary: return "canary";
  case kind::own_secret: return "own_secret";
  case kind::custom: return "custom";
  }
  return "format";
}

std::string_view to_string(action a) { return a == action::block ? "block" : "report"; }

const std::vector<rule> &builtin_rules() {
  static const std::vector<rule> rules = {
      // GitHub: personal (ghp_), OAuth (gho_), user-to-server (ghu_), server-to-server (ghs_) and
      // refresh (ghr_) tokens: the prefix and 36 base62 characters (30 random, a 6-character
      // checksum), 40 in all ("Behind GitHub's new authentication token formats", 2021).
      {"github_token", R"(\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36}\b)"},
      // GitHub fine-grained personal access tokens: github_pat_, 22 characters, '_', 59 characters.
      {"github_fine_grained_token", R"(\bgithub_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}\b)"},
      // GitLab's token prefixes (docs.gitlab.com, "Token prefixes"): personal/project/group access
      // tokens (glpat-), OAuth application secrets, deploy, runner, CI/CD job, trigger, feed,
      // agent, SCIM and incoming mail tokens; at least 20 characters after the prefix.
      {"gitlab_token", R"(\bgl(?:pat|oas|dt|rt|rtr|cbt|ptt|ft|agent|soat|imt)-[0-9A-Za-z_\-]{20})"},
      // AWS access key ids (IAM "Understanding unique ID prefixes"): AKIA long-term, ASIA
      // temporary (STS), then 16 upper-case letters and digits; 20 in all.
      {"aws_access_key_id", R"(\b(?:AKIA|ASIA)[A-Z0-9]{16}\b)"},
      // AWS secret access keys have no prefix (40 characters of base64's alphabet): only where
      // they are named, as the credentials file, the environment and STS's JSON name them.
      {"aws_secret_access_key",
       R"((?i:(?:aws_?)?secret_?access_?key)["']?\s{0,4}[:=]\s{0,4}["']?[A-Za-z0-9/+]{40}(?:[^A-Za-z0-9/+=]|$))"},
      // Anthropic API keys (sk-ant-api03-), Admin API keys (sk-ant-admin01-) and OAuth tokens
      // (sk-ant-oat01-, sk-ant-ort01-): the prefix and more than 80 URL-safe base64 characters.
      {"anthropic_api_key", R"(\bsk-ant-(?:api|admin|oat|ort)[0-9]{2}-[A-Za-z0-9_\-]{80})"},
      // OpenAI: project, service account and admin keys (sk-proj-, sk-svcacct-, sk-admin-, long
      // URL-safe base64), and the legacy user keys: sk-, 20 characters, "T3BlbkFJ" (base64 of
      // "OpenAI"), 20 characters.
      {"openai_api_key",
       R"(\bsk-(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{40}|\bsk-[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}\b)"},
      // Slack (api.slack.com, "Token types"): bot (xoxb-), user (xoxp-), app config (xoxe-),
      // legacy workspace (xoxa-), refresh (xoxr-) and session tokens: the prefix, a team or user
      // number, '-', then the rest; app-level tokens xapp-1-A...-digits-hex.
      {"slack_token",
       R"(\bxox[abeoprs]-[0-9]+-[0-9A-Za-z\-]{10}|\bxapp-[0-9]+-[A-Z0-9]+-[0-9]+-[a-f0-9]{10})"},
      // Slack incoming webhooks: https://hooks.slack.com/services/T.../B.../24 characters.
      {"slack_webhook_url", R"(hooks\.slack\.com/services/T[A-Z0-9]{6,}/B[A-Z0-9]{6,}/[A-Za-z0-9]{20})"},
      // Stripe live secret keys (sk_live_) and restricted keys (rk_live_). Test-mode keys
      // (sk_test_) reach no money and are left out.
      {"stripe_secret_key", R"(\b[sr]k_live_[0-9A-Za-z]{20})"},
      // Google API keys: AIza and 35 characters of URL-safe base64, 39 in all.
      {"google_api_key", R"(\bAIza[0-9A-Za-z_\-]{35})"},
      // npm granular and automation tokens: npm_ and 36 base62 characters (GitHub's format).
      {"npm_token", R"(\bnpm_[A-Za-z0-9]{36}\b)"},
      // PyPI API tokens are macaroons: pypi- and the base64 of a macaroon whose location is
      // "pypi.org" (AgEIcHlwaS5vcmc) or "test.pypi.org" (AgENdGVzdC5weXBpLm9yZw).
      {"pypi_token", R"(\bpypi-AgE(?:IcHlwaS5vcmc|NdGVzdC5weXBpLm9yZw)[A-Za-z0-9_\-]{50})"},
      // PEM private keys (RFC 7468; OpenSSH's and PGP's armour too): the BEGIN line and at least 64
      // characters of its body (base64, line breaks, JSON's \n, an encrypted key's headers), so
      // that code that only names the marker ("-----BEGIN PRIVATE KEY-----") does not match.
      {"private_key", R"(-----BEGIN[ A-Z0-9]{0,20}PRIVATE KEY(?: BLOCK)?-----[A-Za-z0-9+/=\s\\:,\-]{64})"},
      // JSON Web Tokens (RFC 7519, compact JWS): base64url header and payload, both JSON objects
      // ("eyJ" is base64 of '{"'), and a signature.
      {"jwt", R"(\beyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10})"},
      // Hugging Face user access tokens: hf_ and 34 letters.
      {"huggingface_token", R"(\bhf_[A-Za-z]{34}\b)"},
      // SendGrid API keys: SG., 22 characters, '.', 43 characters.
      {"sendgrid_api_key", R"(\bSG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43})"},
      // Twilio API keys: the SID, SK and 32 hex digits (the secret has no prefix of its own).
      {"twilio_api_key", R"(\bSK[0-9a-fA-F]{32}\b)"},
      // DigitalOcean personal access (dop_v1_), OAuth (doo_v1_) and refresh (dor_v1_) tokens.
      {"digitalocean_token", R"(\bdo[opr]_v1_[a-f0-9]{64}\b)"},
      // Shopify admin API access tokens, custom app, partner and shared secrets.
      {"shopify_token", R"(\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b)"},
  };
  return rules;
}

} // namespace sluice::scan
