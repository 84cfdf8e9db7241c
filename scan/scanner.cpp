// The scanner: Hyperscan streams per location, RE2 windows for the rules it matches, and the
// findings (placeholders taken away, own secrets allowed to their host, one finding per rule and
// location, the stop at a certain block).
#include "scan/scanner.hpp"

#include <hs/hs.h>
#include <re2/re2.h>
#include <algorithm>
#include <array>
#include <limits>
#include <new>
#include <stdexcept>

namespace sluice::scan {

// How much of a stream's past the RE2 rules see again in front of each new piece.
constexpr std::size_t fallback_overlap = 4096;

struct scanner::stream {
  std::string location;
  // One Hyperscan stream per database::hs_streams(), in the same order; none when closed.
  std::array<hs_stream_t *, 2> hs{};
  std::uint64_t offset = 0;       // bytes fed
  std::string window;             // RE2: the last bytes fed (at most fallback_overlap)
  std::uint64_t fallback_from = 0; // RE2: matches ending before this were considered
  std::vector<std::pair<std::uint64_t, std::uint64_t>> placeholders; // recent placeholder spans
  bool ended = false;
};

// The callback's context: one scan call on one stream.
struct match_call {
  scanner *self;
  scanner::stream *st;
  // The database scanned is the last of the stream's: the one a sure block may stop. Those before
  // it (a run's values) never stop, so that every canary and own secret of a piece, and every
  // placeholder (which may take a rule's finding back), is known before the rules' pass decides.
  bool may_stop = true;

