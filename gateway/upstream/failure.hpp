#pragma once
// What an HTTP/1.1 origin's failure means, the same for every protocol a client speaks (an
// HTTP/1.1 request, an h2 stream sent on as HTTP/1.1, a WebSocket upgrade). Private to gateway/.
#include "gateway/error.hpp"

#include <boost/system/error_code.hpp>

namespace sluice::gateway::upstream {

// What a write to a pooled connection, or the read of its response head, meets when the origin
// closed the connection while it waited in the pool. A request whose body sluice still holds
// whole (or that has none) goes once more, on a fresh connection.
bool closed_while_pooled(const boost::system::error_code &ec);

// The reason a request failed while it went to the origin or its response head was read:
// response_timeout, upstream_response_too_large, response_incomplete (the origin closed, reset or
// cut its TLS short) or upstream_protocol_error (anything else it sent that is not HTTP/1.1).
gateway_error response_failure(const boost::system::error_code &ec);

} // namespace sluice::gateway::upstream
