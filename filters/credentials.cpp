#include "filters/credentials.hpp"
#include "filters/aws_sigv4.hpp"
#include "filters/policy_loader.hpp"

#include <boost/beast/core/detail/base64.hpp>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <algorithm>
#include <cctype>

namespace sluice::filters {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  for (auto at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

// The user:password of a "Basic ..." value, if it is one.
std::optional<std::string> basic_credentials(std::string_view value) {
  if (value.size() < 6 || !iequals(value.substr(0, 6), "basic ")) return std::nullopt;
  auto b64 = value.substr(6);
  while (!b64.empty() && b64.front() == ' ') b64.remove_prefix(1);
  return base64_decode(b64);
}

} // namespace

std::string credential_placeholder(std::string_view name) {
  return "sluice-credential-" + std::string(name);
}

const std::vector<placeholder_kind> &placeholder_kinds() {
  static constexpr std::string_view alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  static constexpr std::string_view upper = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
  static const std::vector<placeholder_kind> kinds = {
      {"github", "ghp_", 40, alnum},                 // a classic personal access token
      {"github-fine-grained", "github_pat_", 93, alnum},
      {"gitlab", "glpat-", 26, alnum},
      {"openai", "sk-proj-", 164, alnum},
      {"anthropic", "sk-ant-api03-", 108, alnum},
      {"slack-bot", "xoxb-", 56, alnum},
      {"npm", "npm_", 40, alnum},
      {"aws-access-key-id", "AKIA", 20, upper},       // AWS: 20 characters, base32 after AKIA
      {"aws-secret-access-key", "", 40, alnum},
  };
  return kinds;
}

std::string shaped_placeholder(const credential_config &c, bool random) {
  if (c.placeholder_shape.empty()) return credential_placeholder(c.name);
  std::string_view prefix = c.placeholder_shape, alphabet = placeholder_kinds().front().alphabet;
  unsigned length = c.placeholder_length;
  for (const auto &k : placeholder_kinds()) {
    if (k.name == c.placeholder_shape) {
      prefix = k.prefix;
      length = k.length;
      alphabet = k.alphabet;
    }
  }
  std::string out(prefix);
  unsigned char bytes[64];
  std::size_t have = 0, used = 0;
  std::uint64_t counter = 0;
  auto next = [&]() -> unsigned char {
    if (used == have) {
      if (random) {
        if (RAND_bytes(bytes, sizeof bytes) != 1) throw config_error("no random bytes for a placeholder");
      } else {
        // Derived: SHA-256 of the name and a counter, as many blocks as it takes.
        std::string seed = "sluice-placeholder:" + c.name + ":" + std::to_string(counter++);
        SHA256(reinterpret_cast<const unsigned char *>(seed.data()), seed.size(), bytes);
        SHA256(bytes, 32, bytes + 32);
      }
      have = sizeof bytes;
      used = 0;
    }
    return bytes[used++];
  };
  const unsigned limit = 256 - 256 % alphabet.size(); // no bias: draws at or past it are dropped
  while (out.size() < length) {
    unsigned b = next();
    if (b < limit) out += alphabet[b % alphabet.size()];
  }
  return out;
}

std::string base64_encode(std::string_view in) {
  namespace b64 = boost::beast::detail::base64;
  std::string out(b64::encoded_size(in.size()), '\0');
  out.resize(b64::encode(out.data(), in.data(), in.size()));
  return out;
}

std::optional<std::string> base64_decode(std::string_view in) {
  namespace b64 = boost::beast::detail::base64;
  if (in.size() % 4 != 0) return std::nullopt;
  for (char c : in) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/' || c == '=')) return std::nullopt;
  }
  std::string out(b64::decoded_size(in.size()), '\0');
  auto [written, read] = b64::decode(out.data(), in.data(), in.size());
  if (in.substr(read).find_first_not_of('=') != std::string_view::npos) return std::nullopt;
  out.resize(written);
  return out;
}

std::vector<std::string> command_argv(std::string_view source) {
  std::vector<std::string> argv;
  if (source.rfind("command:", 0) != 0) return argv;
  std::string word;
  for (char ch : source.substr(8)) {
    if (ch == ' ' || ch == '\t') {
      if (!word.empty()) argv.push_back(std::move(word));
      word.clear();
    } else {
      word += ch;
    }
  }
  if (!word.empty()) argv.push_back(std::move(word));
  return argv;
}

void make_placeholders(credential_config &c, bool random) {
  c.placeholder = shaped_placeholder(c, random);
  if (c.aws) {
    credential_config secret;
    secret.name = c.name + ".secret-access-key";
    secret.placeholder_shape = "aws-secret-access-key";
    c.aws->placeholder_secret = shaped_placeholder(secret, random);
  }
}

