#pragma once
// The access log's record as an OCSF event (Open Cybersecurity Schema Framework, schema 1.8.0):
// HTTP Activity (class 4002) for a request sluice read and answered, Network Activity (class 4001)
// for a connection that ended without one (a refused listener peer, a protocol sluice does not
// carry) and for Git over SSH. docs/metrics.md maps every field.
#include "metrics/access_log.hpp"

#include <chrono>
#include <string>
#include <string_view>

namespace sluice::metrics {

inline constexpr std::string_view ocsf_schema_version = "1.8.0";

// Appends one event (a JSON object, no newline) for `r`, written at `now`, to `out`.
void encode_ocsf(std::string &out, const access_record &r, std::chrono::system_clock::time_point now,
                 std::string_view command_id, std::string_view skill);

} // namespace sluice::metrics
