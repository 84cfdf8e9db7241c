#pragma once
// An HTTPS POST from the gateway itself (OAuth2's token request, the approvals webhook), made as
// sluice reaches any origin.
#include "filters/policy.hpp"

#include <string>
#include <utility>
#include <vector>

namespace sluice::gateway {

// POSTs `body` to an https:// URL as sluice reaches any origin: the trust of [tls], the pins, DNS
// servers and address rules of [upstream], within 10 s in all. `what` names the other end in
// messages ("token endpoint", "approvals webhook"). Throws std::runtime_error saying what failed.
struct post_result {
  unsigned status = 0;
  std::string body;
};
post_result https_post(const std::string &url, std::string body, const std::string &content_type,
                       std::vector<std::pair<std::string, std::string>> headers, const filters::config &cfg,
                       const std::string &what);

} // namespace sluice::gateway
