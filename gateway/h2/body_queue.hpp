#pragma once
// The bytes of an h2 stream's response waiting for the client's window, in the worker's pooled
// 64 KiB buffers (`chunk`): an HTTP/1.1 origin's read straight into them (body_tail) and shared
// with the queue, an h2 origin's DATA copied into buffers of the queue's own (append), or, in small
// pieces (a small response, sluice's own answers), copied into strings. A DATA frame whose
// payload lies in one buffer is written from it (take_frame): its 9-byte header goes into the
// bytes just before the payload (the buffer's headroom, or the end of the frame before it,
// encrypted by then), and OpenSSL encrypts header and payload as one record. Any other frame is
// copied out once, next to its header (move_to). Private to gateway/.
#include "gateway/session_impl.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::gateway::detail {

class body_queue {
public:
  // A DATA frame's header, and where the origin's bytes start in a buffer (room for the header).
  static constexpr std::size_t frame_header = 9;
  static constexpr std::size_t headroom = frame_header;
  // A DATA frame's payload: a TLS record's plaintext (16 KiB) less the frame header, so that a
  // frame is one whole record; a buffer holds four such payloads at most.
  static constexpr std::size_t frame_payload = 16 * 1024 - frame_header;
  static constexpr std::size_t capacity = 4 * frame_payload;
  static_assert(headroom + capacity <= chunk_size);
  // Bytes this few go into a string rather than a 64 KiB buffer of their own (append, body_tail).
  static constexpr std::size_t small = 4 * 1024;

  // A frame written from a buffer: `at` is the header's place, the payload follows it; `keep`
  // holds the buffer until the write is done.
  struct frame {
    char *at = nullptr;
    std::shared_ptr<chunk> keep;
  };

  // Bytes waiting.
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // Takes the `n` bytes at `at` in `buffer` (at >= headroom), shared with whoever filled it; bytes
  // that follow the last piece's in the same buffer extend it.
  void push(const std::shared_ptr<chunk> &buffer, std::size_t at, std::size_t n) {
    if (n == 0) return;
    if (!pieces_.empty() && pieces_.back().buffer == buffer && pieces_.back().end == at) {
      pieces_.back().end += n;
    } else {
      pieces_.push_back({buffer, {}, at, at + n});
    }
    size_ += n;
  }
  // Copies `bytes` in.
  void append(std::string_view bytes) {
    if (bytes.empty()) return;
    size_ += bytes.size();
    // Large pieces (an h2 origin's DATA) go into pooled buffers of the queue's own, after their
    // headroom, each filled to `capacity` (four whole frames) before the next is begun, so that the
    // frames that carry them are written in place; small ones into a string.
    bool large = bytes.size() > small;
    if (!pieces_.empty() && pieces_.back().appended) {
      auto &last = pieces_.back();
      const std::size_t n = std::min(bytes.size(), headroom + capacity - last.end);
      std::memcpy(last.buffer->get() + last.end, bytes.data(), n); // past every byte a frame holds
      last.end += n;
      bytes.remove_prefix(n);
      large = large || n > 0; // the rest of what filled the buffer goes on in a new one
    }
    while (large && !bytes.empty()) {
      const std::size_t n = std::min(bytes.size(), capacity);
      auto buffer = std::make_shared<chunk>();
      std::memcpy(buffer->get() + headroom, bytes.data(), n);
      pieces_.push_back({std::move(buffer), {}, headroom, headroom + n, true});
      bytes.remove_prefix(n);
    }
    if (bytes.empty()) return;
    if (pieces_.empty() || pieces_.back().buffer || pieces_.back().end + bytes.size() > chunk_size) {
      pieces_.push_back({nullptr, {}, 0, 0});
    }
    auto &p = pieces_.back();
    p.copied.append(bytes);
    p.end += bytes.size();
  }
  // Moves the first `n` bytes (at most size()) to the end of `out`; emptied buffers go back to
  // the worker's pool.
  void move_to(std::string &out, std::size_t n) {
    n = std::min(n, size_);
    size_ -= n;
    std::size_t used = 0; // pieces emptied
    while (n > 0) {
      auto &p = pieces_[used];
      std::size_t take = std::min(n, p.end - p.begin);
      out.append(p.data() + p.begin, take);
      p.begin += take;
      n -= take;
      if (p.begin == p.end) ++used;
    }
    pieces_.erase(pieces_.begin(), pieces_.begin() + static_cast<std::ptrdiff_t>(used));
  }
  // How much of `want` bytes the next frame should carry: less when the first buffer ends before
  // (so that the frame is written in place rather than copied across two buffers), unless so
  // little of the buffer is left that a frame of it would be a record of a few bytes.
  std::size_t frame_size(std::size_t want) const {
    want = std::min(want, size_);
    if (pieces_.empty() || !pieces_.front().buffer) return want;
    const std::size_t here = pieces_.front().end - pieces_.front().begin;
    return here < want && here >= min_in_place ? here : want;
  }
  // The next `n` bytes as a frame written in place, when they lie in one buffer:
  // the header goes to f.at, the payload is the n bytes after it. False (nothing taken) otherwise.
  bool take_frame(std::size_t n, frame &f) {
    if (pieces_.empty() || n == 0) return false;
    auto &p = pieces_.front();
    if (!p.buffer || p.end - p.begin < n) return false;
    f.at = p.data() + p.begin - frame_header; // begin >= headroom: the headroom or bytes already taken
    f.keep = p.buffer;
    p.begin += n;
    size_ -= n;
    if (p.begin == p.end) pieces_.erase(pieces_.begin());
    return true;
  }
  void clear() {
    pieces_.clear();
    size_ = 0;
  }

private:
  static constexpr std::size_t min_in_place = 4 * 1024;
  struct piece {
    std::shared_ptr<chunk> buffer; // a pooled buffer (shared with frames being written), or none
    std::string copied;            // else the bytes copied in
    std::size_t begin = 0, end = 0;
    bool appended = false; // `buffer` is the queue's own, filled by append: more may go after `end`
    char *data() { return buffer ? buffer->get() : copied.data(); }
  };
  std::vector<piece> pieces_;
  std::size_t size_ = 0;
};

// Where an origin's next bytes for a stream are read: a buffer of their own each read (so that a
// read takes up to four frames' worth at once, and the queue's pieces end where frames do), shared
// with the queue once filled. A small read is copied into the queue instead and its buffer used
// again, so that a small response or a trickle of small reads does not hold 64 KiB each while the
// client's window is shut.
class body_tail {
public:
  // Where the next read goes: at most `want` bytes.
  char *room(std::size_t want, std::size_t &size) {
    if (!buffer_ || buffer_.use_count() > 1) buffer_ = std::make_shared<chunk>();
    size = std::min(want, body_queue::capacity);
    return buffer_->get() + body_queue::headroom;
  }
  // The read put `n` bytes there: they go to `q`.
  void filled(body_queue &q, std::size_t n) {
    if (n <= body_queue::small) return q.append(std::string_view(buffer_->get() + body_queue::headroom, n));
    q.push(buffer_, body_queue::headroom, n);
  }

private:
  std::shared_ptr<chunk> buffer_;
};

} // namespace sluice::gateway::detail
