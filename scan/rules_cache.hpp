#pragma once
// The compiled rules of a policy kept between runs of sluice exec (docs/policy.md, "What leaves":
// "The compiled rules, kept between runs"). Compiling the built-in rules costs about 30 ms of CPU,
// the same every run; a run's own values (its canaries, the caller's secrets) compile apart, in a
// few milliseconds, and are never written anywhere. Private to scan/ (database.cpp).
//
// A file holds one Hyperscan database as hs_serialize_database wrote it, named by the SHA-256 of
// everything it was compiled from (the patterns with their ids and flags, the mode, Hyperscan's
// version, the CPU features it targets): a policy with other rules, another Hyperscan or another
// CPU asks for another name. Files are written whole (a temporary file, then rename) and read
// only when they are regular files of this user's that no one else may write; anything that does
// not load is compiled again and written over. The directory's own trust is its caller's to check:
// sluice exec uses one that nothing inside its sandbox can write (exec/runner_scan.cpp).
#include <cstddef>
#include <string>
#include <vector>

struct hs_database;

namespace sluice::scan::detail {

// What a database is compiled from: the same inputs, the same key.
struct rules_key_input {
  const std::vector<const char *> &expressions;
  const std::vector<unsigned> &flags;
  const std::vector<unsigned> &ids;
  unsigned mode;
};

// The file name for these inputs ("rules-<64 hex digits>.hs").
std::string rules_cache_name(const rules_key_input &in);

// The database kept under `name` in `dir`, or null (none, unreadable, not this user's, writable by
// others, or not a database this Hyperscan loads). A file that is found and used has its time
// set to now, so that the oldest files are the ones let go.
hs_database *load_rules(const std::string &dir, const std::string &name);

// Keeps `db` under `name` in `dir` (best effort: a directory that cannot take it is left as it is),
// then lets go of the oldest files past `keep_files`.
void save_rules(const std::string &dir, const std::string &name, const hs_database *db);

constexpr std::size_t keep_files = 16;

} // namespace sluice::scan::detail
