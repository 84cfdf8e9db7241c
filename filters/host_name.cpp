#include "filters/host_name.hpp"

#include <vector>

#include <cctype>

#include <algorithm>
#include <charconv>

namespace sluice::filters {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f'); }

// WHATWG's URL parser treats a host whose last label is numeric (decimal or 0x-hex) as an IPv4 address
// in one of several legacy notations. Anything of that shape that is not a canonical dotted quad is
// refused: curl, python and the gateway would each read it differently.
bool looks_numeric(std::string_view label) {
  if (label.empty()) {
    return false;
  }
  if (label.size() >= 2 && label[0] == '0' && label[1] == 'x') {
    return std::all_of(label.begin() + 2, label.end(), is_hex);
  }
  return std::all_of(label.begin(), label.end(), is_digit);
}

std::optional<boost::asio::ip::address_v4> canonical_v4(std::string_view s) {
  unsigned char bytes[4];
  std::size_t pos = 0;
  for (int i = 0; i < 4; ++i) {
    if (i > 0) {
      if (pos >= s.size() || s[pos] != '.') {
        return std::nullopt;
      }
      ++pos;
    }
    std::size_t start = pos;
    while (pos < s.size() && is_digit(s[pos])) {
      ++pos;
    }
    std::size_t len = pos - start;
    if (len == 0 || len > 3 || (len > 1 && s[start] == '0')) {
      return std::nullopt; // leading zeros read as octal by some resolvers
    }
    unsigned v = 0;
    std::from_chars(s.data() + start, s.data() + pos, v);
    if (v > 255) {
      return std::nullopt;
    }
    bytes[i] = static_cast<unsigned char>(v);
  }
  if (pos != s.size()) {
    return std::nullopt;
  }
  return boost::asio::ip::address_v4({bytes[0], bytes[1], bytes[2], bytes[3]});
}

} // namespace

host_parse_result parse_host(std::string_view raw) {
  if (raw.empty() || raw.size() > 255) {
    return {std::nullopt, "invalid_host"};
  }
  if (raw.front() == '[') {
    if (raw.back() != ']') {
      return {std::nullopt, "invalid_host"};
    }
    std::string inner(raw.substr(1, raw.size() - 2));
    if (inner.find('%') != std::string::npos) {
      return {std::nullopt, "invalid_host"}; // zone ids name local interfaces
    }
    boost::system::error_code ec;
    auto v6 = boost::asio::ip::make_address_v6(inner, ec);
    if (ec) {
      return {std::nullopt, "invalid_host"};
    }
    if (v6.is_v4_mapped()) {
      auto v4 = boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, v6);
      return {host_name{v4.to_string(), boost::asio::ip::address(v4)}, {}};
    }
    return {host_name{v6.to_string(), boost::asio::ip::address(v6)}, {}};
  }
  std::string name;
  name.reserve(raw.size());
  for (char c : raw) {
    auto u = static_cast<unsigned char>(c);
    if (u >= 0x80) {
      return {std::nullopt, "non_ascii_host"};
    }
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
    if (!(is_digit(c) || (c >= 'a' && c <= 'z') || c == '-' || c == '.' || c == '_')) {
      return {std::nullopt, "invalid_host"};
    }
    name.push_back(c);
  }
  if (name.back() == '.') {
    name.pop_back(); // the root label: "example.com." is "example.com"
  }
  if (name.empty() || name.size() > 253) {
    return {std::nullopt, "invalid_host"};
  }
  std::string_view last_label;
  std::size_t start = 0;
  while (true) {
    std::size_t dot = name.find('.', start);
    std::string_view label(name.data() + start,
                           (dot == std::string::npos ? name.size() : dot) - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
      return {std::nullopt, "invalid_host"};
    }
    last_label = label;
    if (dot == std::string::npos) {
      break;
    }
    start = dot + 1;
  }
  if (looks_numeric(last_label)) {
    if (auto v4 = canonical_v4(name)) {
      return {host_name{v4->to_string(), boost::asio::ip::address(*v4)}, {}};
    }
    return {std::nullopt, "ambiguous_host"};
  }
  return {host_name{std::move(name), std::nullopt}, {}};
}

bool split_authority(std::string_view authority, std::string_view &host, unsigned &port) {
  port = 0;
  std::string_view rest;
  if (!authority.empty() && authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos) {
      return false;
    }
    host = authority.substr(0, close + 1);
    rest = authority.substr(close + 1);
  } else {
    auto colon = authority.rfind(':');
    if (colon == std::string_view::npos) {
      host = authority;
      return !host.empty();
    }
    if (authority.find(':') != colon) {
      return false; // a bare IPv6 literal without brackets is ambiguous
    }
    host = authority.substr(0, colon);
    rest = authority.substr(colon);
  }
  if (host.empty()) {
    return false;
  }
  if (rest.empty()) {
    return true;
  }
  if (rest.front() != ':' || rest.size() < 2 || rest.size() > 6) {
    return false;
  }
  unsigned p = 0;
  auto [ptr, ec] = std::from_chars(rest.data() + 1, rest.data() + rest.size(), p);
  if (ec != std::errc() || ptr != rest.data() + rest.size() || p == 0 || p > 65535) {
    return false;
  }
  port = p;
  return true;
}

std::optional<listen_address> parse_listen_address(std::string_view text) {
  std::string_view host;
  unsigned port = 0;
  if (!split_authority(text, host, port) || port == 0) return std::nullopt;
  if (host.front() == '[') host = host.substr(1, host.size() - 2);
  boost::system::error_code ec;
  auto ip = boost::asio::ip::make_address(std::string(host), ec);
  if (ec) return std::nullopt;
  return listen_address{ip, static_cast<unsigned short>(port)};
}

std::optional<std::string> hosts_file_address(std::string_view text, std::string_view name) {
  auto lower = [](std::string_view v) {
    std::string out(v);
    for (auto &c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  std::string want = lower(name);
  while (!text.empty()) {
    auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    line = line.substr(0, line.find('#'));
    std::vector<std::string_view> words;
    std::size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
      std::size_t j = i;
      while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
      if (j > i) words.push_back(line.substr(i, j - i));
      i = j;
    }
    for (std::size_t k = 1; k < words.size(); ++k) {
      if (lower(words[k]) == want) return std::string(words[0]);
    }
  }
  return std::nullopt;
}

} // namespace sluice::filters
