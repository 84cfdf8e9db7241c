#include "gateway/exchange/body.hpp"

#include "filters/aws_sigv4.hpp"
#include "filters/git_upload_pack.hpp"
#include "gateway/exchange/mcp.hpp"

#include <algorithm>
#include <boost/beast/core/string.hpp>

namespace sluice::gateway::exchange {

std::string authority(std::string_view scheme, const std::string &host, unsigned port) {
  std::string out = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  if (port != (scheme == "https" ? 443u : 80u)) out += ":" + std::to_string(port);
  return out;
}

std::size_t whole_body_limit(const verdict &v) {
  std::size_t limit = 0;
  if (v.git_read) limit = std::max(limit, filters::max_git_request_bytes);
  if (v.aws_body) limit = std::max(limit, filters::max_aws_body_bytes);
  if (v.mcp) limit = std::max(limit, max_mcp_body_bytes);
  return std::max(limit, v.decider_body);
}

body_refusal judge_body(verdict &v, outcome &o, const filters::policy &pol, const field_list &fields,
                        std::string_view method, std::string_view body) {
  if (v.git_read) {
    std::string_view encoding;
    for (auto [n, value] : fields) {
      if (boost::beast::iequals(n, "content-encoding")) encoding = value;
    }
    const bool gzip = boost::beast::iequals(encoding, "gzip");
    std::string_view why = body.size() > filters::max_git_request_bytes ? std::string_view("body_too_large")
                           : !encoding.empty() && !gzip ? std::string_view("git_request_refused")
                                                        : filters::check_git_upload_pack(body, gzip);
    if (!why.empty()) return {why, o.rule, {}};
  }
  if (v.mcp) {
    if (auto no = judge_mcp(*v.mcp, o, pol, fields, body); !no.reason.empty()) return no;
  }
  if (v.aws_body) {
    if (body.size() > filters::max_aws_body_bytes) return {"body_too_large", o.rule, {}};
    auto cr = pol.credentials().sign_aws(v.aws_credential, fields, method, o.target,
                                         authority(o.scheme, o.host, o.port), filters::sigv4::sha256_hex(body));
    if (!cr.reason.empty()) return {cr.reason, "credential:" + cr.credential, {}};
    for (auto &f : cr.set) v.set.push_back(std::move(f));
  }
  return {};
}

} // namespace sluice::gateway::exchange
