// Compiling a policy's rules, secrets and canaries into one Hyperscan streaming database, with RE2
// for what Hyperscan refuses.
//
// Which engine, and why: Hyperscan matches every pattern of the database in one pass over the bytes,
// in streaming mode (a match that spans two pieces of a body is found without holding either),
// at gigabytes per second. It takes PCRE syntax read byte-wise; custom rules are RE2 syntax. A
// pattern goes to RE2 instead when
//  - it uses Unicode (\p{...}, \x{...} above FF, non-ASCII bytes): RE2 reads UTF-8, Hyperscan
//    without HS_FLAG_UTF8 reads bytes, and with it scanning bytes that are not UTF-8 (any binary
//    body) is undefined; RE2 keeps the rule's meaning on any input;
//  - Hyperscan refuses it (RE2-only syntax such as (?U), or a pattern too large for its engines):
//    Hyperscan's message is kept as the reason (database::re2_rules()).
// RE2 cannot stream: a scanner runs those rules over each piece with the last 4 KiB of the
// previous one in front (scanner.cpp), so their matches across pieces are found up to that length.
#include "scan/database.hpp"
#include "scan/literals.hpp"
#include "scan/rules_cache.hpp"

#include <hs/hs.h>
#include <openssl/crypto.h>
#include <re2/re2.h>
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <system_error>
#include <thread>

namespace sluice::scan {
namespace {

std::atomic<std::uint64_t> generations{0};

bool needs_unicode(std::string_view p) {
  if (p.find("\\p") != std::string_view::npos || p.find("\\P") != std::string_view::npos ||
      p.find("\\x{") != std::string_view::npos) {
    return true;
  }
  return std::any_of(p.begin(), p.end(), [](unsigned char c) { return c >= 0x80; });
}

void wipe(std::string &s) {
  if (!s.empty()) OPENSSL_cleanse(s.data(), s.size());
  s.clear();
}

} // namespace

bool valid_rule_id(std::string_view id) {
  if (id.empty() || id.size() > 64 || id[0] < 'a' || id[0] > 'z') return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
  });
}

// Builds the databases: the patterns in order (a pattern's index is its Hyperscan id), then one
// compile a part, moving to RE2 any expression Hyperscan refuses. Part 0 holds everything, or with
// a rules cache the rules (the same every run), and part 1 the run's values: its placeholders,
// canaries and own secrets.
struct database_builder {
  database &db;
  bool block_database;   // database_spec::block_database
  std::string cache_dir; // database_spec::rules_cache_dir
  std::vector<std::string> expressions; // parallel to db.patterns_
  std::vector<unsigned> flags;
  std::vector<bool> to_re2;
  std::vector<int> part; // 0 or 1
  int adding_part = 0;

  std::uint32_t add_entry(database::entry e) {
    db.entries_.push_back(std::move(e));
    return static_cast<std::uint32_t>(db.entries_.size() - 1);
  }

  void add_pattern(std::uint32_t entry, std::string expr, std::string_view encoding, bool literal) {
    hs_expr_info_t *info = nullptr;
    hs_compile_error_t *err = nullptr;
    database::pattern p{entry, encoding, 0};
    unsigned f = HS_FLAG_SOM_LEFTMOST;
    bool re2 = false;
    if (hs_expression_info(expr.c_str(), 0, &info, &err) != HS_SUCCESS) {
      note_re2(entry, err->message);
      hs_free_compile_error(err);
      re2 = true;
    } else {
      if (info->min_width == info->max_width && info->max_width > 0 && info->max_width != UINT_MAX) {
        // Fixed width: the start is the end minus the width, no SOM state needed. A secret needs
        // one report per stream; a rule's every match counts (one may lie inside a placeholder).
        p.width = info->max_width;
        f = literal ? HS_FLAG_SINGLEMATCH : 0;
      }
      std::free(info);
    }
    db.patterns_.push_back(p);
    expressions.push_back(std::move(expr));
    flags.push_back(f);
    to_re2.push_back(re2);
    part.push_back(adding_part);
  }

