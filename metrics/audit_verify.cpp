// `sluice audit verify` (audit_chain.hpp): reads the files in order, sorts their lines into one
// chain per writer, and walks each: the first link that fails is named with its file, line and
// seq, told apart as removed, inserted, reordered or edited by what the lines around it hold;
// every checkpoint's signature is checked; what after the last good checkpoint is not signed is
// said, and so is a chain that does not end with its closing checkpoint.
#include "metrics/audit_chain.hpp"

#include <boost/json.hpp>

#include <fstream>
#include <map>
#include <optional>
#include <ostream>
#include <sstream>
#include <stdexcept>

namespace sluice::metrics {

namespace {

namespace js = boost::json;

struct entry {
  std::size_t file = 0, line = 0;
  std::uint64_t seq = 0;
  std::string prev, hash;
  bool checkpoint = false, final = false;
  std::string key_id, sig, message; // a checkpoint's: what its signature covers
};

struct chain {
  std::string writer;
  std::vector<entry> entries;
};

struct state {
  const verify_request &req;
  std::ostream &out;
  std::optional<chain_verifier_key> key;
  std::vector<chain> chains;
  std::map<std::string, std::size_t, std::less<>> by_writer;
  std::size_t problems = 0, records = 0;
  std::string writer; // the chain being walked ("writer W: " starts its findings)

