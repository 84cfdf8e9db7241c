#include "gateway/websocket/frames.hpp"

#include "scan/inflate.hpp"

#include <boost/beast/zlib/inflate_stream.hpp>

#include <algorithm>
#include <cstring>

namespace sluice::gateway {
namespace zlib = boost::beast::zlib;

struct websocket_scanner::inflater {
  zlib::inflate_stream stream; // raw deflate, a 32 KiB window: any window the peers agreed on fits
  char out[4096];
  std::uint64_t decoded = 0; // of the current message
};

websocket_scanner::websocket_scanner(bool from_client, std::uint64_t max_message, bool rsv1)
    : from_client_(from_client), max_message_(max_message), rsv1_(rsv1) {}

websocket_scanner::~websocket_scanner() = default;

std::size_t websocket_scanner::scan(const unsigned char *data, std::size_t n) {
  if (!error_.empty()) return 0;
  std::size_t i = 0;
  std::size_t frame_start = 0; // a header begun in an earlier buffer: its bytes have gone already
  while (i < n) {
    if (in_payload_) {
      auto take = static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, n - i));
      // A close frame's code: its first two payload bytes, unmasked (client frames are masked).
      for (std::size_t k = 0; opcode_ == 8 && k < take && payload_offset_ + k < 2; ++k) {
        auto at = payload_offset_ + k;
        close_bytes_[at] = data[i + k] ^ (from_client_ ? mask_[at % 4] : 0);
      }
      if (sink_ && opcode_ < 8 && !to_sink(data + i, take, take == remaining_ && fin_)) return i;
      payload_offset_ += take;
      remaining_ -= take;
      payload_ += take;
      i += take;
      if (remaining_ == 0 && end_frame()) return i; // a data message's end, where the caller pauses
      continue;
    }
    if (header_have_ == 0) frame_start = i;
    header_[header_have_++] = data[i++];
    std::size_t need = 2;
    if (header_have_ >= 2) {
      unsigned len7 = header_[1] & 0x7f;
      need += (len7 == 126 ? 2 : len7 == 127 ? 8 : 0) + ((header_[1] & 0x80) ? 4 : 0);
    }
    if (header_have_ < need) continue;
    header_have_ = 0;
    if (!begin_frame()) return frame_start;
    if (remaining_ == 0) {
      if (sink_ && opcode_ < 8 && fin_ && !to_sink(data, 0, true)) return frame_start;
      if (end_frame()) return i;
    } else {
      in_payload_ = true;
    }
  }
  return n;
}

bool websocket_scanner::begin_frame() {
  auto fail = [this](std::string_view why) {
    error_ = why;
    return false;
  };
  const bool fin = header_[0] & 0x80;
  const unsigned rsv = header_[0] & 0x70;
  const unsigned char op = header_[0] & 0x0f;
  const bool masked = header_[1] & 0x80;
  // RSV1 is permessage-deflate's "compressed" bit; no other extension is carried.
  if (rsv & ~(rsv1_ ? 0x40u : 0u)) return fail("websocket_protocol_error");
  // Client frames are masked, server frames are not (RFC 6455 section 5.1).
  if (masked != from_client_) return fail("websocket_protocol_error");
  std::uint64_t len = header_[1] & 0x7f;
  std::size_t at = 2;
  if (len == 126) {
    len = (std::uint64_t{header_[2]} << 8) | header_[3];
    at = 4;
  } else if (len == 127) {
    len = 0;
    for (std::size_t k = 0; k < 8; ++k) len = (len << 8) | header_[2 + k];
    if (len >> 63) return fail("websocket_protocol_error"); // the most significant bit must be 0
    at = 10;
  }
  if (masked) std::memcpy(mask_, header_ + at, 4);
  if (op >= 8) {
    // Control frames: close, ping, pong; whole (FIN) and at most 125 bytes; a close code is two
    // bytes or none.
    if (op > 10 || !fin || len > 125 || (op == 8 && len == 1)) return fail("websocket_protocol_error");
  } else if (op == 0) {
    if (!in_message_) return fail("websocket_protocol_error"); // a continuation of nothing
    message_size_ += len;
  } else if (op == 1 || op == 2) {
    if (in_message_) return fail("websocket_protocol_error"); // a new message inside another
    in_message_ = true;
    message_size_ = len;
    compressed_ = (rsv & 0x40) != 0;
  } else {
    return fail("websocket_protocol_error"); // reserved opcodes
  }
  if (op < 8 && max_message_ && message_size_ > max_message_) return fail("websocket_message_too_large");
  opcode_ = op;
  fin_ = fin;
  remaining_ = len;
  payload_offset_ = 0;
  return true;
}

