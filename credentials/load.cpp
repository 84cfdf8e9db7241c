// A credential's value from wherever it comes (load.hpp): the source, the OAuth2 client or the AWS
// key pair, and when to read it again.
#include "credentials/load.hpp"
#include "filters/policy_loader.hpp"

#include <boost/json.hpp>

#include <algorithm>

namespace sluice::credentials {

std::string read_source(const filters::credential_config &c, const std::string &what, const std::string &source) {
  filters::credential_config part;
  part.name = c.name + "." + what;
  part.source = source;
  load_secret(part);
  return part.secret;
}

std::optional<std::chrono::system_clock::time_point> jwt_expiry(std::string_view token) {
  // header.payload.signature, each base64url without padding; the payload's "exp" in seconds.
  auto first = token.find('.');
  auto second = first == std::string_view::npos ? first : token.find('.', first + 1);
  if (second == std::string_view::npos || token.find('.', second + 1) != std::string_view::npos) return std::nullopt;
  std::string part(token.substr(first + 1, second - first - 1));
  for (auto &ch : part) {
    if (ch == '-') ch = '+';
    if (ch == '_') ch = '/';
  }
  while (part.size() % 4) part += '=';
  auto payload = filters::base64_decode(part);
  if (!payload) return std::nullopt;
  boost::system::error_code jec;
  auto v = boost::json::parse(*payload, jec);
  auto *exp = !jec && v.is_object() ? v.as_object().if_contains("exp") : nullptr;
  if (!exp || !(exp->is_int64() || exp->is_uint64() || exp->is_double())) return std::nullopt;
  auto seconds = exp->is_double() ? static_cast<std::int64_t>(exp->as_double())
                                  : exp->is_int64() ? exp->as_int64() : static_cast<std::int64_t>(exp->as_uint64());
  return std::chrono::system_clock::time_point(std::chrono::seconds(seconds));
}

void load_credential(filters::credential_config &c, const filters::config &cfg) {
  if (c.oauth2) {
    load_oauth2(c, cfg);
  } else if (c.aws) {
    load_aws(c);
  } else {
    if (c.ttl.count() == 0) c.refresh_at = {}; // set again below when the token says it expires
    load_secret(c);
    // A token that says when it expires (a JWT's "exp") is read again 80% of the way there, or
    // after its ttl if that comes first.
    if (c.source.rfind("env:", 0) != 0) {
      if (auto exp = jwt_expiry(c.secret)) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*exp - std::chrono::system_clock::now());
        if (left.count() <= 0) {
          throw filters::config_error("credential '" + c.name + "': the token from " + c.source.substr(0, c.source.find(':')) +
                                      " expired already (its exp is in the past); renew it where it comes from");
        }
        auto at = std::chrono::steady_clock::now() + std::max<std::chrono::milliseconds>(std::chrono::milliseconds(1000), left * 8 / 10);
        if (c.refresh_at == std::chrono::steady_clock::time_point{} || at < c.refresh_at) c.refresh_at = at;
      }
    }
  }
}

} // namespace sluice::credentials
