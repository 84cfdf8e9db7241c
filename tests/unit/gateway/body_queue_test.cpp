#include "gateway/h2/body_queue.hpp"

#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <string>

using sluice::gateway::detail::body_queue;
using sluice::gateway::detail::body_tail;
using sluice::gateway::detail::chunk;

namespace {

// A pooled buffer holding `bytes` after its headroom, as the origin's reads leave it.
std::shared_ptr<chunk> filled(const std::string &bytes) {
  auto c = std::make_shared<chunk>();
  std::memcpy(c->get() + body_queue::headroom, bytes.data(), bytes.size());
  return c;
}

std::string pattern(std::size_t n, char seed) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed + i * 7 % 251);
  return s;
}

} // namespace

TEST_CASE("a frame inside one of the origin's buffers is taken in place, its header's room before it",
          "[body_queue]") {
  body_queue q;
  const auto bytes = pattern(3 * body_queue::frame_payload, 'a');
  q.push(filled(bytes), body_queue::headroom, bytes.size());
  REQUIRE(q.size() == bytes.size());

  body_queue::frame f1, f2;
  REQUIRE(q.take_frame(body_queue::frame_payload, f1));
  REQUIRE(q.take_frame(body_queue::frame_payload, f2));
  // The payload follows the header's room; the second frame's room is the first one's last bytes.
  CHECK(std::string(f1.at + body_queue::frame_header, body_queue::frame_payload) ==
        bytes.substr(0, body_queue::frame_payload));
  CHECK(f2.at == f1.at + body_queue::frame_payload);
  CHECK(std::string(f2.at + body_queue::frame_header, body_queue::frame_payload) ==
        bytes.substr(body_queue::frame_payload, body_queue::frame_payload));
  CHECK(f1.keep == f2.keep);
  CHECK(q.size() == body_queue::frame_payload);

  // The rest taken by copy: the bytes are still those sent, the buffer let go by the queue but
  // kept by the frames taken from it.
  std::string out;
  q.move_to(out, body_queue::frame_payload);
  CHECK(out == bytes.substr(2 * body_queue::frame_payload));
  CHECK(q.empty());
  CHECK(f1.keep.use_count() == 2);
}

TEST_CASE("a frame spanning two buffers, or copied bytes, is not taken in place", "[body_queue]") {
  body_queue q;
  const auto a = pattern(10000, 'x'), b = pattern(20000, 'y');
  q.push(filled(a), body_queue::headroom, a.size());
  q.push(filled(b), body_queue::headroom, b.size());
  body_queue::frame f;
  CHECK_FALSE(q.take_frame(12000, f)); // 10,000 in the first buffer: the frame spans both
  CHECK(q.size() == a.size() + b.size());
  std::string out;
  q.move_to(out, 12000);
  CHECK(out == a + b.substr(0, 2000));
  // The next frame starts 2,000 bytes into the second buffer: in place, its room being bytes
  // already copied out.
  REQUIRE(q.take_frame(18000, f));
  CHECK(std::string(f.at + body_queue::frame_header, 18000) == b.substr(2000));
  CHECK(q.empty());

  body_queue small;
  small.append("a small answer of sluice's own");
  CHECK_FALSE(small.take_frame(5, f));
  CHECK(small.size() == 30);
}

TEST_CASE("each read of an origin's bytes has a buffer of its own; small reads are copied", "[body_queue]") {
  body_queue q;
  body_tail tail;
  const auto bytes = pattern(3 * body_queue::capacity, 'r');
  std::size_t room = 0, at = 0;
  auto read = [&](std::size_t n) { // what a read of n bytes from the origin does
    char *into = tail.room(body_queue::capacity, room);
    REQUIRE(room >= n);
    std::memcpy(into, bytes.data() + at, n);
    tail.filled(q, n);
    at += n;
    return into;
  };
  char *first = read(100); // small: copied, the buffer used again by the next read
  body_queue::frame f;
  CHECK_FALSE(q.take_frame(100, f));
  std::string out;
  q.move_to(out, 100);
  CHECK(out == bytes.substr(0, 100));
  CHECK(read(body_queue::capacity) == first); // four frames' worth: in place, frame by frame
  char *second = read(25000);                 // the first buffer is the queue's: a new one
  CHECK(second != first);
  for (int i = 0; i < 4; ++i) {
    CHECK(q.frame_size(body_queue::frame_payload) == body_queue::frame_payload);
    REQUIRE(q.take_frame(body_queue::frame_payload, f));
    CHECK(std::string(f.at + body_queue::frame_header, body_queue::frame_payload) ==
          bytes.substr(100 + i * body_queue::frame_payload, body_queue::frame_payload));
  }
  // 25,000 bytes in the second buffer: one whole frame, then, with more bytes behind it, a
  // frame cut where the buffer ends (in place) rather than one going on into the next.
  REQUIRE(q.take_frame(q.frame_size(body_queue::frame_payload), f));
  read(10000);
  CHECK(q.frame_size(body_queue::frame_payload) == 25000 - body_queue::frame_payload);
  REQUIRE(q.take_frame(q.frame_size(body_queue::frame_payload), f));
  CHECK(f.keep->get() + body_queue::headroom == second);
  // Less than 4 KiB left in a buffer: the frame goes on into the next one (copied).
  REQUIRE(q.take_frame(7000, f));
  read(9000);
  CHECK(q.frame_size(body_queue::frame_payload) == 3000 + 9000);
  CHECK_FALSE(q.take_frame(body_queue::frame_payload, f));
}

TEST_CASE("an h2 origin's large DATA is appended into a buffer of the queue's own, its frames in place",
          "[body_queue]") {
  body_queue q;
  const auto bytes = pattern(5 * 16384, 'h');
  for (int i = 0; i < 5; ++i) { // in pieces of 16 KiB, as nghttp2 hands an origin's DATA over
    q.append(std::string_view(bytes).substr(i * 16384, 16384));
  }
  REQUIRE(q.size() == bytes.size());
  body_queue::frame f;
  std::size_t at = 0;
  // Four frames' worth fills the first buffer (65,500 bytes), the rest is in a second.
  for (int i = 0; i < 4; ++i) {
    const auto n = q.frame_size(body_queue::frame_payload);
    REQUIRE(q.take_frame(n, f));
    CHECK(std::string(f.at + body_queue::frame_header, n) == bytes.substr(at, n));
    at += n;
  }
  CHECK(at == body_queue::capacity); // the first buffer holds what fitted of the fourth append
  // The rest, in a second buffer: in place too.
  std::string out;
  while (!q.empty()) {
    const auto n = q.frame_size(body_queue::frame_payload);
    REQUIRE(q.take_frame(n, f));
    out.append(f.at + body_queue::frame_header, n);
  }
  CHECK(out == bytes.substr(at));
  // A small append starts no buffer; one after a buffer of the queue's goes into its room.
  q.append("small");
  CHECK_FALSE(q.take_frame(5, f));
  q.move_to(out, 5);
  q.append(std::string_view(bytes).substr(0, 5000));
  q.append("tail");
  REQUIRE(q.take_frame(5004, f));
  CHECK(std::string(f.at + body_queue::frame_header, 5004) == bytes.substr(0, 5000) + "tail");
  // Sluice's own answer larger than a buffer: several buffers, the bytes in order.
  const auto answer = pattern(3 * body_queue::capacity + 7, 'a');
  q.append(answer);
  out.clear();
  while (!q.empty()) q.move_to(out, 1000);
  CHECK(out == answer);
}
