#pragma once
// WebSocket frames (RFC 6455 section 5) as they pass through the gateway: headers only. No I/O.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace sluice::gateway {

// Where a data message's payload goes, unmasked, before it is forwarded ([scan]): returns a reason
// to stop the stream ("" to go on). A message compressed by permessage-deflate (RFC 7692) is
// handed over inflated.
class websocket_payload_sink {
public:
  virtual std::string_view piece(std::string_view bytes, bool message_end) = 0;

protected:
  ~websocket_payload_sink() = default;
};

// Reads one direction of a WebSocket connection a buffer at a time, looking at frame headers
// only: payload bytes are counted and skipped, never copied or unmasked (but a close frame's
// two-byte code). Holds the protocol's rules a relay must: frames from the client are masked and
// those from the server are not, control frames are whole and short, continuations belong to a
// message, reserved bits only where an extension was negotiated; and the gateway's limit on one
// message's size.
class websocket_scanner {
public:
  // `from_client`: the client-to-server direction. `max_message`: payload bytes one data message
  // may have across its fragments (0: no limit). `rsv1`: permessage-deflate was negotiated.
  websocket_scanner(bool from_client, std::uint64_t max_message, bool rsv1);
  ~websocket_scanner();
  websocket_scanner(const websocket_scanner &) = delete;
  websocket_scanner &operator=(const websocket_scanner &) = delete;

  // Scans the next `n` bytes of the stream. Returns how many may be forwarded: all of them, or,
  // where a frame breaks a rule, the bytes before that frame's header (error() then says why;
  // nothing more may be scanned).
  std::size_t scan(const unsigned char *data, std::size_t n);
  // Data messages' payload goes to `sink` (unmasked, and inflated where the message is
  // compressed) before it may be forwarded; a reason it returns stops the stream as a broken rule
  // does (error() is that reason), and the piece it was given is not forwarded. A compressed
  // message that does not inflate stops it as websocket_protocol_error, one whose inflated size
  // passes the message limit as websocket_message_too_large.
  void set_sink(websocket_payload_sink *sink) { sink_ = sink; }
  // scan() returns at the end of each data message (just past its last frame), so that a caller
  // holding messages back until they are judged can part them from what follows in its buffer.
  void pause_at_message_end(bool on) { pause_ = on; }
  // At a frame boundary outside any data message: bytes may be inserted into the stream here (a
  // whole frame of sluice's own), and nothing scanned so far belongs to an unfinished message.
  bool at_rest() const { return header_have_ == 0 && !in_payload_ && !in_message_; }

  // "" while the stream is sound; "websocket_message_too_large" or "websocket_protocol_error".
  std::string_view error() const { return error_; }
  // The close code a well-formed close frame carries (1005 for one without a code), -1 before one.
  int close_code() const { return close_code_; }
  // A close frame has passed whole: what follows on the connection is its end.
  bool closed() const { return closed_; }
  std::uint64_t messages() const { return messages_; }      // complete data messages
  std::uint64_t payload_bytes() const { return payload_; } // of every frame, control frames too

private:
  // Parses the header in header_ once complete; false where a rule is broken.
  bool begin_frame();
  // The current frame's payload has passed. True where it ended a data message and scan() pauses
  // there (pause_at_message_end).
  bool end_frame();

  bool from_client_;
  std::uint64_t max_message_;
  bool rsv1_;
  std::string_view error_;
  unsigned char header_[14] = {};
  std::size_t header_have_ = 0;    // bytes of the current header read so far
  std::uint64_t remaining_ = 0;    // payload bytes of the current frame still to pass
  bool in_payload_ = false;
  unsigned char opcode_ = 0;       // of the current frame
  bool fin_ = false;
  unsigned char mask_[4] = {};
  std::uint64_t payload_offset_ = 0; // into the current frame's payload (a close code's bytes)
  unsigned char close_bytes_[2] = {};
  bool in_message_ = false;        // a fragmented data message has begun
  std::uint64_t message_size_ = 0; // payload bytes of the data message so far
  int close_code_ = -1;
  bool closed_ = false;
  std::uint64_t messages_ = 0;
  std::uint64_t payload_ = 0;
  websocket_payload_sink *sink_ = nullptr;
  bool pause_ = false; // pause_at_message_end
  bool compressed_ = false; // the current message has RSV1 (permessage-deflate): inflated for sink_
  // The direction's inflater, made at its first compressed message and kept: permessage-deflate's
  // window runs on from message to message (context takeover).
  struct inflater;
  std::unique_ptr<inflater> inflater_;
  // Hands a data frame's payload bytes data[0, n) (masked as they came) to sink_; false: stop.
  bool to_sink(const unsigned char *data, std::size_t n, bool message_end);
  // Inflates a compressed message's next payload bytes into sink_: a reason to stop, or "".
  std::string_view inflate_to_sink(std::string_view compressed, bool message_end);
};

// A text frame from the server's side (unmasked, uncompressed: RFC 7692 lets a message go
// uncompressed whatever was negotiated) carrying `payload` whole.
std::string websocket_text_frame(std::string_view payload);

// A close frame with `code` and a short reason (at most 123 bytes), masked with `mask` when it
// goes to the server (every client frame is masked). Writes at most 129 bytes into `out`; returns
// how many.
std::size_t websocket_close_frame(unsigned code, std::string_view reason, bool masked,
                                  const unsigned char mask[4], unsigned char *out);

} // namespace sluice::gateway
