// Fuzzes the HTTP/2 translation: the input is header fields, one per line ('\n'), name and value
// split at the line's first NUL (later NULs and CRs stay in the value). The same fields go through
// translate_h2_request and, as an HTTP/1.1 response head, through h2_response_fields (and, as a
// trailer section, h2_trailer_fields); what comes out must hold the invariants the session relies on.
#include "filters/h2_translation.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace {

void require(bool ok) {
  if (!ok) {
    __builtin_trap();
  }
}

bool has_ctl(std::string_view v) {
  return v.find_first_of(std::string_view("\r\n\0", 3)) != v.npos;
}

bool connection_specific(std::string_view n) {
  return n == "connection" || n == "keep-alive" || n == "proxy-connection" ||
         n == "transfer-encoding" || n == "upgrade";
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; });
  return out;
}

void check_request(const sluice::filters::h2_request &r) {
  require(!r.method.empty() && !r.scheme.empty() && !r.path.empty() && !r.authority.empty());
  require((r.method == "CONNECT") == !r.protocol.empty()); // only extended CONNECT gets through
  require(r.path.front() == '/' || (r.path == "*" && r.method == "OPTIONS"));
  require(r.authority.find('@') == std::string::npos);
  for (auto *v : {&r.method, &r.scheme, &r.authority, &r.path, &r.protocol}) {
    require(!has_ctl(*v));
  }
  require(r.method.find(' ') == std::string::npos && r.path.find(' ') == std::string::npos);
  int cookies = 0, lengths = 0;
  for (auto &[name, value] : r.fields) {
    require(!name.empty() && name.front() != ':' && name == lower(name));
    require(!has_ctl(value));
    require(!connection_specific(name) && name != "host");
    require(name != "te" || value == "trailers");
    cookies += name == "cookie";
    lengths += name == "content-length";
  }
  require(cookies <= 1 && lengths <= 1);
  require(lengths == (r.content_length ? 1 : 0));
}

void check_response(const std::vector<std::pair<std::string, std::string>> &out,
                    const std::vector<std::pair<std::string_view, std::string_view>> &in) {
  std::vector<std::string> named; // what every Connection field lists, lowercased
  for (auto [name, value] : in) {
    if (lower(name) != "connection") {
      continue;
    }
    std::string v = lower(value);
    for (std::size_t start = 0; start <= v.size();) {
      auto comma = std::min(v.find(',', start), v.size());
      auto token = v.substr(start, comma - start);
      token.erase(0, token.find_first_not_of(" \t"));
      token.erase(token.find_last_not_of(" \t") + 1);
      named.push_back(token);
      start = comma + 1;
    }
  }
  require(!out.empty() && out.front().first == ":status");
  for (std::size_t i = 1; i < out.size(); ++i) {
    auto &[name, value] = out[i];
    require(!name.empty() && name.front() != ':' && name == lower(name));
    require(!has_ctl(value));
    require(!connection_specific(name) && name != "te");
    require(std::find(named.begin(), named.end(), name) == named.end());
  }
  require(out.size() <= in.size() + 1);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view input(reinterpret_cast<const char *>(data), size);
  std::vector<sluice::filters::h2_field> fields;
  std::vector<std::pair<std::string_view, std::string_view>> h1;
  for (std::size_t start = 0; start < input.size();) {
    auto end = std::min(input.find('\n', start), input.size());
    auto line = input.substr(start, end - start);
    auto nul = std::min(line.find('\0'), line.size());
    auto name = line.substr(0, nul);
    auto value = nul < line.size() ? line.substr(nul + 1) : std::string_view{};
    fields.push_back({name, value});
    h1.emplace_back(name, value);
    start = end + 1;
  }
  sluice::filters::h2_request req;
  if (sluice::filters::translate_h2_request(fields, req).empty()) {
    check_request(req);
  }
  check_response(sluice::filters::h2_response_fields(100 + size % 500, h1), h1);
  // As a trailer section: the same invariants, no pseudo-header at all, and none of the fields a
  // trailer section must not carry.
  auto trailers = sluice::filters::h2_trailer_fields(h1);
  trailers.insert(trailers.begin(), {":status", "200"});
  check_response(trailers, h1);
  for (std::size_t i = 1; i < trailers.size(); ++i) {
    const auto &name = trailers[i].first;
    require(name != "content-length" && name != "host" && name != "authorization" && name != "set-cookie");
  }
  return 0;
}
