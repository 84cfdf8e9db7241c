#include "exec/journal_impl.hpp"

#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

// A journaled run's life: its directory and lock before the sandbox starts (and what a crash left
// of earlier runs finished first), then its changes applied to the workspace or kept staged.
namespace sluice::exec::journal {
using namespace detail;
namespace {

namespace fs = std::filesystem;

std::uint64_t bytes_of(const std::string &dir) {
  std::uint64_t n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st {};
    if (lexists(it->path().string(), &st) && S_ISREG(st.st_mode)) n += static_cast<std::uint64_t>(st.st_blocks) * 512;
  }
  return n;
}

// Runs of `workspace` (every workspace when empty) that a crash left in the middle: applying or
// undoing ones are finished; a running one whose sluice is gone (no lock) is marked interrupted,
// its changes kept in its layer, the workspace untouched. Says what it did on stderr.
void finish_interrupted(const std::string &runs, const std::string &workspace) {
  for (const auto &id : run_ids(runs)) {
    std::string dir = runs + "/" + id;
    js::object meta;
    try {
      meta = read_meta(dir);
    } catch (const std::exception &) {
      continue;
    }
    std::string state = text(meta, "state"), ws = text(meta, "workspace");
    if (!workspace.empty() && ws != workspace) continue;
    if (state != "applying" && state != "undoing" && state != "running") continue;
    std::string holder;
    int fd = take_lock(runs, ws, holder);
    if (fd < 0) continue; // its sluice is still at work
    std::error_code ec;
    bool staged = meta.if_contains("staged") != nullptr;
    if (state == "running" && staged) { // a staged run's command ended with its sluice: still staged
      meta["state"] = "staged";
      write_meta(dir, meta);
      ::close(fd);
      continue;
    }
    if (state == "running" && fs::is_empty(dir + "/upper", ec)) { // stopped before it changed anything
      remove_tree(dir);
      ::close(fd);
      continue;
    }
    auto ops = ops_of(meta);
    if (state == "applying") {
      apply_steps(dir, ws, ops);
      meta["ops"] = ops_json(ops);
      meta["state"] = "applied";
      std::fprintf(stderr, "sluice: run %s was stopped while its changes were applied to %s; finished applying them "
                           "(sluice undo %s puts the workspace back)\n", id.c_str(), ws.c_str(), id.c_str());
    } else if (state == "undoing") {
      undo_steps(dir, ws, ops);
      meta["state"] = "undone";
      std::fprintf(stderr, "sluice: run %s was stopped while it was undone; finished undoing it in %s\n",
                   id.c_str(), ws.c_str());
    } else {
      meta["state"] = "interrupted";
      std::fprintf(stderr, "sluice: run %s in %s ended before sluice applied its changes; the workspace has "
                           "none of them (they are kept in %s/upper)\n", id.c_str(), ws.c_str(), dir.c_str());
    }
    write_meta(dir, meta);
    ::close(fd);
  }
}

void prune(const std::string &runs, const std::string &keep, const limits &lim) {
  auto ids = run_ids(runs); // newest first
  std::uint64_t total = 0;
  for (const auto &id : ids) {
    std::string dir = runs + "/" + id;
    if (id == keep) continue;
    js::object meta;
    try {
      meta = read_meta(dir);
    } catch (const std::exception &) {
      continue;
    }
    std::string state = text(meta, "state");
    // Never what holds changes not in the workspace: a staged or interrupted run's layer.
    if (state == "running" || state == "applying" || state == "undoing" || state == "staged" ||
        state == "interrupted") {
      continue;
    }
    auto *s = meta.if_contains("started");
    bool old = s && now_seconds() - s->to_number<std::int64_t>() > lim.max_age_seconds;
    std::uint64_t size = bytes_of(dir);
    if (old || total + size > lim.max_bytes) {
      std::error_code ec;
      remove_tree(dir);
      continue;
    }
    total += size;
  }
}

run start_run(const std::string &home, const std::string &id, const std::string &continue_id,
              const std::string &workspace, const std::vector<std::string> &argv, const limits &lim, bool staged) {
  if (home.empty() || home[0] != '/') {
    throw std::runtime_error("the journal keeps runs in the caller's home, and HOME is unset; set HOME");
  }
  std::string runs = runs_dir(home);
  // The overlay's options name these paths: ',' ':' and '\' would be read as separators.
  for (const auto &p : {workspace, runs}) {
    if (p.find_first_of(",:\\") != std::string::npos) {
      throw std::runtime_error("the journal cannot layer " + p + ": the path holds ',', ':' or '\\', which "
                               "overlay options cannot carry; rename it or run without --journal");
    }
  }
  std::error_code ec;
  fs::create_directories(runs, ec);
  if (ec) throw std::runtime_error("cannot make " + runs + ": " + ec.message());
  ::chmod(runs.c_str(), 0700);
  finish_interrupted(runs, workspace);
  run r;
  r.id = continue_id.empty() ? id : continue_id;
  r.dir = runs + "/" + r.id;
  r.upper = r.dir + "/upper";
  r.work = r.dir + "/work";
  r.workspace = workspace;
  js::object meta;
  if (!continue_id.empty()) {
    // A staged run goes on: its own workspace, and nothing else at work there.
    if (continue_id.find('/') != std::string::npos || continue_id[0] == '.' || !lexists(r.dir + "/meta.json")) {
      throw std::runtime_error("no staged run " + continue_id + " in " + runs + " (sluice runs lists them)");
    }
    meta = read_meta(r.dir);
    if (text(meta, "state") != "staged") {
      throw std::runtime_error("run " + continue_id + " is " + text(meta, "state") + ", not staged; start a new one with --stage");
    }
    if (text(meta, "workspace") != workspace) {
      throw std::runtime_error("staged run " + continue_id + " is of " + text(meta, "workspace") + ", not " + workspace +
                               "; run from there");
    }
  }
  std::string holder;
  r.lock_fd = take_lock(runs, workspace, holder);
  if (r.lock_fd < 0) {
    throw std::runtime_error("another journaled run (" + holder + ") is working in " + workspace +
                             "; one at a time, so that each can be undone: wait for it to end");
  }
  set_holder(r.lock_fd, r.id);
  if (continue_id.empty()) {
    for (const auto &d : {r.dir, r.upper, r.work}) {
      if (::mkdir(d.c_str(), 0700) != 0) {
        ::close(r.lock_fd);
        fail("cannot make the run's directory", d);
      }
    }
    js::array args;
    for (const auto &a : argv) args.push_back(js::string(a.substr(0, 4096)));
    meta = {{"id", r.id}, {"workspace", workspace}, {"argv", std::move(args)}, {"started", now_seconds()}};
    if (staged) meta["staged"] = true;
  } else {
    // The overlay's scratch, made anew (a run that stopped with its sluice leaves the volatile
    // mark there, which a new mount would refuse).
    remove_tree(r.work);
    if (::mkdir(r.work.c_str(), 0700) != 0) {
      ::close(r.lock_fd);
      fail("cannot make the run's directory", r.work);
    }
  }
  meta["state"] = "running";
  write_meta(r.dir, meta);
  prune(runs, r.id, lim);
  return r;
}

} // namespace

