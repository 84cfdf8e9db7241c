#include "exec/journal.hpp"
#include "exec/workspace_guard.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <fnmatch.h>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

namespace sluice::exec::journal {
namespace {

namespace fs = std::filesystem;

std::string join(const std::string &a, const std::string &rel) { return rel.empty() ? a : a + "/" + rel; }
namespace js = boost::json;

// One step of a run's record. "r": what is at `path` is replaced by the upper layer's entry
// (after), or removed (a whiteout: !after); what was there (before) is kept in before/. "m": a
// directory both sides have gets the upper one's mode and times.
struct op {
  std::string path;
  char kind = 'r';
  bool before = false, after = false;
  mode_t mode = 0, umode = 0;              // "m": the workspace's and the upper layer's mode
  timespec mtime{}, umtime{};              // and modification times
  std::string stamp;                        // "r" with after: what the workspace held once applied
  int batch = 0;                            // a staged run's n-th apply: its before/ is before/N
};

// Where step `o` keeps what it replaced.
std::string before_of(const std::string &dir, const op &o) {
  return join(o.batch == 0 ? dir + "/before" : dir + "/before." + std::to_string(o.batch), o.path);
}

// rm -rf that also takes directories whose mode shuts their owner out (the overlay makes its
// work/work with mode 0): each is given back to its owner first.
void remove_tree(const std::string &p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    ::chmod(p.c_str(), 0700);
    if (DIR *d = ::opendir(p.c_str())) {
      std::vector<std::string> names;
      while (dirent *e = ::readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") names.push_back(n);
      }
      ::closedir(d);
      for (const auto &n : names) remove_tree(p + "/" + n);
    }
    ::rmdir(p.c_str());
  } else {
    ::unlink(p.c_str());
  }
}

bool lexists(const std::string &p, struct stat *out = nullptr) {
  struct stat st {};
  bool ok = ::lstat(p.c_str(), &st) == 0;
  if (ok && out) *out = st;
  return ok;
}

[[noreturn]] void fail(const std::string &what, const std::string &path) {
  throw std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}

void make_parents(const std::string &p) {
  std::error_code ec;
  fs::create_directories(fs::path(p).parent_path(), ec);
  if (ec) throw std::runtime_error("cannot make the directories of " + p + ": " + ec.message());
}

// Runs a program of the system (cp, rm, diff) and waits for it; its exit status.
int run_program(const std::vector<std::string> &argv) {
  pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    std::vector<char *> args;
    for (const auto &a : argv) args.push_back(const_cast<char *>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// A rename; across file systems (the run's directory elsewhere than the workspace), a copy that
// keeps modes, times and links (cp -a), then the source removed.
void move_path(const std::string &from, const std::string &to) {
  if (::rename(from.c_str(), to.c_str()) == 0) return;
  if (errno != EXDEV) fail("cannot move " + from + " to", to);
  if (run_program({"/bin/cp", "-a", "--no-target-directory", from, to}) != 0) {
    throw std::runtime_error("cannot copy " + from + " to " + to + " (cp -a failed)");
  }
  remove_tree(from);
  if (lexists(from)) throw std::runtime_error("cannot remove " + from + " after copying it");
}

bool whiteout(const struct stat &st) { return S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0); }

bool opaque(const std::string &p) {
  char v[4] = {};
  for (const char *name : {"user.overlay.opaque", "trusted.overlay.opaque"}) {
    if (::lgetxattr(p.c_str(), name, v, sizeof v) > 0 && v[0] == 'y') return true;
  }
  return false;
}

// The overlay's own attributes (user.overlay.*) stay with the layer, not the workspace.
void strip_overlay_xattrs(const std::string &p) {
  auto strip = [](const std::string &one) {
    char names[4096];
    ssize_t n = ::llistxattr(one.c_str(), names, sizeof names);
    for (ssize_t i = 0; i < n;) {
      std::string name(names + i);
      if (name.rfind("user.overlay.", 0) == 0) ::lremovexattr(one.c_str(), name.c_str());
      i += static_cast<ssize_t>(name.size()) + 1;
    }
  };
  strip(p);
  struct stat st {};
  if (!lexists(p, &st) || !S_ISDIR(st.st_mode)) return;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    strip(it->path().string());
  }
}

// What a path holds, as a string that changes when anything under it does: type, mode, size,
// modification time and inode of it and of everything below it.
std::string stamp_of(const std::string &p) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (i * 8)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  auto one = [&](const std::string &rel, const struct stat &st) {
    for (char c : rel) mix(static_cast<unsigned char>(c));
    mix(st.st_mode);
    mix(st.st_ino);
    if (!S_ISDIR(st.st_mode)) {
      mix(static_cast<std::uint64_t>(st.st_size));
      mix(static_cast<std::uint64_t>(st.st_mtim.tv_sec));
      mix(static_cast<std::uint64_t>(st.st_mtim.tv_nsec));
    }
  };
  struct stat st {};
  if (!lexists(p, &st)) return "absent";
  one("", st);
  if (S_ISDIR(st.st_mode)) {
    std::vector<std::pair<std::string, struct stat>> below;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      struct stat s {};
      if (lexists(it->path().string(), &s)) below.emplace_back(it->path().string().substr(p.size()), s);
    }
    std::sort(below.begin(), below.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
    for (const auto &[rel, s] : below) one(rel, s);
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}


op replace(const std::string &path, bool before, bool after) {
  op o;
  o.path = path;
  o.before = before;
  o.after = after;
  return o;
}

// The steps that put the upper layer's entries under `rel` into the workspace.
void plan_dir(const std::string &upper, const std::string &ws, const std::string &rel, std::vector<op> &ops) {
  DIR *d = ::opendir(join(upper, rel).c_str());
  if (!d) fail("cannot read the run's layer", join(upper, rel));
  std::vector<std::string> names;
  while (dirent *e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto &n : names) {
    std::string r = rel.empty() ? n : rel + "/" + n;
    struct stat u {}, w {};
    if (!lexists(join(upper, r), &u)) continue;
    bool there = lexists(join(ws, r), &w);
    if (whiteout(u)) {
      if (there) ops.push_back(replace(r, true, false));
      continue;
    }
    if (S_ISDIR(u.st_mode) && there && S_ISDIR(w.st_mode) && !opaque(join(upper, r))) {
      plan_dir(upper, ws, r, ops);
      op m;
      m.path = r;
      m.kind = 'm';
      m.mode = w.st_mode & 07777;
      m.umode = u.st_mode & 07777;
      m.mtime = w.st_mtim;
      m.umtime = u.st_mtim;
      ops.push_back(m);
      continue;
    }
    ops.push_back(replace(r, there, true));
  }
}

js::object op_json(const op &o) {
  js::object j{{"path", o.path}, {"op", std::string(1, o.kind)}};
  if (o.batch) j["batch"] = o.batch;
  if (o.kind == 'r') {
    j["before"] = o.before;
    j["after"] = o.after;
    if (!o.stamp.empty()) j["stamp"] = o.stamp;
  } else {
    j["mode"] = o.mode;
    j["umode"] = o.umode;
    j["mtime"] = js::array{o.mtime.tv_sec, o.mtime.tv_nsec};
    j["umtime"] = js::array{o.umtime.tv_sec, o.umtime.tv_nsec};
  }
  return j;
}

op op_of(const js::value &v) {
  const auto &j = v.as_object();
  op o;
  o.path = std::string(j.at("path").as_string());
  o.kind = j.at("op").as_string()[0];
  if (auto *b = j.if_contains("batch")) o.batch = b->to_number<int>();
  if (o.kind == 'r') {
    o.before = j.at("before").as_bool();
    o.after = j.at("after").as_bool();
    if (auto *s = j.if_contains("stamp")) o.stamp = std::string(s->as_string());
  } else {
    o.mode = static_cast<mode_t>(j.at("mode").to_number<unsigned>());
    o.umode = static_cast<mode_t>(j.at("umode").to_number<unsigned>());
    o.mtime = {j.at("mtime").as_array()[0].to_number<time_t>(), j.at("mtime").as_array()[1].to_number<long>()};
    o.umtime = {j.at("umtime").as_array()[0].to_number<time_t>(), j.at("umtime").as_array()[1].to_number<long>()};
  }
  return o;
}

// meta.json, written whole to a new file and renamed over the old one (synced first): a reader
// sees the old record or the new one, never half of one.
void write_meta(const std::string &dir, const js::object &meta) {
  std::string tmp = dir + "/meta.json.new";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) fail("cannot write the run's record", tmp);
  std::string text = js::serialize(meta) + "\n";
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), (dir + "/meta.json").c_str()) != 0) fail("cannot write the run's record", tmp);
}

