#include "filters/policy.hpp"

namespace sluice::filters {

// A deny rule without a port denies the host on every port: the conservative reading.
policy::policy(config cfg)
    : cfg_(std::move(cfg)), allow_(cfg_.allow), deny_(cfg_.deny, true), credentials_(cfg_.credentials) {}

decision policy::decide_host(std::string_view scheme, std::string_view raw_host, unsigned port,
                             std::string &rule) const {
  // The gateway passes normalized names, which write an IPv6 literal without its brackets.
  std::string bracketed;
  if (!raw_host.empty() && raw_host.front() != '[' && raw_host.find(':') != std::string_view::npos) {
    bracketed = "[" + std::string(raw_host) + "]";
    raw_host = bracketed;
  }
  auto parsed = parse_host(raw_host);
  if (!parsed.host) {
    return decision::deny(parsed.reason);
  }
  const auto &host = parsed.host->name;
  // "localhost" names this machine whatever DNS says; refuse it before any lookup.
  if (!parsed.host->ip && (host == "localhost" || host.ends_with(".localhost"))) {
    if (!allow_.match(host, scheme, port)) {
      return decision::deny("localhost_refused");
    }
  }
  if (auto d = deny_.match(host, scheme, port)) {
    return decision::deny("host_denied", *d);
  }
  auto a = allow_.match(host, scheme, port);
  if (!a) {
    return decision::deny("host_not_allowlisted");
  }
  rule = *a;
  return decision::allow(*a);
}

decision policy::decide(std::string_view method, std::string_view scheme, std::string_view raw_host,
                        unsigned port) const {
  std::string rule;
  auto d = decide_host(scheme, raw_host, port, rule);
  if (!d.allowed) {
    return d;
  }
  if (!method_allowed(cfg_.mode, method)) {
    return decision::deny("method_not_allowed", rule);
  }
  return d;
}

decision policy::decide_connect(std::string_view raw_host, unsigned port) const {
  if (cfg_.mode == profile::offline) {
    return decision::deny("offline");
  }
  std::string rule;
  return decide_host("https", raw_host, port, rule);
}

decision policy::decide_address(const boost::asio::ip::address &addr,
                                const std::vector<boost::asio::ip::address> &own) const {
  for (const auto &r : cfg_.allow_addresses) {
    if (r.contains(addr)) {
      return decision::allow({});
    }
  }
  auto c = classify(addr, own);
  if (c == address_class::global) {
    return decision::allow({});
  }
  return decision::deny("destination_address_denied");
}

} // namespace sluice::filters
