#include "metrics/live_stats.hpp"

#include <boost/json.hpp>

#include <charconv>

namespace sluice::metrics {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string redact_target(std::string_view target, bool redact) {
  auto q = target.find('?');
  if (!redact || q == std::string_view::npos) return std::string(target);
  return std::string(target.substr(0, q)) + "?REDACTED";
}

void live_stats::record(const event &e) {
  double now = unix_now();
  // "host:port", built in a buffer the thread keeps: a destination already seen allocates nothing.
  thread_local std::string key;
  if (e.host.empty()) {
    key.assign("(no host)");
  } else {
    char port[8];
    key.assign(e.host).append(1, ':').append(port, std::to_chars(port, port + sizeof port, e.port).ptr);
  }
  std::lock_guard lock(mutex_);
  bool allowed = e.decision == "allow", denied = e.decision == "deny";
  (allowed ? allowed_ : denied ? denied_ : errors_) += 1;
  bytes_in_ += e.bytes_in;
  bytes_out_ += e.bytes_out;
  auto it = destinations_.find(key);
  if (it == destinations_.end()) {
    it = destinations_.try_emplace(destinations_.size() >= max_destinations ? std::string("(other)") : key).first;
  }
  auto &d = it->second;
  if (!e.rule.empty() && d.rule != e.rule) d.rule = e.rule;
  (allowed ? d.allowed : denied ? d.denied : d.errors) += 1;
  d.bytes_in += e.bytes_in;
  d.bytes_out += e.bytes_out;
  d.last_seen = now;
  if (!allowed) {
    denials_.push_front({now, std::string(e.method), std::string(e.host), std::string(e.path),
                         std::string(e.rule), std::string(e.decision), std::string(e.reason),
                         e.port, e.status});
    if (denials_.size() > max_denials) denials_.pop_back();
  }
  if (!e.scan_rule.empty()) {
    findings_.push_front({now, std::string(e.scan_kind), std::string(e.scan_rule), std::string(e.scan_location),
                          std::string(e.scan_action), std::string(e.method), std::string(e.host), std::string(e.path),
                          std::string(e.decision), e.port});
    if (findings_.size() > max_findings) findings_.pop_back();
    auto k = findings_by_kind_.find(e.scan_kind);
    if (k == findings_by_kind_.end()) k = findings_by_kind_.emplace(std::string(e.scan_kind), 0).first;
    ++k->second;
  }
}

boost::json::object live_stats::snapshot() const {
  namespace js = boost::json;
  js::object out;
  std::lock_guard lock(mutex_);
  out["totals"] = js::object{{"allowed", allowed_}, {"denied", denied_}, {"errors", errors_},
                             {"bytes_in", bytes_in_}, {"bytes_out", bytes_out_}};
  js::array dests;
  for (auto &[key, d] : destinations_) {
    dests.push_back(js::object{{"destination", key},
                               {"rule", d.rule},
                               {"allowed", d.allowed},
                               {"denied", d.denied},
                               {"errors", d.errors},
                               {"bytes_in", d.bytes_in},
                               {"bytes_out", d.bytes_out},
                               {"last_seen", d.last_seen}});
  }
  out["destinations"] = std::move(dests);
  js::array denials;
  for (auto &d : denials_) {
    denials.push_back(js::object{{"time", d.time},
                                 {"method", d.method},
                                 {"host", d.host},
                                 {"port", d.port},
                                 {"path", d.path},
                                 {"rule", d.rule},
                                 {"decision", d.decision},
                                 {"reason", d.reason},
                                 {"status", d.status}});
  }
  out["denials"] = std::move(denials);
  js::array findings;
  for (auto &f : findings_) {
    findings.push_back(js::object{{"time", f.time},         {"kind", f.kind},     {"rule", f.rule},
                                  {"location", f.location}, {"action", f.action}, {"method", f.method},
                                  {"host", f.host},         {"port", f.port},     {"path", f.path},
                                  {"decision", f.decision}});
  }
  out["findings"] = std::move(findings);
  js::object by_kind;
  for (auto &[kind, n] : findings_by_kind_) by_kind[kind] = n;
  out["totals"].as_object()["findings"] = std::move(by_kind);
  return out;
}

} // namespace sluice::metrics
