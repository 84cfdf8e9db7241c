#pragma once
// What the scanner looks for (docs/policy.md, "What leaves"): rules (a pattern with a stable id,
// a kind and an action) and the findings a scan returns. A finding names the rule and where it
// matched, never the bytes that matched.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::scan {

// Where a rule comes from: sluice's rule set of documented secret formats, a per-run canary, a value
// of the caller's own secrets, or a rule the trusted policy adds ([[scan.rules]]).
enum class kind { format, canary, own_secret, custom };
// What a finding does: `block` refuses the request, `report` logs it and lets it pass.
enum class action { block, report };

std::string_view to_string(kind k);
std::string_view to_string(action a);

// One pattern. `pattern` is RE2 syntax (for the built-in rules also valid Hyperscan syntax);
// `id` is what the access log, metrics and refusals name: lower case, digits and '_'.
struct rule {
  std::string id;
  std::string pattern;
  scan::kind kind = kind::format;
  scan::action action = action::block;
};

// sluice's own rules for secret formats providers document (scan/builtin_rules.cpp lists each with
// its source); every one has kind::format and action::block. Stable ids: github_token,
// github_fine_grained_token, gitlab_token, aws_access_key_id, aws_secret_access_key,
// anthropic_api_key, openai_api_key, slack_token, slack_webhook_url, stripe_secret_key,
// google_api_key, npm_token, pypi_token, private_key, jwt, huggingface_token, sendgrid_api_key,
// twilio_api_key, digitalocean_token, shopify_token.
const std::vector<rule> &builtin_rules();

// One match, as the caller logs it and decides on it. No field holds the matched bytes.
struct finding {
  std::string rule;      // the rule id; "own_secret" and "canary" for those kinds
  scan::kind kind = kind::format;
  scan::action action = action::block;
  std::string location;  // "path", "query:NAME", "query", "field:NAME", "body", ...
  std::uint64_t offset = 0; // where the match starts in that location (decoded bytes for a body)
  std::string name;      // own_secret: the secret's name (an env var); canary: which one; else ""
  std::vector<std::string> allowed_hosts; // own_secret: the hosts it may go to (none: no host)
  std::string_view encoding; // how it was written: "raw", "percent", "base64", "hex"
};

} // namespace sluice::scan
