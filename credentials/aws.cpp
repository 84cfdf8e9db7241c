// An AWS key pair's real values (docs/policy.md, "AWS"): from a credential_process command (AWS's
// JSON, with an Expiration that says when to ask again) or from one source each.
#include "credentials/load.hpp"
#include "filters/policy_loader.hpp"

#include <boost/json.hpp>
#include <ctime>

namespace sluice::credentials {
namespace {

// "2026-12-05T06:00:00Z" (fractions of a second and "+00:00" too); nullopt when not that form.
std::optional<std::chrono::system_clock::time_point> parse_expiration(std::string_view text) {
  std::tm tm{};
  std::string s(text);
  const char *end = ::strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!end) return std::nullopt;
  std::string_view rest(end);
  if (!rest.empty() && rest.front() == '.') {
    rest.remove_prefix(1);
    while (!rest.empty() && rest.front() >= '0' && rest.front() <= '9') rest.remove_prefix(1);
  }
  if (rest != "Z" && rest != "+00:00" && rest != "UTC") return std::nullopt;
  return std::chrono::system_clock::from_time_t(::timegm(&tm));
}

} // namespace

void load_aws(filters::credential_config &c) {
  auto &a = *c.aws;
  auto fail = [&](const std::string &why) {
    return filters::config_error("credential '" + c.name + "': the AWS key pair " + why);
  };
  std::string key, secret, token;
  std::optional<std::chrono::system_clock::time_point> expires;
  if (!a.process.empty()) {
    filters::credential_config run;
    run.name = c.name + ".aws.process";
    run.source = a.process;
    std::string out = command_output(run);
    boost::system::error_code jec;
    auto v = boost::json::parse(out, jec);
    const boost::json::object *o = !jec && v.is_object() ? &v.as_object() : nullptr;
    auto text = [&](const char *name) -> std::string {
      auto *x = o ? o->if_contains(name) : nullptr;
      return x && x->is_string() ? std::string(x->as_string()) : std::string();
    };
    if (!o) throw fail("from process is not the JSON of a credential_process (AccessKeyId, SecretAccessKey, ...)");
    key = text("AccessKeyId");
    secret = text("SecretAccessKey");
    token = text("SessionToken");
    if (key.empty() || secret.empty()) throw fail("from process lacks AccessKeyId or SecretAccessKey");
    if (auto e = text("Expiration"); !e.empty()) {
      expires = parse_expiration(e);
      if (!expires) throw fail("from process has an Expiration sluice cannot read (" + e + "); it takes 2026-01-01T00:00:00Z");
    }
  } else {
    key = read_source(c, "aws.access_key_id", a.access_key_id_source);
    secret = read_source(c, "aws.secret_access_key", a.secret_access_key_source);
    if (!a.session_token_source.empty()) token = read_source(c, "aws.session_token", a.session_token_source);
  }
  if (key.size() < 16 || key.size() > 128 ||
      key.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") != std::string::npos) {
    throw fail("has an access key id that is not one (16 to 128 upper-case letters and digits)");
  }
  for (const auto *v : {&secret, &token}) {
    if (v->find_first_of("\r\n \t") != std::string::npos) throw fail("has a secret key or session token with white space in it");
  }
  auto now = std::chrono::system_clock::now();
  if (expires && *expires <= now) throw fail("from process expired already (Expiration is in the past)");
  a.access_key_id = std::move(key);
  a.session_token = std::move(token);
  c.secret = std::move(secret);
  c.refresh_at = {};
  if (expires) {
    // Asked again 80% into what is left of its life (at least 1 s on): never used expired.
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*expires - now);
    c.refresh_at = std::chrono::steady_clock::now() + std::max<std::chrono::milliseconds>(std::chrono::milliseconds(1000), left * 8 / 10);
  } else if (c.ttl.count() > 0) {
    c.refresh_at = std::chrono::steady_clock::now() + c.ttl;
  }
}

} // namespace sluice::credentials
