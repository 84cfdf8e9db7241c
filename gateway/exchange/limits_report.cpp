// The budgets' counters as JSON and Prometheus text.
#include "gateway/exchange/limits_report.hpp"

#include <boost/json/object.hpp>

namespace sluice::gateway::exchange {

namespace {

std::uint64_t left(std::uint64_t limit, std::uint64_t used) { return used >= limit ? 0 : limit - used; }

// A label value in the exposition format: backslash, quote and line feed escaped.
std::string label(std::string_view v) {
  std::string s;
  for (char c : v) {
    if (c == '\\' || c == '"') s += '\\';
    if (c == '\n') {
      s += "\\n";
      continue;
    }
    s += c;
  }
  return s;
}

} // namespace

boost::json::array budgets_json(const std::vector<budget_row> &rows) {
  boost::json::array out;
  for (const auto &r : rows) {
    boost::json::object o{{"budget", r.budget}, {"per", r.per}, {"client", r.client},
                          {"requests", r.requests}, {"refused", r.refused}, {"open", r.open},
                          {"bytesOut", r.bytes_out}, {"bytesIn", r.bytes_in}};
    if (r.requests_per_second > 0) o["requestsPerSecond"] = r.requests_per_second;
    if (r.connections_limit) o["connections"] = r.connections_limit;
    if (r.bytes_out_limit) {
      o["bytesOutLimit"] = r.bytes_out_limit;
      o["bytesOutLeft"] = left(r.bytes_out_limit, r.bytes_out);
    }
    if (r.bytes_in_limit) {
      o["bytesInLimit"] = r.bytes_in_limit;
      o["bytesInLeft"] = left(r.bytes_in_limit, r.bytes_in);
    }
    if (r.refills_at) o["refillsAt"] = r.refills_at;
    out.push_back(std::move(o));
  }
  return out;
}

std::string budgets_prometheus(const std::vector<budget_row> &rows) {
  if (rows.empty()) return {};
  std::string s;
  auto labels = [](const budget_row &r, std::string_view extra = {}) {
    std::string l = "{budget=\"" + label(r.budget) + "\",client=\"" + label(r.client) + "\"";
    if (!extra.empty()) l += "," + std::string(extra);
    return l + "}";
  };
  s += "# HELP sluice_budget_requests_total Exchanges admitted under a [[limits.budget]], by budget and client.\n"
       "# TYPE sluice_budget_requests_total counter\n";
  for (const auto &r : rows) s += "sluice_budget_requests_total" + labels(r) + " " + std::to_string(r.requests) + "\n";
  s += "# HELP sluice_budget_refused_total Exchanges a [[limits.budget]] refused (rate_limited, budget_exhausted).\n"
       "# TYPE sluice_budget_refused_total counter\n";
  for (const auto &r : rows) s += "sluice_budget_refused_total" + labels(r) + " " + std::to_string(r.refused) + "\n";
  s += "# HELP sluice_budget_open Exchanges under a [[limits.budget]] open now.\n"
       "# TYPE sluice_budget_open gauge\n";
  for (const auto &r : rows) s += "sluice_budget_open" + labels(r) + " " + std::to_string(r.open) + "\n";
  s += "# HELP sluice_budget_bytes_total Bytes a [[limits.budget]] counted, by direction (out: towards origins).\n"
       "# TYPE sluice_budget_bytes_total counter\n";
  for (const auto &r : rows) {
    s += "sluice_budget_bytes_total" + labels(r, "direction=\"out\"") + " " + std::to_string(r.bytes_out) + "\n";
    s += "sluice_budget_bytes_total" + labels(r, "direction=\"in\"") + " " + std::to_string(r.bytes_in) + "\n";
  }
  s += "# HELP sluice_budget_remaining_bytes Bytes left in a [[limits.budget]] with a byte limit, by direction.\n"
       "# TYPE sluice_budget_remaining_bytes gauge\n";
  for (const auto &r : rows) {
    if (r.bytes_out_limit) {
      s += "sluice_budget_remaining_bytes" + labels(r, "direction=\"out\"") + " " +
           std::to_string(left(r.bytes_out_limit, r.bytes_out)) + "\n";
    }
    if (r.bytes_in_limit) {
      s += "sluice_budget_remaining_bytes" + labels(r, "direction=\"in\"") + " " +
           std::to_string(left(r.bytes_in_limit, r.bytes_in)) + "\n";
    }
  }
  return s;
}

} // namespace sluice::gateway::exchange