js::object read_meta(const std::string &dir) {
  std::ifstream f(dir + "/meta.json");
  std::stringstream ss;
  ss << f.rdbuf();
  boost::system::error_code ec;
  auto v = js::parse(ss.str(), ec);
  if (ec || !v.is_object()) throw std::runtime_error("the run's record " + dir + "/meta.json cannot be read");
  return v.as_object();
}

std::string text(const js::object &o, const char *k) {
  auto *v = o.if_contains(k);
  return v && v->is_string() ? std::string(v->as_string()) : std::string();
}

std::vector<op> ops_of(const js::object &meta) {
  std::vector<op> ops;
  if (auto *a = meta.if_contains("ops"); a && a->is_array()) {
    for (const auto &v : a->as_array()) ops.push_back(op_of(v));
  }
  return ops;
}

js::array ops_json(const std::vector<op> &ops) {
  js::array a;
  for (const auto &o : ops) a.push_back(op_json(o));
  return a;
}

counts count(const std::vector<op> &ops) {
  counts c;
  for (const auto &o : ops) {
    if (o.kind != 'r') continue;
    if (!o.after) ++c.deleted;
    else if (o.before) ++c.modified;
    else ++c.created;
  }
  return c;
}

std::string lock_path(const std::string &runs, const std::string &workspace) {
  std::uint64_t h = 1469598103934665603ull;
  for (char c : workspace) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  char out[40];
  std::snprintf(out, sizeof out, "/.lock-%016llx", static_cast<unsigned long long>(h));
  return runs + out;
}

