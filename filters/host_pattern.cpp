#include "filters/host_pattern.hpp"
#include "filters/host_name.hpp"

#include <charconv>

namespace sluice::filters {
namespace {

// Takes a trailing ":PORT" off `body` when present.
unsigned take_port(std::string_view &body, std::string_view text) {
  auto colon = body.rfind(':');
  if (colon == std::string_view::npos || (!body.empty() && body.back() == ']')) {
    return 0;
  }
  auto digits = body.substr(colon + 1);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) {
    if (body.front() == '[' || body.substr(0, 3) == "re:") {
      return 0;
    }
    throw pattern_error("pattern '" + std::string(text) +
                        "': the port after ':' must be a number from 1 to 65535");
  }
  unsigned port = 0;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (ec != std::errc() || port == 0 || port > 65535) {
    throw pattern_error("pattern '" + std::string(text) + "': port " + std::string(digits) +
                        " is out of range; use 1 to 65535");
  }
  body = body.substr(0, colon);
  return port;
}

// One alternative's domain, or "" when it has none (see regex_domain_suffixes).
std::string alternative_domain(std::string_view alt) {
  if (!alt.empty() && alt.front() == '^') alt.remove_prefix(1);
  if (!alt.empty() && alt.back() == '$' && (alt.size() < 2 || alt[alt.size() - 2] != '\\')) {
    alt.remove_suffix(1);
  }
  // Tokens: a literal host character (escaped '.' or '-' too) or 0 for anything else.
  std::vector<char> tokens;
  for (std::size_t i = 0; i < alt.size(); ++i) {
    char c = alt[i];
    if (c == '\\' && i + 1 < alt.size()) {
      char n = alt[++i];
      tokens.push_back(n == '.' || n == '-' ? n : 0);
    } else if (c == '[') { // a class: skip to its end
      ++i;
      if (i < alt.size() && alt[i] == '^') ++i;
      if (i < alt.size() && alt[i] == ']') ++i;
      while (i < alt.size() && alt[i] != ']') i += alt[i] == '\\' ? 2 : 1;
      tokens.push_back(0);
    } else if (c == '*' || c == '+' || c == '?' || c == '{') { // a quantifier: its atom varies
      if (!tokens.empty()) tokens.back() = 0;
      if (c == '{') {
        while (i < alt.size() && alt[i] != '}') ++i;
      }
      tokens.push_back(0);
    } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '-' || c == '_') {
      tokens.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c));
    } else {
      tokens.push_back(0); // '.', '(', ')', '|' inside groups, anchors, ...
    }
  }
  std::string tail;
  std::size_t k = tokens.size();
  while (k > 0 && tokens[k - 1] != 0) --k;
  tail.assign(tokens.begin() + static_cast<std::ptrdiff_t>(k), tokens.end());
  if (tail.empty()) return {};
  if (k > 0) { // something variable precedes the tail: only whole labels after it are fixed
    auto dot = tail.find('.');
    if (dot == std::string::npos) return {};
    tail = tail.substr(dot + 1);
  }
  if (tail.empty() || tail.front() == '.' || tail.back() == '.' ||
      tail.find("..") != std::string::npos) {
    return {};
  }
  return tail;
}

} // namespace

std::vector<std::string> regex_domain_suffixes(std::string_view regex) {
  std::vector<std::string> out;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= regex.size(); ++i) {
    char c = i < regex.size() ? regex[i] : '|';
    if (c == '\\') {
      ++i;
      continue;
    }
    if (c == '[') { // '|' and parentheses inside a class are literal
      for (++i; i < regex.size() && regex[i] != ']'; ++i) {
        if (regex[i] == '\\') ++i;
      }
      continue;
    }
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == '|' && depth == 0) {
      auto d = alternative_domain(regex.substr(start, i - start));
      if (d.empty()) return {};
      bool seen = false;
      for (auto &o : out) seen = seen || o == d;
      if (!seen) out.push_back(d);
      start = i + 1;
    }
  }
  return out;
}

void require_constrainable(const host_pattern &p) {
  if (p.type == host_pattern::kind::regex && p.domains.empty()) {
    throw pattern_error("allow pattern '" + p.text +
                        "' has no literal domain suffix, so the CA could not be name-constrained; "
                        "end every alternative with escaped labels, e.g. re:[a-z0-9-]+\\.example\\.com");
  }
}

host_pattern parse_host_pattern(std::string_view text) {
  host_pattern out;
  out.text = std::string(text);
  if (text.empty()) {
    throw pattern_error("empty host pattern; write a host such as api.github.com, *.github.com "
                        "or re:REGEX");
  }
  std::string_view body = text;
  if (body.substr(0, 3) == "re:") {
    body.remove_prefix(3);
    // A regex may itself hold ':'; only a trailing ":DIGITS" is a port.
    auto colon = body.rfind(':');
    if (colon != std::string_view::npos && colon + 1 < body.size() &&
        body.substr(colon + 1).find_first_not_of("0123456789") == std::string_view::npos) {
      std::string_view port_part = body;
      out.port = take_port(port_part, text);
      body = port_part;
    }
    if (body.empty()) {
      throw pattern_error("pattern '" + std::string(text) + "': the regex after 're:' is empty");
    }
    out.type = host_pattern::kind::regex;
    out.value = std::string(body);
    out.domains = regex_domain_suffixes(body);
    return out;
  }
  out.port = take_port(body, text);
  bool wildcard = body.substr(0, 2) == "*.";
  if (wildcard) {
    body.remove_prefix(2);
  }
  if (body.find('*') != std::string_view::npos) {
    throw pattern_error("pattern '" + std::string(text) +
                        "': '*' is only allowed as a leading '*.' label; use re: for other shapes");
  }
  auto parsed = parse_host(body);
  if (!parsed.host) {
    throw pattern_error("pattern '" + std::string(text) + "' is not a valid host (" +
                        std::string(parsed.reason) +
                        "); write a DNS name, a dotted-quad IPv4 or a [bracketed] IPv6 address");
  }
  if (wildcard && parsed.host->ip) {
    throw pattern_error("pattern '" + std::string(text) + "': '*.' cannot precede an IP address");
  }
  if (wildcard && parsed.host->name.find('.') == std::string::npos) {
    throw pattern_error("pattern '" + std::string(text) +
                        "' would match a whole top-level domain; name a registrable domain");
  }
  out.type = wildcard ? host_pattern::kind::subdomains : host_pattern::kind::exact;
  out.value = parsed.host->name;
  return out;
}

} // namespace sluice::filters
