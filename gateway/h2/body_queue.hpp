#pragma once
// The bytes of an h2 stream's response waiting for the client's window: the worker's pooled
// 64 KiB relay buffers (`chunk`), read from the origin straight into them and handed over whole
// (no copy), or bytes copied in when they come in small pieces (a small response, sluice's own
// answers, an h2 origin's DATA). The connection's writer copies them out once, next to their frame headers
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

  // Takes `buffer` with its first `n` bytes to send. A small piece is copied instead (and the
  // buffer goes back to the pool at once), so that a small response or a trickle of small reads
  // does not hold 64 KiB each while the client's window is shut.
  void push(chunk buffer, std::size_t n) {
    if (n <= small) return append(std::string_view(buffer.get(), n));
    pieces_.push_back({std::move(buffer), {}, 0, n});
    size_ += n;
  }
  // Copies `bytes` in.
  void append(std::string_view bytes) {
    if (bytes.empty()) return;
    if (pieces_.empty() || pieces_.back().buffer.get() || pieces_.back().end + bytes.size() > chunk_size) {
      pieces_.push_back({chunk::none(), {}, 0, 0});
    }
    auto &p = pieces_.back();
    p.copied.append(bytes);
    p.end += bytes.size();
    size_ += bytes.size();
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
  void clear() {
    pieces_.clear();
    size_ = 0;
  }

private:
  static constexpr std::size_t small = 4 * 1024;
  struct piece {
    chunk buffer;        // a pooled buffer handed over whole, or none
    std::string copied;  // else the bytes copied in
    std::size_t begin = 0, end = 0;
    const char *data() { return buffer.get() ? buffer.get() : copied.data(); }
  };
  std::vector<piece> pieces_;
  std::size_t size_ = 0;
};

} // namespace sluice::gateway::detail
