#include "gateway/error.hpp"

#include <string>

namespace sluice::gateway {
namespace {

struct category : boost::system::error_category {
  const char *name() const noexcept override { return "sluice.gateway"; }
  std::string message(int ev) const override {
    return std::string(reason_of(static_cast<gateway_error>(ev)));
  }
};

} // namespace

const boost::system::error_category &gateway_category() {
  static const category c;
  return c;
}

boost::system::error_code make_error_code(gateway_error e) {
  return {static_cast<int>(e), gateway_category()};
}

std::string_view reason_of(gateway_error e) {
  switch (e) {
  case gateway_error::dns_error: return "dns_error";
  case gateway_error::destination_address_denied: return "destination_address_denied";
  case gateway_error::connection_refused: return "connection_refused";
  case gateway_error::connection_timeout: return "connection_timeout";
  case gateway_error::destination_unreachable: return "destination_unreachable";
  case gateway_error::tls_certificate_error: return "tls_certificate_error";
  case gateway_error::tls_protocol_error: return "tls_protocol_error";
  case gateway_error::response_timeout: return "response_timeout";
  case gateway_error::response_incomplete: return "response_incomplete";
  case gateway_error::upstream_protocol_error: return "upstream_protocol_error";
  case gateway_error::upstream_response_too_large: return "upstream_response_too_large";
  }
  return "proxy_internal_error";
}

std::string_view proxy_status_of(gateway_error e) {
  switch (e) {
  case gateway_error::dns_error: return "dns_error";
  case gateway_error::destination_address_denied: return "destination_ip_prohibited";
  case gateway_error::connection_refused: return "connection_refused";
  case gateway_error::connection_timeout: return "connection_timeout";
  case gateway_error::destination_unreachable: return "destination_ip_unroutable";
  case gateway_error::tls_certificate_error: return "tls_certificate_error";
  case gateway_error::tls_protocol_error: return "tls_protocol_error";
  case gateway_error::response_timeout: return "http_response_timeout";
  case gateway_error::response_incomplete: return "http_response_incomplete";
  case gateway_error::upstream_protocol_error: return "http_protocol_error";
  case gateway_error::upstream_response_too_large: return "http_response_header_size";
  }
  return "proxy_internal_error";
}

unsigned http_status_of(gateway_error e) {
  switch (e) {
  case gateway_error::destination_address_denied: return 403;
  case gateway_error::connection_timeout:
  case gateway_error::response_timeout: return 504;
  default: return 502;
  }
}

} // namespace sluice::gateway
