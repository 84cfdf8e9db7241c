#pragma once
// JSON text written straight into a line kept between records (the access log's two encodings):
// what boost::json::serialize would write for these values ('"', '\\' and control characters
// escaped, other bytes as they are), without building an object first.
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::metrics::json_text {

void put_string(std::string &out, std::string_view v);
// `key` is the key with its separator and colon as it goes into the line (",\"host\":").
void field(std::string &out, std::string_view key, std::string_view v);
void field(std::string &out, std::string_view key, std::uint64_t v);
void field_signed(std::string &out, std::string_view key, std::int64_t v);
// Seconds with six decimals ("0.001235").
void field(std::string &out, std::string_view key, double v);
// "2026-12-02T18:30:05.123Z" in quotes, for `now` (the part up to the seconds formatted once a
// second per thread).
void put_time(std::string &out, std::chrono::system_clock::time_point now);

} // namespace sluice::metrics::json_text
