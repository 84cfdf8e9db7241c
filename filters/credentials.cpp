#include "filters/credentials.hpp"
#include "filters/policy_loader.hpp"

#include <boost/beast/core/detail/base64.hpp>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

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

void load_secret(credential_config &c) {
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
  } else {
    throw config_error("credential '" + c.name + "': source must be \"env:VAR\" or \"file:/path\"");
  }
  if (value.find_first_of("\r\n") != std::string::npos) {
    throw config_error("credential '" + c.name + "': the secret holds a line break and cannot go "
                       "into a header");
  }
  c.secret = std::move(value);
}

credential_injector::credential_injector(std::vector<credential_config> credentials) {
  for (auto &c : credentials) {
    entry e{c, host_matcher(c.hosts), credential_placeholder(c.name), {}};
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
    std::string_view host, std::string_view scheme, unsigned port) const {
  credential_result r;
  // First every placeholder bound elsewhere: one leaking is refused whatever else the request is.
  for (const auto &e : entries_) {
    bool belongs = e.hosts.match(host, scheme, port) != nullptr;
    if (belongs) continue;
    bool carried = target.find(e.placeholder) != std::string_view::npos;
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
  for (const auto &e : entries_) {
    if (!e.hosts.match(host, scheme, port)) continue;
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
  return r;
}

} // namespace sluice::filters
