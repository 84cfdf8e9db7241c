#pragma once
// [[limits.budget]] counters as the live page, the exec summary and /metrics show them
// (docs/metrics.md, "Budgets"). Separate from limits.hpp so that the data path does not compile
// Boost.JSON.
#include "gateway/exchange/limits.hpp"

#include <boost/json/array.hpp>

#include <string>
#include <vector>

namespace sluice::gateway::exchange {

// One object per counter: budget, per, client, requests, refused, open, bytesOut, bytesIn, and
// for each limit set its value and what is left (bytesOutLeft, bytesInLeft), refillsAt (per day).
boost::json::array budgets_json(const std::vector<budget_row> &rows);

// Prometheus text: sluice_budget_requests_total, sluice_budget_refused_total, sluice_budget_open,
// sluice_budget_bytes_total{direction}, sluice_budget_remaining_bytes{direction} (budgets with a
// limit that way), by budget and client (bounded: budgets and clients come from the policy).
std::string budgets_prometheus(const std::vector<budget_row> &rows);

} // namespace sluice::gateway::exchange
