// SigV4 against botocore's own signer: the canonical requests and signatures below are what
// botocore (awscli 2.9's) computed for the same requests, key and time.
#include "filters/aws_sigv4.hpp"
#include "filters/credentials.hpp"

#include <catch2/catch.hpp>

using namespace sluice::filters;

namespace {
using fields = std::vector<std::pair<std::string_view, std::string_view>>;
constexpr std::string_view key_id = "AKIAIOSFODNN7EXAMPLE";
constexpr std::string_view secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
constexpr std::string_view when = "20261205T060000Z";
const std::string empty_hash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

sigv4::authorization scope(std::string_view service, std::vector<std::string> headers) {
  sigv4::authorization a;
  a.access_key = key_id;
  a.date = "20261205";
  a.region = "us-east-1";
  a.service = service;
  a.signed_headers = std::move(headers);
  return a;
}

std::string sign(const sigv4::request &r, sigv4::authorization &a, std::string_view payload, std::string_view with) {
  auto canonical = sigv4::canonical_request(r, a.signed_headers, payload, sigv4::is_s3(a.service));
  a.signature = sigv4::signature(with, a, sigv4::string_to_sign(when, a, canonical));
  return canonical;
}
} // namespace

TEST_CASE("SigV4 as botocore signs: another service's path is normalized and encoded again", "[filters][sigv4]") {
  fields f{{"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"},
           {"Host", "iam.amazonaws.com"},
           {"X-Amz-Date", when}};
  sigv4::request r{"GET", "/a/./b//c%20d/?Action=ListUsers&Version=2010-05-08&z=a%2Fb&empty=", &f, ""};
  auto a = scope("iam", {"content-type", "host", "x-amz-date"});
  CHECK(sign(r, a, empty_hash, secret) ==
        "GET\n/a/b/c%2520d/\nAction=ListUsers&Version=2010-05-08&empty=&z=a%2Fb\n"
        "content-type:application/x-www-form-urlencoded; charset=utf-8\nhost:iam.amazonaws.com\n"
        "x-amz-date:20261205T060000Z\n\ncontent-type;host;x-amz-date\n" + empty_hash);
  CHECK(a.signature == "3d17dceaa27cbd8eb0d69ee7489bbccf6aecd7b6c0db7b1dcf221603e161bebc");
}

TEST_CASE("SigV4 as botocore signs: S3 keeps its path, values are trimmed", "[filters][sigv4]") {
  fields f{{"x-amz-content-sha256", empty_hash}, {"X-Amz-Meta-Note", "  two   spaces  "}, {"X-Amz-Date", when}};
  // No host field (HTTP/2): the authority stands for it.
  sigv4::request r{"GET", "/bucket/some%20key/x?list-type=2&prefix=a%2Fb&delimiter=%2F", &f, "aws.test:8443"};
  auto a = scope("s3", {"host", "x-amz-content-sha256", "x-amz-date", "x-amz-meta-note"});
  CHECK(sign(r, a, empty_hash, secret) ==
        "GET\n/bucket/some%20key/x\ndelimiter=%2F&list-type=2&prefix=a%2Fb\nhost:aws.test:8443\n"
        "x-amz-content-sha256:" + empty_hash + "\nx-amz-date:20261205T060000Z\nx-amz-meta-note:two spaces\n\n"
        "host;x-amz-content-sha256;x-amz-date;x-amz-meta-note\n" + empty_hash);
  CHECK(a.signature == "864cb264938ef82ec95036a1bde1cc852064f6e7d5fa136637f377a0f9f0926e");
}

TEST_CASE("SigV4 as botocore signs: a POST's body hash", "[filters][sigv4]") {
  fields f{{"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"},
           {"Host", "sts.amazonaws.com"},
           {"X-Amz-Date", when}};
  sigv4::request r{"POST", "/", &f, ""};
  auto a = scope("sts", {"content-type", "host", "x-amz-date"});
  sign(r, a, sigv4::sha256_hex("Action=GetCallerIdentity&Version=2011-06-15"), secret);
  CHECK(a.signature == "2801d167956e65b23c07dcb2ff62aef5e483f7644220d1758addf07690ff1ab5");
  auto parsed = sigv4::parse_authorization(sigv4::format_authorization(a));
  REQUIRE(parsed);
  CHECK(parsed->access_key == key_id);
  CHECK(parsed->service == "sts");
  CHECK(parsed->signed_headers == a.signed_headers);
  CHECK(parsed->signature == a.signature);
}

