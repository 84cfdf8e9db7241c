#pragma once
// gRPC request bodies taken apart for the scanner (docs/policy.md, "What leaves"): a body is a
// sequence of messages, each a compressed flag, a 4-byte length and the message (protobuf wire
// format). The raw body is scanned as it streams like any other; this hands over, in addition,
// each length-delimited field of every whole message (strings, bytes, nested messages) on its own,
// so that a secret that fills a field is seen as a value of its own and not after its length's
// byte (which may be a letter, and would hide a rule's leading word boundary). No I/O.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace sluice::scan {

// Calls `field` with each length-delimited field of `message` (protobuf wire format), and, for a
// field whose bytes are themselves a well-formed message, with its fields in turn (at most
// `depth` levels). Returns false when `message` is not well-formed (what was handed over stands).
bool protobuf_fields(std::string_view message, const std::function<void(std::string_view)> &field, int depth = 16);

class grpc_messages {
public:
  // Messages longer than `max_message` bytes are not gathered (their bytes are still scanned as
  // the body).
  explicit grpc_messages(std::size_t max_message) : max_(max_message) {}
  // The body's next piece: each whole message it completes goes to `message`, with its
  // compressed flag (grpc-encoding then says how).
  void feed(std::string_view piece, const std::function<void(std::string_view, bool)> &message);

private:
  std::size_t max_;
  unsigned char prefix_[5] = {};
  std::size_t have_prefix_ = 0;
  std::uint64_t left_ = 0;   // bytes of the current message still to come
  bool keep_ = false;        // the current message is gathered (within max_)
  std::string message_;
};

} // namespace sluice::scan
