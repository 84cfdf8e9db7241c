#include "filters/host_matcher.hpp"

#include <re2/re2.h>

namespace sluice::filters {

host_matcher::host_matcher(const std::vector<std::string> &patterns, bool portless_any_port)
    : portless_any_port_(portless_any_port) {
  patterns_.reserve(patterns.size());
  for (const auto &text : patterns) {
    patterns_.push_back(parse_host_pattern(text));
    std::size_t idx = patterns_.size() - 1;
    auto &p = patterns_.back();
    switch (p.type) {
    case host_pattern::kind::exact:
      exact_[p.value].push_back(idx);
      break;
    case host_pattern::kind::subdomains:
      suffix_[p.value].push_back(idx);
      break;
    case host_pattern::kind::regex: {
      RE2::Options opts;
      opts.set_log_errors(false);
      opts.set_case_sensitive(false);
      auto re = std::make_unique<re2::RE2>(p.value, opts);
      if (!re->ok()) {
        throw pattern_error("pattern '" + p.text + "': bad regex: " + re->error() +
                            " (RE2 syntax; the whole host must match)");
      }
      regexes_.emplace_back(std::move(re), idx);
      break;
    }
    }
  }
}

host_matcher::host_matcher(host_matcher &&) noexcept = default;
host_matcher &host_matcher::operator=(host_matcher &&) noexcept = default;
host_matcher::~host_matcher() = default;

const std::string *host_matcher::match(std::string_view host, std::string_view scheme, unsigned port) const {
  if (auto it = exact_.find(host); it != exact_.end()) {
    for (auto idx : it->second) {
      if (port_ok(patterns_[idx], scheme, port)) {
        return &patterns_[idx].text;
      }
    }
  }
  // "*.github.com" matches "a.github.com" and "a.b.github.com", never "github.com" itself.
  if (!suffix_.empty()) {
    for (auto dot = host.find('.'); dot != std::string_view::npos; dot = host.find('.', dot + 1)) {
      auto it = suffix_.find(host.substr(dot + 1));
      if (it == suffix_.end()) {
        continue;
      }
      for (auto idx : it->second) {
        if (port_ok(patterns_[idx], scheme, port)) {
          return &patterns_[idx].text;
        }
      }
    }
  }
  for (const auto &[re, idx] : regexes_) {
    if (port_ok(patterns_[idx], scheme, port) && RE2::FullMatch(re2::StringPiece(host.data(), host.size()), *re)) {
      return &patterns_[idx].text;
    }
  }
  return nullptr;
}

} // namespace sluice::filters
