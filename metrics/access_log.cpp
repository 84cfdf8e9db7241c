#include "metrics/access_log.hpp"

#include <charconv>
#include <chrono>
#include <cmath>
#include <ctime>
#include <stdexcept>

namespace sluice::metrics {

access_log::access_log(const std::string &destination, std::string command_id, std::string skill,
                       bool redact_query)
    : command_id_(std::move(command_id)), skill_(std::move(skill)), redact_query_(redact_query) {
  if (destination.empty()) {
    return;
  }
  if (destination == "-") {
    file_ = stderr;
    return;
  }
  file_ = std::fopen(destination.c_str(), "ae");
  if (!file_) {
    throw std::runtime_error("cannot open access log '" + destination +
                             "' for appending; check the directory exists and is writable");
  }
  owned_ = true;
}

access_log::~access_log() {
  if (owned_) std::fclose(file_);
}

namespace {

// JSON text into a line kept between requests: what boost::json::serialize wrote for these fields
// ('"', '\\' and control characters escaped, other bytes as they are), without building an object
// first (that was a fifth of a keep-alive request's instructions).
struct escapes {
  bool needed[256] = {};
  constexpr escapes() {
    for (int c = 0; c < 0x20; ++c) needed[c] = true;
    needed[static_cast<unsigned char>('"')] = needed[static_cast<unsigned char>('\\')] = true;
  }
};
constexpr escapes escape_table;

void put_string(std::string &out, std::string_view v) {
  static constexpr char hex[] = "0123456789abcdef";
  out.push_back('"');
  std::size_t run = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    auto c = static_cast<unsigned char>(v[i]);
    if (!escape_table.needed[c]) continue;
    out.append(v.data() + run, i - run);
    run = i + 1;
    char esc[6] = {'\\', 0, 0, 0, 0, 0};
    std::size_t n = 2;
    switch (c) {
    case '"': esc[1] = '"'; break;
    case '\\': esc[1] = '\\'; break;
    case '\b': esc[1] = 'b'; break;
    case '\f': esc[1] = 'f'; break;
    case '\n': esc[1] = 'n'; break;
    case '\r': esc[1] = 'r'; break;
    case '\t': esc[1] = 't'; break;
    default:
      esc[1] = 'u', esc[2] = '0', esc[3] = '0', esc[4] = hex[c >> 4], esc[5] = hex[c & 0xf];
      n = 6;
    }
    out.append(esc, n);
  }
  out.append(v.data() + run, v.size() - run);
  out.push_back('"');
}

// `key` is the key with its separator and colon as it goes into the line (",\"host\":").
void field(std::string &out, std::string_view key, std::string_view v) {
  out.append(key);
  put_string(out, v);
}

void field(std::string &out, std::string_view key, std::uint64_t v) {
  out.append(key);
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}

// Seconds with six decimals ("0.001235"): a duration to the microsecond, formatted as two integers
// (the shortest form of the double cost a tenth of the line's instructions).
void field(std::string &out, std::string_view key, double v) {
  out.append(key);
  if (!(v > 0)) v = 0;             // JSON has no NaN; a duration is never negative
  if (v > 1e12) v = 1e12;          // and never 30,000 years: keeps the conversion defined
  auto us = static_cast<std::uint64_t>(std::llround(v * 1e6));
  char buf[40];
  auto [end, ec] = std::to_chars(buf, buf + 24, us / 1000000);
  *end++ = '.';
  auto frac = us % 1000000;
  for (int d = 5; d >= 0; --d, frac /= 10) end[d] = static_cast<char>('0' + frac % 10);
  out.append(buf, end + 6);
}

// "2026-12-02T18:30:05.123Z": the part up to the seconds is formatted once a second per thread.
void put_time(std::string &out) {
  auto now = std::chrono::system_clock::now();
  auto ms_total = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  auto secs = static_cast<std::time_t>(ms_total / 1000);
  auto ms = static_cast<int>(ms_total % 1000);
  thread_local std::time_t cached_second = -1;
  thread_local char cached[64]; // 20 used; room for what snprintf could write for any int
  if (secs != cached_second) {
    std::tm tm{};
    gmtime_r(&secs, &tm);
    std::snprintf(cached, sizeof cached, "%04d-%02d-%02dT%02d:%02d:%02d.", tm.tm_year + 1900, tm.tm_mon + 1,
                  tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    cached_second = secs;
  }
  out.push_back('"');
  out.append(cached, 20);
  char tail[5] = {static_cast<char>('0' + ms / 100), static_cast<char>('0' + ms / 10 % 10),
                  static_cast<char>('0' + ms % 10), 'Z', '"'};
  out.append(tail, 5);
}

} // namespace

void access_log::write(const access_record &r) {
  if (!file_) return;
  // One line per request, built in a buffer this thread keeps (its capacity stays, so a request
  // allocates nothing here once the longest line has been seen). The keys in the documented order.
  thread_local std::string line;
  line.assign("{\"time\":");
  put_time(line);
  field(line, ",\"command_id\":", command_id_);
  field(line, ",\"skill\":", skill_);
  field(line, ",\"profile\":", r.profile);
  field(line, ",\"method\":", r.method);
  field(line, ",\"scheme\":", r.scheme);
  field(line, ",\"host\":", r.host);
  field(line, ",\"port\":", std::uint64_t{r.port});
  field(line, ",\"path\":", r.target);
  field(line, ",\"rule\":", r.rule);
  field(line, ",\"decision\":", r.decision);
  field(line, ",\"reason\":", r.reason);
  field(line, ",\"status\":", std::uint64_t{r.status});
  field(line, ",\"bytes_in\":", r.bytes_in);
  field(line, ",\"bytes_out\":", r.bytes_out);
  field(line, ",\"duration_seconds\":", r.duration_seconds);
  field(line, ",\"entry\":", r.entry);
  field(line, ",\"agent\":", r.agent);
  field(line, ",\"client\":", r.client);
  field(line, ",\"role\":", r.role);
  field(line, ",\"protocol\":", r.protocol);
  if (r.protocol == "websocket") {
    field(line, ",\"ws_messages_in\":", r.ws_messages_in);
    field(line, ",\"ws_messages_out\":", r.ws_messages_out);
    if (r.ws_close_code >= 0) field(line, ",\"ws_close_code\":", static_cast<std::uint64_t>(r.ws_close_code));
  }
  if (r.protocol == "grpc" && r.grpc_status >= 0) {
    field(line, ",\"grpc_status\":", static_cast<std::uint64_t>(r.grpc_status));
  }
  if (r.protocol == "ssh") {
    field(line, ",\"ssh_user\":", r.ssh_user);
    field(line, ",\"ssh_command\":", r.ssh_command);
    if (r.exit_status >= 0) field(line, ",\"exit_status\":", static_cast<std::uint64_t>(r.exit_status));
  }
  if (!r.approval.empty()) {
    field(line, ",\"approval\":", r.approval);
    if (!r.decided_by.empty()) field(line, ",\"decided_by\":", r.decided_by);
  }
  line.append("}\n");
  std::lock_guard lock(mutex_);
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

} // namespace sluice::metrics