// The workspace's lock, or -1 with `holder` the run that has it.
int take_lock(const std::string &runs, const std::string &workspace, std::string &holder) {
  std::string p = lock_path(runs, workspace);
  int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) fail("cannot open the journal's lock", p);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char buf[128] = {};
    ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    holder = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "another run";
    ::close(fd);
    return -1;
  }
  return fd;
}

void set_holder(int fd, const std::string &id) {
  if (::ftruncate(fd, 0) == 0) {
    [[maybe_unused]] auto n = ::pwrite(fd, id.data(), id.size(), 0);
  }
}

// Finishes an apply that stopped part-way: each step again, skipping what is done.
void apply_steps(const std::string &dir, const std::string &ws, std::vector<op> &ops) {
  std::string upper = dir + "/upper";
  for (auto &o : ops) {
    std::string w = join(ws, o.path), u = join(upper, o.path), b = before_of(dir, o);
    if (o.kind == 'm') {
      ::chmod(w.c_str(), o.umode);
      timespec t[2] = {{0, UTIME_OMIT}, o.umtime};
      ::utimensat(AT_FDCWD, w.c_str(), t, AT_SYMLINK_NOFOLLOW);
      continue;
    }
    if (o.before && lexists(w) && !lexists(b)) {
      make_parents(b);
      move_path(w, b);
    }
    if (o.after && lexists(u) && !lexists(w)) {
      move_path(u, w);
      strip_overlay_xattrs(w);
    }
    o.stamp = o.after ? stamp_of(w) : "absent";
  }
}

// Puts the workspace back, last step first, skipping what is done.
void undo_steps(const std::string &dir, const std::string &ws, const std::vector<op> &ops) {
  std::string trash = dir + "/trash";
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
    const auto &o = *it;
    std::string w = join(ws, o.path), b = before_of(dir, o), t = join(trash + "." + std::to_string(o.batch), o.path);
    if (o.kind == 'm') {
      ::chmod(w.c_str(), o.mode);
      timespec times[2] = {{0, UTIME_OMIT}, o.mtime};
      ::utimensat(AT_FDCWD, w.c_str(), times, AT_SYMLINK_NOFOLLOW);
      continue;
    }
    if (o.after && lexists(w) && !lexists(t)) {
      make_parents(t);
      move_path(w, t);
    }
    if (o.before && lexists(b)) {
      make_parents(w);
      move_path(b, w);
    }
  }
  std::error_code ec;
  for (const auto &e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename().string().rfind("trash.", 0) == 0) remove_tree(e.path());
  }
}

std::vector<std::string> run_ids(const std::string &runs) {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  for (const auto &e : fs::directory_iterator(runs, ec)) {
    std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.' || !e.is_directory()) continue;
    try {
      auto meta = read_meta(e.path().string());
      auto *s = meta.if_contains("started");
      found.emplace_back(s ? s->to_number<std::int64_t>() : 0, name);
    } catch (const std::exception &) {
      found.emplace_back(0, name);
    }
  }
  std::sort(found.begin(), found.end(), std::greater<>());
  std::vector<std::string> out;
  for (auto &[t, id] : found) out.push_back(id);
  return out;
}

std::uint64_t bytes_of(const std::string &dir) {
  std::uint64_t n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st {};
    if (lexists(it->path().string(), &st) && S_ISREG(st.st_mode)) n += static_cast<std::uint64_t>(st.st_blocks) * 512;
  }
  return n;
}

std::int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
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

std::string when(std::int64_t t) {
  std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  ::localtime_r(&tt, &tm);
  char out[32];
  std::strftime(out, sizeof out, "%Y-%m-%d %H:%M:%S", &tm);
  return out;
}

// The run `id`, or the newest when empty; its directory.
std::string find_run(const std::string &runs, const std::string &id) {
  if (!id.empty()) {
    if (id.find('/') != std::string::npos || id[0] == '.' || !lexists(runs + "/" + id + "/meta.json")) {
      throw std::runtime_error("no run " + id + " in " + runs + " (sluice runs lists them)");
    }
    return runs + "/" + id;
  }
  auto ids = run_ids(runs);
  if (ids.empty()) throw std::runtime_error("no journaled run in " + runs + " (run with sluice exec --journal)");
  return runs + "/" + ids.front();
}

} // namespace

std::string runs_dir(const std::string &home) {
  if (const char *x = std::getenv("XDG_STATE_HOME"); x && x[0] == '/') return std::string(x) + "/sluice/runs";
  return home + "/.local/state/sluice/runs";
}

namespace {

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

int recover(const std::string &home) {
  finish_interrupted(runs_dir(home), "");
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

namespace {

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
