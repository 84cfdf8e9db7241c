#include "gateway/admin/approvals.hpp"

#include "filters/policy_loader.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace sluice::gateway {

struct approvals::entry {
  held_request r;
  std::function<void()> wake;
  approval decision = approval::pending;
  std::string by;
};

std::string_view to_string(approval a) {
  switch (a) {
  case approval::pending: return "pending";
  case approval::once: return "once";
  case approval::run: return "run";
  case approval::always: return "always";
  case approval::deny: return "deny";
  case approval::timeout: return "timeout";
  case approval::gone: return "gone";
  }
  return "pending";
}

approvals::entry_ptr approvals::hold(held_request r, std::function<void()> wake) {
  std::lock_guard lock(m_);
  if (held_.size() >= max_) return nullptr;
  auto e = std::make_shared<entry>();
  r.id = next_++;
  r.since = std::chrono::system_clock::now();
  e->r = std::move(r);
  e->wake = std::move(wake);
  held_.emplace(e->r.id, e);
  return e;
}

std::uint64_t approvals::id_of(const entry_ptr &e) { return e->r.id; }

approval approvals::result(const entry_ptr &e, bool timed_out) {
  std::lock_guard lock(m_);
  if (e->decision == approval::pending && timed_out) e->decision = approval::timeout;
  if (e->decision != approval::pending) held_.erase(e->r.id);
  return e->decision;
}

std::string approvals::decided_by(const entry_ptr &e) {
  std::lock_guard lock(m_);
  return e->by;
}

void approvals::forget(const entry_ptr &e) {
  std::lock_guard lock(m_);
  held_.erase(e->r.id);
}

bool approvals::decide(std::uint64_t id, approval a, const std::string &by) {
  std::function<void()> wake;
  {
    std::lock_guard lock(m_);
    auto it = held_.find(id);
    if (it == held_.end() || it->second->decision != approval::pending) return false;
    auto &e = *it->second;
    e.decision = a;
    e.by = by;
    if (a == approval::run || a == approval::always) run_.insert(e.r.host + ":" + std::to_string(e.r.port));
    wake = e.wake;
  }
  if (wake) wake();
  return true;
}

namespace {

// Client words in a TOML comment: one line, printable, bounded.
std::string comment_safe(std::string_view s) {
  std::string out;
  for (char ch : s.substr(0, 200)) {
    auto u = static_cast<unsigned char>(ch);
    out += u < 0x20 || u >= 0x7f ? '?' : ch;
  }
  return out;
}

// A TOML basic string.
std::string toml_string(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') out += '\\';
    if (u >= 0x20 && u != 0x7f) out += ch;
  }
  return out + "\"";
}

// The allowlist entry for the request's host: its port only when not the scheme's own.
std::string always_host(const held_request &r) {
  bool default_port = r.port == 443 || (r.port == 80 && r.scheme == "http");
  return r.host + (default_port ? "" : ":" + std::to_string(r.port));
}

} // namespace

std::string approvals::always_text(const held_request &r) {
  std::string host = always_host(r);
  auto t = std::chrono::system_clock::to_time_t(r.since);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
  std::string what = r.kind == "connect" ? "CONNECT " + r.host + ":" + std::to_string(r.port)
                                         : r.method + " " + r.scheme + "://" + r.host + ":" + std::to_string(r.port) + r.path;
  return "# allowed always in sluice's approvals inbox: request " + std::to_string(r.id) + ", " + comment_safe(what) +
         " (" + when + ")\n[[approvals.allowed]]\nhost = " + toml_string(host) + "\n";
}

std::string approvals::allow_always(std::uint64_t id, const std::string &by) {
  held_request r;
  {
    std::lock_guard lock(m_);
    auto it = held_.find(id);
    if (it == held_.end() || it->second->decision != approval::pending) {
      return "request " + std::to_string(id) + " is no longer waiting (decided, timed out or gone)";
    }
    r = it->second->r;
  }
  if (file_.empty()) {
    return "the policy is sluice's built-in one, not a file; \"allow always\" needs a policy file (--policy "
           "FILE, or ~/.config/sluice/policy.toml): allow for the run, or add the host to the file yourself";
  }
  std::string block = always_text(r);
  std::lock_guard file_lock(file_m_);
  std::ifstream in(file_, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in) return "cannot read the policy file " + file_ + "; allow for the run instead";
  std::string old = ss.str();
  if (old.size() > 4 * 1024 * 1024) return "the policy file " + file_ + " is over 4 MiB; add the host to it yourself";
  std::string suffix = (old.empty() || old.back() == '\n' ? "\n" : "\n\n") + block;
  bool already = false;
  try {
    auto now = filters::load_config_string(old, file_);
    auto host = always_host(r);
    already = std::find(now.approvals.allowed.begin(), now.approvals.allowed.end(), host) != now.approvals.allowed.end();
    if (!already) filters::load_config_string(old + suffix, file_); // the file still loads with the block
  } catch (const std::exception &e) {
    return "the policy file would not load with the block, so nothing was written: " + std::string(e.what());
  }
  if (!already) {
    // Appended in place: the file keeps its inode, owner, mode and any link that points at it.
    int fd = ::open(file_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0) {
      return "cannot write the policy file " + file_ + ": " + std::strerror(errno) +
             "; allow for the run, or add these lines to it yourself:\n" + block;
    }
    ssize_t n = ::write(fd, suffix.data(), suffix.size());
    int err = errno;
    bool synced = n == static_cast<ssize_t>(suffix.size()) && ::fsync(fd) == 0;
    ::close(fd);
    if (!synced) return "writing the policy file " + file_ + " failed: " + std::strerror(err) + "; check its end";
  }
  if (!decide(id, approval::always, by)) {
    return "request " + std::to_string(id) + " stopped waiting meanwhile; the block is in " + file_ +
           " all the same (the next run passes)";
  }
  return {};
}

bool approvals::allowed_for_run(const std::string &host, unsigned port) const {
  std::lock_guard lock(m_);
  return run_.count(host + ":" + std::to_string(port)) > 0;
}

std::size_t approvals::pending() const {
  std::lock_guard lock(m_);
  return held_.size();
}

std::string approvals::pending_json() const {
  boost::json::array list;
  std::lock_guard lock(m_);
  auto now = std::chrono::system_clock::now();
  for (const auto &[id, e] : held_) {
    if (e->decision != approval::pending) continue;
    const auto &r = e->r;
    auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - r.since);
    list.push_back(boost::json::object{{"id", r.id},
                                       {"kind", r.kind},
                                       {"client", r.client},
                                       {"method", r.method},
                                       {"scheme", r.scheme},
                                       {"host", r.host},
                                       {"port", r.port},
                                       {"path", r.path},
                                       {"profile", r.profile},
                                       {"rule", r.rule},
                                       {"waited_seconds", static_cast<double>(waited.count()) / 1000.0},
                                       {"timeout_seconds", static_cast<double>(r.timeout.count()) / 1000.0},
                                       {"always_file", file_},
                                       {"always_text", file_.empty() ? std::string() : always_text(r)}});
  }
  return boost::json::serialize(boost::json::object{{"pending", std::move(list)}});
}

} // namespace sluice::gateway
