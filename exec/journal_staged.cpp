#include "exec/journal_impl.hpp"
#include "exec/workspace_guard.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fnmatch.h>
#include <sstream>
#include <unistd.h>

// A staged run's changes, into the workspace (`sluice apply`, all or some paths, undoable as a
// journaled run's are) or thrown away (`sluice discard`).
namespace sluice::exec::journal {
using namespace detail;
namespace {

namespace fs = std::filesystem;

// Shell, editor, Git and agent settings a staged run made: tools outside read them, so they wait
// for a person's explicit yes (--include-guarded).
bool guarded(const std::string &rel) {
  std::vector<std::string> parts;
  std::stringstream ss(rel);
  for (std::string p; std::getline(ss, p, '/');) parts.push_back(p);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    for (const auto &g : guarded_names()) {
      auto slash = g.find('/');
      if (slash == std::string::npos ? ::fnmatch(g.c_str(), parts[i].c_str(), 0) == 0
                                     : i > 0 && ::fnmatch(g.substr(0, slash).c_str(), parts[i - 1].c_str(), 0) == 0 &&
                                           ::fnmatch(g.substr(slash + 1).c_str(), parts[i].c_str(), 0) == 0) {
        return true;
      }
    }
    if (parts[i] == ".git" && i + 1 < parts.size() &&
        (parts[i + 1] == "config" || parts[i + 1] == "hooks" || parts[i + 1] == "commondir")) {
      return true;
    }
  }
  return false;
}

// The guarded paths at or under `rel` in the layer.
std::vector<std::string> guarded_in(const std::string &upper, const std::string &rel) {
  std::vector<std::string> out;
  if (guarded(rel)) out.push_back(rel);
  std::error_code ec;
  std::string top = join(upper, rel);
  if (!fs::is_directory(fs::symlink_status(top, ec))) return out;
  for (auto it = fs::recursive_directory_iterator(top, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::string r = rel + it->path().string().substr(top.size());
    if (guarded(r)) out.push_back(r);
  }
  return out;
}

} // namespace

int apply_staged(const std::string &home, const std::string &id, const std::vector<std::string> &paths,
                 bool include_guarded) {
  std::string runs = runs_dir(home);
  std::string dir = find_run(runs, id);
  auto meta = read_meta(dir);
  std::string rid = text(meta, "id"), ws = text(meta, "workspace"), state = text(meta, "state");
  if (state != "staged" && state != "interrupted") {
    std::fprintf(stderr, "sluice: run %s is %s, not staged: nothing of it waits to be applied\n", rid.c_str(), state.c_str());
    return 1;
  }
  std::string holder;
  int fd = take_lock(runs, ws, holder);
  if (fd < 0) {
    std::fprintf(stderr, "sluice: a journaled run (%s) is working in %s; apply once it has ended\n", holder.c_str(), ws.c_str());
    return 1;
  }
  std::vector<std::string> chosen;
  for (auto p : paths) { // relative to the workspace, or absolute inside it
    if (p.rfind(ws + "/", 0) == 0) p = p.substr(ws.size() + 1);
    while (p.rfind("./", 0) == 0) p = p.substr(2);
    while (!p.empty() && p.back() == '/') p.pop_back();
    if (p.empty() || p[0] == '/' || p == ".." || p.rfind("../", 0) == 0 || p.find("/../") != std::string::npos) {
      std::fprintf(stderr, "sluice: %s is not a path in the workspace %s\n", p.c_str(), ws.c_str());
      ::close(fd);
      return 1;
    }
    chosen.push_back(p);
  }
  auto done = ops_of(meta);
  int batch = 0;
  for (const auto &o : done) batch = std::max(batch, o.batch + 1);
  std::vector<op> all, now;
  plan_dir(dir + "/upper", ws, "", all);
  std::vector<std::string> held;
  for (auto &o : all) {
    bool pick = chosen.empty() || std::any_of(chosen.begin(), chosen.end(), [&](const std::string &c) {
      return o.path == c || o.path.rfind(c + "/", 0) == 0;
    });
    if (!pick || (o.kind == 'm' && !chosen.empty())) continue;
    if (o.kind == 'r' && o.after && !include_guarded) {
      auto g = guarded_in(dir + "/upper", o.path);
      if (!g.empty()) {
        held.insert(held.end(), g.begin(), g.end());
        continue;
      }
    }
    o.batch = batch;
    now.push_back(o);
  }
  for (const auto &o : now) done.push_back(o);
  meta["ops"] = ops_json(done);
  meta["state"] = "applying";
  write_meta(dir, meta); // recorded first: a crash from here on is finished by --recover
  apply_steps(dir, ws, done);
  std::vector<op> left;
  plan_dir(dir + "/upper", ws, "", left);
  bool rest = std::any_of(left.begin(), left.end(), [](const op &o) { return o.kind == 'r'; });
  auto c = count(done);
  meta["ops"] = ops_json(done);
  meta["state"] = rest ? "staged" : "applied";
  meta["created"] = c.created;
  meta["modified"] = c.modified;
  meta["deleted"] = c.deleted;
  write_meta(dir, meta);
  ::close(fd);
  auto n = count(now);
  std::printf("run %s: %zu created, %zu modified, %zu deleted applied to %s%s\n", rid.c_str(), n.created, n.modified,
              n.deleted, ws.c_str(), rest ? "; the rest stays staged" : "");
  for (const auto &h : held) {
    std::printf("held back: %s (shell, editor, Git or agent settings: review it with sluice diff %s, then "
                "apply it with --include-guarded)\n", h.c_str(), rid.c_str());
  }
  return 0;
}

int discard(const std::string &home, const std::string &id) {
  std::string runs = runs_dir(home);
  std::string dir = find_run(runs, id);
  auto meta = read_meta(dir);
  std::string rid = text(meta, "id"), ws = text(meta, "workspace"), state = text(meta, "state");
  if (state != "staged" && state != "interrupted") {
    std::fprintf(stderr, "sluice: run %s is %s, not staged: nothing to discard (sluice undo takes back an applied run)\n",
                 rid.c_str(), state.c_str());
    return 1;
  }
  std::string holder;
  int fd = take_lock(runs, ws, holder);
  if (fd < 0) {
    std::fprintf(stderr, "sluice: a journaled run (%s) is working in %s; discard once it has ended\n", holder.c_str(), ws.c_str());
    return 1;
  }
  std::error_code ec;
  if (ops_of(meta).empty()) {
    remove_tree(dir);
  } else { // part of it was applied: that part stays undoable
    remove_tree(dir + "/upper");
    meta["state"] = "applied";
    write_meta(dir, meta);
  }
  ::close(fd);
  std::printf("run %s discarded: nothing more of it reaches %s\n", rid.c_str(), ws.c_str());
  return 0;
}

} // namespace sluice::exec::journal
