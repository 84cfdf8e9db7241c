// Fuzzes the request-head path: raw-head checks, Beast's parser on the same bytes, request hygiene
// and the policy decision on the host found, as the session runs them.
#include "filters/policy.hpp"
#include "filters/request_hygiene.hpp"

#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>

namespace http = boost::beast::http;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const sluice::filters::policy pol([] {
    sluice::filters::config c;
    c.mode = sluice::filters::profile::network_read;
    c.allow = {"api.github.com", "*.example.com", "re:^pkg[0-9]+\\.test$", "198.18.0.2:8443"};
    c.deny = {"bad.example.com"};
    return c;
  }());
  std::string_view head(reinterpret_cast<const char *>(data), size);
  if (!sluice::filters::check_raw_head(head).empty()) return 0;
  http::request_parser<http::empty_body> parser;
  parser.header_limit(64 * 1024);
  boost::system::error_code ec;
  parser.put(boost::asio::buffer(data, size), ec);
  if (ec || !parser.is_header_done()) return 0;
  auto &req = parser.get();
  sluice::filters::request_view view{req.method_string(), req.target(), {}};
  for (auto &f : req) view.fields.emplace_back(f.name_string(), f.value());
  for (auto p : {sluice::filters::profile::network_read, sluice::filters::profile::publish}) {
    (void)sluice::filters::check_request(view, p);
  }
  std::string_view host;
  unsigned port = 0;
  if (sluice::filters::split_authority(req[http::field::host], host, port)) {
    auto d = pol.decide(req.method_string(), "https", host, port ? port : 443);
    if (d.allowed && d.rule.empty()) __builtin_trap(); // an allow always names its rule
  }
  return 0;
}