TEST_CASE("SigV4 Authorization values that are not one are refused", "[filters][sigv4]") {
  CHECK_FALSE(sigv4::parse_authorization("Bearer x"));
  CHECK_FALSE(sigv4::parse_authorization("AWS4-HMAC-SHA256 Credential=K/20261205/us-east-1/s3/aws4_request"));
  CHECK_FALSE(sigv4::parse_authorization("AWS4-HMAC-SHA256 Credential=K/2026120/us-east-1/s3/aws4_request, "
                                         "SignedHeaders=host, Signature=" + empty_hash));
  CHECK_FALSE(sigv4::parse_authorization("AWS4-HMAC-SHA256 Credential=K/20261205/us-east-1/s3/aws4_request, "
                                         "SignedHeaders=Host, Signature=" + empty_hash));
  CHECK_FALSE(sigv4::parse_authorization("AWS4-HMAC-SHA256 Credential=K/20261205/us-east-1/s3/aws4_request, "
                                         "SignedHeaders=host, Signature=" + empty_hash + ", Extra=1"));
  CHECK(sigv4::parse_authorization("AWS4-HMAC-SHA256 Credential=K/20261205/us-east-1/s3/aws4_request, "
                                   "SignedHeaders=host;x-amz-date, Signature=" + empty_hash));
}

namespace {
credential_config aws_credential(std::string token = "") {
  credential_config c;
  c.name = "aws";
  c.source = "aws";
  c.hosts = {"*.amazonaws.com", "aws.test"};
  c.placeholder_shape = "aws-access-key-id";
  c.aws = aws_config{};
  c.aws->process = "command:true";
  make_placeholders(c, true);
  c.aws->access_key_id = key_id;
  c.aws->session_token = std::move(token);
  c.secret = secret;
  return c;
}

// A request as a client holding the placeholder pair signs it.
struct signed_request {
  std::string method = "GET", target = "/bucket/key", payload = empty_hash;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string authorization;
  fields view() const {
    fields out;
    for (auto &[n, v] : headers) out.emplace_back(n, v);
    if (!authorization.empty()) out.emplace_back("Authorization", authorization);
    return out;
  }
};

signed_request sign_as_client(const credential_config &c, std::string_view service, std::string_view host,
                              std::string_view key, std::string_view with, bool content_hash = true) {
  signed_request s;
  s.headers = {{"Host", std::string(host)}, {"X-Amz-Date", std::string(when)}};
  std::vector<std::string> names{"host", "x-amz-date"};
  if (content_hash) {
    s.headers.emplace_back("x-amz-content-sha256", s.payload);
    names = {"host", "x-amz-content-sha256", "x-amz-date"};
  }
  auto f = s.view();
  sigv4::request r{s.method, s.target, &f, ""};
  auto a = scope(service, names);
  a.access_key = key;
  sign(r, a, s.payload, with);
  (void)c;
  s.authorization = sigv4::format_authorization(a);
  return s;
}
} // namespace

TEST_CASE("a request signed with the placeholder pair is signed again with the real one", "[filters][sigv4]") {
  auto c = aws_credential("SESSIONTOKEN");
  credential_injector inj({c});
  auto s = sign_as_client(c, "s3", "aws.test", c.placeholder, c.aws->placeholder_secret);
  auto r = inj.apply(s.view(), s.target, "aws.test", "https", 443, "GET");
  REQUIRE(r.reason.empty());
  REQUIRE(r.set.size() == 2);
  CHECK(r.set[0].first == "Authorization");
  CHECK(r.set[1] == std::pair<std::string, std::string>{"X-Amz-Security-Token", "SESSIONTOKEN"});
  // What the origin checks: the real key, the token among the signed fields, a valid signature.
  auto real = sigv4::parse_authorization(r.set[0].second);
  REQUIRE(real);
  CHECK(real->access_key == key_id);
  CHECK(real->signed_headers == std::vector<std::string>{"host", "x-amz-content-sha256", "x-amz-date", "x-amz-security-token"});
  auto f = s.view();
  f.pop_back(); // the old Authorization
  f.emplace_back("X-Amz-Security-Token", "SESSIONTOKEN");
  sigv4::request out{"GET", s.target, &f, ""};
  auto expect = *real;
  sign(out, expect, s.payload, secret);
  CHECK(expect.signature == real->signature);
  CHECK(r.set[0].second.find(c.aws->placeholder_secret) == std::string::npos);
}

