#include "exec/journal_impl.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <sys/file.h>
#include <unistd.h>

// A run's record on disk (RUNS/ID/meta.json: its state and its steps), the list of runs, and the
// lock that keeps one journaled run per workspace.
namespace sluice::exec::journal {
namespace detail {

namespace fs = std::filesystem;

namespace {

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

} // namespace

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

namespace {

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

} // namespace

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

std::int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
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

} // namespace detail

std::string runs_dir(const std::string &home) {
  if (const char *x = std::getenv("XDG_STATE_HOME"); x && x[0] == '/') return std::string(x) + "/sluice/runs";
  return home + "/.local/state/sluice/runs";
}

} // namespace sluice::exec::journal