credential_injector::credential_injector(std::vector<credential_config> credentials) {
  for (auto &c : credentials) {
    entry e{c, host_matcher(c.hosts), c.placeholder.empty() ? credential_placeholder(c.name) : c.placeholder, {}};
    if (c.format.rfind("basic:", 0) == 0) {
      e.value = "Basic " + base64_encode(c.format.substr(6) + ":" + c.secret);
    } else {
      e.value = replace_all(c.format, "{}", c.secret);
    }
    entries_.push_back(std::move(e));
  }
}

credential_result credential_injector::apply(
    const std::vector<std::pair<std::string_view, std::string_view>> &fields, std::string_view target,
    std::string_view host, std::string_view scheme, unsigned port, std::string_view method) const {
  credential_result r;
  // First every placeholder bound elsewhere: one leaking is refused whatever else the request is.
  for (const auto &e : entries_) {
    bool belongs = e.hosts.match(host, scheme, port) != nullptr;
    if (belongs) continue;
    // In the target (origin form) or the host name itself (an absolute-form request's authority).
    bool carried = target.find(e.placeholder) != std::string_view::npos || host.find(e.placeholder) != std::string_view::npos;
    for (const auto &[name, value] : fields) {
      if (carried) break;
      carried = value.find(e.placeholder) != std::string_view::npos;
      if (!carried) {
        auto basic = basic_credentials(value);
        carried = basic && basic->find(e.placeholder) != std::string::npos;
      }
    }
    if (carried) {
      r.reason = "credential_host_mismatch";
      r.credential = e.cfg.name;
      return r;
    }
  }
  // AWS: the one pair of the host whose placeholder key signed the request (else the first pair of
  // the host, which refuses another key's signature or lets an unsigned request pass).
  const entry *aws = nullptr;
  for (const auto &e : entries_) {
    if (!e.cfg.aws || !e.hosts.match(host, scheme, port)) continue;
    if (!aws) aws = &e;
    bool named = target.find(e.placeholder) != std::string_view::npos;
    for (const auto &[name, value] : fields) {
      named = named || (iequals(name, "authorization") && value.find(e.placeholder) != std::string_view::npos);
    }
    if (named) {
      aws = &e;
      break;
    }
  }
  if (aws) {
    std::string authority = host.find(':') != std::string_view::npos ? "[" + std::string(host) + "]" : std::string(host);
    if (port != (scheme == "https" ? 443u : 80u)) authority += ":" + std::to_string(port);
    r = apply_aws(*aws, fields, target, method, authority);
    if (!r.reason.empty()) return r;
  }
  for (const auto &e : entries_) {
    if (e.cfg.aws || !e.hosts.match(host, scheme, port)) continue;
    bool has_header = false;
    for (const auto &[name, value] : fields) {
      if (iequals(name, e.cfg.header)) has_header = true;
      std::string v(value);
      if (v.find(e.placeholder) != std::string::npos) {
        r.set.emplace_back(std::string(name), replace_all(v, e.placeholder, e.cfg.secret));
        r.credential = e.cfg.name;
      } else if (auto basic = basic_credentials(value); basic && basic->find(e.placeholder) != std::string::npos) {
        r.set.emplace_back(std::string(name),
                           "Basic " + base64_encode(replace_all(*basic, e.placeholder, e.cfg.secret)));
        r.credential = e.cfg.name;
      }
    }
    bool set_already = false;
    for (auto &[n, v] : r.set) set_already = set_already || iequals(n, e.cfg.header);
    if (!has_header && !set_already) {
      r.set.emplace_back(e.cfg.header, e.value);
      r.credential = e.cfg.name;
    }
  }
  if (r.aws_needs_body) r.credential = aws->cfg.name; // sign_aws is asked for it by name
  return r;
}

namespace {

std::string_view field(const std::vector<std::pair<std::string_view, std::string_view>> &fields, std::string_view name,
                       int *count = nullptr) {
  std::string_view v;
  for (const auto &[n, value] : fields) {
    if (!iequals(n, name)) continue;
    v = value;
    if (count) ++*count;
  }
  return v;
}

bool starts_with_nocase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && iequals(s.substr(0, prefix.size()), prefix);
}

// The key a presigned URL's X-Amz-Credential parameter names (nullopt: the target has none).
std::optional<std::string_view> presigned_key(std::string_view target) {
  auto q = target.find('?');
  if (q == std::string_view::npos) return std::nullopt;
  std::string_view query = target.substr(q + 1);
  std::size_t at = 0;
  while (at <= query.size()) {
    auto amp = query.find('&', at);
    auto item = query.substr(at, amp == std::string_view::npos ? std::string_view::npos : amp - at);
    if (starts_with_nocase(item, "X-Amz-Credential=")) {
      auto v = item.substr(17);
      return v.substr(0, std::min(v.find('/'), v.find('%')));
    }
    if (amp == std::string_view::npos) break;
    at = amp + 1;
  }
  return std::nullopt;
}

} // namespace