TEST_CASE("AWS signatures sluice does not sign again are refused", "[filters][sigv4]") {
  auto c = aws_credential();
  credential_injector inj({c});
  SECTION("another key") {
    auto s = sign_as_client(c, "s3", "aws.test", "AKIAOTHERKEY00000000", "other-secret");
    CHECK(inj.apply(s.view(), s.target, "aws.test", "https", 443).reason == "aws_signature_refused");
  }
  SECTION("the placeholder key with another secret") {
    auto s = sign_as_client(c, "s3", "aws.test", c.placeholder, "not-the-placeholder-secret");
    CHECK(inj.apply(s.view(), s.target, "aws.test", "https", 443).reason == "aws_signature_invalid");
  }
  SECTION("changed after it was signed") {
    auto s = sign_as_client(c, "s3", "aws.test", c.placeholder, c.aws->placeholder_secret);
    s.target = "/bucket/other-key";
    CHECK(inj.apply(s.view(), s.target, "aws.test", "https", 443).reason == "aws_signature_invalid");
  }
  SECTION("chunk signatures") {
    auto s = sign_as_client(c, "s3", "aws.test", c.placeholder, c.aws->placeholder_secret);
    s.headers[2].second = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD";
    CHECK(inj.apply(s.view(), s.target, "aws.test", "https", 443, "PUT").reason == "aws_signature_unsupported");
  }
  SECTION("a presigned URL") {
    std::string target = "/bucket/key?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=" + c.placeholder +
                         "%2F20261205%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Signature=00";
    CHECK(inj.apply(fields{{"Host", "aws.test"}}, target, "aws.test", "https", 443).reason == "aws_signature_unsupported");
    CHECK(inj.apply(fields{{"Host", "aws.test"}}, "/b/k?X-Amz-Credential=AKIAOTHER%2F2026", "aws.test", "https", 443)
              .reason == "aws_signature_refused");
  }
  SECTION("a session token sluice did not give") {
    auto s = sign_as_client(c, "s3", "aws.test", c.placeholder, c.aws->placeholder_secret);
    s.headers.emplace_back("X-Amz-Security-Token", "someone-elses");
    CHECK(inj.apply(s.view(), s.target, "aws.test", "https", 443).reason == "aws_signature_refused");
  }
  SECTION("the placeholder key sent to a host the credential does not name") {
    auto s = sign_as_client(c, "s3", "elsewhere.test", c.placeholder, c.aws->placeholder_secret);
    CHECK(inj.apply(s.view(), s.target, "elsewhere.test", "https", 443).reason == "credential_host_mismatch");
  }
}

TEST_CASE("an unsigned AWS request passes as it is; a body to hash is asked for", "[filters][sigv4]") {
  auto c = aws_credential();
  credential_injector inj({c});
  auto r = inj.apply(fields{{"Host", "aws.test"}}, "/public/object", "aws.test", "https", 443);
  CHECK(r.reason.empty());
  CHECK(r.set.empty());
  // No x-amz-content-sha256 and a body: the gateway hashes the body and calls sign_aws.
  auto s = sign_as_client(c, "sts", "sts.amazonaws.com", c.placeholder, c.aws->placeholder_secret, false);
  auto f = s.view();
  f.emplace_back("Content-Length", "43");
  r = inj.apply(f, "/", "sts.amazonaws.com", "https", 443, "POST");
  CHECK(r.reason.empty());
  CHECK(r.aws_needs_body);
  CHECK(r.credential == "aws");
  // Without a body (a GET), the empty body's hash is used at once.
  r = inj.apply(s.view(), s.target, "sts.amazonaws.com", "https", 443, "GET");
  CHECK(r.reason.empty());
  CHECK_FALSE(r.aws_needs_body);
  REQUIRE(r.set.size() == 1);
}
