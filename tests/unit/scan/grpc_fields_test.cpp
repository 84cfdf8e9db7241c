// gRPC bodies taken apart for the scanner: each length-delimited field of each whole message, in
// any pieces; nested messages' fields; compressed, oversized and malformed messages left whole.
#include "scan/grpc_fields.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

using namespace sluice::scan;

namespace {

std::string varint(std::uint64_t v) {
  std::string out;
  do {
    unsigned char b = v & 0x7f;
    v >>= 7;
    out += static_cast<char>(b | (v ? 0x80 : 0));
  } while (v);
  return out;
}

std::string bytes_field(unsigned number, const std::string &value) {
  return varint(number << 3 | 2) + varint(value.size()) + value;
}

std::string grpc_frame(const std::string &message, bool compressed = false) {
  std::string out(1, compressed ? '\1' : '\0');
  for (int k = 3; k >= 0; --k) out += static_cast<char>((message.size() >> (8 * k)) & 0xff);
  return out + message;
}

// The fields of the uncompressed messages of `body` fed in pieces of `step`; `compressed` counts
// the compressed messages handed over whole.
std::vector<std::string> fields_of(const std::string &body, std::size_t step, std::size_t max = 1 << 20,
                                   std::vector<std::string> *compressed = nullptr) {
  std::vector<std::string> got;
  grpc_messages g(max);
  for (std::size_t at = 0; at < body.size(); at += step) {
    g.feed(std::string_view(body).substr(at, step), [&](std::string_view m, bool packed) {
      if (packed) {
        if (compressed) compressed->emplace_back(m);
        return;
      }
      protobuf_fields(m, [&](std::string_view f) { got.emplace_back(f); });
    });
  }
  return got;
}

} // namespace

TEST_CASE("each field of each message is handed over, in any pieces", "[scan][grpc]") {
  const std::string token(108, 'k'); // a length whose byte is a letter ('l')
  const std::string inner = bytes_field(1, "nested value");
  const std::string m1 = varint(1 << 3 | 0) + varint(300) + bytes_field(2, token) + varint(3 << 3 | 5) + "abcd" +
                         varint(4 << 3 | 1) + "12345678" + bytes_field(5, inner);
  const std::string m2 = bytes_field(1, "second message");
  const auto body = grpc_frame(m1) + grpc_frame("") + grpc_frame(m2);
  for (std::size_t step : {body.size(), std::size_t{1}, std::size_t{3}, std::size_t{64}}) {
    CAPTURE(step);
    REQUIRE(fields_of(body, step) == std::vector<std::string>{token, inner, "nested value", "second message"});
  }
}

TEST_CASE("compressed messages are handed over whole; oversized and malformed ones not taken apart",
          "[scan][grpc]") {
  const std::string m = bytes_field(1, "value");
  std::vector<std::string> compressed;
  REQUIRE(fields_of(grpc_frame("packed bytes", true) + grpc_frame(m), 7, 1 << 20, &compressed) ==
          std::vector<std::string>{"value"});
  REQUIRE(compressed == std::vector<std::string>{"packed bytes"});
  REQUIRE(fields_of(grpc_frame(m), 1, 4).empty());
  // A length past the end, a group, field number 0: nothing handed over from the bad part.
  REQUIRE(fields_of(grpc_frame(varint(1 << 3 | 2) + varint(50) + "short"), 1).empty());
  REQUIRE(fields_of(grpc_frame(varint(1 << 3 | 3)), 1).empty());
  REQUIRE(fields_of(grpc_frame(varint(0 << 3 | 2) + varint(1) + "x"), 1).empty());
  // A string that is not itself a message is handed over whole, never in pieces.
  REQUIRE(fields_of(grpc_frame(bytes_field(1, "hello world")), 5) == std::vector<std::string>{"hello world"});
}

TEST_CASE("protobuf_fields walks nested messages to a bounded depth", "[scan][grpc]") {
  std::string m = bytes_field(1, "deep");
  for (int i = 0; i < 40; ++i) m = bytes_field(1, m);
  std::size_t calls = 0;
  REQUIRE(protobuf_fields(m, [&](std::string_view) { ++calls; }, 16));
  REQUIRE(calls == 16);
}
