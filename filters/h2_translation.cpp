#include "filters/h2_translation.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <utility>

namespace sluice::filters {
namespace {

// ASCII only, as HTTP's names and tokens are (no locale lookup per byte).
char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + ('a' - 'A')) : c; }

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return ascii_lower(x) == ascii_lower(y);
         });
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), ascii_lower);
  return out;
}

bool is_ows(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view s) {
  auto first = s.find_first_not_of(" \t");
  return first == s.npos ? std::string_view{}
                         : s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

// A byte table built from a list of the bytes it admits, plus ASCII letters and digits.
constexpr std::array<bool, 256> alnum_and(std::string_view extra) {
  std::array<bool, 256> t{};
  for (int c = 0; c < 256; ++c) {
    t[c] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  }
  for (char c : extra) {
    t[static_cast<unsigned char>(c)] = true;
  }
  return t;
}

constexpr auto tchar = alnum_and("!#$%&'*+-.^_`|~");               // RFC 9110 section 5.6.2
constexpr auto scheme_char = alnum_and("+-.");                     // RFC 3986 section 3.1
constexpr auto authority_char = alnum_and("-._~%!$&'()*+,;=:[]@"); // RFC 3986 section 3.2

bool all_of(std::string_view s, const std::array<bool, 256> &table) {
  return std::all_of(s.begin(), s.end(),
                     [&](char c) { return table[static_cast<unsigned char>(c)]; });
}

bool is_token(std::string_view s) { return !s.empty() && all_of(s, tchar); }

bool is_scheme(std::string_view s) {
  return !s.empty() && ascii_lower(s[0]) >= 'a' && ascii_lower(s[0]) <= 'z' &&
         all_of(s, scheme_char);
}

// RFC 9113 section 8.2.2: fields that only mean something to one HTTP/1.1 connection.
bool is_connection_specific(std::string_view lower_name) {
  return lower_name == "connection" || lower_name == "keep-alive" ||
         lower_name == "proxy-connection" || lower_name == "transfer-encoding" ||
         lower_name == "upgrade";
}

// A field name as HTTP/2 carries it: a lowercase token, or ':' and one (a pseudo-header).
std::string_view check_name(std::string_view name) {
  if (name.empty() || name == ":") {
    return "h2_bad_field_name";
  }
  for (std::size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (c >= 'A' && c <= 'Z') {
      return "h2_uppercase_name";
    }
    if (!tchar[static_cast<unsigned char>(c)] && !(c == ':' && i == 0)) {
      return "h2_bad_field_name";
    }
  }
  return {};
}

// RFC 9113 section 8.2.1 forbids NUL, CR, LF and surrounding SP/HTAB. The other control bytes are
// refused too: RFC 9110's field-content has none, and the HTTP/1.1 path refuses them as well.
std::string_view check_value(std::string_view v) {
  bool padded = !v.empty() && (is_ows(v.front()) || is_ows(v.back()));
  bool control = std::any_of(v.begin(), v.end(),
                             [](unsigned char c) { return (c < 0x20 && c != '\t') || c == 0x7f; });
  return padded || control ? "h2_bad_field_value" : std::string_view{};
}

// Decimal digits only, 1 to 18 of them (so the value always fits).
std::optional<std::uint64_t> parse_length(std::string_view v) {
  if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != v.npos) {
    return std::nullopt;
  }
  std::uint64_t n = 0;
  std::from_chars(v.data(), v.data() + v.size(), n);
  return n;
}

// The request pseudo-headers (RFC 9113 section 8.3.1, RFC 8441 section 4) and where they go.
struct pseudo_slot {
  std::string_view name;
  std::string h2_request::*member;
};
constexpr std::array<pseudo_slot, 5> pseudo_slots{{{":method", &h2_request::method},
                                                   {":scheme", &h2_request::scheme},
                                                   {":authority", &h2_request::authority},
                                                   {":path", &h2_request::path},
                                                   {":protocol", &h2_request::protocol}}};
