#include "filters/route_matcher.hpp"

#include <algorithm>
#include <cctype>

namespace sluice::filters {
namespace {

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool unreserved(unsigned char c) {
  return std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

// An HTTP method token (RFC 9110): visible characters but delimiters.
bool token(std::string_view m) {
  if (m.empty()) return false;
  for (unsigned char c : m) {
    if (c <= 0x20 || c >= 0x7f || std::string_view("\"(),/:;<=>?@[\\]{}").find(c) != std::string_view::npos) {
      return false;
    }
  }
  return true;
}

char lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

bool equal(std::string_view a, std::string_view b, bool fold) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (fold ? lower(a[i]) != lower(b[i]) : a[i] != b[i]) return false;
  }
  return true;
}

std::string join(const std::vector<std::string> &v) {
  std::string out;
  for (const auto &s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

// Whether the escape at path[i] (decoded to `d`) starts an overlong UTF-8 sequence: C0 and C1
// lead bytes always are; E0 followed by an escaped 80-9F, F0 by 80-8F encode what a shorter form
// would (RFC 3629 section 3).
bool overlong_utf8(std::string_view path, std::size_t i, unsigned char d) {
  if (d == 0xc0 || d == 0xc1) return true;
  if (d != 0xe0 && d != 0xf0) return false;
  if (i + 5 >= path.size() || path[i + 3] != '%') return false;
  int h = hex(path[i + 4]), l = hex(path[i + 5]);
  if (h < 0 || l < 0) return false;
  auto next = static_cast<unsigned char>(h * 16 + l);
  return d == 0xe0 ? next >= 0x80 && next <= 0x9f : next >= 0x80 && next <= 0x8f;
}

} // namespace

std::optional<std::string> route_path(std::string_view target) {
  std::string_view path = target.substr(0, target.find('?'));
  if (path.empty() || path.front() != '/') return std::nullopt;
  std::string out;
  out.reserve(path.size());
  for (std::size_t i = 0; i < path.size(); ++i) {
    char c = path[i];
    if (c == '%') {
      int h = i + 2 < path.size() ? hex(path[i + 1]) : -1, l = h >= 0 ? hex(path[i + 2]) : -1;
      if (h < 0 || l < 0) return std::nullopt;
      auto d = static_cast<unsigned char>(h * 16 + l);
      if (d == '/' || d == '\\' || d == ';' || d == 0) return std::nullopt;
      if (unreserved(d)) {
        out.push_back(static_cast<char>(d));
      } else {
        const char *digits = "0123456789ABCDEF";
        out += {'%', digits[h], digits[l]};
      }
      i += 2;
    } else if (c == ';' || c == '\\' || c == '#' || static_cast<unsigned char>(c) <= 0x20 ||
               static_cast<unsigned char>(c) >= 0x7f) {
      return std::nullopt;
    } else {
      out.push_back(c);
    }
  }
  // A double escape ("%252e" is "%2e" once decoded) names one path here and another at an origin
  // that decodes twice; an overlong UTF-8 form ("%c0%ae" for '.') one that decodes leniently.
  // Neither is a spelling a client needs: refused. Looked for in what was read, where every
  // escape is in one form, so that one read out of pieces ("%25%34%31" is "%2541") is caught too.
  for (std::size_t at = out.find('%'); at != std::string::npos; at = out.find('%', at + 1)) {
    if (out.compare(at, 3, "%25") == 0 && at + 4 < out.size() && hex(out[at + 3]) >= 0 && hex(out[at + 4]) >= 0) {
      return std::nullopt;
    }
    if (overlong_utf8(out, at, static_cast<unsigned char>(hex(out[at + 1]) * 16 + hex(out[at + 2])))) {
      return std::nullopt;
    }
  }
  // Segments: no empty one but the last ("/a/" is fine, "/a//b" is not), no dot segments.
  std::size_t start = 1;
  while (start <= out.size()) {
    auto slash = out.find('/', start);
    auto seg = std::string_view(out).substr(start, (slash == std::string::npos ? out.size() : slash) - start);
    if (seg == "." || seg == ".." || (seg.empty() && slash != std::string::npos)) return std::nullopt;
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return out;
}

bool route_path_matches(std::string_view pattern, std::string_view path, bool deny) {
  // A deny route also takes the path's trailing-slash twin ("/a" and "/a/"), which many servers
  // serve as the same resource; an allow route stays exact.
  auto twin = [&](std::string_view want) {
    if (!deny) return false;
    if (path.size() == want.size() + 1 && path.back() == '/') return equal(path.substr(0, want.size()), want, true);
    if (want.size() == path.size() + 1 && want.back() == '/') return equal(want.substr(0, path.size()), path, true);
    return false;
  };
  if (!pattern.empty() && pattern.back() == '*') {
    auto prefix = pattern.substr(0, pattern.size() - 1);
    if (path.size() >= prefix.size() && equal(path.substr(0, prefix.size()), prefix, deny)) return true;
    // A denied "/admin/*" takes "/admin" too (the directory itself, redirected to "/admin/").
    return prefix.size() > 1 && prefix.back() == '/' && twin(prefix);
  }
  return equal(pattern, path, deny) || twin(pattern);
}

std::string describe_route(route_rule &r) {
  for (const auto &m : r.methods) {
    if (!token(m)) throw pattern_error("method '" + m + "' is not an HTTP method token");
    if (m == "TRACE" || m == "CONNECT") {
      throw pattern_error("method " + m + " cannot be allowed or denied by a route (sluice refuses it everywhere)");
    }
  }
  for (auto &p : r.paths) {
    auto star = p.find('*');
    if (star != std::string::npos && star != p.size() - 1) {
      throw pattern_error("path '" + p + "': '*' may only end a path (a prefix)");
    }
    std::string base = star == std::string::npos ? p : p.substr(0, star);
    auto norm = route_path(base.empty() ? "/" : base);
    if (base.find('?') != std::string::npos || !norm) {
      throw pattern_error("path '" + p + "' must start with '/' and hold no query, no '//', ';', "
                          "dot segment, space or escaped '/'");
    }
    p = *norm + (star == std::string::npos ? "" : "*");
  }
  if (r.websocket && !r.methods.empty() && std::find(r.methods.begin(), r.methods.end(), "GET") == r.methods.end()) {
    throw pattern_error("websocket = true needs GET among the methods (a WebSocket opens with a GET)");
  }
  if (r.mcp && !r.websocket && !r.methods.empty() &&
      std::find(r.methods.begin(), r.methods.end(), "POST") == r.methods.end()) {
    throw pattern_error("an mcp route needs POST among the methods (MCP's calls are POSTs), or websocket = true "
                        "where its MCP runs over a WebSocket");
  }
  return r.host + " " + (r.methods.empty() ? "*" : join(r.methods)) + " " +
         (r.paths.empty() ? "*" : join(r.paths)) + (r.websocket ? " websocket" : "") + (r.mcp ? " mcp" : "");
}

route_matcher::route_matcher(std::vector<route_rule> rules, bool deny) : rules_(std::move(rules)), deny_(deny) {
  for (const auto &r : rules_) hosts_.emplace_back(std::vector<std::string>{r.host}, deny);
}

const route_rule *route_matcher::match(std::string_view method, std::string_view target,
                                       std::string_view host, std::string_view scheme, unsigned port,
                                       bool profile_allows, bool websocket, bool mcp) const {
  std::optional<std::string> path;
  bool path_read = false;
  for (std::size_t i = 0; i < rules_.size(); ++i) {
    const auto &r = rules_[i];
    if ((websocket && !r.websocket) || (mcp && !r.mcp)) continue;
    if (!hosts_[i].match(host, scheme, port)) continue;
    // An MCP route carries POSTs whatever the profile: each is judged by its calls (mcp_rule).
    bool method_ok = r.methods.empty() ? (deny_ || profile_allows || (r.mcp && method == "POST"))
                                       : std::find(r.methods.begin(), r.methods.end(), method) != r.methods.end();
    if (!method_ok) continue;
    if (r.paths.empty()) return &r;
    if (!path_read) {
      path = route_path(target);
      path_read = true;
    }
    if (!path) {
      if (deny_) return &r; // a path no one can read one way only is denied where a route covers it
      continue;
    }
    for (const auto &p : r.paths) {
      if (route_path_matches(p, *path, deny_)) return &r;
    }
  }
  return nullptr;
}

const route_rule *route_matcher::match_host(std::string_view host, std::string_view scheme,
                                            unsigned port) const {
  for (std::size_t i = 0; i < rules_.size(); ++i) {
    if (hosts_[i].match(host, scheme, port)) return &rules_[i];
  }
  return nullptr;
}

} // namespace sluice::filters
