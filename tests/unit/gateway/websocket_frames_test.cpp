#include "gateway/websocket/frames.hpp"

#include <boost/beast/zlib/deflate_stream.hpp>
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

using namespace sluice::gateway;

namespace {

// One frame as the wire carries it: FIN, opcode, the length in its shortest form, a mask for
// client frames, the payload masked with it.
std::vector<unsigned char> frame(unsigned char opcode, std::string payload, bool masked, bool fin = true,
                                 unsigned char rsv = 0) {
  std::vector<unsigned char> out;
  out.push_back(static_cast<unsigned char>((fin ? 0x80 : 0) | rsv | opcode));
  const unsigned char m = masked ? 0x80 : 0;
  auto n = payload.size();
  if (n < 126) {
    out.push_back(static_cast<unsigned char>(m | n));
  } else if (n < 65536) {
    out.push_back(m | 126);
    out.push_back(static_cast<unsigned char>(n >> 8));
    out.push_back(static_cast<unsigned char>(n));
  } else {
    out.push_back(m | 127);
    for (int k = 7; k >= 0; --k) out.push_back(static_cast<unsigned char>(std::uint64_t(n) >> (8 * k)));
  }
  const unsigned char key[4] = {0x12, 0x34, 0x56, 0x78};
  if (masked) out.insert(out.end(), key, key + 4);
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(static_cast<unsigned char>(payload[i]) ^ (masked ? key[i % 4] : 0));
  }
  return out;
}

std::vector<unsigned char> operator+(std::vector<unsigned char> a, const std::vector<unsigned char> &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Feeds `wire` to the scanner in pieces of `step` bytes; returns how many it let through.
std::size_t feed(websocket_scanner &s, const std::vector<unsigned char> &wire, std::size_t step) {
  std::size_t passed = 0;
  for (std::size_t at = 0; at < wire.size(); at += step) {
    auto n = std::min(step, wire.size() - at);
    auto ok = s.scan(wire.data() + at, n);
    passed += ok;
    if (ok < n) break;
  }
  return passed;
}

// One direction's permessage-deflate compressor (RFC 7692): each message flushed with a sync
// flush, its last four bytes (00 00 ff ff) taken off, the window kept for the next message.
struct deflater {
  boost::beast::zlib::deflate_stream ds;
  std::string message(std::string_view in) {
    std::string out(in.size() + in.size() / 10 + 1024, '\0');
    boost::beast::zlib::z_params zs;
    zs.next_in = in.data();
    zs.avail_in = in.size();
    zs.next_out = out.data();
    zs.avail_out = out.size();
    boost::system::error_code ec;
    ds.write(zs, boost::beast::zlib::Flush::sync, ec);
    REQUIRE(!ec);
    out.resize(zs.total_out);
    REQUIRE(out.substr(out.size() - 4) == std::string("\0\0\xff\xff", 4));
    out.resize(out.size() - 4);
    return out;
  }
};

// Collects what the scanner hands over: each message's text once it ends.
struct collecting_sink : websocket_payload_sink {
  std::vector<std::string> messages;
  std::string current;
  std::string_view refuse_on; // a text that stops the stream once it is seen
  std::string_view piece(std::string_view bytes, bool message_end) override {
    current.append(bytes);
    if (!refuse_on.empty() && current.find(refuse_on) != std::string::npos) return "secret_detected";
    if (message_end) messages.push_back(std::exchange(current, {}));
    return "";
  }
};

} // namespace

TEST_CASE("frames pass whole, in any pieces, counted", "[gateway][websocket]") {
  std::string close_payload("\x03\xe8", 2);
  auto wire = frame(1, "hello", true) + frame(2, std::string(70000, 'x'), true) + frame(9, "ping", true) +
              frame(1, "frag", true, false) + frame(10, "", true) + frame(0, "ment", true, true) +
              frame(8, close_payload + "bye", true);
  for (std::size_t step : {std::size_t(1), std::size_t(2), std::size_t(3), std::size_t(7), std::size_t(4096),
                           wire.size()}) {
    INFO(step);
    websocket_scanner s(true, 0, false);
    CHECK(feed(s, wire, step) == wire.size());
    CHECK(s.error().empty());
    CHECK(s.messages() == 3);
    CHECK(s.close_code() == 1000);
    CHECK(s.closed());
  }
  websocket_scanner down(false, 0, false);
  auto server = frame(1, "hi", false) + frame(8, "", false);
  CHECK(feed(down, server, 1) == server.size());
  CHECK(down.close_code() == 1005); // a close without a code
  CHECK(down.messages() == 1);
}

