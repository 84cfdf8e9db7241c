#pragma once
// A request body for the scanner: fed in pieces as it arrives, decoded on the way when its
// Content-Encoding is gzip or deflate (docs/policy.md, "What leaves"). The decoded bytes are
// streamed, never held; `max_decoded_bytes` bounds what one body may inflate to, so that a small
// compressed body cannot make the scan run for long (body_decode_limit). The bytes as sent are
// scanned too (location "body:encoded"): a gzip header's file name or comment, bytes after the
// last member, a coding sluice cannot decode. A form body (application/x-www-form-urlencoded) is
// scanned percent-decoded as well ("body:form", '+' as a space): a secret with a '/', '=', ' ' or a
// line break in it is escaped there, and `curl --data-urlencode` or any HTML form sends it so.
#include "scan/scanner.hpp"

#include <boost/beast/zlib/inflate_stream.hpp>
#include <memory>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::scan {

enum class body_status {
  ok,
  decode_limit,         // inflated past max_decoded_bytes: refuse as body_decode_limit
  decode_error,         // not valid gzip/deflate, or it ended inside the compressed data
  unsupported_encoding, // br, zstd, compress, several codings: only the bytes as sent were scanned
};
// "ok", "body_decode_limit", "body_decode_error", "body_encoding_unsupported".
std::string_view to_string(body_status s);

class body_scan {
public:
  // `content_encoding`: the request's Content-Encoding field value ("" or "identity": none; "gzip",
  // "x-gzip", "deflate" (zlib, or raw deflate as some clients send it); others are unsupported).
  // max_decoded_bytes 0: no bound.
  // `form`: the body is application/x-www-form-urlencoded (see the top).
  body_scan(scanner &s, std::string_view content_encoding, std::uint64_t max_decoded_bytes,
            std::string location = "body", bool form = false);
  body_scan(const body_scan &) = delete;
  body_scan &operator=(const body_scan &) = delete;

  // The next piece as received. Once a status other than ok is returned it stays.
  body_status feed(std::string_view bytes);
  // The body has ended: its streams are closed (matches at the very end reported).
  body_status finish();
  body_status status() const { return status_; }
  std::uint64_t decoded_bytes() const { return decoded_; }
  // A gzip or deflate body's decoded bytes are also appended to `out`, the first `cap` of them,
  // for a caller that looks at them again (a gRPC message's fields); kept_whole() says whether
  // they all fitted.
  void keep_decoded(std::string *out, std::size_t cap) {
    keep_ = out;
    keep_cap_ = cap;
  }
  bool kept_whole() const { return keep_ && decoded_ <= keep_cap_; }

private:
  enum class coding { identity, gzip, deflate, unsupported };
  enum class stage { header, inflate, trailer, member, done };
  enum class field { fixed, xlen, extra, name, comment, hcrc };
  void consume(std::string_view in);
  bool header_byte(unsigned char c); // gzip; false: not gzip
  bool zlib_header(std::string_view &in);
  void next_field();
  void inflate(std::string_view &in);
  bool emit(const char *p, std::size_t n);
  void form_feed(std::string_view bytes); // the decoded bytes, percent-decoded, to form_location_

  scanner &scanner_;
  std::string location_, encoded_location_;
  std::uint64_t max_;
  coding coding_ = coding::identity;
  stage stage_ = stage::header;
  field field_ = field::fixed;
  body_status status_ = body_status::ok;
  std::uint64_t decoded_ = 0;
  unsigned char fixed_[10] = {};
  unsigned flags_ = 0, got_ = 0;
  std::size_t need_ = 0;
  std::string zlib_head_;
  bool zlib_ = false;
  bool started_ = false;
  bool form_ = false;
  std::string form_location_;
  std::string form_escape_; // "%" or "%X" left at a piece's end
  std::string *keep_ = nullptr;
  std::size_t keep_cap_ = 0;
  // Allocated for a gzip or deflate body only: an identity body (most requests) costs nothing.
  struct inflater {
    boost::beast::zlib::inflate_stream stream;
    char out[16384];
  };
  std::unique_ptr<inflater> inflater_;
};

} // namespace sluice::scan
