#include "filters/scan_policy.hpp"

#include <cctype>

namespace sluice::filters {

const std::vector<std::string_view> &builtin_scan_rule_ids() {
  static const std::vector<std::string_view> ids = {
      "github_token", "github_fine_grained_token", "gitlab_token", "aws_access_key_id",
      "aws_secret_access_key", "anthropic_api_key", "openai_api_key", "slack_token", "slack_webhook_url",
      "stripe_secret_key", "google_api_key", "npm_token", "pypi_token", "private_key", "jwt",
      "huggingface_token", "sendgrid_api_key", "twilio_api_key", "digitalocean_token", "shopify_token"};
  return ids;
}

namespace {

// '*' matches any run of characters; case is ignored (iterative, with one backtrack point).
bool glob(std::string_view p, std::string_view s) {
  std::size_t i = 0, j = 0, star = std::string_view::npos, mark = 0;
  auto same = [](char a, char b) {
    return std::toupper(static_cast<unsigned char>(a)) == std::toupper(static_cast<unsigned char>(b));
  };
  while (j < s.size()) {
    if (i < p.size() && p[i] == '*') {
      star = i++;
      mark = j;
    } else if (i < p.size() && same(p[i], s[j])) {
      ++i;
      ++j;
    } else if (star != std::string_view::npos) {
      i = star + 1;
      j = ++mark;
    } else {
      return false;
    }
  }
  while (i < p.size() && p[i] == '*') ++i;
  return i == p.size();
}

} // namespace

bool secret_name(const std::vector<std::string> &patterns, std::string_view name) {
  for (const auto &p : patterns) {
    if (glob(p, name)) return true;
  }
  return false;
}

scan_hosts::scan_hosts(const scan_config &c) : report_(c.report_hosts, true), off_(c.off_hosts, true) {
  for (const auto &r : c.rules) {
    if (!r.hosts.empty()) exempt_.emplace_back(r.id, host_matcher(r.hosts, true));
  }
}

bool scan_hosts::exempt(std::string_view id, std::string_view host, std::string_view scheme, unsigned port) const {
  for (const auto &[rule, hosts] : exempt_) {
    if (rule == id) return hosts.match(host, scheme, port) != nullptr;
  }
  return false;
}

scan_hosts::mode scan_hosts::mode_for(std::string_view host, std::string_view scheme, unsigned port) const {
  if (off_.match(host, scheme, port)) return mode::off;
  if (report_.match(host, scheme, port)) return mode::report;
  return mode::enforce;
}

} // namespace sluice::filters