TEST_CASE("a message over the limit stops before its frame", "[gateway][websocket]") {
  auto wire = frame(1, "small", true) + frame(2, std::string(2000, 'y'), true);
  websocket_scanner s(true, 1024, false);
  CHECK(feed(s, wire, wire.size()) == frame(1, "small", true).size());
  CHECK(s.error() == "websocket_message_too_large");
  CHECK(s.scan(wire.data(), 1) == 0); // nothing more after an error
  // Fragments add up: 600 + 600 is over 1024 at the second fragment's header.
  auto frags = frame(2, std::string(600, 'a'), true, false) + frame(0, std::string(600, 'b'), true);
  websocket_scanner f(true, 1024, false);
  CHECK(feed(f, frags, frags.size()) == frame(2, std::string(600, 'a'), true, false).size());
  CHECK(f.error() == "websocket_message_too_large");
  // A header split across reads: what came before it has gone, the rest of it does not.
  websocket_scanner g(true, 1024, false);
  CHECK(feed(g, frags, 5) == 615); // reads end at 605, 610, 615; the header is bytes 608-615
  CHECK(g.error() == "websocket_message_too_large");
  // Exactly the limit passes; control frames do not count.
  websocket_scanner e(true, 1024, false);
  auto exact = frame(2, std::string(1024, 'z'), true) + frame(9, std::string(125, 'p'), true);
  CHECK(feed(e, exact, 100) == exact.size());
  CHECK(e.error().empty());
}

TEST_CASE("frames that break RFC 6455 are refused", "[gateway][websocket]") {
  struct row {
    const char *what;
    std::vector<unsigned char> wire;
    bool from_client;
    bool rsv1;
  };
  std::vector<unsigned char> long_len = {0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4};
  const row rows[] = {
      {"unmasked client frame", frame(1, "x", false), true, false},
      {"masked server frame", frame(1, "x", true), false, false},
      {"continuation without a message", frame(0, "x", true), true, false},
      {"new message inside a fragmented one", frame(1, "a", true, false) + frame(1, "b", true), true, false},
      {"fragmented ping", frame(9, "x", true, false), true, false},
      {"control frame over 125 bytes", frame(9, std::string(126, 'p'), true), true, false},
      {"close with a one-byte payload", frame(8, "x", true), true, false},
      {"reserved opcode 3", frame(3, "x", true), true, false},
      {"reserved opcode 11", frame(11, "", true), true, false},
      {"RSV1 without permessage-deflate", frame(1, "x", true, true, 0x40), true, false},
      {"RSV2 with permessage-deflate", frame(1, "x", true, true, 0x20), true, true},
      {"64-bit length with its top bit set", long_len, true, false},
  };
  for (const auto &r : rows) {
    INFO(r.what);
    websocket_scanner s(r.from_client, 0, r.rsv1);
    feed(s, r.wire, r.wire.size());
    CHECK(s.error() == "websocket_protocol_error");
  }
  websocket_scanner deflate(true, 0, true);
  auto compressed = frame(1, "x", true, true, 0x40);
  CHECK(feed(deflate, compressed, 1) == compressed.size());
  CHECK(deflate.error().empty());
}

TEST_CASE("the close frame sluice sends", "[gateway][websocket]") {
  unsigned char out[140];
  const unsigned char mask[4] = {1, 2, 3, 4};
  auto n = websocket_close_frame(1009, "sluice: websocket_message_too_large", true, mask, out);
  websocket_scanner up(true, 0, false);
  CHECK(up.scan(out, n) == n);
  CHECK(up.close_code() == 1009);
  n = websocket_close_frame(1002, std::string(300, 'r'), false, mask, out);
  CHECK(n == 2 + 125);
  websocket_scanner down(false, 0, false);
  CHECK(down.scan(out, n) == n);
  CHECK(down.close_code() == 1002);
}

TEST_CASE("a compressed message is handed over inflated, the window kept across messages",
          "[gateway][websocket]") {
  deflater d;
  const std::string first = "the same words again and again: " + std::string(300, 'a');
  const std::string second = first + " and a token ghp_0123456789abcdefghijklmnopqrstuvwxyzAB";
  auto c1 = d.message(first), c2 = d.message(second);
  REQUIRE(c2.size() < second.size() / 2); // the second refers back into the first
  // The second message in two fragments (RSV1 on the first only), an uncompressed one between.
  auto wire = frame(1, c1, true, true, 0x40) + frame(1, "plain", true) +
              frame(1, c2.substr(0, 5), true, false, 0x40) + frame(0, c2.substr(5), true);
  for (std::size_t step : {wire.size(), std::size_t{1}, std::size_t{7}}) {
    websocket_scanner s(true, 0, true);
    collecting_sink sink;
    s.set_sink(&sink);
    REQUIRE(feed(s, wire, step) == wire.size());
    REQUIRE(s.error().empty());
    REQUIRE(sink.messages == std::vector<std::string>{first, "plain", second});
  }
}

