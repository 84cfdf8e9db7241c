#include "gateway/approvals.hpp"

#include <boost/json.hpp>

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
    if (a == approval::run) run_.insert(e.r.host + ":" + std::to_string(e.r.port));
    wake = e.wake;
  }
  if (wake) wake();
  return true;
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
                                       {"waited_seconds", static_cast<double>(waited.count()) / 1000.0},
                                       {"timeout_seconds", static_cast<double>(r.timeout.count()) / 1000.0}});
  }
  return boost::json::serialize(boost::json::object{{"pending", std::move(list)}});
}

} // namespace sluice::gateway
