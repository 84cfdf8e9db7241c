#pragma once
// One request's scan (docs/policy.md, "What leaves"): what the command sends (its target, fields,
// body pieces) against a compiled database; findings name the rule and where, never the bytes.
//
// Ownership and threads. A database is immutable and shared by every thread. Hyperscan needs a
// scratch space per thread that scans: `scratch::this_thread()` is one per thread (created on first
// use, grown when a newer database needs more, freed at thread exit), and the gateway's workers
// (one thread each, coroutines that never leave it) use theirs. A scanner belongs to one request on
// one thread: it keeps its database alive (shared_ptr), references the thread's scratch, and is
// neither copied nor used from another thread. Creating one costs no allocation beyond the object
// itself; each location streamed opens a Hyperscan stream (database::stream_bytes(), a few hundred
// bytes), the first scan_whole opens one it then reuses.
#include "scan/database.hpp"
#include "scan/rule.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct hs_scratch;

namespace sluice::scan {

class scratch {
public:
  scratch() = default;
  ~scratch();
  scratch(const scratch &) = delete;
  scratch &operator=(const scratch &) = delete;
  // The calling thread's scratch.
  static scratch &this_thread();
  // The scratch, fitted to `db` (grown if `db` needs more; it still fits every earlier database).
  // Throws std::bad_alloc when Hyperscan cannot allocate it.
  hs_scratch *fit(const database &db);

private:
  hs_scratch *s_ = nullptr;
  std::uint64_t fitted_ = 0; // the generation last fitted
};

// [scan] hosts: how a request to one host is scanned. `report` turns every block into a report;
// `off` looks for canaries only. Canaries keep their action for every host.
enum class host_mode { enforce, report, off };

struct scanner_options {
  // Stop at the first blocking finding: later input is skipped and stopped() says so.
  bool stop_at_block = true;
  // The request's host: an own secret one of whose allowed_hosts is this host (case ignored), or
  // "*.SUFFIX" that covers it, is no finding here.
  std::string host;
  host_mode mode = host_mode::enforce;
};

class scanner {
public:
  explicit scanner(database_ptr db, scratch &s = scratch::this_thread(), scanner_options o = {});
  ~scanner();
  scanner(const scanner &) = delete;
  scanner &operator=(const scanner &) = delete;

  // The request target (origin form or absolute form): the path ("path") and each query
  // parameter's value ("query:NAME"; "query" for a name that is itself a finding or no plain
  // name), raw and percent-decoded (twice at most), and the whole query string ("query").
  void scan_target(std::string_view target);
  // A field value ("field:NAME", the name in lower case), raw and percent-decoded; for
  // Authorization and Proxy-Authorization "Basic ..." also the decoded user:password.
  void scan_field(std::string_view name, std::string_view value);
  // Every field of a head, as scan_field does each: first one scan over all the raw values (most
  // heads hold nothing), and each field on its own only when that scan found something; the
  // decoded forms of a value that holds an escape (or Basic credentials) are scanned as ever.
  void scan_fields(const std::vector<std::pair<std::string_view, std::string_view>> &fields);
  // One whole value at `location`.
  void scan_whole(std::string_view location, std::string_view bytes);
  // The next piece of a stream at `location` (a body, a WebSocket message): matches spanning pieces
  // are found; offsets count from the stream's first byte. end() closes it (matches that needed
  // its end, such as a token that is the body's last bytes, are reported then); a later feed to the
  // same location starts a new stream.
  void feed(std::string_view location, std::string_view bytes);
  void end(std::string_view location);
  // Ends every open stream.
  void finish();
  // Streams held: the open ones (an ended one is let go at end()).
  std::size_t streams_held() const { return streams_.size(); }

  const std::vector<finding> &findings() const { return findings_; }
  // The blocking finding that decides the request (a canary before an own secret before a custom
  // rule before a format rule; the first of them), or null.
  const finding *blocking() const;
  // stop_at_block and a blocking finding is certain: every later call returns at once.
  bool stopped() const { return stopped_; }

  struct stream; // one location's Hyperscan stream and RE2 window (scanner.cpp)

private:
  friend struct match_call;
  stream &stream_for(std::string_view location);
  void scan_stream(stream &st, std::string_view bytes);
  void close_stream(stream &st);
  void run_fallbacks(stream &st, std::string_view bytes, bool at_end);
  // One match of `entry` at [start, end) in st's location; `at` is the scan's position (for stop).
  void record(std::uint32_t entry, std::string_view encoding, std::uint64_t start, std::uint64_t end, stream &st);
  bool wanted(const database::entry &e) const;
  bool sure_block(const stream &st, std::uint64_t position) const;
  void query(std::string_view query);

  database_ptr db_;
  scratch &scratch_;
  scanner_options opts_;
  std::vector<std::unique_ptr<stream>> streams_;
  std::unique_ptr<stream> whole_;
  std::vector<finding> findings_;
  struct hit {
    std::uint32_t entry;
    std::uint64_t end;
  };
  std::vector<hit> hits_; // parallel to findings_
  bool stopped_ = false;
  std::string field_location_; // scan_field's "field:NAME"
  std::string joined_;         // scan_fields' raw values, one per line
  // scan_field's decoded forms only (the raw value was covered by scan_fields' one scan).
  void scan_field_decoded(std::string_view name, std::string_view value);
  void scan_decoded_forms(const std::string &location, std::string_view value);
};

// Percent-decodes `s` (%XX with two hex digits; '+' as a space when `form`); other bytes as they are.
std::string percent_decode(std::string_view s, bool form);

} // namespace sluice::scan
