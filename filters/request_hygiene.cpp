#include "filters/request_hygiene.hpp"

#include <algorithm>
#include <array>
#include <string>

namespace sluice::filters {
namespace {

// ASCII only, as HTTP's names and tokens are (no locale lookup per byte).
char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + ('a' - 'A')) : c; }

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return ascii_lower(x) == ascii_lower(y); });
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto &c : out) c = ascii_lower(c);
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Calls `f` with each element of a comma-separated list (RFC 9110 section 5.6.1), trimmed; a
// protocol's version ("websocket/13") is part of its token.
template <class F> void for_each_token(std::string_view list, F &&f) {
  while (!list.empty()) {
    auto comma = list.find(',');
    auto t = trim(list.substr(0, comma));
    if (!t.empty()) f(t);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
}

} // namespace

bool target_is_unambiguous(std::string_view target) {
  if (target == "*") {
    return true;
  }
  if (target.empty() || target.front() != '/') {
    return false;
  }
  auto path = target.substr(0, target.find('?'));
  for (unsigned char c : target) {
    if (c <= 0x20 || c == 0x7f || c == '#' || c == '\\') {
      return false;
    }
  }
  // Without a dot or a percent sign there is no dot segment, encoded or not.
  if (path.find_first_of(".%") == std::string_view::npos) {
    return true;
  }
  std::string p = lower(path);
  // Decode %2e and %2f so that "/%2e%2e/" and "/..%2f" are seen as the dot segments they become.
  std::string decoded;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '%' && i + 2 < p.size() + 0 && p.compare(i, 3, "%2e") == 0) {
      decoded.push_back('.');
      i += 2;
    } else if (p[i] == '%' && p.compare(i, 3, "%2f") == 0) {
      decoded.push_back('/');
      i += 2;
    } else if (p[i] == '%' && p.compare(i, 3, "%5c") == 0) {
      return false;
    } else {
      decoded.push_back(p[i]);
    }
  }
  std::size_t start = 0;
  while (start <= decoded.size()) {
    auto slash = decoded.find('/', start);
    auto seg = std::string_view(decoded).substr(
        start, (slash == std::string::npos ? decoded.size() : slash) - start);
    if (seg == "." || seg == "..") {
      return false;
    }
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return true;
}

namespace {
// Bytes check_raw_head looks at twice: CR, LF, and the control characters (HTAB aside) with DEL.
constexpr auto raw_head_special = [] {
  std::array<bool, 256> t{};
  for (int c = 0; c < 0x20; ++c) t[c] = c != '\t';
  t[0x7f] = true;
  return t;
}();
} // namespace

std::string_view check_raw_head(std::string_view head) {
  for (std::size_t i = 0; i < head.size(); ++i) {
    auto c = static_cast<unsigned char>(head[i]);
    if (!raw_head_special[c]) continue; // nearly every byte: one lookup
    if (c == '\r') {
      if (i + 1 >= head.size() || head[i + 1] != '\n') return "bare_line_ending";
      ++i;
      // CRLF then SP/HTAB continues the previous field: obs-fold (RFC 9112 section 5.2).
      if (i + 1 < head.size() && (head[i + 1] == ' ' || head[i + 1] == '\t')) {
        return "obsolete_line_folding";
      }
    } else if (c == '\n') {
      return "bare_line_ending";
    } else if ((c < 0x20 && c != '\t') || c == 0x7f) {
      return "control_character";
    }
  }
  return {};
}

bool is_framing_error(std::string_view reason) {
  if (reason == "obsolete_line_folding" || reason == "bare_line_ending" ||
      reason == "bad_request_body" || reason == "body_too_large") {
    return true;
  }
  return reason == "duplicate_content_length" || reason == "content_length_with_transfer_encoding" ||
         reason == "bad_transfer_encoding" || reason == "bad_content_length" ||
         reason == "ambiguous_target" || reason == "bad_host_header" ||
         reason == "control_character" || reason == "connection_strips_field" ||
         reason == "underscore_framing_field";
}

namespace {

// RFC 6455 section 4.1: the key is a random 16-byte value, base64-encoded: 22 characters of the
// alphabet and "==" (a value of any other shape is not a WebSocket handshake).
bool websocket_key_is_valid(std::string_view key) {
  if (key.size() != 24 || key.substr(22) != "==") return false;
  for (char c : key.substr(0, 22)) {
    bool b64 = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/';
    if (!b64) return false;
  }
  return true;
}

} // namespace