  void note_re2(std::uint32_t entry, std::string reason) {
    db.re2_notes_.push_back({db.entries_[entry].rule, std::move(reason)});
  }

  void add_rule(const rule &r) {
    if (!valid_rule_id(r.id)) {
      throw compile_error("scan rule \"" + r.id + "\": an id is a lower-case letter, then lower-case letters, "
                          "digits, '_', '-' or '.' (at most 64)");
    }
    for (const auto &e : db.entries_) {
      if (e.rule == r.id) throw compile_error("scan rule \"" + r.id + "\": the id is used twice; give each rule its own");
    }
    RE2::Options o;
    o.set_log_errors(false);
    RE2 re(r.pattern, o);
    if (!re.ok()) throw compile_error("scan rule \"" + r.id + "\": not a valid RE2 pattern: " + re.error());
    if (RE2::PartialMatch("", re)) {
      throw compile_error("scan rule \"" + r.id + "\": the pattern matches the empty string (it would match "
                          "every request); make it match at least one byte");
    }
    auto e = add_entry({r.id, r.kind, r.action, "", {}, false});
    if (needs_unicode(r.pattern)) {
      note_re2(e, "Unicode: RE2 reads UTF-8, Hyperscan bytes");
      db.fallbacks_.push_back({std::make_unique<RE2>(r.pattern, o), e});
      return;
    }
    add_pattern(e, r.pattern, "raw", false);
  }

  void add_secret(std::string_view rule_id, kind k, action a, secret &s) {
    auto e = add_entry({std::string(rule_id), k, a, s.name, s.allowed_hosts, false});
    for (auto &f : literal_forms(s.value)) add_pattern(e, std::move(f.pattern), f.encoding, true);
    wipe(s.value);
  }

  void add_placeholder(std::string &value) {
    if (value.size() < min_secret_length) return;
    auto e = add_entry({"placeholder", kind::format, action::report, "", {}, true});
    add_pattern(e, literal_pattern(value), "raw", false);
    db.placeholder_reach_ = std::max(db.placeholder_reach_, value.size());
  }

  // Part `p`'s database: Hyperscan's compile of the expressions it takes; an expression it refuses
  // moves to RE2 (a rule's) or fails the compile (a literal's: never expected) and the rest is
  // compiled again. With a cache, part 0 is read from it when it holds these expressions, and
  // written to it when all of them compiled.
  hs_database *compile_part(int p) {
    const bool cached = p == 0 && !cache_dir.empty();
    std::string cache_name;
    for (bool first = true;; first = false) {
      std::vector<const char *> ex;
      std::vector<unsigned> fl, ids;
      bool som = false;
      for (std::size_t i = 0; i < expressions.size(); ++i) {
        if (to_re2[i] || part[i] != p) continue;
        ex.push_back(expressions[i].c_str());
        fl.push_back(flags[i]);
        ids.push_back(static_cast<unsigned>(i));
        som = som || (flags[i] & HS_FLAG_SOM_LEFTMOST);
      }
      if (ex.empty()) return nullptr;
      unsigned mode = HS_MODE_STREAM | (som ? HS_MODE_SOM_HORIZON_LARGE : 0);
      if (cached && first) {
        cache_name = detail::rules_cache_name({ex, fl, ids, mode});
        if (auto *loaded = detail::load_rules(cache_dir, cache_name)) {
          db.rules_from_cache_ = true;
          return loaded;
        }
      }
      // Whole values are scanned in block mode, which costs less per call; without it (a spec
      // that asks for none, or a cache) they take the streaming database too. The two compile
      // side by side (Hyperscan's compiler is thread-safe): the gateway waits for them before it
      // takes its first request.
      hs_database_t *block = nullptr;
      auto compile_block = [&] {
        hs_compile_error_t *berr = nullptr;
        if (hs_compile_multi(ex.data(), fl.data(), ids.data(), static_cast<unsigned>(ex.size()), HS_MODE_BLOCK,
                             nullptr, &block, &berr) != HS_SUCCESS) {
          hs_free_compile_error(berr);
          block = nullptr;
        }
      };
      std::thread block_compile;
      try {
        if (block_database && cache_dir.empty()) block_compile = std::thread(compile_block);
      } catch (const std::system_error &) {
        compile_block(); // no thread to be had: one after the other
      }
      hs_compile_error_t *err = nullptr;
      hs_database_t *stream = nullptr;
      const auto rc = hs_compile_multi(ex.data(), fl.data(), ids.data(), static_cast<unsigned>(ex.size()), mode,
                                       nullptr, &stream, &err);
      if (block_compile.joinable()) block_compile.join();
      if (rc == HS_SUCCESS) {
        db.hs_block_ = block;
        // Only a set that compiled whole is kept: a cache hit then means no rule of it went to RE2.
        if (cached && first) detail::save_rules(cache_dir, cache_name, stream);
        return stream;
      }
      if (block) hs_free_database(block);
      std::string message = err->message;
      int at = err->expression;
      hs_free_compile_error(err);
      auto entry = at >= 0 ? db.entries_[db.patterns_[ids[at]].entry] : database::entry{};
      if (at < 0 || entry.kind == kind::own_secret || entry.kind == kind::canary || entry.placeholder) {
        throw compile_error("the scan database does not compile: " + message);
      }
      to_re2[ids[at]] = true;
      note_re2(db.patterns_[ids[at]].entry, message);
    }
  }