run prepare(const std::string &home, const std::string &id, const std::string &workspace,
            const std::vector<std::string> &argv, const limits &lim) {
  return start_run(home, id, "", workspace, argv, lim, false);
}

run prepare_stage(const std::string &home, const std::string &id, const std::string &continue_id,
                  const std::string &workspace, const std::vector<std::string> &argv, const limits &lim) {
  return start_run(home, id, continue_id, workspace, argv, lim, true);
}

counts stage_end(run &r, int exit_status) {
  auto meta = read_meta(r.dir);
  std::vector<op> ops;
  plan_dir(r.upper, r.workspace, "", ops);
  auto c = count(ops);
  meta["state"] = "staged";
  meta["ended"] = now_seconds();
  meta["exit_status"] = exit_status;
  meta["created"] = c.created;
  meta["modified"] = c.modified;
  meta["deleted"] = c.deleted;
  write_meta(r.dir, meta);
  std::error_code ec;
  remove_tree(r.work); // the overlay's scratch; made again if the run goes on
  if (r.lock_fd >= 0) ::close(r.lock_fd);
  r.lock_fd = -1;
  return c;
}

counts apply(run &r, int exit_status) {
  auto meta = read_meta(r.dir);
  std::vector<op> ops;
  plan_dir(r.upper, r.workspace, "", ops);
  meta["ops"] = ops_json(ops);
  meta["state"] = "applying";
  meta["ended"] = now_seconds();
  meta["exit_status"] = exit_status;
  write_meta(r.dir, meta); // the plan first: a crash from here on is finished by the next run
  apply_steps(r.dir, r.workspace, ops);
  auto c = count(ops);
  meta["ops"] = ops_json(ops);
  meta["state"] = "applied";
  meta["created"] = c.created;
  meta["modified"] = c.modified;
  meta["deleted"] = c.deleted;
  write_meta(r.dir, meta);
  std::error_code ec;
  remove_tree(r.work);
  remove_tree(r.upper); // what is left: the directories both sides had
  if (r.lock_fd >= 0) ::close(r.lock_fd);
  r.lock_fd = -1;
  return c;
}

int recover(const std::string &home) {
  finish_interrupted(runs_dir(home), "");
  return 0;
}

} // namespace sluice::exec::journal
