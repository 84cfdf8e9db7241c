#include "filters/ssh_command.hpp"

#include <algorithm>
#include <cstdio>

namespace sluice::filters {
namespace {

bool is_control(char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }

// Bytes a shell would read as more than a word's letters: outside quotes they are refused.
bool is_shell_byte(char c) {
  return std::string_view(" \t\"'\\$`;&|<>(){}[]*?!#~=%^,").find(c) != std::string_view::npos;
}

// Reads Git's sq_quote form: '...' pieces, joined by \' or \! between them.
bool unquote(std::string_view in, std::string &out) {
  out.clear();
  std::size_t i = 0;
  if (in.empty() || in[0] != '\'') {
    // The unquoted form (older clients, `ssh host git-upload-pack repo`): plain bytes only.
    for (char c : in) {
      if (is_shell_byte(c) || is_control(c)) return false;
    }
    out.assign(in);
    return !out.empty();
  }
  while (i < in.size()) {
    if (in[i] != '\'') return false;
    auto close = in.find('\'', i + 1);
    if (close == std::string_view::npos) return false;
    out.append(in.substr(i + 1, close - i - 1));
    i = close + 1;
    if (i == in.size()) break;
    if (in[i] != '\\' || i + 1 >= in.size() || (in[i + 1] != '\'' && in[i + 1] != '!')) return false;
    out.push_back(in[i + 1]);
    i += 2;
  }
  return true;
}

} // namespace

std::string_view parse_git_ssh_command(std::string_view command, git_ssh_command &out) {
  static constexpr std::pair<std::string_view, git_ssh_service> programs[] = {
      {"git-upload-pack", git_ssh_service::upload_pack},
      {"git-upload-archive", git_ssh_service::upload_archive},
      {"git-receive-pack", git_ssh_service::receive_pack},
      {"git upload-pack", git_ssh_service::upload_pack},
      {"git upload-archive", git_ssh_service::upload_archive},
      {"git receive-pack", git_ssh_service::receive_pack},
  };
  const std::pair<std::string_view, git_ssh_service> *found = nullptr;
  for (auto &p : programs) {
    if (command.size() > p.first.size() && command.substr(0, p.first.size()) == p.first &&
        command[p.first.size()] == ' ') {
      found = &p;
    }
  }
  if (!found) return "ssh_command_refused";
  out.service = found->second;
  out.program = "git-" + std::string(found->first.substr(4));
  auto arg = command.substr(found->first.size() + 1);
  if (!unquote(arg, out.path) || out.path.empty()) return "ssh_bad_repository";
  const auto &p = out.path;
  if (std::any_of(p.begin(), p.end(), is_control) || p.front() == '-') return "ssh_bad_repository";
  // The repository as rules see it: "/org/r.git", "~/org/r.git" and "org/r.git/" are "org/r.git".
  std::string_view r = p;
  if (r.substr(0, 2) == "~/") r.remove_prefix(2);
  while (!r.empty() && r.front() == '/') r.remove_prefix(1);
  while (!r.empty() && r.back() == '/') r.remove_suffix(1);
  if (r.empty() || r.front() == '~') return "ssh_bad_repository"; // another user's home: not a rule's
  if (r.front() == '-') return "ssh_bad_repository"; // "/-x": an option's shape once the '/' is gone
  for (std::size_t start = 0; start <= r.size();) {
    auto slash = std::min(r.find('/', start), r.size());
    auto seg = r.substr(start, slash - start);
    if (seg.empty() || seg == "." || seg == "..") return "ssh_bad_repository";
    start = slash + 1;
  }
  out.repository.assign(r);
  return {};
}

bool ssh_repository_matches(const std::vector<std::string> &patterns, std::string_view repository) {
  if (patterns.empty()) return true;
  auto strip = [](std::string_view s) {
    while (!s.empty() && s.front() == '/') s.remove_prefix(1);
    if (s.size() > 4 && s.substr(s.size() - 4) == ".git") s.remove_suffix(4);
    return s;
  };
  for (const auto &pattern : patterns) {
    std::string_view pat = pattern;
    while (!pat.empty() && pat.front() == '/') pat.remove_prefix(1);
    if (!pat.empty() && pat.back() == '*') {
      if (repository.substr(0, pat.size() - 1) == pat.substr(0, pat.size() - 1)) return true;
    } else if (strip(pat) == strip(repository)) {
      return true;
    }
  }
  return false;
}

bool is_git_protocol_value(std::string_view value) {
  if (value.empty() || value.size() > 64) return false;
  for (std::size_t start = 0; start <= value.size();) {
    auto colon = std::min(value.find(':', start), value.size());
    auto item = value.substr(start, colon - start);
    if (item.size() != 9 || item.substr(0, 8) != "version=" || item[8] < '0' || item[8] > '2') return false;
    start = colon + 1;
  }
  return true;
}

std::string git_error_pkt_line(std::string_view message) {
  std::string body = "ERR ";
  body.append(message.substr(0, 60000));
  body.push_back('\n');
  char len[5];
  std::snprintf(len, sizeof len, "%04zx", body.size() + 4);
  return std::string(len, 4) + body;
}

std::string_view git_ssh_service_name(git_ssh_service s) {
  switch (s) {
  case git_ssh_service::upload_pack:
    return "git-upload-pack";
  case git_ssh_service::upload_archive:
    return "git-upload-archive";
  case git_ssh_service::receive_pack:
    return "git-receive-pack";
  }
  return "-";
}

} // namespace sluice::filters
