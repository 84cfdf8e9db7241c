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
};

// Framing and semantic checks on a request head. Returns an empty view when clean, else a reason:
//  - 400-class framing ("duplicate_content_length", "content_length_with_transfer_encoding",
//    "bad_transfer_encoding", "bad_content_length", "ambiguous_target", "bad_host_header",
//    "control_character"),
//  - 403-class semantics for the profile ("upgrade_refused", "method_override_refused",
//    "body_on_read_method").
std::string_view check_request(const request_view &req, profile p);

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
