// What a request names before its body: the target (path and query parameters, raw and
// percent-decoded) and field values.
#include "scan/scanner.hpp"

#include <algorithm>
#include <cctype>
#include <optional>

namespace sluice::scan {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A parameter name the location may carry: short, of the characters names are made of.
bool plain_name(std::string_view n) {
  return !n.empty() && n.size() <= 40 && std::all_of(n.begin(), n.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '-' || c == '.' || c == '[' || c == ']';
  });
}

// The decodings worth scanning besides the raw value: once, and again for a value encoded twice.
template <class F> void each_decoding(std::string_view raw, bool form, F &&scan) {
  // Most values hold nothing to decode: no copy of them then.
  if (raw.find('%') == std::string_view::npos && (!form || raw.find('+') == std::string_view::npos)) return;
  std::string previous(raw);
  for (int round = 0; round < 2; ++round) {
    if (previous.find('%') == std::string::npos && (!form || previous.find('+') == std::string::npos)) return;
    auto decoded = percent_decode(previous, form);
    if (decoded == previous) return;
    scan(decoded);
    previous = std::move(decoded);
  }
}

std::optional<std::string> base64_decode(std::string_view in) {
  std::string out;
  unsigned buf = 0;
  int bits = 0;
  for (char c : in) {
    int v;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    else if (c >= '0' && c <= '9') v = c - '0' + 52;
    else if (c == '+' || c == '-') v = 62;
    else if (c == '/' || c == '_') v = 63;
    else if (c == '=') break;
    else return std::nullopt;
    buf = (buf << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buf >> bits) & 0xff);
    }
  }
  return out;
}

} // namespace

std::string percent_decode(std::string_view s, bool form) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += form && s[i] == '+' ? ' ' : s[i];
  }
  return out;
}

void scanner::scan_target(std::string_view target) {
  auto q = target.find('?');
  auto path = target.substr(0, q);
  scan_whole("path", path);
  each_decoding(path, false, [&](const std::string &d) { scan_whole("path", d); });
  if (q != std::string_view::npos) query(target.substr(q + 1));
}

void scanner::query(std::string_view query) {
  // The whole query string first (what lies across parameters too); only when it holds something
  // is each parameter scanned, to name where: most queries cost two scans, not one per parameter.
  auto clean = findings_.size();
  scan_whole("query", query);
  each_decoding(query, true, [&](const std::string &d) { scan_whole("query", d); });
  if (findings_.size() == clean) return;
  findings_.resize(clean);
  hits_.resize(clean);
  stopped_ = false; // it was not stopped before: only this query's findings stopped it
  for (std::size_t at = 0; at <= query.size() && !stopped_;) {
    auto amp = std::min(query.find('&', at), query.size());
    auto param = query.substr(at, amp - at);
    at = amp + 1;
    if (param.empty()) continue;
    auto eq = param.find('=');
    auto name = param.substr(0, eq);
    auto before = findings_.size();
    scan_whole("query", name);
    each_decoding(name, true, [&](const std::string &d) { scan_whole("query", d); });
    auto decoded_name = percent_decode(name, true);
    std::string location = findings_.size() == before && plain_name(decoded_name) ? "query:" + decoded_name : "query";
    if (eq == std::string_view::npos) continue;
    auto value = param.substr(eq + 1);
    scan_whole(location, value);
    each_decoding(value, true, [&](const std::string &d) { scan_whole(location, d); });
  }
  // Again whole, for what lies across parameters; a rule already found in a parameter is not
  // found again here.
  scan_whole("query", query);
  each_decoding(query, true, [&](const std::string &d) { scan_whole("query", d); });
}

void scanner::scan_fields(const std::vector<std::pair<std::string_view, std::string_view>> &fields) {
  if (stopped_) return;
  joined_.clear();
  for (auto [name, value] : fields) joined_.append(value).push_back('\n');
  const auto before = findings_.size();
  const bool was_stopped = stopped_;
  scan_whole("fields", joined_);
  if (findings_.size() > before) {
    // Something is there: the one scan's findings go (they name no field, and a match may span
    // two values), and each field is scanned on its own to say where.
    findings_.resize(before);
    hits_.resize(before);
    stopped_ = was_stopped;
    for (auto [name, value] : fields) scan_field(name, value);
    return;
  }
  for (auto [name, value] : fields) scan_field_decoded(name, value);
}

void scanner::scan_field_decoded(std::string_view name, std::string_view value) {
  bool basic = name.size() == 13 || name.size() == 19; // authorization, proxy-authorization
  if (value.find('%') == std::string_view::npos && !basic) return;
  std::string &location = field_location_;
  location.assign("field:");
  for (char c : name) location += c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c;
  scan_decoded_forms(location, value);
}

void scanner::scan_field(std::string_view name, std::string_view value) {
  std::string &location = field_location_; // kept: its capacity serves every field of the request
  location.assign("field:");
  for (char c : name) location += c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c;
  scan_whole(location, value);
  scan_decoded_forms(location, value);
}

void scanner::scan_decoded_forms(const std::string &location, std::string_view value) {
  each_decoding(value, false, [&](const std::string &d) { scan_whole(location, d); });
  if (location == "field:authorization" || location == "field:proxy-authorization") {
    auto v = value;
    while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
    if (v.size() > 6 && (v.substr(0, 6) == "Basic " || v.substr(0, 6) == "basic ")) {
      auto b64 = v.substr(6);
      while (!b64.empty() && b64.front() == ' ') b64.remove_prefix(1);
      while (!b64.empty() && b64.back() == ' ') b64.remove_suffix(1);
      if (auto credentials = base64_decode(b64)) scan_whole(location, *credentials);
    }
  }
}

} // namespace sluice::scan