bool websocket_scanner::to_sink(const unsigned char *data, std::size_t n, bool message_end) {
  unsigned char plain[4096];
  std::size_t done = 0;
  do {
    std::size_t k = std::min(n - done, sizeof plain);
    for (std::size_t j = 0; j < k; ++j) {
      plain[j] = data[done + j] ^ (from_client_ ? mask_[(payload_offset_ + done + j) % 4] : 0);
    }
    done += k;
    const std::string_view piece(reinterpret_cast<const char *>(plain), k);
    const bool end = message_end && done == n;
    auto why = compressed_ ? inflate_to_sink(piece, end) : sink_->piece(piece, end);
    if (!why.empty()) {
      error_ = why;
      return false;
    }
  } while (done < n);
  return true;
}

// RFC 7692 section 7.2.2: a message is raw DEFLATE data whose final empty stored block's last
// four bytes (00 00 ff ff) the sender took off; they are put back at the message's end.
std::string_view websocket_scanner::inflate_to_sink(std::string_view compressed, bool message_end) {
  if (!inflater_) inflater_ = std::make_unique<inflater>();
  auto &z = *inflater_;
  auto run = [&](const void *in, std::size_t n, zlib::Flush flush) -> std::string_view {
    zlib::z_params zs;
    zs.next_in = in;
    zs.avail_in = n;
    std::string_view why;
    auto emit = [&](const char *piece, std::size_t k) {
      z.decoded += k;
      why = max_message_ && z.decoded > max_message_ ? "websocket_message_too_large" : sink_->piece({piece, k}, false);
      return why.empty();
    };
    for (;;) {
      switch (scan::inflate_pass(z.stream, zs, z.out, sizeof z.out, flush, emit)) {
      case scan::inflated::stopped: return why;
      case scan::inflated::not_deflate: return "websocket_protocol_error"; // nothing of it goes on
      case scan::inflated::input_taken: return {};
      case scan::inflated::stream_end:
        // A final block: what follows starts afresh, and is inflated and scanned as such (or,
        // not being DEFLATE, stops the stream) rather than passing unread.
        z.stream.reset();
        if (zs.avail_in == 0) return {};
        break;
      }
    }
  };
  if (auto why = run(compressed.data(), compressed.size(), zlib::Flush::none); !why.empty()) return why;
  if (!message_end) return {};
  static constexpr unsigned char tail[4] = {0x00, 0x00, 0xff, 0xff};
  if (auto why = run(tail, sizeof tail, zlib::Flush::sync); !why.empty()) return why;
  z.decoded = 0;
  return sink_->piece({}, true);
}

bool websocket_scanner::end_frame() {
  in_payload_ = false;
  if (opcode_ == 8) {
    close_code_ = payload_offset_ >= 2 ? (close_bytes_[0] << 8) | close_bytes_[1] : 1005;
    closed_ = true;
  } else if (opcode_ < 8 && fin_) {
    ++messages_;
    in_message_ = false;
    message_size_ = 0;
    return pause_;
  }
  return false;
}

std::string websocket_text_frame(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 10);
  out.push_back(static_cast<char>(0x81)); // FIN, text
  const std::uint64_t len = payload.size();
  if (len < 126) {
    out.push_back(static_cast<char>(len));
  } else if (len <= 0xffff) {
    out.push_back(static_cast<char>(126));
    for (int shift = 8; shift >= 0; shift -= 8) out.push_back(static_cast<char>((len >> shift) & 0xff));
  } else {
    out.push_back(static_cast<char>(127));
    for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>((len >> shift) & 0xff));
  }
  out.append(payload);
  return out;
}

std::size_t websocket_close_frame(unsigned code, std::string_view reason, bool masked,
                                  const unsigned char mask[4], unsigned char *out) {
  reason = reason.substr(0, 123);
  const std::size_t len = 2 + reason.size();
  std::size_t at = 0;
  out[at++] = 0x88; // FIN, close
  out[at++] = static_cast<unsigned char>((masked ? 0x80 : 0) | len);
  if (masked) {
    std::memcpy(out + at, mask, 4);
    at += 4;
  }
  unsigned char payload[125];
  payload[0] = static_cast<unsigned char>(code >> 8);
  payload[1] = static_cast<unsigned char>(code & 0xff);
  std::memcpy(payload + 2, reason.data(), reason.size());
  for (std::size_t k = 0; k < len; ++k) out[at + k] = payload[k] ^ (masked ? mask[k % 4] : 0);
  return at + len;
}

} // namespace sluice::gateway
