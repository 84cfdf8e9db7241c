// Streaming gzip (RFC 1952, every member) and deflate (RFC 1950's zlib wrapper, or raw RFC 1951)
// with Beast's inflater; the wrappers' headers are parsed here byte by byte, their checksums not
// checked (the origin checks them; the scan needs the bytes).
#include "scan/body.hpp"
#include "scan/inflate.hpp"

#include <algorithm>
#include <cctype>

namespace sluice::scan {
namespace zlib = boost::beast::zlib;

namespace {

// gzip's flag bits (RFC 1952, 2.3.1).
constexpr unsigned fhcrc = 2, fextra = 4, fname = 8, fcomment = 16;

std::string lower_trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

} // namespace

std::string_view to_string(body_status s) {
  switch (s) {
  case body_status::ok: return "ok";
  case body_status::decode_limit: return "body_decode_limit";
  case body_status::decode_error: return "body_decode_error";
  case body_status::unsupported_encoding: return "body_encoding_unsupported";
  }
  return "ok";
}

body_scan::body_scan(scanner &s, std::string_view content_encoding, std::uint64_t max_decoded_bytes,
                     std::string location, bool form)
    : scanner_(s), location_(std::move(location)), encoded_location_(location_ + ":encoded"),
      max_(max_decoded_bytes), form_(form), form_location_(form ? location_ + ":form" : std::string()) {
  std::vector<std::string> codings;
  for (std::size_t at = 0; at <= content_encoding.size();) {
    auto comma = std::min(content_encoding.find(',', at), content_encoding.size());
    auto c = lower_trimmed(content_encoding.substr(at, comma - at));
    if (!c.empty() && c != "identity") codings.push_back(c);
    at = comma + 1;
  }
  if (codings.empty()) {
    coding_ = coding::identity;
  } else if (codings.size() == 1 && (codings[0] == "gzip" || codings[0] == "x-gzip")) {
    coding_ = coding::gzip;
  } else if (codings.size() == 1 && codings[0] == "deflate") {
    coding_ = coding::deflate;
  } else {
    coding_ = coding::unsupported;
    status_ = body_status::unsupported_encoding;
  }
  if (coding_ == coding::gzip || coding_ == coding::deflate) inflater_ = std::make_unique<inflater>();
}

body_status body_scan::feed(std::string_view bytes) {
  if (bytes.empty() || scanner_.stopped()) return status_;
  if (coding_ == coding::identity) {
    scanner_.feed(location_, bytes);
    if (form_) form_feed(bytes);
    return status_;
  }
  started_ = true;
  scanner_.feed(encoded_location_, bytes);
  if (status_ == body_status::ok) consume(bytes);
  return status_;
}

body_status body_scan::finish() {
  // Between gzip members, after the deflate data's end, or nothing sent at all: a whole body.
  bool whole = stage_ == stage::done || stage_ == stage::member || !started_;
  if (status_ == body_status::ok && coding_ != coding::identity && coding_ != coding::unsupported && !whole) {
    status_ = body_status::decode_error; // ended inside a header or the compressed data
  }
  scanner_.end(location_);
  scanner_.end(encoded_location_);
  if (form_) {
    if (!form_escape_.empty()) scanner_.feed(form_location_, form_escape_); // an escape cut short: as sent
    scanner_.end(form_location_);
  }
  return status_;
}

// Percent-decoding as a stream: an escape split between two pieces is completed by the next one.
void body_scan::form_feed(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  auto hex = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  for (char c : bytes) {
    if (form_escape_.empty()) {
      if (c == '%') form_escape_.assign(1, '%'); // not = "%": GCC 12 warns wrongly (-Wrestrict)
      else out += c == '+' ? ' ' : c;
      continue;
    }
    form_escape_ += c;
    if (hex(c) < 0) { // not an escape: its bytes as they are
      out += form_escape_;
      form_escape_.clear();
    } else if (form_escape_.size() == 3) {
      out += static_cast<char>(hex(form_escape_[1]) * 16 + hex(form_escape_[2]));
      form_escape_.clear();
    }
  }
  if (!out.empty()) scanner_.feed(form_location_, out);
}

void body_scan::consume(std::string_view in) {
  while (!in.empty() && status_ == body_status::ok && !scanner_.stopped()) {
    switch (stage_) {
    case stage::header:
      if (coding_ == coding::deflate) {
        if (!zlib_header(in)) return;
        break;
      }
      if (!header_byte(static_cast<unsigned char>(in.front()))) {
        status_ = body_status::decode_error;
        return;
      }
      in.remove_prefix(1);
      break;
    case stage::inflate:
      inflate(in);
      break;
    case stage::trailer: {
      auto n = std::min(need_, in.size());
      in.remove_prefix(n);
      need_ -= n;
      if (need_ == 0) stage_ = coding_ == coding::gzip ? stage::member : stage::done;
      break;
    }
    case stage::member:
      // Another gzip member follows (gunzip decodes them all); anything else after the last
      // member is not decoded (it was scanned as sent, in body:encoded).
      if (static_cast<unsigned char>(in.front()) != 0x1f) {
        stage_ = stage::done;
        return;
      }
      stage_ = stage::header;
      field_ = field::fixed;
      got_ = 0;
      inflater_->stream.reset();
      break;
    case stage::done:
      return;
    }
  }
}

bool body_scan::header_byte(unsigned char c) {
  switch (field_) {
  case field::fixed:
    fixed_[got_++] = c;
    if (got_ < 10) return true;
    // ID1 ID2, CM = 8 (deflate), no reserved flag bits.
    if (fixed_[0] != 0x1f || fixed_[1] != 0x8b || fixed_[2] != 8 || (fixed_[3] & 0xe0)) return false;
    flags_ = fixed_[3];
    next_field();
    return true;
  case field::xlen:
    need_ |= static_cast<std::size_t>(c) << (8 * got_);
    if (++got_ == 2) {
      field_ = field::extra;
      if (need_ == 0) next_field();
    }
    return true;
  case field::extra:
    if (--need_ == 0) next_field();
    return true;
  case field::name:
  case field::comment:
    if (c == 0) next_field();
    return true;
  case field::hcrc:
    if (++got_ == 2) next_field();
    return true;
  }
  return false;
}

// The next optional field of a gzip header, in the order RFC 1952 puts them, or the data.
void body_scan::next_field() {
  got_ = 0;
  need_ = 0;
  if (flags_ & fextra) {
    flags_ &= ~fextra;
    field_ = field::xlen;
  } else if (flags_ & fname) {
    flags_ &= ~fname;
    field_ = field::name;
  } else if (flags_ & fcomment) {
    flags_ &= ~fcomment;
    field_ = field::comment;
  } else if (flags_ & fhcrc) {
    flags_ &= ~fhcrc;
    field_ = field::hcrc;
  } else {
    stage_ = stage::inflate;
  }
}

// "deflate" is zlib (RFC 1950: CMF, FLG with CM 8, a multiple of 31) or, from some clients, raw
// deflate: the first two bytes decide.
bool body_scan::zlib_header(std::string_view &in) {
  auto n = std::min<std::size_t>(2 - zlib_head_.size(), in.size());
  zlib_head_.append(in.substr(0, n));
  in.remove_prefix(n);
  if (zlib_head_.size() < 2) return false;
  auto cmf = static_cast<unsigned char>(zlib_head_[0]), flg = static_cast<unsigned char>(zlib_head_[1]);
  zlib_ = (cmf & 0x0f) == 8 && (cmf >> 4) <= 7 && ((cmf << 8) | flg) % 31 == 0;
  stage_ = stage::inflate;
  if (zlib_ && (flg & 0x20)) {
    status_ = body_status::decode_error; // a preset dictionary: not something a body uses
    return false;
  }
  if (!zlib_) {
    std::string_view head = zlib_head_;
    inflate(head);
  }
  return true;
}

void body_scan::inflate(std::string_view &in) {
  zlib::z_params zs;
  zs.next_in = in.data();
  zs.avail_in = in.size();
  auto &z = *inflater_;
  switch (inflate_pass(z.stream, zs, z.out, sizeof z.out, zlib::Flush::none,
                       [this](const char *p, std::size_t n) { return emit(p, n); })) {
  case inflated::stream_end:
    stage_ = stage::trailer;
    need_ = coding_ == coding::gzip ? 8 : zlib_ ? 4 : 0;
    if (need_ == 0) stage_ = stage::done;
    break;
  case inflated::not_deflate:
    status_ = body_status::decode_error;
    break;
  case inflated::input_taken:
  case inflated::stopped: // emit set the status
    break;
  }
  in.remove_prefix(in.size() - zs.avail_in);
}

bool body_scan::emit(const char *p, std::size_t n) {
  bool over = max_ && decoded_ + n > max_;
  if (over) n = static_cast<std::size_t>(max_ - decoded_);
  scanner_.feed(location_, std::string_view(p, n));
  if (form_) form_feed(std::string_view(p, n));
  if (keep_ && keep_->size() < keep_cap_) keep_->append(p, std::min(n, keep_cap_ - keep_->size()));
  decoded_ += n;
  if (over) status_ = body_status::decode_limit;
  return !over && !scanner_.stopped();
}

} // namespace sluice::scan