  // Into db.hs_streams_ in the order a scan takes them: the run's values (part 1) before the rules
  // (part 0), so that a scan stopped early by the rules has seen every canary and own secret.
  void compile() {
    for (int p = cache_dir.empty() ? 0 : 1; p >= 0; --p) {
      if (auto *hs = compile_part(p)) {
        db.hs_streams_.push_back(hs);
        std::size_t bytes = 0;
        hs_stream_size(hs, &bytes);
        db.stream_bytes_ += bytes;
      }
    }
    for (std::size_t i = 0; i < expressions.size(); ++i) {
      if (!to_re2[i]) continue;
      RE2::Options o;
      o.set_log_errors(false);
      db.fallbacks_.push_back({std::make_unique<RE2>(expressions[i], o), db.patterns_[i].entry});
    }
    for (auto &e : expressions) wipe(e);
  }
};

database::database() : generation_(++generations) {}

database::~database() {
  for (auto *hs : hs_streams_) hs_free_database(hs);
  if (hs_block_) hs_free_database(hs_block_);
}

std::shared_ptr<const database> database::compile(database_spec spec) {
  if (hs_valid_platform() != HS_SUCCESS) {
    throw compile_error("this CPU lacks SSSE3, which Hyperscan (the scanner's engine) needs");
  }
  std::shared_ptr<database> db(new database());
  database_builder b{*db, spec.block_database, spec.rules_cache_dir, {}, {}, {}, {}};
  try {
    // The rules first: with a cache they are part 0, whose ids (their indices) must not depend on
    // a run's values. The placeholders are a run's too (exec draws them for each command).
    for (const auto &r : spec.rules) b.add_rule(r);
    b.adding_part = b.cache_dir.empty() ? 0 : 1;
    for (auto &p : spec.placeholders) b.add_placeholder(p);
    for (auto &s : spec.canaries) b.add_secret("canary", kind::canary, spec.canary_action, s);
    for (auto &s : spec.own_secrets) {
      if (matchable_secret(s.value)) {
        b.add_secret("own_secret", kind::own_secret, spec.own_secret_action, s);
      } else {
        db->skipped_.push_back(s.name);
        wipe(s.value);
      }
    }
    b.compile();
  } catch (...) {
    for (auto &s : spec.own_secrets) wipe(s.value);
    for (auto &s : spec.canaries) wipe(s.value);
    for (auto &e : b.expressions) wipe(e);
    throw;
  }
  return db;
}

} // namespace sluice::scan