  static int on_match(unsigned id, unsigned long long from, unsigned long long to, unsigned, void *ctx) {
    auto *c = static_cast<match_call *>(ctx);
    auto &s = *c->self;
    const auto &p = s.db_->patterns()[id];
    // Matches ending where a blocking one ends still count (a canary and the format rule it also
    // fits); a later one, past a placeholder's reach, stops the scan instead.
    if (c->may_stop && s.opts_.stop_at_block && s.sure_block(*c->st, to)) return 1;
    s.record(p.entry, p.encoding, p.width ? to - p.width : from, to, *c->st);
    return 0;
  }
};

scratch::~scratch() {
  if (s_) hs_free_scratch(s_);
}

scratch &scratch::this_thread() {
  thread_local scratch s;
  return s;
}

hs_scratch *scratch::fit(const database &db) {
  if (db.hs_streams().empty() || fitted_ == db.generation()) return s_;
  for (const auto *hs : db.hs_streams()) {
    if (hs_alloc_scratch(hs, &s_) != HS_SUCCESS) throw std::bad_alloc();
  }
  if (db.hs_block() && hs_alloc_scratch(db.hs_block(), &s_) != HS_SUCCESS) throw std::bad_alloc();
  fitted_ = db.generation();
  return s_;
}

scanner::scanner(database_ptr db, scratch &s, scanner_options o)
    : db_(std::move(db)), scratch_(s), opts_(std::move(o)) {}

namespace {

void open_streams(const database &db, scanner::stream &st);
void drop_streams(scanner::stream &st);

} // namespace

scanner::~scanner() {
  for (auto &st : streams_) drop_streams(*st);
  if (whole_) drop_streams(*whole_);
}

scanner::stream &scanner::stream_for(std::string_view location) {
  for (auto &st : streams_) {
    if (!st->ended && st->location == location) return *st;
  }
  auto st = std::make_unique<stream>();
  st->location = location;
  open_streams(*db_, *st); // a failure keeps nothing: a later feed to this location tries again
  streams_.push_back(std::move(st));
  return *streams_.back();
}

void scanner::feed(std::string_view location, std::string_view bytes) {
  if (stopped_ || bytes.empty()) return;
  auto &st = stream_for(location);
  scan_stream(st, bytes);
  if (opts_.stop_at_block && sure_block(st, st.offset + 1)) stopped_ = true;
}

void scanner::scan_stream(stream &st, std::string_view bytes) {
  const auto n_db = db_->hs_streams().size();
  for (std::size_t i = 0; i < n_db && st.hs[i]; ++i) {
    auto *sc = scratch_.fit(*db_);
    match_call call{this, &st, i + 1 == n_db};
    for (std::size_t at = 0; at < bytes.size();) {
      auto n = std::min<std::size_t>(bytes.size() - at, 1u << 30);
      auto rc = hs_scan_stream(st.hs[i], bytes.data() + at, static_cast<unsigned>(n), 0, sc, match_call::on_match,
                               &call);
      if (rc == HS_SCAN_TERMINATED) break;
      at += n;
    }
  }
  run_fallbacks(st, bytes, false);
  st.offset += bytes.size();
}

namespace {

// Opens a stream on each database, or none: what one failure left open is closed again.
void open_streams(const database &db, scanner::stream &st) {
  if (db.hs_streams().size() > st.hs.size()) throw std::logic_error("scanner: more databases than streams");
  for (std::size_t i = 0; i < db.hs_streams().size(); ++i) {
    if (hs_open_stream(db.hs_streams()[i], 0, &st.hs[i]) != HS_SUCCESS) {
      drop_streams(st);
      throw std::bad_alloc();
    }
  }
}

void drop_streams(scanner::stream &st) {
  for (auto *&hs : st.hs) {
    if (hs) hs_close_stream(hs, nullptr, nullptr, nullptr);
    hs = nullptr;
  }
}

} // namespace

void scanner::close_stream(stream &st) {
  if (st.ended) return;
  st.ended = true;
  const auto n_db = db_->hs_streams().size();
  for (std::size_t i = 0; i < n_db && !stopped_ && st.hs[i]; ++i) {
    match_call call{this, &st, i + 1 == n_db};
    hs_close_stream(st.hs[i], scratch_.fit(*db_), match_call::on_match, &call);
    st.hs[i] = nullptr;
  }
  drop_streams(st); // what a stop left open
  if (!stopped_) run_fallbacks(st, {}, true);
  if (opts_.stop_at_block && sure_block(st, std::numeric_limits<std::uint64_t>::max())) stopped_ = true;
}

void scanner::end(std::string_view location) {
  for (auto &st : streams_) {
    if (!st->ended && st->location == location) close_stream(*st);
  }
  // An ended stream is done with (a later feed to its location opens another), and its findings
  // keep their own location: let it go, so that a connection of many messages, each a stream of
  // its own, holds only its open ones (and finds each in constant time) rather than every message
  // it ever carried.
  std::erase_if(streams_, [](const std::unique_ptr<stream> &st) { return st->ended; });
}

void scanner::finish() {
  for (auto &st : streams_) close_stream(*st);
}

void scanner::scan_whole(std::string_view location, std::string_view bytes) {
  if (stopped_ || bytes.empty()) return;
  bool block = db_->hs_block() && bytes.size() < (1u << 30);
  if (!whole_) whole_ = std::make_unique<stream>();
  auto &st = *whole_;
  st.location = location;
  st.offset = 0;
  st.window.clear();
  st.fallback_from = 0;
  st.placeholders.clear();
  match_call call{this, &st};
  if (block) {
    hs_scan(db_->hs_block(), bytes.data(), static_cast<unsigned>(bytes.size()), 0, scratch_.fit(*db_),
            match_call::on_match, &call);
    run_fallbacks(st, bytes, true);
  } else {
    if (!st.hs[0]) open_streams(*db_, st);
    scan_stream(st, bytes);
    // The end of the value: matches that needed it, then the streams as new for the next value.
    const auto n_db = db_->hs_streams().size();
    for (std::size_t i = 0; i < n_db && st.hs[i]; ++i) {
      match_call end_call{this, &st, i + 1 == n_db};
      hs_reset_stream(st.hs[i], 0, scratch_.fit(*db_), match_call::on_match, &end_call);
    }
    run_fallbacks(st, {}, true);
  }
  if (opts_.stop_at_block && sure_block(st, std::numeric_limits<std::uint64_t>::max())) stopped_ = true;
}

// RE2 cannot stream: each piece is matched with the last fallback_overlap bytes in front, and a
// match is taken once (it ends at or after fallback_from) and only when it does not touch the end
// of what has come so far (a \b or $ there may not hold once more comes), unless at the end.
void scanner::run_fallbacks(stream &st, std::string_view bytes, bool at_end) {
  if (db_->fallbacks().empty()) return;
  std::string text = st.window;
  text.append(bytes);
  std::uint64_t base = st.offset - st.window.size();
  for (const auto &f : db_->fallbacks()) {
    re2::StringPiece m;
    std::size_t pos = 0;
    while (pos < text.size() && f.re->Match(text, pos, text.size(), RE2::UNANCHORED, &m, 1)) {
      std::size_t s = static_cast<std::size_t>(m.data() - text.data()), e = s + m.size();
      if (base + e < st.fallback_from || (!at_end && e == text.size())) {
        pos = s + 1; // seen before, or not sure yet: a match starting later may still count
        continue;
      }
      record(f.entry, "raw", base + s, base + e, st);
      pos = std::max(e, s + 1);
    }
  }
  st.fallback_from = base + text.size();
  st.window = text.size() > fallback_overlap ? text.substr(text.size() - fallback_overlap) : text;
}

bool scanner::wanted(const database::entry &e) const {
  if (e.kind == kind::canary) return true;
  if (opts_.mode == host_mode::off) return false;
  if (e.kind == kind::own_secret && !opts_.host.empty()) {
    std::string_view h = opts_.host;
    auto lower_equal = [](std::string_view x, std::string_view y) {
      return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin(), [](char p, char q) {
               return (p | 0x20) == (q | 0x20);
             });
    };
    for (std::string_view a : e.allowed_hosts) {
      if (lower_equal(h, a)) return false;
      if (a.starts_with("*.") && h.size() > a.size() - 1 && lower_equal(h.substr(h.size() - (a.size() - 1)), a.substr(1))) {
        return false;
      }
    }
  }
  return true;
}

