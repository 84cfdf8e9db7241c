#include "filters/git_upload_pack.hpp"

#include <boost/beast/zlib/inflate_stream.hpp>
#include <vector>

namespace sluice::filters {
namespace {

bool ends_with(std::string_view s, std::string_view t) {
  return s.size() >= t.size() && s.substr(s.size() - t.size()) == t;
}

bool is_oid(std::string_view s) {
  if (s.size() != 40 && s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool printable(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  }
  return true;
}

// One pkt-line: kind 0 flush, 1 delim, 2 response-end, 3 data (in `data`, without its '\n').
struct pkt {
  int kind = 3;
  std::string_view data;
};

std::optional<std::vector<pkt>> pkt_lines(std::string_view body) {
  std::vector<pkt> out;
  while (!body.empty()) {
    if (body.size() < 4) return std::nullopt;
    unsigned len = 0;
    for (int i = 0; i < 4; ++i) {
      char c = body[i];
      unsigned v = c >= '0' && c <= '9' ? unsigned(c - '0') : c >= 'a' && c <= 'f' ? unsigned(c - 'a' + 10) : 99;
      if (v == 99) return std::nullopt;
      len = len * 16 + v;
    }
    if (len < 4) {
      if (len == 3) return std::nullopt;
      out.push_back({static_cast<int>(len), {}});
      body.remove_prefix(4);
      continue;
    }
    if (len > body.size() || len == 4) return std::nullopt;
    auto data = body.substr(4, len - 4);
    if (!data.empty() && data.back() == '\n') data.remove_suffix(1);
    out.push_back({3, data});
    body.remove_prefix(len);
  }
  return out;
}

std::string_view word(std::string_view line, std::string_view &rest) {
  auto sp = line.find(' ');
  rest = sp == std::string_view::npos ? std::string_view() : line.substr(sp + 1);
  return line.substr(0, sp);
}

// Protocol v0/v1: want lines (the first with capabilities after a space or NUL), then have lines
// and the rest, flushes between rounds.
bool valid_v0(const std::vector<pkt> &lines) {
  bool any = false;
  for (const auto &p : lines) {
    if (p.kind == 0) continue;
    if (p.kind != 3) return false;
    auto line = p.data;
    if (auto nul = line.find('\0'); nul != std::string_view::npos) line = line.substr(0, nul);
    std::string_view rest;
    auto w = word(line, rest);
    std::string_view arg;
    auto first = word(rest, arg);
    if (w == "want" || w == "have" || w == "shallow") {
      if (!is_oid(first)) return false;
      if (w != "want" && !arg.empty()) return false;
      if (!printable(arg)) return false; // capabilities on the first want
    } else if (w == "deepen" || w == "deepen-since" || w == "deepen-not" || w == "filter") {
      if (rest.empty() || !printable(rest)) return false;
    } else if (w == "done" && rest.empty()) {
    } else {
      return false;
    }
    any = true;
  }
  return any;
}

// Protocol v2: command=ls-refs or command=fetch, capability lines, delim, arguments, flush.
bool valid_v2(const std::vector<pkt> &lines) {
  std::size_t i = 0;
  if (lines.empty() || lines[0].kind != 3) return false;
  auto cmd = lines[0].data;
  if (cmd != "command=ls-refs" && cmd != "command=fetch") return false;
  bool fetch = cmd == "command=fetch";
  for (i = 1; i < lines.size() && lines[i].kind == 3; ++i) { // capabilities
    auto key = lines[i].data.substr(0, lines[i].data.find('='));
    if (key != "agent" && key != "object-format" && key != "server-option" && key != "session-id") {
      return false;
    }
    if (!printable(lines[i].data)) return false;
  }
  if (i < lines.size() && lines[i].kind == 1) { // delim, then the command's arguments
    for (++i; i < lines.size() && lines[i].kind == 3; ++i) {
      std::string_view rest;
      auto w = word(lines[i].data, rest);
      static const std::string_view ls_refs_args[] = {"peel", "symrefs", "unborn", "ref-prefix"};
      static const std::string_view fetch_args[] = {
          "want",          "have",         "done",       "thin-pack",  "no-progress", "include-tag",
          "ofs-delta",     "shallow",      "deepen",     "deepen-relative", "deepen-since",
          "deepen-not",    "filter",       "want-ref",   "sideband-all", "packfile-uris",
          "wait-for-done"};
      bool known = false;
      if (fetch) {
        for (auto a : fetch_args) known = known || a == w;
      } else {
        for (auto a : ls_refs_args) known = known || a == w;
      }
      if (!known || !printable(rest)) return false;
      if ((w == "want" || w == "have" || w == "shallow") && !is_oid(rest)) return false;
    }
  }
  // A flush ends the request; nothing may follow.
  return i + 1 == lines.size() && lines[i].kind == 0;
}

} // namespace

bool is_git_upload_pack(std::string_view method, std::string_view path, std::string_view content_type) {
  return method == "POST" && ends_with(path, "/git-upload-pack") &&
         content_type == "application/x-git-upload-pack-request";
}

bool is_git_receive_pack(std::string_view path) {
  auto q = path.find('?');
  return ends_with(path.substr(0, q), "/git-receive-pack") ||
         path.substr(q == std::string_view::npos ? path.size() : q).find("service=git-receive-pack") !=
             std::string_view::npos;
}

std::optional<std::string> gunzip(std::string_view in, std::size_t limit) {
  // RFC 1952 header: ID1 ID2 CM FLG MTIME(4) XFL OS, then optional fields by FLG.
  if (in.size() < 18 || static_cast<unsigned char>(in[0]) != 0x1f ||
      static_cast<unsigned char>(in[1]) != 0x8b || in[2] != 8) {
    return std::nullopt;
  }
  unsigned flags = static_cast<unsigned char>(in[3]);
  std::size_t pos = 10;
  if (flags & 4) {
    if (pos + 2 > in.size()) return std::nullopt;
    pos += 2 + (static_cast<unsigned char>(in[pos]) | (static_cast<unsigned char>(in[pos + 1]) << 8));
  }
  for (unsigned bit : {8u, 16u}) {
    if (flags & bit) {
      auto nul = in.find('\0', pos);
      if (nul == std::string_view::npos) return std::nullopt;
      pos = nul + 1;
    }
  }
  if (flags & 2) pos += 2;
  if (pos + 8 > in.size()) return std::nullopt;
  auto deflated = in.substr(pos, in.size() - pos - 8);
  boost::beast::zlib::inflate_stream inflater;
  inflater.reset(15);
  std::string out;
  char buf[16384];
  boost::beast::zlib::z_params zs;
  zs.next_in = deflated.data();
  zs.avail_in = deflated.size();
  for (;;) {
    zs.next_out = buf;
    zs.avail_out = sizeof buf;
    boost::system::error_code ec;
    inflater.write(zs, boost::beast::zlib::Flush::sync, ec);
    out.append(buf, sizeof buf - zs.avail_out);
    if (out.size() > limit) return std::nullopt;
    if (ec == boost::beast::zlib::error::end_of_stream) break;
    if (ec || (zs.avail_out != 0 && zs.avail_in == 0)) {
      if (ec) return std::nullopt;
      break; // all input consumed
    }
  }
  return out;
}

std::string_view check_git_upload_pack(std::string_view body, bool gzip) {
  std::optional<std::string> inflated;
  if (gzip) {
    inflated = gunzip(body, max_git_inflated_bytes);
    if (!inflated) return "git_request_refused";
    body = *inflated;
  }
  auto lines = pkt_lines(body);
  if (!lines || lines->empty()) return "git_request_refused";
  bool v2 = (*lines)[0].kind == 3 && (*lines)[0].data.substr(0, 8) == "command=";
  return (v2 ? valid_v2(*lines) : valid_v0(*lines)) ? std::string_view() : "git_request_refused";
}

} // namespace sluice::filters
