#include "gateway/upstream/failure.hpp"

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>

namespace sluice::gateway::upstream {

namespace http = boost::beast::http;

bool closed_while_pooled(const boost::system::error_code &ec) {
  return ec == http::error::end_of_stream || ec == boost::asio::error::connection_reset ||
         ec == boost::asio::error::broken_pipe || ec == boost::asio::error::eof ||
         ec == boost::asio::ssl::error::stream_truncated;
}

gateway_error response_failure(const boost::system::error_code &ec) {
  if (ec == boost::beast::error::timeout) return gateway_error::response_timeout;
  if (ec == http::error::header_limit) return gateway_error::upstream_response_too_large;
  if (closed_while_pooled(ec)) return gateway_error::response_incomplete;
  return gateway_error::upstream_protocol_error;
}

} // namespace sluice::gateway::upstream
