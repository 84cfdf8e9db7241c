// OAuth2 access tokens (load.hpp): one POST to the token endpoint (gateway/https_post.hpp), with
// the gateway's own resolver and address rules, and the upstream trust of the policy.
#include "credentials/load.hpp"
#include "filters/policy_loader.hpp"
#include "gateway/https_post.hpp"

#include <boost/json.hpp>

#include <cctype>

namespace sluice::credentials {
namespace {

// application/x-www-form-urlencoded (RFC 6749 appendix B).
std::string form_encode(std::string_view s) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char ch : s) {
    if (std::isalnum(ch) || ch == '-' || ch == '.' || ch == '_' || ch == '~') {
      out += static_cast<char>(ch);
    } else if (ch == ' ') {
      out += '+';
    } else {
      out += '%';
      out += hex[ch >> 4];
      out += hex[ch & 15];
    }
  }
  return out;
}

} // namespace

void load_oauth2(filters::credential_config &c, const filters::config &cfg) {
  auto &o = *c.oauth2;
  auto fail = [&](const std::string &why) {
    return filters::config_error("credential '" + c.name + "': the OAuth2 token from " + o.token_url + " " + why);
  };
  std::string secret = read_source(c, "client_secret", o.client_secret_source);
  std::string authorization = "Basic " + filters::base64_encode(form_encode(o.client_id) + ":" + form_encode(secret));
  if (o.refresh_token.empty() && !o.refresh_token_source.empty()) {
    o.refresh_token = read_source(c, "refresh_token", o.refresh_token_source);
  }
  std::string body = o.refresh_token.empty() ? "grant_type=client_credentials"
                                             : "grant_type=refresh_token&refresh_token=" + form_encode(o.refresh_token);
  if (!o.scopes.empty()) {
    std::string scope;
    for (const auto &sc : o.scopes) scope += (scope.empty() ? "" : " ") + sc;
    body += "&scope=" + form_encode(scope);
  }
  gateway::post_result x;
  try {
    x = gateway::https_post(o.token_url, std::move(body), "application/x-www-form-urlencoded",
                            {{"Authorization", authorization}}, cfg, "token endpoint");
  } catch (const std::exception &e) {
    throw fail(std::string(e.what()).rfind("did not come", 0) == 0 ? std::string(e.what()) : "cannot be had: " + std::string(e.what()));
  }
  boost::system::error_code jec;
  auto v = boost::json::parse(x.body, jec);
  const boost::json::object *obj = !jec && v.is_object() ? &v.as_object() : nullptr;
  if (x.status == 200 && !obj) {
    throw fail("answered HTTP 200 with what is not a JSON token response; check token_url (it must be the "
               "token endpoint)");
  }
  if (x.status != 200 || !obj) {
    std::string why = "was refused: HTTP " + std::to_string(x.status);
    if (obj) {
      if (auto *e = obj->if_contains("error"); e && e->is_string()) why += " " + std::string(e->as_string());
    }
    throw fail(why + "; check client_id, client_secret and the refresh token");
  }
  auto *token = obj->if_contains("access_token");
  if (!token || !token->is_string() || token->as_string().empty()) throw fail("came without an access_token");
  std::string value(token->as_string());
  if (value.find_first_of("\r\n") != std::string::npos) throw fail("holds a line break");
  std::chrono::seconds life{3600};
  if (auto *e = obj->if_contains("expires_in")) {
    if (e->is_int64() && e->as_int64() > 0) life = std::chrono::seconds(e->as_int64());
    if (e->is_uint64() && e->as_uint64() > 0) life = std::chrono::seconds(static_cast<long long>(e->as_uint64()));
  }
  if (auto *r = obj->if_contains("refresh_token"); r && r->is_string() && !r->as_string().empty()) {
    o.refresh_token = std::string(r->as_string()); // rotated
  }
  c.secret = std::move(value);
  // Asked again 80% into its life (at least 1 s on): never sent expired.
  auto before = std::max<std::chrono::milliseconds>(std::chrono::milliseconds(1000), life * 8 / 10);
  c.refresh_at = std::chrono::steady_clock::now() + before;
}

} // namespace sluice::credentials
