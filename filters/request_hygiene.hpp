#pragma once
#include "filters/method_policy.hpp"

#include <string_view>
#include <utility>
#include <vector>

namespace sluice::filters {

// The parts of a parsed request head that hygiene looks at, filled by the session from the parser.
struct request_view {
  std::string_view method;
  std::string_view target;
  std::vector<std::pair<std::string_view, std::string_view>> fields; // name, value; in order
  // Fields the gateway itself sets on the way out (credential headers): a Connection header may
  // not name them, as it may not name Host or the framing fields.
  std::vector<std::string_view> guarded{};
};

// Framing and semantic checks on a request head. Returns an empty view when clean, else a reason:
//  - 400-class framing ("duplicate_content_length", "content_length_with_transfer_encoding",
//    "bad_transfer_encoding", "bad_content_length", "ambiguous_target", "bad_host_header",
//    "control_character"),
//    "connection_strips_field": a Connection header naming an end-to-end field (Host,
//    Content-Length, Transfer-Encoding, Authorization, Proxy-Authorization, a guarded field),
//    which a hop-by-hop strip would remove after it was checked;
//    "underscore_framing_field": Content_Length or Transfer_Encoding on a request with a body
//    (back ends that fold '_' into '-' would frame it by them),
//  - 403-class semantics for the profile ("upgrade_refused": an upgrade other than a well-formed
//    WebSocket one, "h2c_refused", "method_override_refused", "body_on_read_method"). Whether a
//    WebSocket upgrade may pass is the policy's (policy::decide_websocket).
std::string_view check_request(const request_view &req, profile p);

// Whether a request check_request passed asks for a WebSocket upgrade (it names Upgrade, and
// check_request refuses every other upgrade outside allowlist).
bool is_websocket_upgrade(const request_view &req);

// Checks the raw bytes of a request head (request line through the blank line) for shapes that
// parsers disagree on and that a lenient parser would silently repair: obsolete line folding
// ("obsolete_line_folding"), a bare LF or CR ("bare_line_ending"), NUL and other control bytes
// ("control_character"). Empty when clean.
std::string_view check_raw_head(std::string_view head);

// True when a reason from check_request is a framing error (400) rather than a policy denial (403).
bool is_framing_error(std::string_view reason);

// Checks an origin-form target ("/path?q") for shapes that upstreams resolve differently: dot segments
// (also percent-encoded), backslashes, fragments, control bytes.
bool target_is_unambiguous(std::string_view target);

} // namespace sluice::filters