// One bit per slot, in pseudo_slots' order: which pseudo-headers the request carried.
constexpr unsigned bit_method = 1, bit_scheme = 2, bit_authority = 4, bit_path = 8;
constexpr unsigned bit_protocol = 16;

// Request-wide checks once every field is in: the pseudo-headers' presence and shapes, then the
// authority against any host field.
std::string_view check_request_line(const h2_request &r, unsigned seen, int hosts,
                                    std::string_view host) {
  bool extended = (seen & bit_protocol) != 0;
  if (!(seen & bit_method)) {
    return "h2_pseudo_header";
  }
  // The method becomes the first word of an HTTP/1.1 request line; :protocol names a protocol.
  if (!is_token(r.method) || (extended && !is_token(r.protocol))) {
    return "h2_bad_field_value";
  }
  if (r.method == "CONNECT" && !extended) {
    return "h2_connect_refused";
  }
  // Extended CONNECT carries :scheme and :path as any other request does (RFC 8441 section 4).
  if ((extended && r.method != "CONNECT") || !(seen & bit_scheme) || !(seen & bit_path) ||
      r.path.empty() || (r.path == "*" ? r.method != "OPTIONS" : r.path.front() != '/')) {
    return "h2_pseudo_header";
  }
  if (!is_scheme(r.scheme) || r.path.find(' ') != std::string::npos) {
    return "h2_bad_field_value"; // a space would end the request-target early
  }
  std::string_view authority = (seen & bit_authority) ? std::string_view(r.authority) : host;
  if (authority.find('@') != std::string_view::npos) {
    return "userinfo_in_target"; // RFC 9113 section 8.3.1: no userinfo in :authority
  }
  // RFC 9113 section 8.3.1: a host that names another entity than :authority is malformed.
  if (hosts > 1 || authority.empty() || !all_of(authority, authority_char) ||
      (hosts == 1 && !iequals(host, authority))) {
    return "bad_host_header";
  }
  return {};
}

} // namespace

std::string_view translate_h2_request(const std::vector<h2_field> &in, h2_request &out) {
  out = h2_request{};
  out.fields.reserve(in.size()); // one allocation, not one per doubling
  unsigned seen = 0;
  bool regular_seen = false;
  int hosts = 0;
  std::string_view host;
  std::optional<std::size_t> cookie_at; // index in out.fields of the joined cookie
  for (const h2_field &field : in) {
    // Plain variables, not a structured binding: clang before 16 cannot capture one in a lambda.
    std::string_view name = field.name, value = field.value;
    if (auto r = check_name(name); !r.empty()) {
      return r;
    }
    if (auto r = check_value(value); !r.empty()) {
      return r;
    }
    if (name.front() == ':') {
      // Pseudo-headers come first, once each, and only those a request defines (RFC 9113 8.3).
      auto slot = std::find_if(pseudo_slots.begin(), pseudo_slots.end(),
                               [&](const pseudo_slot &s) { return s.name == name; });
      unsigned bit = slot == pseudo_slots.end() ? 0 : 1u << (slot - pseudo_slots.begin());
      if (regular_seen || bit == 0 || (seen & bit)) {
        return "h2_pseudo_header";
      }
      seen |= bit;
      out.*(slot->member) = value;
      continue;
    }
    regular_seen = true;
    if (is_connection_specific(name)) {
      return "h2_connection_header";
    }
    if (name == "te" && value != "trailers") {
      return "h2_te_not_trailers";
    }
    if (name == "host") {
      ++hosts;
      host = value;
      continue; // checked against :authority below; `authority` carries it from here on
    }
    if (name == "cookie") {
      // RFC 9113 section 8.2.3: crumbs split over fields become one field again for HTTP/1.1.
      if (cookie_at) {
        out.fields[*cookie_at].second.append("; ").append(value);
        continue;
      }
      cookie_at = out.fields.size();
    }
    if (name == "content-length") {
      auto n = parse_length(value);
      if (!n || (out.content_length && *out.content_length != *n)) {
        return "bad_content_length";
      }
      if (std::exchange(out.content_length, n)) {
        continue; // an equal duplicate, folded into the first
      }
    }
    out.fields.emplace_back(name, value);
  }
  if (auto r = check_request_line(out, seen, hosts, host); !r.empty()) {
    return r;
  }
  if (!(seen & bit_authority)) {
    out.authority = host;
  }
  return {};
}

