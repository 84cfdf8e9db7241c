#include "exec/journal_impl.hpp"

#include <cstdio>
#include <ctime>
#include <map>

// What the journal shows and takes back: `sluice runs`, `sluice undo`, `sluice diff`.
namespace sluice::exec::journal {
using namespace detail;
namespace {

std::string when(std::int64_t t) {
  std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  ::localtime_r(&tt, &tm);
  char out[32];
  std::strftime(out, sizeof out, "%Y-%m-%d %H:%M:%S", &tm);
  return out;
}

} // namespace

int list_runs(const std::string &home, bool files, bool json) {
  std::string runs = runs_dir(home);
  js::array all;
  for (const auto &id : run_ids(runs)) {
    js::object meta;
    try {
      meta = read_meta(runs + "/" + id);
    } catch (const std::exception &) {
      continue;
    }
    if (json) {
      if (!files) meta.erase("ops");
      all.push_back(std::move(meta));
      continue;
    }
    std::string cmd;
    if (auto *a = meta.if_contains("argv"); a && a->is_array()) {
      for (const auto &v : a->as_array()) cmd += (cmd.empty() ? "" : " ") + std::string(v.as_string());
    }
    if (cmd.size() > 60) cmd = cmd.substr(0, 57) + "...";
    auto c = count(ops_of(meta));
    auto *s = meta.if_contains("started");
    std::printf("%-16s %-19s %-11s +%-4zu ~%-4zu -%-4zu %s  %s\n", id.c_str(),
                s ? when(s->to_number<std::int64_t>()).c_str() : "-", text(meta, "state").c_str(), c.created,
                c.modified, c.deleted, text(meta, "workspace").c_str(), cmd.c_str());
    if (files) {
      for (const auto &o : ops_of(meta)) {
        if (o.kind != 'r') continue;
        std::printf("    %c %s\n", !o.after ? 'D' : o.before ? 'M' : 'A', o.path.c_str());
      }
    }
  }
  if (json) std::printf("%s\n", js::serialize(all).c_str());
  return 0;
}

int undo(const std::string &home, const std::string &id, bool force) {
  std::string runs = runs_dir(home);
  std::string dir = find_run(runs, id);
  auto meta = read_meta(dir);
  std::string rid = text(meta, "id"), ws = text(meta, "workspace"), state = text(meta, "state");
  if (state == "undone") {
    std::fprintf(stderr, "sluice: run %s is undone already\n", rid.c_str());
    return 1;
  }
  if (state == "staged" && !ops_of(meta).empty()) {
    std::fprintf(stderr, "sluice: run %s is applied in part and the rest is staged: apply the rest (sluice apply %s, "
                         "--include-guarded for what was held back) or discard it (sluice discard %s), then undo\n",
                 rid.c_str(), rid.c_str(), rid.c_str());
    return 1;
  }
  if (state != "applied" && state != "undoing") {
    std::fprintf(stderr, "sluice: run %s is %s: nothing of it is in %s to undo%s\n", rid.c_str(), state.c_str(),
                 ws.c_str(), state == "applying" ? " yet (sluice undo --recover finishes it first)" : "");
    return 1;
  }
  std::string holder;
  int fd = take_lock(runs, ws, holder);
  if (fd < 0) {
    std::fprintf(stderr, "sluice: a journaled run (%s) is working in %s; undo once it has ended\n", holder.c_str(), ws.c_str());
    return 1;
  }
  auto ops = ops_of(meta);
  if (state == "applied" && !force) {
    // Changed again since the run (by a later run or a person): refused, with the paths.
    // Each path as its last step left it (a staged run applied in parts may have several).
    std::map<std::string, std::string> last;
    for (const auto &o : ops) {
      if (o.kind == 'r' && !o.stamp.empty()) last[o.path] = o.stamp;
    }
    std::vector<std::string> changed;
    for (const auto &[path, stamp] : last) {
      if (stamp_of(join(ws, path)) != stamp) changed.push_back(path);
    }
    if (!changed.empty()) {
      std::fprintf(stderr, "sluice: not undone: these paths changed after run %s, and undoing it would lose that:\n",
                   rid.c_str());
      for (const auto &p : changed) std::fprintf(stderr, "  %s\n", join(ws, p).c_str());
      std::fprintf(stderr, "undo the later runs first (sluice runs), or give --force to put back run %s's "
                           "before-state all the same\n", rid.c_str());
      ::close(fd);
      return 1;
    }
  }
  meta["state"] = "undoing";
  write_meta(dir, meta);
  undo_steps(dir, ws, ops);
  meta["state"] = "undone";
  write_meta(dir, meta);
  ::close(fd);
  auto c = count(ops);
  std::printf("run %s undone in %s: %zu created removed, %zu modified and %zu deleted put back\n", rid.c_str(),
              ws.c_str(), c.created, c.modified, c.deleted);
  return 0;
}

int diff(const std::string &home, const std::string &id) {
  std::string dir = find_run(runs_dir(home), id);
  auto meta = read_meta(dir);
  std::string state = text(meta, "state"), ws = text(meta, "workspace");
  bool staged = state == "staged" || state == "interrupted";
  if (state != "applied" && !staged) {
    std::fprintf(stderr, "sluice: run %s is %s; it has no changes to show\n", text(meta, "id").c_str(), state.c_str());
    return 1;
  }
  std::vector<op> ops;
  if (staged) {
    plan_dir(dir + "/upper", ws, "", ops); // what applying it would do: the workspace, then the layer
  } else {
    ops = ops_of(meta);
  }
  std::fflush(stdout);
  for (const auto &o : ops) {
    if (o.kind != 'r') continue;
    std::printf("%c %s\n", !o.after ? 'D' : o.before ? 'M' : 'A', o.path.c_str());
    std::fflush(stdout);
    // A side that has nothing is a path that does not exist: -N reads it as empty, file or tree.
    std::string absent = dir + "/.absent";
    std::string from = staged ? (o.before ? join(ws, o.path) : absent) : before_of(dir, o);
    std::string to = !o.after ? absent : staged ? join(dir + "/upper", o.path) : join(ws, o.path);
    run_program({"/usr/bin/diff", "-ruN", "--no-dereference", from, to});
  }
  return 0;
}

} // namespace sluice::exec::journal
