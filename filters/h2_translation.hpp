#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::filters {

// One header field as the HTTP/2 session received it (after HPACK), in order.
struct h2_field {
  std::string_view name, value;
};

// A request, translated: what an HTTP/1.1 request head would carry.
struct h2_request {
  std::string method, scheme, authority, path; // from :method, :scheme, :authority (or Host), :path
  std::string protocol; // :protocol (RFC 8441 extended CONNECT), empty if none
  // Regular fields, in order; cookie crumbs joined with "; " into one "cookie" field (RFC 9113
  // section 8.2.3); no pseudo-headers. A host field is checked against :authority and then left
  // out: `authority` is the one place the request's authority is kept. At most one content-length.
  std::vector<std::pair<std::string, std::string>> fields;
  std::optional<std::uint64_t> content_length; // when a content-length field is present (validated)
};

// Validates per RFC 9113 section 8 and translates. Returns an empty string_view when the request is
// acceptable, else a stable low-cardinality reason (snake_case):
//  "h2_uppercase_name", "h2_bad_field_name" (empty name, chars not allowed in a token, a ':' not at
//  the start), "h2_bad_field_value" (CR, LF, NUL or another control byte anywhere; leading/trailing
//  SP/HTAB; a :method or :protocol that is not a token, a :scheme that is not a URI scheme, a :path
//  with SP), "h2_connection_header" (connection, keep-alive, proxy-connection, transfer-encoding,
//  upgrade), "h2_te_not_trailers", "h2_pseudo_header" (unknown, duplicate, after a regular field,
//  :status, missing :method/:scheme/:path, empty :path, :path not starting with '/' unless "*" with
//  OPTIONS, :protocol without CONNECT), "h2_connect_refused" (plain CONNECT; extended CONNECT with
//  :protocol is returned as parsed, protocol set, for the session to judge), "bad_content_length",
//  "bad_host_header" (host disagreeing with :authority, several host fields, no authority at all,
//  or bytes an authority cannot hold), "userinfo_in_target" (an authority containing '@').
// Names in HTTP/2 are lowercase on the wire; they are refused rather than folded. `out` is
// unspecified when a reason is returned.
std::string_view translate_h2_request(const std::vector<h2_field> &in, h2_request &out);

// An HTTP/1.1 response head's fields -> HTTP/2 header list (lowercase names), leaving out the
// connection-specific ones (connection, keep-alive, proxy-connection, transfer-encoding, upgrade,
// and any field the Connection header names) and "te"; ":status" first. Fields HTTP/2 cannot carry
// (a name that is not a token, a value with CR, LF or NUL) are left out too; values lose
// surrounding SP/HTAB. `status` is the three-digit code the session already checked.
std::vector<std::pair<std::string, std::string>>
h2_response_fields(unsigned status,
                   const std::vector<std::pair<std::string_view, std::string_view>> &h1_fields);

// The same for an h2 origin's head (its ":status" among them, which is replaced by `status`),
// whose strings it takes over instead of copying them.
std::vector<std::pair<std::string, std::string>>
h2_response_fields_from_h2(unsigned status, std::vector<std::pair<std::string, std::string>> &&h2_head);

// A response's trailer fields (HTTP/2 from an h2 origin, or an HTTP/1.1 chunked trailer section)
// -> the trailer list sent to an h2 client: the same fields left out as for a head, and also
// pseudo-headers and the fields a trailer section must not carry (RFC 9110 section 6.5.1: framing,
// routing and authentication: content-length, content-type's framing kin, host, authorization,
// set-cookie...). gRPC's grpc-status, grpc-message and grpc-status-details-bin pass.
std::vector<std::pair<std::string, std::string>>
h2_trailer_fields(const std::vector<std::pair<std::string_view, std::string_view>> &fields);

} // namespace sluice::filters
