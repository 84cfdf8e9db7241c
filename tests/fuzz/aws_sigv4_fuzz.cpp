// Fuzzes AWS SigV4 checking and signing again (filters/aws_sigv4, credential_injector): the input
// is a request (first line its target, the rest "name: value" fields). Whatever it holds, an
// Authorization sluice sets is under the real key; the same request signed with the placeholder
// pair always verifies and is signed again; an Authorization value that parses prints back the same.
#include "filters/aws_sigv4.hpp"
#include "filters/credentials.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace {
void require(bool ok) {
  if (!ok) std::abort();
}
using namespace sluice::filters;

const credential_injector &injector() {
  static credential_injector inj = [] {
    credential_config c;
    c.name = "aws";
    c.source = "aws";
    c.hosts = {"aws.test"};
    c.placeholder_shape = "aws-access-key-id";
    c.aws = aws_config{};
    make_placeholders(c, false);
    c.aws->access_key_id = "AKIAREALKEY000000000";
    c.secret = "real-secret";
    return credential_injector({c});
  }();
  return inj;
}

credential_config placeholders() {
  credential_config c;
  c.name = "aws";
  c.placeholder_shape = "aws-access-key-id";
  c.aws = aws_config{};
  make_placeholders(c, false);
  return c;
}

bool token(std::string_view s) {
  if (s.empty()) return false;
  for (char ch : s) {
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-')) return false;
  }
  return true;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view input(reinterpret_cast<const char *>(data), size);
  if (auto a = sigv4::parse_authorization(input)) {
    auto again = sigv4::parse_authorization(sigv4::format_authorization(*a));
    require(again && again->access_key == a->access_key && again->signed_headers == a->signed_headers &&
            again->signature == a->signature && again->service == a->service);
  }
  auto nl = input.find('\n');
  std::string target(input.substr(0, nl));
  if (target.empty() || target.front() != '/' || target.find_first_of("\r\n ") != std::string::npos) return 0;
  std::vector<std::pair<std::string, std::string>> owned;
  bool plain = target.find("X-Amz-Credential") == std::string::npos && target.find("x-amz-credential") == std::string::npos;
  for (std::size_t at = nl == std::string_view::npos ? input.size() : nl + 1; at < input.size();) {
    auto end = input.find('\n', at);
    auto line = input.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
    at = end == std::string_view::npos ? input.size() : end + 1;
    auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string name(line.substr(0, colon)), value(line.substr(colon + 1));
    if (value.find_first_of("\r") != std::string::npos) continue;
    plain = plain && token(name) && name != "authorization" && name != "x-amz-security-token" &&
            name != "x-amz-content-sha256" && name != "host" && name != "x-amz-date" && name != "content-length" &&
            name != "transfer-encoding";
    owned.emplace_back(std::move(name), std::move(value));
  }
  std::vector<std::pair<std::string_view, std::string_view>> fields;
  for (auto &[n, v] : owned) fields.emplace_back(n, v);
  const auto &inj = injector();
  auto r = inj.apply(fields, target, "aws.test", "https", 443, "GET");
  for (auto &[n, v] : r.set) {
    if (n == "Authorization") require(v.find("Credential=AKIAREALKEY000000000/") != std::string::npos);
  }
  if (!plain || owned.size() > 20) return 0;
  // Signed by a client with the placeholder pair: it verifies, and leaves signed with the real key.
  auto c = placeholders();
  owned.emplace_back("host", "aws.test");
  owned.emplace_back("x-amz-date", "20261205T060000Z");
  owned.emplace_back("x-amz-content-sha256", "UNSIGNED-PAYLOAD");
  fields.clear();
  std::vector<std::string> names;
  for (auto &[n, v] : owned) {
    fields.emplace_back(n, v);
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  sigv4::authorization a;
  a.access_key = c.placeholder;
  a.date = "20261205";
  a.region = "us-east-1";
  a.service = (size & 1) ? "s3" : "sts";
  a.signed_headers = names;
  sigv4::request rq{"GET", target, &fields, ""};
  a.signature = sigv4::signature(c.aws->placeholder_secret, a,
                                 sigv4::string_to_sign("20261205T060000Z", a,
                                                       sigv4::canonical_request(rq, names, "UNSIGNED-PAYLOAD", sigv4::is_s3(a.service))));
  std::string auth = sigv4::format_authorization(a);
  fields.emplace_back("Authorization", auth);
  r = inj.apply(fields, target, "aws.test", "https", 443, "GET");
  require(r.reason.empty() && !r.set.empty() && r.set[0].first == "Authorization" &&
          r.set[0].second.find("Credential=AKIAREALKEY000000000/") != std::string::npos);
  return 0;
}
