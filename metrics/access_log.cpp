#include "metrics/access_log.hpp"

#include "metrics/json_text.hpp"
#include "metrics/ocsf.hpp"

#include <chrono>
#include <stdexcept>

namespace sluice::metrics {

access_log::access_log(const std::string &destination, std::string command_id, std::string skill,
                       bool redact_query, log_format format)
    : command_id_(std::move(command_id)), skill_(std::move(skill)), redact_query_(redact_query), format_(format) {
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

// The fields only some records have: WebSocket, gRPC and SSH details, a scan finding, an approval.
void append_detail_fields(std::string &line, const access_record &r) {
  using namespace json_text;
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
  if (r.protocol == "tcp") {
    if (!r.closed_by.empty()) field(line, ",\"closed_by\":", r.closed_by);
    if (!r.db_protocol.empty()) {
      field(line, ",\"db_protocol\":", r.db_protocol);
      field(line, ",\"db_user\":", r.db_user);
      field(line, ",\"db_name\":", r.db_name);
    }
  }
  if (!r.scan_rule.empty()) {
    field(line, ",\"scan_rule\":", r.scan_rule);
    field(line, ",\"scan_location\":", r.scan_location);
  }
  if (!r.approval.empty()) field(line, ",\"approval\":", r.approval);
  // Who decided, where not the file: a person's channel (cli, page, webhook) or the decider.
  if (!r.decided_by.empty()) field(line, ",\"decided_by\":", r.decided_by);
}

} // namespace

// sluice's own line (docs/metrics.md): the keys in the documented order.
void encode_json(std::string &line, const access_record &r, std::chrono::system_clock::time_point now,
                 std::string_view command_id, std::string_view skill) {
  using namespace json_text;
  line.append("{\"time\":");
  put_time(line, now);
  field(line, ",\"command_id\":", command_id);
  field(line, ",\"skill\":", skill);
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
  append_detail_fields(line, r);
  if (!r.source_ip.empty()) {
    field(line, ",\"source_ip\":", r.source_ip);
    field(line, ",\"source_port\":", std::uint64_t{r.source_port});
  }
  line.push_back('}');
}

void access_log::write(const access_record &r) {
  if (!file_) return;
  // One line per request, built in a buffer this thread keeps (its capacity stays, so a request
  // allocates nothing here once the longest line has been seen).
  thread_local std::string line;
  line.clear();
  auto now = std::chrono::system_clock::now();
  if (format_ == log_format::ocsf) {
    encode_ocsf(line, r, now, command_id_, skill_);
  } else {
    encode_json(line, r, now, command_id_, skill_);
  }
  line.push_back('\n');
  std::lock_guard lock(mutex_);
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

} // namespace sluice::metrics
