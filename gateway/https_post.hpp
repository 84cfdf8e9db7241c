#pragma once
// An HTTPS POST from the gateway itself (OAuth2's token request, the approvals webhook, a decider
// endpoint), made as sluice reaches any origin.
#include "filters/policy.hpp"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sluice::gateway {

struct post_result {
  unsigned status = 0;
  std::string body;
};

// POSTs `body` to an https:// URL as sluice reaches any origin: the trust of [tls], the pins, DNS
// servers and address rules of [upstream], within 10 s in all. `what` names the other end in
// messages ("token endpoint", "approvals webhook"). Throws std::runtime_error saying what failed.
post_result https_post(const std::string &url, std::string body, const std::string &content_type,
                       std::vector<std::pair<std::string, std::string>> headers, const filters::config &cfg,
                       const std::string &what);

// POSTs to one https:// URL again and again over one kept-alive connection (HTTP/1.1), for a caller
// that asks often (a decider endpoint): the trust is loaded once; a new connection is dialled as
// https_post's is (the name resolved, every address judged) when there is none, after the server
// closed it, or after a failure. A POST whose reused connection turns out closed before any answer
// came is sent once more on a new one, so it must be safe to repeat (a question is). One thread
// at a time; each post() within 10 s; throws as https_post does. The URL is checked at
// construction (std::runtime_error).
class https_session {
public:
  https_session(const std::string &url, const filters::config &cfg, std::string what);
  ~https_session();
  https_session(const https_session &) = delete;
  https_session &operator=(const https_session &) = delete;

  post_result post(std::string body, const std::string &content_type,
                   const std::vector<std::pair<std::string, std::string>> &headers = {});

private:
  struct state;
  std::unique_ptr<state> s_;
};

} // namespace sluice::gateway
