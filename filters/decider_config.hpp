#pragma once
// [decider]: a decider of the operator's own (a program sluice starts, or an HTTPS endpoint such as
// an OPA server's data API), asked about requests the file leaves undecided or about every request
// (gateway/decider/, docs/policy.md "An external decider").
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace sluice::filters {

struct decider_config {
  // command = "PROGRAM ARGS": started by sluice, spoken to over a socket pair on its standard input
  // and output, one JSON object per line each way; restarted when it exits.
  std::vector<std::string> command;
  std::string command_text;
  // url = "https://...": each question POSTed as {"input": ...}, answered with {"result": ...}.
  std::string url;
  // Which requests are asked about: "undecided" (an allowlist miss, askable hosts included) or
  // "all" (also what the file allows, which the decider may then narrow).
  bool all = false;
  std::chrono::milliseconds timeout{2000}; // per call; past it the request is refused (decider_timeout)
  std::size_t max_in_flight = 64;          // calls waiting at once; beyond, refused (decider_unavailable)
  // The longest an answer is kept (the decider says for how long and on what it depends; 0: never).
  std::chrono::seconds cache_seconds{60};
  std::size_t cache_entries = 10000;
  // The most of a request's body sent when the decider asks for it ({"decision": "body"}); a
  // longer body is refused (body_too_large).
  std::size_t max_body_bytes = 1 << 20;
  bool configured() const { return !command.empty() || !url.empty(); }
  bool operator==(const decider_config &) const = default;
};

} // namespace sluice::filters