  std::string where(const entry &e) const { return req.files[e.file] + ":" + std::to_string(e.line); }
  void problem(const std::string &at, const std::string &what) {
    ++problems;
    out << at << ": " << (writer.empty() ? "" : "writer " + writer + ": ") << what << "\n";
  }
};

const js::object *object_at(const js::object &o, std::string_view key) {
  auto *v = o.if_contains(key);
  return v ? v->if_object() : nullptr;
}

// The chain's fields of one line: sluice's JSON line has them at the top, an OCSF event in its
// unmapped part (sluice's line). False when they are missing.
bool chain_fields(const js::object &top, entry &e, std::string &writer) {
  const js::object *o = &top;
  if (!top.contains("seq")) {
    if (auto *u = object_at(top, "unmapped")) o = u;
  }
  auto *w = o->if_contains("writer");
  auto *s = o->if_contains("seq");
  auto *p = o->if_contains("prev_hash");
  if (!w || !w->is_string() || !s || !p || !p->is_string()) return false;
  if (s->is_uint64()) {
    e.seq = s->as_uint64();
  } else if (s->is_int64() && s->as_int64() > 0) {
    e.seq = static_cast<std::uint64_t>(s->as_int64());
  } else {
    return false;
  }
  writer = w->as_string();
  e.prev = p->as_string();
  if (auto *t = top.if_contains("type"); t && t->is_string() && t->as_string() == "checkpoint") {
    e.checkpoint = true;
    auto *f = top.if_contains("final");
    e.final = f && f->is_bool() && f->as_bool();
    if (auto *k = top.if_contains("key_id"); k && k->is_string()) e.key_id = k->as_string();
    if (auto *g = top.if_contains("sig"); g && g->is_string()) e.sig = g->as_string();
  }
  return true;
}

void read_file(state &st, std::size_t index, line_hasher &hasher) {
  const auto &path = st.req.files[index];
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read '" + path + "'; give the access log's path (and rotated ones first)");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  std::size_t pos = 0, n = 0;
  while (pos < text.size()) {
    auto nl = text.find('\n', pos);
    bool cut = nl == std::string::npos;
    std::string_view line(text.data() + pos, (cut ? text.size() : nl) - pos);
    pos = cut ? text.size() : nl + 1;
    ++n;
    std::string at = path + ":" + std::to_string(n);
    if (cut) {
      st.problem(at, "the last line is cut short (no line break): the file was truncated, or is being written");
      break;
    }
    entry e;
    e.file = index;
    e.line = n;
    std::string writer;
    std::error_code ec;
    js::value v = js::parse(line, ec);
    if (ec || !v.is_object()) {
      st.problem(at, "not a JSON line: edited, or inserted");
      continue;
    }
    if (!chain_fields(v.as_object(), e, writer)) {
      st.problem(at, "a line without the chain's writer, seq and prev_hash (written with [log] chain = false, or "
                     "edited): not covered");
      continue;
    }
    if (!st.req.writer.empty() && writer != st.req.writer) continue;
    e.hash = hasher.hex(line);
    if (e.checkpoint && !e.sig.empty()) {
      auto cut_at = line.rfind(",\"sig\":\"");
      if (cut_at != std::string_view::npos) e.message = std::string(line.substr(0, cut_at));
    }
    auto [it, added] = st.by_writer.try_emplace(writer, st.chains.size());
    if (added) st.chains.push_back({writer, {}});
    st.chains[it->second].entries.push_back(std::move(e));
    if (!st.chains[it->second].entries.back().checkpoint) ++st.records;
  }
}

std::string seq_text(const entry &e) { return (e.checkpoint ? "checkpoint seq " : "seq ") + std::to_string(e.seq); }

// The link into e[i] failed (it is not seq s with the hash of e[i-1]): says what most likely
// happened, naming the record, from what the lines around it hold.
void classify(state &st, const std::vector<entry> &e, std::size_t i, std::size_t end) {
  const entry &before = e[i - 1], &here = e[i];
  const std::uint64_t s = before.seq + 1;
  const std::string &p = before.hash;
  const bool next = i + 1 < end;
  auto later_with_seq = [&](std::uint64_t want) -> const entry * {
    for (std::size_t j = i + 1; j < end; ++j) {
      if (e[j].seq == want) return &e[j];
    }
    return nullptr;
  };
  auto copy_later = [&] {
    for (std::size_t j = i + 1; j < end; ++j) {
      if (e[j].hash == here.hash) return true;
    }
    return false;
  };
  // A later record that is not a copy of this one, with seq s still to come: lines moved.
  const entry *missing = here.seq > s ? later_with_seq(s) : nullptr;
  if (missing && !copy_later()) {
    st.problem(st.where(here), seq_text(here) + " comes before seq " + std::to_string(s) + " (" + st.where(*missing) +
                                   "): records reordered");
  } else if (next && e[i + 1].seq == s && e[i + 1].prev == p) {
    st.problem(st.where(here), seq_text(here) + " inserted: the next line (seq " + std::to_string(s) +
                                   ") follows seq " + std::to_string(before.seq) + " (" + st.where(before) + ") directly");
  } else if (here.checkpoint && here.prev != p && !(next && e[i + 1].prev == here.hash)) {
    // A checkpoint that links to nothing here: signed for another run's chain (or edited).
    st.problem(st.where(here), seq_text(here) + " does not link to seq " + std::to_string(before.seq) + " (" +
                                   st.where(before) + "): the checkpoint comes from another run, or was edited");
  } else if (here.seq == s) {
    if (next && e[i + 1].prev == here.hash) {
      st.problem(st.where(before), seq_text(before) + " edited: its hash is not the prev_hash seq " +
                                       std::to_string(s) + " (" + st.where(here) + ") holds");
    } else if (next) {
      st.problem(st.where(here), seq_text(here) + " edited or replaced: its prev_hash is not the hash of seq " +
                                     std::to_string(before.seq) + ", and seq " + std::to_string(e[i + 1].seq) +
                                     "'s prev_hash is not its hash");
    } else {
      st.problem(st.where(here), seq_text(here) + " does not link to seq " + std::to_string(before.seq) + " (" +
                                     st.where(before) + "): it or seq " + std::to_string(before.seq) + " was edited");
    }
  } else if (const entry *moved = here.seq < s ? later_with_seq(s) : nullptr) {
    st.problem(st.where(here), seq_text(here) + " comes before seq " + std::to_string(s) + " (" + st.where(*moved) +
                                   "): records reordered");
  } else if (here.seq > s && here.prev != p) {
    std::string which = here.seq == s + 1 ? "record " + std::to_string(s)
                                          : "records " + std::to_string(s) + ".." + std::to_string(here.seq - 1);
    st.problem(st.where(here), seq_text(here) + " follows seq " + std::to_string(before.seq) + " (" +
                                   st.where(before) + "): " + which + " removed");
  } else if (here.prev == p) {
    st.problem(st.where(here), seq_text(here) + " edited: it links to seq " + std::to_string(before.seq) +
                                   " but says seq " + std::to_string(here.seq));
  } else {
    st.problem(st.where(here), seq_text(here) + " out of place after seq " + std::to_string(before.seq) + " (" +
                                   st.where(before) + "): inserted, or replayed from elsewhere");
  }
}

// A checkpoint's signature against the key given. Returns whether it holds.
bool check_signature(state &st, const entry &c) {
  if (!st.key) return true;
  std::string at = st.where(c);
  if (c.sig.empty()) {
    st.problem(at, seq_text(c) + " is not signed (its writer had no signing key)");
    return false;
  }
  if (c.key_id != st.key->key_id()) {
    st.problem(at, seq_text(c) + " was signed by another key (key_id " + c.key_id +
                       ", the key given is " + st.key->key_id() + "): a checkpoint from another run, or the wrong --key");
    return false;
  }
  if (c.message.empty() || !st.key->verify(c.message, c.sig)) {
    st.problem(at, seq_text(c) + "'s signature does not verify: the checkpoint was edited");
    return false;
  }
  return true;
}

// One run of a writer's chain: entries [b, end), from a first record (seq 1) or from wherever the
// files given begin.
void walk_segment(state &st, const chain &c, std::size_t b, std::size_t end) {
  const auto &e = c.entries;
  bool intact = true;
  if (e[b].seq == 1 && e[b].prev != chain_genesis) {
    st.problem(st.where(e[b]), "seq 1 edited: its prev_hash is not the chain's start");
    intact = false;
  } else if (e[b].seq != 1) {
    st.out << st.where(e[b]) << ": writer " << c.writer << " begins at seq " << e[b].seq
           << " (its earlier records are in a file not given, rotated before it)\n";
  }
  for (std::size_t i = b + 1; intact && i < end; ++i) {
    if (e[i].seq == e[i - 1].seq + 1 && e[i].prev == e[i - 1].hash) continue;
    classify(st, e, i, end);
    intact = false;
  }
  const entry *signed_up_to = nullptr;
  for (std::size_t i = b; i < end; ++i) {
    if (e[i].checkpoint && check_signature(st, e[i])) signed_up_to = &e[i];
  }
  if (!intact) return; // what is signed means little past a broken link: the break is the finding
  const entry &last = e[end - 1];
  if (signed_up_to == &last && last.final) return;
  std::string tail;
  std::size_t first = signed_up_to ? static_cast<std::size_t>(signed_up_to - e.data()) + 1 : b;
  if (first < end) {
    tail = "records " + std::to_string(e[first].seq) + ".." + std::to_string(last.seq) + " (" + st.where(e[first]) +
           " to " + st.where(last) + ") " +
           (signed_up_to ? "after the last checkpoint (seq " + std::to_string(signed_up_to->seq) + ", " +
                               st.where(*signed_up_to) + ") are not signed"
                         : "are not signed (no checkpoint covers them)");
  } else {
    tail = "the last checkpoint (seq " + std::to_string(last.seq) + ") is not the closing one";
  }
  std::string what = "the chain ends at seq " + std::to_string(last.seq) +
                     " without its closing checkpoint; " + tail +
                     ": the end was cut, or the writer is still running or stopped without closing its log";
  if (st.req.running) {
    st.out << st.where(last) << ": writer " << c.writer << ": " << what << " (--running: not counted)\n";
  } else {
    st.problem(st.where(last), what);
  }
}

} // namespace

int verify_chain(const verify_request &req, std::ostream &out) {
  if (req.files.empty()) throw std::runtime_error("give the access log's files (rotated ones first)");
  state st{req, out, std::nullopt, {}, {}, 0, 0, {}};
  if (!req.key_text.empty()) st.key = chain_verifier_key::from_text(req.key_text);
  line_hasher hasher;
  for (std::size_t i = 0; i < req.files.size(); ++i) read_file(st, i, hasher);
  if (!req.writer.empty() && st.chains.empty()) {
    st.problem(req.files.front(), "no line of writer " + req.writer + " in the files given");
  }
  for (const auto &c : st.chains) {
    st.writer = c.writer;
    // A writer's chain starts again at seq 1 when it was started again under the same name.
    std::size_t b = 0;
    for (std::size_t i = 1; i <= c.entries.size(); ++i) {
      if (i == c.entries.size() || (c.entries[i].seq == 1 && c.entries[i].prev == chain_genesis)) {
        walk_segment(st, c, b, i);
        b = i;
      }
    }
  }
  st.writer.clear();
  if (!st.key) out << "signatures not checked: give --key with the writer's public key\n";
  if (st.problems == 0) {
    out << "verified: " << st.records << " record" << (st.records == 1 ? "" : "s") << " of " << st.chains.size()
        << " writer" << (st.chains.size() == 1 ? "" : "s") << (st.key ? ", signed by key " + st.key->key_id() : "")
        << "\n";
    return 0;
  }
  out << "NOT verified: " << st.problems << " problem" << (st.problems == 1 ? "" : "s") << "\n";
  return 1;
}

} // namespace sluice::metrics
