#pragma once
// Every rule of one policy compiled once (docs/policy.md, "What leaves"): one Hyperscan database
// in streaming mode for the built-in rules, the policy's custom rules, the caller's own secrets and
// the run's canaries (or two, the rules kept between runs apart from a run's values: see
// database_spec::rules_cache_dir), and RE2 for a rule Hyperscan cannot take. Immutable once built:
// share it (std::shared_ptr<const database>) between every worker thread; scanners read it
// concurrently.
#include "scan/rule.hpp"

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

struct hs_database;

namespace re2 {
class RE2;
}

namespace sluice::scan {

// A rule that cannot be compiled: the message names the rule id and the reason.
class compile_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// A value to match literally in every encoding: the caller's own secret (`name` is the variable or
// [credentials] name, `allowed_hosts` the hosts it may be sent to: exact names or "*.SUFFIX") or a
// canary (`name` says which).
struct secret {
  std::string name;
  std::string value;
  std::vector<std::string> allowed_hosts;
};

// What one database holds. compile() takes it by value and wipes the secret values once they are
// compiled; only the compiled matcher keeps them.
struct database_spec {
  std::vector<rule> rules; // builtin_rules() (with the policy's actions) and the custom rules
  std::vector<secret> own_secrets;
  scan::action own_secret_action = action::block;
  std::vector<secret> canaries;
  scan::action canary_action = action::block;
  // What the command is given instead of a credential (filters/credentials: shaped placeholders
  // look like tokens by design): a format or custom match that lies inside one is no finding.
  std::vector<std::string> placeholders;
  // A second, block-mode database for whole values (a request's target and fields: about 80 ns a
  // short value, against 200 for a stream's scan and reset). It costs more CPU to compile than the
  // streaming one (about 80 ms against 49 with the built-in rules, the canaries and 20 secrets),
  // which a gateway that lives long gets back and one run of sluice exec, compiling for itself,
  // mostly does not: without it, whole values take the streaming database.
  bool block_database = true;
  // A directory to keep the compiled rules in between runs (scan/rules_cache.hpp), one nothing
  // that is scanned can write. Set, the rules compile into a database of their own, read from the
  // directory when it holds them (about 0.2 ms instead of 30 ms of CPU), and the placeholders,
  // canaries and own secrets (new every run) into a second, never written anywhere; a scan then
  // makes two passes (about a tenth slower than over one database of both). Streaming only: no
  // block-mode database. Empty: one database of everything, compiled here.
  std::string rules_cache_dir;
};

// How one rule is matched: its id and, for one RE2 matches, why Hyperscan did not take it.
struct engine_note {
  std::string rule;
  std::string reason;
};

class database {
public:
  // Compiles `spec`: throws compile_error naming the rule (a custom rule RE2 refuses, one that
  // matches the empty string, a duplicate or malformed id). Costs a few tens of milliseconds
  // for the built-in rules and about 0.1 ms per secret; do it once per policy (and run).
  static std::shared_ptr<const database> compile(database_spec spec);
  ~database();
  database(const database &) = delete;
  database &operator=(const database &) = delete;

  // The rules RE2 matches, and why (for the log at start).
  const std::vector<engine_note> &re2_rules() const { return re2_notes_; }
  // Own secrets left out (shorter than min_secret_length, or no secret's shape): their names.
  const std::vector<std::string> &skipped_secrets() const { return skipped_; }
  // Bytes of Hyperscan state per open stream (one per location a scanner streams).
  std::size_t stream_bytes() const { return stream_bytes_; }
  // Unique per database (scratch spaces remember which databases they fit).
  std::uint64_t generation() const { return generation_; }
  // With rules_cache_dir: whether the rules' database was read from it rather than compiled.
  bool rules_from_cache() const { return rules_from_cache_; }

  // Inside: what a pattern id means. Several patterns (a secret's encodings) share an entry.
  struct entry {
    std::string rule;
    scan::kind kind = kind::format;
    scan::action action = action::block;
    std::string name;
    std::vector<std::string> allowed_hosts;
    bool placeholder = false;
  };
  struct pattern {
    std::uint32_t entry = 0;
    std::string_view encoding = "raw";
    std::uint32_t width = 0; // a fixed-width pattern's length (start = end - width); 0: SOM reports it
  };
  struct fallback {
    std::unique_ptr<re2::RE2> re;
    std::uint32_t entry = 0;
  };
  // The streaming databases, scanned in this order: one of everything, or with rules_cache_dir
  // the run's values' (placeholders, canaries, own secrets) then the rules'. Only the last may
  // stop a scan early (scanner.cpp). Empty when Hyperscan has no pattern.
  const std::vector<hs_database *> &hs_streams() const { return hs_streams_; }
  // The same patterns in block mode, for whole values (scanner::scan_whole: about 60 ns for a
  // short value against 200 for a stream's scan and reset); null if Hyperscan refused it.
  const hs_database *hs_block() const { return hs_block_; }
  const std::vector<entry> &entries() const { return entries_; }
  const std::vector<pattern> &patterns() const { return patterns_; }
  const std::vector<fallback> &fallbacks() const { return fallbacks_; }
  // The longest placeholder: how far back a later placeholder match may still take a finding away.
  std::size_t placeholder_reach() const { return placeholder_reach_; }

private:
  database();
  friend struct database_builder;

  std::vector<hs_database *> hs_streams_;
  hs_database *hs_block_ = nullptr;
  bool rules_from_cache_ = false;
  std::vector<entry> entries_;
  std::vector<pattern> patterns_;
  std::vector<fallback> fallbacks_;
  std::vector<engine_note> re2_notes_;
  std::vector<std::string> skipped_;
  std::size_t stream_bytes_ = 0;
  std::size_t placeholder_reach_ = 0;
  std::uint64_t generation_ = 0;
};

using database_ptr = std::shared_ptr<const database>;

// Whether `id` is a valid rule id: a lower-case letter, then lower-case letters, digits, '_', '-'
// or '.', at most 64 in all.
bool valid_rule_id(std::string_view id);

} // namespace sluice::scan
