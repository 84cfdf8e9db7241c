#pragma once
// The checks of a request whose body is read whole before anything leaves (verdict::read_whole()),
// the same for every protocol: under network-read, a Git fetch's POST must hold Git negotiation
// only; an AWS request signed over its body's hash is signed again; a POST on an MCP route passes
// as its JSON-RPC calls do (mcp.hpp). No I/O: the codec reads the
// body (bounded by whole_body_limit) and answers what this returns.
#include "filters/policy.hpp"
#include "gateway/exchange/exchange.hpp"

#include <cstddef>

namespace sluice::gateway::exchange {

// The origin's authority as a Host field names it: an IPv6 literal in brackets, the port left out
// when it is the scheme's own.
std::string authority(std::string_view scheme, const std::string &host, unsigned port);

// The most body the verdict's whole-body checks read.
std::size_t whole_body_limit(const verdict &v);

struct body_refusal {
  std::string_view reason; // empty: the body passed
  std::string rule;
  // An MCP call refused (mcp.hpp): the JSON-RPC answer (an error object per refused request, or
  // an array of them for a batch) the client gets with HTTP 200 instead of sluice's text.
  std::string jsonrpc;
};

// Judges `body` (the request's whole body, as its client sent it) for verdict `v`; `fields` are
// the request's fields (Content-Encoding; what AWS signs). An AWS signature's fields are added to
// v.set.
body_refusal judge_body(verdict &v, outcome &o, const filters::policy &pol, const field_list &fields,
                        std::string_view method, std::string_view body);

} // namespace sluice::gateway::exchange