TEST_CASE("a secret in a compressed message stops the stream before its piece goes", "[gateway][websocket]") {
  deflater d;
  auto c = d.message("hello ghp_0123456789abcdefghijklmnopqrstuvwxyzAB");
  auto wire = frame(1, c, true, true, 0x40);
  websocket_scanner s(true, 0, true);
  collecting_sink sink;
  sink.refuse_on = "ghp_";
  s.set_sink(&sink);
  REQUIRE(feed(s, wire, wire.size()) < wire.size());
  REQUIRE(s.error() == "secret_detected");
}

TEST_CASE("a compressed message that does not inflate, or inflates past the limit, is refused",
          "[gateway][websocket]") {
  SECTION("not DEFLATE") {
    auto wire = frame(2, std::string("\xff\xff\xff\xff\xff\xff", 6), true, true, 0x40);
    websocket_scanner s(true, 0, true);
    collecting_sink sink;
    s.set_sink(&sink);
    REQUIRE(feed(s, wire, 3) < wire.size());
    REQUIRE(s.error() == "websocket_protocol_error");
  }
  SECTION("a small message that inflates to more than the limit") {
    deflater d;
    auto c = d.message(std::string(1 << 20, '\0'));
    REQUIRE(c.size() < 4096);
    auto wire = frame(2, c, true, true, 0x40);
    websocket_scanner s(true, 65536, true);
    collecting_sink sink;
    s.set_sink(&sink);
    REQUIRE(feed(s, wire, wire.size()) < wire.size());
    REQUIRE(s.error() == "websocket_message_too_large");
  }
  SECTION("without a sink, compressed frames are only counted") {
    auto wire = frame(2, std::string("\xff\xff\xff", 3), true, true, 0x40);
    websocket_scanner s(true, 0, true);
    REQUIRE(feed(s, wire, wire.size()) == wire.size());
    REQUIRE(s.messages() == 1);
  }
}

TEST_CASE("paused at each data message's end; at rest only outside frames and messages", "[gateway][websocket]") {
  auto wire = frame(1, "one", true) + frame(9, "p", true) + frame(1, "tw", true, false) + frame(10, "", true) +
              frame(0, "o", true) + frame(2, "", true);
  websocket_scanner s(true, 0, false);
  s.pause_at_message_end(true);
  collecting_sink sink;
  s.set_sink(&sink);
  CHECK(s.at_rest());
  std::vector<std::size_t> stops;
  for (std::size_t at = 0; at < wire.size();) {
    auto ok = s.scan(wire.data() + at, wire.size() - at);
    REQUIRE(ok > 0);
    at += ok;
    stops.push_back(at);
    CHECK(s.at_rest());
  }
  // "one" (9 bytes); the ping and the fragmented "two" with its pong (7 + 8 + 6 + 7); the empty binary (6).
  CHECK(stops == std::vector<std::size_t>{9, 37, 43});
  CHECK(sink.messages == std::vector<std::string>{"one", "two", ""});
  CHECK(s.messages() == 3);
  // Byte by byte: not at rest inside a header, a payload or a fragmented message; at rest after a ping.
  websocket_scanner b(true, 0, false);
  b.pause_at_message_end(true);
  std::vector<bool> rest;
  for (auto byte : wire) {
    REQUIRE(b.scan(&byte, 1) == 1);
    rest.push_back(b.at_rest());
  }
  CHECK_FALSE(rest[0]);
  CHECK(rest[8]);
  CHECK(rest[15]);  // after the ping
  CHECK_FALSE(rest[23]); // after "tw", its message goes on
  CHECK_FALSE(rest[29]); // after the pong inside it
  CHECK(rest[36]);
}

TEST_CASE("sluice's own text frame reads back whole at every length form", "[gateway][websocket]") {
  for (std::size_t n : {std::size_t(0), std::size_t(125), std::size_t(126), std::size_t(65535), std::size_t(65536),
                        std::size_t(200000)}) {
    INFO(n);
    std::string payload(n, 'j');
    auto text = websocket_text_frame(payload);
    CHECK(text.size() == n + (n < 126 ? 2 : n < 65536 ? 4 : 10));
    std::vector<unsigned char> wire(text.begin(), text.end());
    websocket_scanner down(false, 0, false);
    collecting_sink sink;
    down.set_sink(&sink);
    CHECK(feed(down, wire, 4096) == wire.size());
    CHECK(down.error().empty());
    REQUIRE(sink.messages.size() == 1);
    CHECK(sink.messages[0] == payload);
  }
}
