#include "metrics/access_log.hpp"

#include "metrics/audit_chain.hpp"
#include "metrics/json_text.hpp"
#include "metrics/ocsf.hpp"

#include <chrono>
#include <stdexcept>

namespace sluice::metrics {

namespace {

// The log keeps its own buffer of whole lines (held_): the stream has none, so that a batch of lines
// leaves in one write() and a reader of the file sees the lines a batch at a time, not cut at
// stdio's 4 KiB. (A reader may still catch a write half done: the file's last line is whole only
// once it ends in a newline.)
std::FILE *open_for_appending(const std::string &path) {
  std::FILE *f = std::fopen(path.c_str(), "ae");
  if (f) std::setvbuf(f, nullptr, _IONBF, 0);
  return f;
}

} // namespace

access_log::access_log(const std::string &destination, std::string command_id, std::string skill,
                       bool redact_query, log_format format, chain_options chain)
    : path_(destination), command_id_(std::move(command_id)), skill_(std::move(skill)), redact_query_(redact_query),
      format_(format), chain_(std::move(chain)) {
  if (destination.empty()) {
    return;
  }
  if (chain_.on) {
    hasher_ = std::make_unique<line_hasher>();
    last_hash_ = chain_genesis;
    last_checkpoint_ = std::chrono::steady_clock::now();
    if (!chain_.signing_key_pem.empty()) {
      try {
        signer_ = chain_signer::from_text(chain_.signing_key_pem);
      } catch (const std::exception &e) {
        throw std::runtime_error(std::string("[log] signing_key: ") + e.what());
      }
    }
  }
  if (destination == "-") {
    file_ = stderr;
    return;
  }
  file_ = open_for_appending(destination);
  if (!file_) {
    throw std::runtime_error("cannot open access log '" + destination +
                             "' for appending; check the directory exists and is writable");
  }
  owned_ = true;
}

access_log::~access_log() {
  close();
  if (owned_) std::fclose(file_);
}

namespace {
thread_local access_log::flush_deferrer this_thread_deferrer;
} // namespace

void access_log::defer_flushes_here(flush_deferrer post) { this_thread_deferrer = std::move(post); }

// A line is held when this thread's event loop can flush it after the work it has ready now: with
// many requests ready at once (an h2 connection's streams, many keep-alive connections), their
// lines go out in one write instead of one each, and the last one within microseconds.
void access_log::emit_locked(std::string_view line) {
  auto now = std::chrono::steady_clock::now();
  if (held_.empty()) held_since_ = now;
  held_.append(line);
  if (file_ == stderr || !this_thread_deferrer || held_.size() >= flush_at || now - held_since_ >= max_hold) {
    flush_locked();
    return;
  }
  if (!flush_asked_) {
    flush_asked_ = true;
    this_thread_deferrer([this] { flush(); });
  }
}

void access_log::flush_locked() {
  if (held_.empty()) return;
  std::fwrite(held_.data(), 1, held_.size(), file_);
  std::fflush(file_);
  held_.clear();
  if (held_.capacity() > 4 * flush_at) held_.shrink_to_fit();
}

void access_log::flush() {
  if (!file_) return;
  std::lock_guard lock(mutex_);
  flush_asked_ = false;
  flush_locked();
}

// The chain's fields go in under the mutex, where the order of lines is decided: writer, seq and
// prev_hash close sluice's JSON object (the OCSF event's unmapped part), and an OCSF event also
// carries seq as metadata.sequence. Then the line's own hash is the next line's prev_hash.
void access_log::put_chain_locked(std::string &line) {
  using namespace json_text;
  ++seq_;
  thread_local std::string tail;
  tail.clear();
  field(tail, ",\"writer\":", chain_.writer);
  field(tail, ",\"seq\":", seq_);
  field(tail, ",\"prev_hash\":", last_hash_);
  // `line` ends with the JSON object's '}' (OCSF: the unmapped object's, then the event's).
  line.insert(line.size() - (format_ == log_format::ocsf ? 2 : 1), tail);
  if (format_ == log_format::ocsf) {
    static constexpr std::string_view head = "{\"metadata\":{";
    tail.clear();
    field(tail, "\"sequence\":", seq_);
    tail.push_back(',');
    line.insert(head.size(), tail);
  }
  last_hash_ = hasher_->hex(line);
}

void access_log::write_checkpoint_locked(bool final) {
  std::string time_text;
  json_text::put_time(time_text, std::chrono::system_clock::now());
  ++seq_;
  std::string line = checkpoint_line(time_text, chain_.writer, seq_, last_hash_, final, signer_.get());
  last_hash_ = hasher_->hex(line);
  checkpointed_seq_ = seq_;
  last_checkpoint_ = std::chrono::steady_clock::now();
  line.push_back('\n');
  emit_locked(line);
}

void access_log::checkpoint_if_due() {
  if (!file_) return;
  std::lock_guard lock(mutex_);
  flush_locked(); // a second at most, whatever became of a deferred flush
  if (!chain_.on || closed_ || seq_ == checkpointed_seq_) return;
  if (std::chrono::steady_clock::now() - last_checkpoint_ < chain_.checkpoint_interval) return;
  write_checkpoint_locked(false);
}

std::string access_log::reopen() {
  if (!owned_) return {};
  std::lock_guard lock(mutex_);
  if (closed_) return {};
  std::FILE *next = open_for_appending(path_);
  if (!next) return "cannot open access log '" + path_ + "' again; still writing to the file it was";
  // The old file's part of the chain ends signed; the new file's first line links to it.
  if (chain_.on && seq_ != checkpointed_seq_) write_checkpoint_locked(false);
  flush_locked(); // every line of the old file's part goes to the old file
  std::fclose(file_);
  file_ = next;
  return {};
}

void access_log::close() {
  if (!file_) return;
  std::lock_guard lock(mutex_);
  if (closed_) return;
  closed_ = true;
  if (chain_.on && seq_ > 0) write_checkpoint_locked(true);
  flush_locked();
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
  if (!r.mcp_method.empty()) field(line, ",\"mcp_method\":", r.mcp_method);
  if (!r.mcp_tool.empty()) field(line, ",\"mcp_tool\":", r.mcp_tool);
  if (r.mcp_refused) field(line, ",\"mcp_refused\":", r.mcp_refused);
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
  std::lock_guard lock(mutex_);
  if (closed_) return;
  if (!chain_.on) {
    line.push_back('\n');
    emit_locked(line);
    return;
  }
  put_chain_locked(line);
  line.push_back('\n');
  emit_locked(line);
  if (std::chrono::steady_clock::now() - last_checkpoint_ >= chain_.checkpoint_interval) {
    write_checkpoint_locked(false);
  }
}

} // namespace sluice::metrics