std::string_view check_request(const request_view &req, profile p) {
  int content_lengths = 0;
  int transfer_encodings = 0;
  int hosts = 0;
  bool has_body = false;
  bool upgrade = false;
  bool override_header = false;
  bool underscore_framing = false;
  bool connection_upgrade = false, ws_key = false, ws_version = false, h2c = false, websocket = false;
  for (auto [name, value] : req.fields) {
    if (name.find('_') != std::string_view::npos) {
      std::string folded = lower(name);
      std::replace(folded.begin(), folded.end(), '_', '-');
      underscore_framing = underscore_framing || folded == "content-length" || folded == "transfer-encoding";
    }
    for (unsigned char c : value) {
      if ((c < 0x20 && c != '\t') || c == 0x7f) {
        return "control_character";
      }
    }
    if (iequals(name, "content-length")) {
      ++content_lengths;
      auto v = trim(value);
      if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string_view::npos) {
        return "bad_content_length";
      }
      if (v.find_first_not_of('0') != std::string_view::npos) {
        has_body = true;
      }
    } else if (iequals(name, "transfer-encoding")) {
      ++transfer_encodings;
      if (!iequals(trim(value), "chunked")) {
        return "bad_transfer_encoding"; // only a lone "chunked" frames a request unambiguously
      }
      has_body = true;
    } else if (iequals(name, "host")) {
      ++hosts;
    } else if (iequals(name, "upgrade")) {
      upgrade = true;
      for_each_token(value, [&](std::string_view t) {
        h2c = h2c || iequals(t, "h2c");
        websocket = websocket || iequals(t, "websocket");
      });
    } else if (iequals(name, "connection")) {
      // Connection names fields to strip before forwarding (hop-by-hop). Naming one that was
      // checked here, or that the gateway sets, would strip it after the check: refused.
      bool strips = false;
      for_each_token(value, [&](std::string_view t) {
        connection_upgrade = connection_upgrade || iequals(t, "upgrade");
        for (auto f : {"host", "content-length", "transfer-encoding", "authorization", "proxy-authorization"}) {
          strips = strips || iequals(t, f);
        }
        for (auto g : req.guarded) strips = strips || iequals(t, g);
      });
      if (strips) return "connection_strips_field";
    } else if (iequals(name, "sec-websocket-key")) {
      ws_key = !ws_key && websocket_key_is_valid(trim(value)); // one key, a base64 16-byte nonce
    } else if (iequals(name, "sec-websocket-version")) {
      ws_version = trim(value) == "13";
    } else if (iequals(name, "x-http-method-override") || iequals(name, "x-http-method") ||
               iequals(name, "x-method-override")) {
      override_header = true;
    }
  }
  if (content_lengths > 1) return "duplicate_content_length";
  if (transfer_encodings > 1) return "bad_transfer_encoding";
  if (content_lengths > 0 && transfer_encodings > 0) return "content_length_with_transfer_encoding";
  if (hosts > 1) return "bad_host_header";
  if (underscore_framing && has_body) return "underscore_framing_field";
  if (!target_is_unambiguous(req.target)) return "ambiguous_target";
  if (upgrade && p != profile::allowlist) {
    // HTTP/2 in clear text is never carried (h2 is offered inside TLS); of the other upgrades only
    // a well-formed WebSocket handshake (RFC 6455 section 4.1), whose frames the gateway reads.
    if (h2c) return "h2c_refused";
    bool ws = websocket && req.method == "GET" && connection_upgrade && ws_key && ws_version && !has_body;
    if (!ws) return "upgrade_refused";
  }
  if (p == profile::network_read) {
    if (override_header) return "method_override_refused";
    bool read_method = req.method == "GET" || req.method == "HEAD" || req.method == "OPTIONS";
    if (has_body && read_method) return "body_on_read_method"; // other methods: method_not_allowed
  }
  return {};
}

bool is_websocket_upgrade(const request_view &req) {
  bool ws = false;
  for (auto [name, value] : req.fields) {
    if (iequals(name, "upgrade")) for_each_token(value, [&](std::string_view t) { ws = ws || iequals(t, "websocket"); });
  }
  return ws;
}

} // namespace sluice::filters
