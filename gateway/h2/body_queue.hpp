#pragma once
// The bytes of an h2 stream's response waiting for the client's window: pieces in the worker's
// pooled 64 KiB relay buffers (`chunk`), read from the origin straight into them and handed over
// whole (no copy), or copied in when they come in small pieces (sluice's own answers, an h2
// origin's DATA). The connection's writer copies them out once, next to their frame headers
// (NGHTTP2_DATA_FLAG_NO_COPY), so a response's bytes are copied once between the origin's TLS and
// the client's instead of three times. Private to gateway/.
#include "gateway/session_impl.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::gateway::detail {

class body_queue {
public:
  // Bytes waiting.
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // Takes `buffer` with its first `n` bytes to send. A small piece that fits the last piece's room
  // is copied there instead, so that a trickle of small reads does not hold a buffer each.
  void push(chunk buffer, std::size_t n) {
    if (n == 0) return;
    if (!pieces_.empty() && n <= small && chunk_size - pieces_.back().end >= n) {
      append(std::string_view(buffer.get(), n));
      return;
    }
    pieces_.push_back({std::move(buffer), 0, n});
    size_ += n;
  }
  // Copies `bytes` in.
  void append(std::string_view bytes) {
    while (!bytes.empty()) {
      if (pieces_.empty() || pieces_.back().end == chunk_size) pieces_.push_back({chunk(), 0, 0});
      auto &p = pieces_.back();
      std::size_t n = std::min(bytes.size(), chunk_size - p.end);
      std::memcpy(p.buffer.get() + p.end, bytes.data(), n);
      p.end += n;
      size_ += n;
      bytes.remove_prefix(n);
    }
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
      out.append(p.buffer.get() + p.begin, take);
      p.begin += take;
      n -= take;
      if (p.begin == p.end) ++used;
    }
    pieces_.erase(pieces_.begin(), pieces_.begin() + static_cast<std::ptrdiff_t>(used));
  }
  void clear() {
    pieces_.clear();
    size_ = 0;
  }

private:
  static constexpr std::size_t small = 4 * 1024;
  struct piece {
    chunk buffer;
    std::size_t begin = 0, end = 0;
  };
  std::vector<piece> pieces_;
  std::size_t size_ = 0;
};

} // namespace sluice::gateway::detail
