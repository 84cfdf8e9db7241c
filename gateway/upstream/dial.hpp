#pragma once
// The one way to an origin's TCP connection, for proxying and for the gateway's own requests
// (OAuth2 tokens): the addresses the policy lets it dial, then a connect to the first that answers,
// each attempt under its deadline. Private to gateway/.
#include "filters/policy.hpp"
#include "gateway/net.hpp"
#include "gateway/resolver.hpp"

#include <chrono>
#include <optional>
#include <vector>

namespace prometheus {
class Histogram;
}

namespace sluice::gateway::upstream {

// The addresses `host` may be dialled at: the literal `ip`, else the policy's pin, else what DNS
// says; each judged by the policy's address rules, this host's own addresses (`own`) refused. `ec`
// is dns_error (and the like) from the resolver, or destination_address_denied when none passes.
// `dns_timing`, if given, observes how long DNS took.
net::awaitable<std::vector<net::ip::address>>
allowed_addresses(resolver &dns, const filters::policy &pol, const std::vector<net::ip::address> &own,
                  const std::string &host, const std::optional<net::ip::address> &ip, error_code &ec,
                  prometheus::Histogram *dns_timing = nullptr);

// Connects `s` to the first of `addresses` that answers, each attempt within `timeout`. The error of
// the last attempt as a gateway_error (connection_timeout, destination_unreachable,
// connection_refused), or none. The endpoint dialled is built from an address that was judged,
// never resolved again.
net::awaitable<error_code> connect_first(beast::tcp_stream &s, const std::vector<net::ip::address> &addresses,
                                         unsigned port, std::chrono::steady_clock::duration timeout);

} // namespace sluice::gateway::upstream
