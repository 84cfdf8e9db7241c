#pragma once
#include <boost/system/error_code.hpp>
#include <string_view>
#include <type_traits>

namespace sluice::gateway {

// Every way a proxied request can fail on the gateway's side. One value flows unchanged from where it
// happened to the metric label (reason), the access log and the Proxy-Status header (RFC 9209).
enum class gateway_error {
  dns_error = 1,
  destination_address_denied,
  connection_refused,
  connection_timeout,
  destination_unreachable,
  tls_certificate_error,
  tls_protocol_error,
  response_timeout,
  response_incomplete,
  upstream_protocol_error,
  upstream_response_too_large,
};

const boost::system::error_category &gateway_category();
boost::system::error_code make_error_code(gateway_error e);

// Low-cardinality reason for metrics and logs ("dns_error", "connection_refused", ...).
std::string_view reason_of(gateway_error e);
// RFC 9209 error type for the Proxy-Status header.
std::string_view proxy_status_of(gateway_error e);
// HTTP status the client receives.
unsigned http_status_of(gateway_error e);

} // namespace sluice::gateway

template <> struct boost::system::is_error_code_enum<sluice::gateway::gateway_error> : std::true_type {};