namespace {

// The names a head's Connection fields list, hop-by-hop too (RFC 9110 section 7.6.1). Kept
// lowercased and sorted: an upstream's head may hold thousands of tokens and of fields, so no
// pairwise compare.
template <class Fields> std::vector<std::string> connection_named(const Fields &fields) {
  std::vector<std::string> named;
  for (const auto &[name, raw] : fields) {
    if (!iequals(name, "connection")) {
      continue;
    }
    std::string_view value = raw;
    for (std::size_t start = 0; start <= value.size();) {
      auto comma = std::min(value.find(',', start), value.size());
      if (auto token = trim(value.substr(start, comma - start)); !token.empty()) {
        named.push_back(lower(token));
      }
      start = comma + 1;
    }
  }
  std::sort(named.begin(), named.end());
  return named;
}

// Whether a field with this name and (trimmed) value goes into an h2 head: a token name, a value
// without CR, LF or NUL (HTTP/2 cannot carry either), and none of the fields that end at a hop.
bool h2_keeps(std::string_view lowered_name, std::string_view value, const std::vector<std::string> &named) {
  if (!is_token(lowered_name) ||
      std::any_of(value.begin(), value.end(), [](char c) { return c == '\r' || c == '\n' || c == '\0'; })) {
    return false; // not expressible in HTTP/2; the parser before should not have let it through
  }
  return !std::binary_search(named.begin(), named.end(), lowered_name) && lowered_name != "te" &&
         !is_connection_specific(lowered_name);
}

} // namespace

std::vector<std::pair<std::string, std::string>>
h2_response_fields(unsigned status,
                   const std::vector<std::pair<std::string_view, std::string_view>> &h1_fields) {
  auto named = connection_named(h1_fields);
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(h1_fields.size() + 1);
  out.emplace_back(":status", std::to_string(status));
  for (auto [name, raw_value] : h1_fields) {
    auto value = trim(raw_value);
    std::string n = lower(name);
    if (h2_keeps(n, value, named)) {
      out.emplace_back(std::move(n), std::string(value));
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::string>>
h2_response_fields_from_h2(unsigned status, std::vector<std::pair<std::string, std::string>> &&h2_head) {
  auto named = connection_named(h2_head);
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(h2_head.size() + 1);
  out.emplace_back(":status", std::to_string(status));
  for (auto &[name, value] : h2_head) {
    std::transform(name.begin(), name.end(), name.begin(), ascii_lower);
    auto trimmed = trim(value);
    if (!h2_keeps(name, trimmed, named)) {
      continue; // pseudo-headers too: ":status" is put first above
    }
    if (trimmed.size() != value.size()) {
      value = std::string(trimmed);
    }
    out.emplace_back(std::move(name), std::move(value));
  }
  return out;
}

std::vector<std::pair<std::string, std::string>>
h2_trailer_fields(const std::vector<std::pair<std::string_view, std::string_view>> &fields) {
  auto out = h2_response_fields(200, fields);
  out.erase(out.begin()); // ":status"
  std::erase_if(out, [](const auto &f) {
    const auto &n = f.first;
    return n == "content-length" || n == "content-encoding" || n == "content-range" ||
           n == "content-type" || n == "host" || n == "authorization" || n == "set-cookie" ||
           n == "cache-control" || n == "expect" || n == "max-forwards" || n == "pragma" ||
           n == "range" || n == "trailer" || n == "www-authenticate" || n == "proxy-authenticate" ||
           n == "age" || n == "expires" || n == "date" || n == "location" || n == "retry-after" ||
           n == "vary" || n == "warning";
  });
  return out;
}

} // namespace sluice::filters
