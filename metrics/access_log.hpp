#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>

namespace sluice::metrics {

// One request as the access log records it (docs/metrics.md).
struct access_record {
  std::string_view profile;
  std::string_view method, scheme, host;
  unsigned port = 0;
  std::string_view target; // path and query, already passed through redact_target (live_stats.hpp)
  std::string_view rule, reason;
  std::string_view decision; // allow, deny, would_deny (report mode), error
  unsigned status = 0;
  std::uint64_t bytes_in = 0, bytes_out = 0;
  double duration_seconds = 0;
  std::string_view entry = "proxy"; // how the connection came: "proxy" (proxy port) or "capture"
  std::string_view agent;           // serve: the agent listener it came to ([listen.agents]), else empty
  std::string_view client, role;    // serve: the [clients] name it identified as and its role
  std::string_view protocol = "http/1.1"; // "http/1.1", "websocket" (after its 101), "h2", "grpc", "ssh", "tcp"
  // A WebSocket: data messages each way (in: from the client) and the first close code seen
  // (-1: none; the connection ended without a close frame).
  std::uint64_t ws_messages_in = 0, ws_messages_out = 0;
  int ws_close_code = -1;
  int grpc_status = -1; // a gRPC call: the grpc-status it ended with, where one was seen (-1: none)
  // Git over SSH (protocol "ssh"): the user the client logged in as, its request as sent, and the
  // exit status the server's command ended with (-1: none).
  std::string_view ssh_user, ssh_command;
  int exit_status = -1;
  // A request held for a person ([approvals]): the decision ("once", "run", "deny", "timeout") and
  // where it was made ("page", "cli"; empty for a timeout).
  std::string_view approval, decided_by;
  // The client's address and port as sluice's listener saw them (empty: not known).
  std::string_view source_ip;
  unsigned source_port = 0;
  // What the scanner found in what the command sent ([scan]): the rule's id and where (a field, a
  // query parameter, the body at an offset); never the value.
  std::string_view scan_rule, scan_location;
  // A relayed TCP connection (protocol "tcp"): who closed it, and a database's protocol, user and
  // database name where its cleartext start showed them.
  std::string_view closed_by, db_protocol, db_user, db_name;
};

// How the log encodes a record ([log] format, exec --access-log-format): sluice's JSON line
// (docs/metrics.md), or an OCSF 1.x event (HTTP Activity or Network Activity) per line.
enum class log_format { json, ocsf };

// Appends sluice's JSON line for `r` written at `now` (one object, no newline): the access log's
// own encoding, and the `unmapped` part of its OCSF one.
void encode_json(std::string &line, const access_record &r, std::chrono::system_clock::time_point now,
                 std::string_view command_id, std::string_view skill);

// Writes one JSON object per line to a file or stderr. Thread-safe; a failed write is counted, never
// thrown into the data path.
class access_log {
public:
  // `destination`: "" (off), "-" (stderr) or a path opened for append.
  // `skill`: the exec skill (empty for serve), carried in every line with the command id.
  access_log(const std::string &destination, std::string command_id, std::string skill,
             bool redact_query, log_format format = log_format::json);
  ~access_log();
  access_log(const access_log &) = delete;
  access_log &operator=(const access_log &) = delete;

  bool enabled() const { return file_ != nullptr; }
  // Whether the query of a logged target is replaced ([log] redact_query): the caller redacts once
  // (redact_target) for the log and the live page both.
  bool redact_query() const { return redact_query_; }
  void write(const access_record &r);

private:
  std::FILE *file_ = nullptr;
  bool owned_ = false;
  std::string command_id_;
  std::string skill_;
  bool redact_query_;
  log_format format_;
  std::mutex mutex_;
};

} // namespace sluice::metrics