void scanner::record(std::uint32_t entry, std::string_view encoding, std::uint64_t start, std::uint64_t end,
                     stream &st) {
  const auto &e = db_->entries()[entry];
  const auto &all = db_->entries();
  auto inside = [](std::uint64_t s, std::uint64_t t, const std::pair<std::uint64_t, std::uint64_t> &span) {
    return s >= span.first && t <= span.second;
  };
  auto is_rule = [](const database::entry &x) { return x.kind == kind::format || x.kind == kind::custom; };
  if (e.placeholder) {
    // What the command was given instead of a credential: a rule's match inside it is no finding.
    std::pair<std::uint64_t, std::uint64_t> span{start, end};
    for (std::size_t i = findings_.size(); i-- > 0;) {
      if (findings_[i].location == st.location && is_rule(all[hits_[i].entry]) &&
          inside(findings_[i].offset, hits_[i].end, span)) {
        findings_.erase(findings_.begin() + static_cast<std::ptrdiff_t>(i));
        hits_.erase(hits_.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    // Spans that ended before this piece began can hold no later match (a match is reported in the
    // piece where it ends). Not fewer: with the rules apart, a piece's placeholders are all found
    // before its rules' matches, so an earlier span of the piece may still be the one that counts.
    // At most most_spans are kept (each rule match is checked against them): past that, the oldest
    // goes, and a match inside it would be a finding (a refusal, never a secret let through).
    constexpr std::size_t most_spans = 256;
    std::erase_if(st.placeholders, [&](const auto &p) { return p.second < st.offset; });
    if (st.placeholders.size() >= most_spans) st.placeholders.erase(st.placeholders.begin());
    st.placeholders.push_back(span);
    return;
  }
  if (is_rule(e) && std::any_of(st.placeholders.begin(), st.placeholders.end(),
                                [&](const auto &p) { return inside(start, end, p); })) {
    return;
  }
  if (!wanted(e)) return;
  for (std::size_t i = 0; i < findings_.size(); ++i) {
    const auto &l = findings_[i].location;
    bool same = l == st.location || (l.size() > st.location.size() && l.starts_with(st.location) &&
                                     l[st.location.size()] == ':');
    if (hits_[i].entry == entry && same) return; // one finding per rule and location
  }
  const auto act = e.kind != kind::canary && opts_.mode == host_mode::report ? action::report : e.action;
  // A long WebSocket in report mode may find something in every message, each a location of its
  // own: past this many, only a finding that blocks is kept (the decision and the log line need
  // no more), so that the list stays bounded.
  constexpr std::size_t most_findings = 256;
  if (findings_.size() >= most_findings && act != action::block) return;
  finding f;
  f.rule = e.rule;
  f.kind = e.kind;
  f.action = act;
  f.location = st.location;
  f.offset = start;
  f.name = e.name;
  f.allowed_hosts = e.allowed_hosts;
  f.encoding = encoding;
  findings_.push_back(std::move(f));
  hits_.push_back({entry, end});
}

// A blocking finding of this stream that no placeholder can take away any more: its end is further
// back than the longest placeholder from `position`.
bool scanner::sure_block(const stream &st, std::uint64_t position) const {
  auto reach = db_->placeholder_reach();
  for (std::size_t i = 0; i < findings_.size(); ++i) {
    if (findings_[i].action == action::block && findings_[i].location == st.location &&
        (st.ended || hits_[i].end + reach < position)) {
      return true;
    }
  }
  return false;
}

const finding *scanner::blocking() const {
  static constexpr kind order[] = {kind::canary, kind::own_secret, kind::custom, kind::format};
  for (auto k : order) {
    for (const auto &f : findings_) {
      if (f.kind == k && f.action == action::block) return &f;
    }
  }
  return nullptr;
}

} // namespace sluice::scan
