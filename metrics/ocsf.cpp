#include "metrics/ocsf.hpp"

#include "metrics/json_text.hpp"

#include <cmath>
#include <cstdint>

namespace sluice::metrics {

namespace {

using namespace json_text;

struct activity {
  int id;
  std::string_view name;
};

// HTTP Activity's activity_id is the method (4002: 1 Connect ... 9 Patch, 99 Other).
activity http_activity(std::string_view method) {
  static constexpr std::pair<std::string_view, activity> table[] = {
      {"CONNECT", {1, "Connect"}}, {"DELETE", {2, "Delete"}}, {"GET", {3, "Get"}},
      {"HEAD", {4, "Head"}},       {"OPTIONS", {5, "Options"}}, {"POST", {6, "Post"}},
      {"PUT", {7, "Put"}},         {"TRACE", {8, "Trace"}},     {"PATCH", {9, "Patch"}}};
  for (const auto &[m, a] : table) {
    if (m == method) return a;
  }
  return {99, "Other"};
}

// Network Activity (4001): a connection ended (the line is written when it does), was refused, or
// failed.
activity network_activity(std::string_view decision) {
  if (decision == "deny") return {5, "Refuse"};
  if (decision == "error") return {4, "Fail"};
  return {2, "Close"};
}

void field_int(std::string &out, std::string_view key, std::int64_t v) { field_signed(out, key, v); }

// The URL as judged: scheme, host, port and the target (already redacted as the JSON line's path).
void put_url(std::string &out, const access_record &r) {
  out.append("{");
  std::string url_string;
  if (!r.scheme.empty() && !r.host.empty()) {
    url_string.append(r.scheme).append("://").append(r.host);
    if (r.port) url_string.append(":").append(std::to_string(r.port));
  }
  std::string_view path = r.target, query;
  bool origin_form = !path.empty() && path.front() == '/';
  if (origin_form) {
    url_string.append(path);
    if (auto q = path.find('?'); q != std::string_view::npos) {
      query = path.substr(q + 1);
      path = path.substr(0, q);
    }
  }
  bool first = true;
  auto sep = [&](std::string_view key) -> std::string {
    std::string k = first ? "\"" : ",\"";
    first = false;
    return k.append(key).append("\":");
  };
  if (!url_string.empty()) field(out, sep("url_string"), url_string);
  if (!r.scheme.empty()) field(out, sep("scheme"), r.scheme);
  if (!r.host.empty()) field(out, sep("hostname"), r.host);
  if (r.port) field(out, sep("port"), std::uint64_t{r.port});
  // The url object needs url_string or path; a request with neither host nor target keeps "/".
  if (origin_form) {
    field(out, sep("path"), path);
    if (!query.empty()) field(out, sep("query_string"), query);
  } else if (url_string.empty()) {
    field(out, sep("path"), std::string_view("/"));
  }
  out.push_back('}');
}

void put_groups(std::string &out, std::string_view key, std::string_view name) {
  out.append(key);
  out.append("[{\"name\":");
  put_string(out, name);
  out.append("}]");
}

} // namespace

void encode_ocsf(std::string &out, const access_record &r, std::chrono::system_clock::time_point now,
                 std::string_view command_id, std::string_view skill) {
  const bool http = r.protocol != "ssh" && r.method != "-" && !r.method.empty() && r.status != 0;
  const int class_uid = http ? 4002 : 4001;
  const std::string_view class_name = http ? "HTTP Activity" : "Network Activity";
  const activity act = http ? http_activity(r.method) : network_activity(r.decision);
  const bool allowed = r.decision == "allow" || r.decision == "would_deny";
  const bool approved = r.decision == "allow" && (r.approval == "once" || r.approval == "run" || r.approval == "always");

  // The security control's verdict: what the policy decided, and what became of the request.
  int action_id = 1, disposition_id = 1, severity_id = 1;
  std::string_view action = "Allowed", disposition = "Allowed", severity = "Informational";
  if (r.decision == "deny") {
    action_id = 2, action = "Denied", disposition_id = 2, disposition = "Blocked";
  } else if (r.decision == "would_deny") {
    action_id = 3, action = "Observed", disposition_id = 17, disposition = "Logged";
  } else if (r.decision == "error") {
    disposition_id = 27, disposition = "Error";
  } else if (approved) {
    disposition_id = 8, disposition = "Approved";
  }
  if (r.decision != "allow") severity_id = 2, severity = "Low";

  auto ms_now = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  double d = r.duration_seconds > 0 && r.duration_seconds < 1e9 ? r.duration_seconds : 0;
  auto duration_ms = static_cast<std::int64_t>(std::llround(d * 1000));

  out.append("{\"metadata\":{\"version\":");
  put_string(out, ocsf_schema_version);
  out.append(",\"product\":{\"name\":\"sluice\",\"vendor_name\":\"sluice\",\"version\":");
  put_string(out, SLUICE_VERSION);
  out.append("},\"profiles\":[\"security_control\"],\"log_name\":\"access\"");
  field(out, ",\"correlation_uid\":", command_id);
  out.push_back('}');
  field_int(out, ",\"time\":", ms_now);
  field_int(out, ",\"start_time\":", ms_now - duration_ms);
  field_int(out, ",\"end_time\":", ms_now);
  field_int(out, ",\"duration\":", duration_ms);
  field_int(out, ",\"timezone_offset\":", 0);
  field_int(out, ",\"category_uid\":", 4);
  field(out, ",\"category_name\":", std::string_view("Network Activity"));
  field_int(out, ",\"class_uid\":", class_uid);
  field(out, ",\"class_name\":", class_name);
  field_int(out, ",\"activity_id\":", act.id);
  field(out, ",\"activity_name\":", act.id == 99 ? r.method : act.name);
  field_int(out, ",\"type_uid\":", static_cast<std::int64_t>(class_uid) * 100 + act.id);
  std::string type_name(class_name);
  type_name.append(": ").append(act.id == 99 ? r.method : act.name);
  field(out, ",\"type_name\":", type_name);
  field_int(out, ",\"severity_id\":", severity_id);
  field(out, ",\"severity\":", severity);
  field_int(out, ",\"status_id\":", allowed ? 1 : 2);
  field(out, ",\"status\":", allowed ? std::string_view("Success") : std::string_view("Failure"));
  field(out, ",\"status_code\":", r.reason);
  field_int(out, ",\"action_id\":", action_id);
  field(out, ",\"action\":", action);
  field_int(out, ",\"disposition_id\":", disposition_id);
  field(out, ",\"disposition\":", disposition);
  out.append(",\"is_alert\":false");
  if (!r.rule.empty()) {
    out.append(",\"firewall_rule\":{\"name\":");
    put_string(out, r.rule);
    out.append(",\"uid\":");
    put_string(out, r.rule);
    out.push_back('}');
  }

  std::string message(r.decision);
  message.append(" ");
  if (http) {
    message.append(r.method).append(" ");
  } else if (!r.protocol.empty()) {
    message.append(r.protocol).append(" ");
  }
  message.append(r.host.empty() ? std::string_view("-") : r.host);
  if (r.port) message.append(":").append(std::to_string(r.port));
  if (http && !r.target.empty() && r.target.front() == '/') message.append(r.target);
  message.append(" (").append(r.reason).append(")");
  field(out, ",\"message\":", message);

  // Who: the client's address as sluice saw it, and for serve the client it identified as.
  if (!r.source_ip.empty() || !r.client.empty()) {
    out.append(",\"src_endpoint\":{");
    bool first = true;
    if (!r.source_ip.empty()) {
      field(out, "\"ip\":", r.source_ip);
      field(out, ",\"port\":", std::uint64_t{r.source_port});
      first = false;
    }
    if (!r.client.empty()) field(out, first ? "\"name\":" : ",\"name\":", r.client);
    out.push_back('}');
  }
  if (!r.client.empty()) {
    out.append(",\"actor\":{\"user\":{\"name\":");
    put_string(out, r.client);
    if (!r.role.empty()) put_groups(out, ",\"groups\":", r.role);
    out.append("}}");
  }
  // Where to: the destination as judged; a connection that ended before one was known went no
  // further than sluice itself.
  if (!r.host.empty() || r.port) {
    out.append(",\"dst_endpoint\":{");
    if (!r.host.empty()) field(out, "\"hostname\":", r.host);
    if (r.port) field(out, r.host.empty() ? "\"port\":" : ",\"port\":", std::uint64_t{r.port});
    out.push_back('}');
  } else {
    out.append(",\"dst_endpoint\":{\"svc_name\":\"sluice\"}");
  }
  out.append(",\"proxy\":{\"name\":\"sluice\"}");
  out.append(",\"connection_info\":{\"direction_id\":2,\"direction\":\"Outbound\",\"protocol_name\":\"tcp\","
             "\"protocol_num\":6}");
  field(out, ",\"app_protocol_name\":", r.protocol);
  // bytes_in in OCSF flows from the destination to the source: what sluice sent the client.
  out.append(",\"traffic\":{");
  field(out, "\"bytes_in\":", r.bytes_out);
  field(out, ",\"bytes_out\":", r.bytes_in);
  field(out, ",\"bytes\":", r.bytes_in + r.bytes_out);
  out.push_back('}');
  if (http) {
    out.append(",\"http_request\":{");
    field(out, "\"http_method\":", r.method);
    field(out, ",\"version\":",
          r.protocol == "h2" || r.protocol == "grpc" ? std::string_view("2") : std::string_view("1.1"));
    out.append(",\"url\":");
    put_url(out, r);
    out.push_back('}');
    out.append(",\"http_response\":{");
    field(out, "\"code\":", std::uint64_t{r.status});
    out.push_back('}');
    field(out, ",\"http_status\":", std::uint64_t{r.status});
  } else {
    out.append(",\"url\":");
    put_url(out, r);
  }
  // What a search starts from: the destination's name and the client's address.
  out.append(",\"observables\":[");
  bool any = false;
  if (!r.host.empty()) {
    out.append("{\"name\":\"dst_endpoint.hostname\",\"type_id\":1,\"type\":\"Hostname\"");
    field(out, ",\"value\":", r.host);
    out.push_back('}');
    any = true;
  }
  if (!r.source_ip.empty()) {
    if (any) out.push_back(',');
    out.append("{\"name\":\"src_endpoint.ip\",\"type_id\":2,\"type\":\"IP Address\"");
    field(out, ",\"value\":", r.source_ip);
    out.push_back('}');
  }
  out.push_back(']');
  // sluice's own record: its JSON line as is (docs/metrics.md), every field under its own name.
  out.append(",\"unmapped\":");
  encode_json(out, r, now, command_id, skill);
  out.push_back('}');
}

} // namespace sluice::metrics
