#include "filters/credentials.hpp"
#include "filters/aws_sigv4.hpp"
#include "filters/policy_loader.hpp"

#include <boost/beast/core/detail/base64.hpp>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

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

namespace {

// Runs a command source: its standard output (at most 64 KiB), or a config_error naming the
// credential, the command and what went wrong (its first line of stderr; never its stdout).
std::string run_source_command(const credential_config &c) {
  auto argv = command_argv(c.source);
  std::string shown = c.source.substr(8);
  auto fail = [&](const std::string &why) {
    return config_error("credential '" + c.name + "': the command `" + shown + "` " + why +
                        "; check it by running it yourself, as the user that runs sluice");
  };
  if (argv.empty()) throw fail("is empty");
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw fail("could not start (no pipe)");
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    throw fail("could not start (no pipe)");
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group, so that a timeout ends whatever it started too.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  std::vector<char *> args;
  for (auto &a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(out[1]);
  ::close(err[1]);
  if (rc != 0) {
    ::close(out[0]);
    ::close(err[0]);
    throw fail("could not start: " + std::string(std::strerror(rc)));
  }
  std::string value, errors;
  constexpr std::size_t max_out = 64 * 1024, max_err = 4 * 1024;
  auto deadline = std::chrono::steady_clock::now() + command_timeout;
  bool timed_out = false, too_long = false;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open = 2;
  while (open > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    int n = ::poll(fds, 2, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      ssize_t r = ::read(fds[i].fd, buf, sizeof buf);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        fds[i].fd = -1;
        --open;
        continue;
      }
      auto &into = i == 0 ? value : errors;
      auto cap = i == 0 ? max_out : max_err;
      into.append(buf, static_cast<std::size_t>(std::min<ssize_t>(r, static_cast<ssize_t>(cap - std::min(cap, into.size())))));
      if (i == 0 && into.size() >= max_out) too_long = true;
    }
    if (too_long) break;
  }
  ::close(out[0]);
  ::close(err[0]);
  if (timed_out || too_long) ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) throw fail("did not finish within " + std::to_string(command_timeout.count()) + " s");
  if (too_long) throw fail("printed more than 64 KiB");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    auto line = errors.substr(0, errors.find('\n'));
    throw fail((WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                  : std::string("was killed by a signal")) +
               (line.empty() ? std::string() : " (" + line + ")"));
  }
  while (!value.empty() && (value.back() == '\n' || value.back() == '\r')) value.pop_back();
  if (value.empty()) throw fail("printed nothing");
  return value;
}

} // namespace

std::string command_output(const credential_config &c) { return run_source_command(c); }

std::string file_stamp(std::string_view source) {
  struct stat st {};
  if (source.substr(0, 5) != "file:" || ::stat(std::string(source.substr(5)).c_str(), &st) != 0) return "missing";
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
         std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
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

void load_secret(credential_config &c) {
  if (c.oauth2) {
    throw config_error("credential '" + c.name + "': an OAuth2 client is obtained by the gateway (load_credential)");
  }
  if (c.aws) throw config_error("credential '" + c.name + "': an AWS key pair is read by the gateway (load_credential)");
  std::string value;
  if (c.source.rfind("env:", 0) == 0) {
    const char *v = std::getenv(c.source.c_str() + 4);
    if (!v || !*v) {
      throw config_error("credential '" + c.name + "': the variable " + c.source.substr(4) +
                         " (source = \"" + c.source + "\") is not set; export it for sluice, "
                         "or use source = \"file:/path\"");
    }
    value = v;
  } else if (c.source.rfind("file:", 0) == 0) {
    c.file_stamp = file_stamp(c.source); // before the read: a change during it is read again
    std::ifstream f(c.source.substr(5), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    value = ss.str();
    while (!value.empty() && (value.back() == '\n' || value.back() == '\r')) value.pop_back();
    if (!f || value.empty()) {
      throw config_error("credential '" + c.name + "': cannot read a secret from " +
                         c.source.substr(5) + "; check the path, its permissions and that it is "
                         "not empty");
    }
  } else if (c.source.rfind("command:", 0) == 0) {
    value = run_source_command(c);
  } else {
    throw config_error("credential '" + c.name + "': source must be \"env:VAR\", \"file:/path\" or "
                       "\"command:PROGRAM ARGS...\"");
  }
  if (value.find_first_of("\r\n") != std::string::npos) {
    throw config_error("credential '" + c.name + "': the secret holds a line break and cannot go "
                       "into a header");
  }
  c.secret = std::move(value);
  if (c.ttl.count() > 0) c.refresh_at = std::chrono::steady_clock::now() + c.ttl;
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

} // namespace sluice::filters
