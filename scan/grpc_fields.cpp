// gRPC messages and protobuf's wire format (grpc_fields.hpp): varints, the four wire types a
// message may use (groups end the walk), fields handed over by length.
#include "scan/grpc_fields.hpp"

#include <algorithm>
#include <vector>

namespace sluice::scan {
namespace {

bool varint(std::string_view m, std::size_t &at, std::uint64_t &out) {
  out = 0;
  for (unsigned shift = 0; shift < 64 && at < m.size(); shift += 7) {
    const auto b = static_cast<unsigned char>(m[at++]);
    out |= std::uint64_t{b & 0x7fu} << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

// Walks `m` once, appending each length-delimited field to `out`, and after it a nested message's
// fields where the field's bytes are wholly a well-formed message (a string's bytes that happen to
// parse in part are not cut into pieces): those are dropped again when its walk fails.
bool walk(std::string_view m, int depth, std::vector<std::string_view> &out) {
  std::size_t at = 0;
  while (at < m.size()) {
    std::uint64_t key = 0, v = 0;
    if (!varint(m, at, key) || (key >> 3) == 0) return false;
    switch (key & 7) {
    case 0:
      if (!varint(m, at, v)) return false;
      break;
    case 1:
    case 5: {
      const std::size_t n = (key & 7) == 1 ? 8 : 4;
      if (m.size() - at < n) return false;
      at += n;
      break;
    }
    case 2: {
      if (!varint(m, at, v) || v > m.size() - at) return false;
      const auto bytes = m.substr(at, static_cast<std::size_t>(v));
      at += static_cast<std::size_t>(v);
      out.push_back(bytes);
      const auto mark = out.size();
      if (depth > 1 && !bytes.empty() && !walk(bytes, depth - 1, out)) out.resize(mark);
      break;
    }
    default:
      return false; // groups (3, 4) are long deprecated; 6 and 7 do not exist
    }
  }
  return true;
}

} // namespace

bool protobuf_fields(std::string_view message, const std::function<void(std::string_view)> &field, int depth) {
  std::vector<std::string_view> fields;
  const bool whole = walk(message, depth, fields);
  for (auto f : fields) field(f); // what came before a malformed part is handed over all the same
  return whole;
}

void grpc_messages::feed(std::string_view piece, const std::function<void(std::string_view, bool)> &message) {
  while (!piece.empty()) {
    if (left_ == 0 && have_prefix_ < 5) {
      prefix_[have_prefix_++] = static_cast<unsigned char>(piece.front());
      piece.remove_prefix(1);
      if (have_prefix_ < 5) continue;
      left_ = (std::uint64_t{prefix_[1]} << 24) | (std::uint64_t{prefix_[2]} << 16) |
              (std::uint64_t{prefix_[3]} << 8) | prefix_[4];
      keep_ = left_ <= max_;
      message_.clear();
      if (left_ == 0) have_prefix_ = 0; // an empty message: nothing in it
      continue;
    }
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(left_, piece.size()));
    if (keep_) message_.append(piece.substr(0, n));
    piece.remove_prefix(n);
    left_ -= n;
    if (left_ == 0) {
      have_prefix_ = 0;
      if (keep_) message(message_, prefix_[0] & 1);
      message_.clear();
    }
  }
}

} // namespace sluice::scan
