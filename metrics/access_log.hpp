#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
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
  // A POST on an MCP route: its JSON-RPC methods and the tools it called, comma-joined.
  std::string_view mcp_method, mcp_tool;
  std::uint64_t mcp_refused = 0; // a WebSocket on an MCP route: its messages sluice refused
};

// How the log encodes a record ([log] format, exec --access-log-format): sluice's JSON line
// (docs/metrics.md), or an OCSF 1.x event (HTTP Activity or Network Activity) per line.
enum class log_format { json, ocsf };

// Appends sluice's JSON line for `r` written at `now` (one object, no newline): the access log's
// own encoding, and the `unmapped` part of its OCSF one.
void encode_json(std::string &line, const access_record &r, std::chrono::system_clock::time_point now,
                 std::string_view command_id, std::string_view skill);

// The tamper-evident chain ([log] chain, signing_key, writer, checkpoint_interval; docs/metrics.md).
struct chain_options {
  bool on = true;
  std::string writer;          // names this process's chain among others in one file (replicas)
  std::string signing_key_pem; // PEM Ed25519 private key; empty: checkpoints carry no signature
  std::chrono::milliseconds checkpoint_interval{60'000};
};

class chain_signer;
class line_hasher;

// Writes one JSON object per line to a file or stderr. Thread-safe; a failed write is counted, never
// thrown into the data path. With the chain on, every line carries writer, seq and the SHA-256 of
// the line before it (prev_hash), all set under the mutex that orders the writes, and checkpoint
// lines sign the chain (metrics/audit_chain.hpp).
//
// Lines written on a thread that runs an event loop (one that called defer_flushes_here) go to the
// file together: the first line after a flush asks that loop for a flush after the work it has
// ready now, and every line written until then goes out in the same write(2). Elsewhere (stderr,
// other threads) each line is written at once. A line is never held longer than max_hold, nor
// more than flush_at bytes of them.
class access_log {
public:
  // Runs a function on this thread's event loop after what it has ready now (Asio's post).
  using flush_deferrer = std::function<void(std::function<void()>)>;
  // Sets (or, with an empty function, clears) the deferrer of the calling thread.
  static void defer_flushes_here(flush_deferrer post);
  static constexpr std::size_t flush_at = 64 * 1024;
  static constexpr std::chrono::milliseconds max_hold{100};

  // `destination`: "" (off), "-" (stderr) or a path opened for append.
  // `skill`: the exec skill (empty for serve), carried in every line with the command id.
  // Throws std::runtime_error naming the file or the key when either is unusable.
  access_log(const std::string &destination, std::string command_id, std::string skill,
             bool redact_query, log_format format = log_format::json, chain_options chain = {.on = false});
  ~access_log(); // close()
  access_log(const access_log &) = delete;
  access_log &operator=(const access_log &) = delete;

  bool enabled() const { return file_ != nullptr; }
  // Whether the query of a logged target is replaced ([log] redact_query): the caller redacts once
  // (redact_target) for the log and the live page both.
  bool redact_query() const { return redact_query_; }
  void write(const access_record &r);

  // Rotation (serve's SIGHUP after `mv log log.1`): a checkpoint closes the old file's part of the
  // chain, then the path is opened again; the chain goes on in the new file. A file that cannot be
  // opened leaves the old one in use; returns what went wrong (empty: reopened, or not a file).
  std::string reopen();
  // A checkpoint when the interval has passed and records were written since the last one (serve
  // calls it every second; write() checks it too).
  void checkpoint_if_due();
  // Writes what is held now (the gateway calls it once its workers have stopped).
  void flush();
  // The closing checkpoint ("final": true) when records were written; later writes are dropped.
  // Idempotent.
  void close();

private:
  void put_chain_locked(std::string &line);
  void write_checkpoint_locked(bool final);
  void emit_locked(std::string_view line);
  void flush_locked();

  std::FILE *file_ = nullptr;
  bool owned_ = false;
  std::string path_;
  std::string command_id_;
  std::string skill_;
  bool redact_query_;
  log_format format_;
  chain_options chain_;
  std::unique_ptr<chain_signer> signer_;
  std::unique_ptr<line_hasher> hasher_;
  std::uint64_t seq_ = 0;                // the last seq written
  std::uint64_t checkpointed_seq_ = 0;   // the seq of the last checkpoint
  std::string last_hash_;                // SHA-256 hex of the last line written
  std::chrono::steady_clock::time_point last_checkpoint_;
  bool closed_ = false;
  std::string held_;                         // lines not yet written to file_
  std::chrono::steady_clock::time_point held_since_;
  bool flush_asked_ = false;                 // a deferred flush is on some event loop
  std::mutex mutex_;
};

} // namespace sluice::metrics