credential_result credential_injector::apply_aws(const entry &e,
                                                 const std::vector<std::pair<std::string_view, std::string_view>> &fields,
                                                 std::string_view target, std::string_view method,
                                                 std::string_view authority) const {
  credential_result r;
  r.credential = e.cfg.name;
  int count = 0;
  std::string_view auth = field(fields, "authorization", &count);
  if (count == 0) {
    // No signature in a header: a presigned URL is refused (sluice signs headers only); a request
    // signed in no way passes as it is (S3's public objects).
    if (auto key = presigned_key(target)) {
      r.reason = *key == e.placeholder ? "aws_signature_unsupported" : "aws_signature_refused";
      return r;
    }
    r.credential.clear();
    return r;
  }
  auto parsed = count == 1 ? sigv4::parse_authorization(auth) : std::nullopt;
  if (!parsed) {
    if (count > 1 || starts_with_nocase(auth, "AWS4-HMAC-SHA256")) {
      r.reason = "aws_signature_invalid";
    } else if (starts_with_nocase(auth, "AWS")) { // SigV4a, SigV2: another algorithm
      r.reason = auth.find(e.placeholder) != std::string_view::npos ? "aws_signature_unsupported" : "aws_signature_refused";
    } else {
      r.credential.clear(); // not an AWS signature (a bearer token of the caller's own)
    }
    return r;
  }
  if (parsed->access_key != e.placeholder) {
    r.reason = "aws_signature_refused"; // signed with a key that is not sluice's to replace
    return r;
  }
  std::string_view payload = field(fields, "x-amz-content-sha256");
  if (starts_with_nocase(payload, "STREAMING-") && payload != "STREAMING-UNSIGNED-PAYLOAD-TRAILER") {
    r.reason = "aws_signature_unsupported"; // every chunk signed on its own
    return r;
  }
  if (payload.empty()) {
    std::string_view length = field(fields, "content-length");
    bool bodiless = method == "GET" || method == "HEAD" || method == "DELETE" || method == "OPTIONS";
    bool no_body = field(fields, "transfer-encoding").empty() && (length == "0" || (length.empty() && bodiless));
    if (!no_body) {
      r.aws_needs_body = true;
      return r;
    }
    return sign_aws(e.cfg.name, fields, method, target, authority, sigv4::sha256_hex(""));
  }
  return sign_aws(e.cfg.name, fields, method, target, authority, payload);
}

credential_result credential_injector::sign_aws(std::string_view name,
                                                const std::vector<std::pair<std::string_view, std::string_view>> &fields,
                                                std::string_view method, std::string_view target,
                                                std::string_view authority, std::string_view payload_hash) const {
  credential_result r;
  r.credential = std::string(name);
  const entry *e = nullptr;
  for (const auto &x : entries_) {
    if (x.cfg.name == name && x.cfg.aws) e = &x;
  }
  auto parsed = e ? sigv4::parse_authorization(field(fields, "authorization")) : std::nullopt;
  std::string_view amz_date = field(fields, "x-amz-date");
  if (!parsed || parsed->access_key != e->placeholder || amz_date.size() != 16 ||
      amz_date.substr(0, 8) != parsed->date) {
    r.reason = "aws_signature_invalid";
    return r;
  }
  const bool s3 = sigv4::is_s3(parsed->service);
  sigv4::request rq{method, target, &fields, authority};
  std::string expected = sigv4::signature(
      e->cfg.aws->placeholder_secret, *parsed,
      sigv4::string_to_sign(amz_date, *parsed, sigv4::canonical_request(rq, parsed->signed_headers, payload_hash, s3)));
  if (CRYPTO_memcmp(expected.data(), parsed->signature.data(), 64) != 0) {
    r.reason = "aws_signature_invalid"; // not signed with the placeholder pair, or changed since
    return r;
  }
  if (!field(fields, "x-amz-security-token").empty()) {
    r.reason = "aws_signature_refused"; // a session token sluice did not give: another key's
    return r;
  }
  // Signed again: the real key, its session token added as a signed field.
  const auto &aws = *e->cfg.aws;
  sigv4::authorization real = *parsed;
  real.access_key = aws.access_key_id;
  auto out_fields = fields;
  if (!aws.session_token.empty()) {
    out_fields.emplace_back("x-amz-security-token", aws.session_token);
    real.signed_headers.push_back("x-amz-security-token");
    std::sort(real.signed_headers.begin(), real.signed_headers.end());
  }
  sigv4::request out{method, target, &out_fields, authority};
  real.signature = sigv4::signature(
      e->cfg.secret, real,
      sigv4::string_to_sign(amz_date, real, sigv4::canonical_request(out, real.signed_headers, payload_hash, s3)));
  r.set.emplace_back("Authorization", sigv4::format_authorization(real));
  if (!aws.session_token.empty()) r.set.emplace_back("X-Amz-Security-Token", aws.session_token);
  return r;
}

bool credential_injector::belongs_to(std::string_view name, std::string_view host, std::string_view scheme,
                                     unsigned port) const {
  for (const auto &e : entries_) {
    if (e.cfg.name == name) return e.hosts.match(host, scheme, port) != nullptr;
  }
  return false;
}

} // namespace sluice::filters
