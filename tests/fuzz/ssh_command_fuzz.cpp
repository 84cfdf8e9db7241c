// Fuzzes the SSH gateway's reading of exec requests (filters/ssh_command): whatever a client sends
// as a command, a parse that passes names one of Git's three programs and a repository that holds
// no control byte, no "..", no empty segment and no leading '-' or '~', and rules match it the
// same way whichever slashes and ".git" it was written with.
#include "filters/ssh_command.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace {
void require(bool ok) {
  if (!ok) std::abort();
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view input(reinterpret_cast<const char *>(data), size);
  sluice::filters::git_ssh_command c;
  if (sluice::filters::parse_git_ssh_command(input, c).empty()) {
    require(c.program == "git-upload-pack" || c.program == "git-upload-archive" || c.program == "git-receive-pack");
    require(c.program == sluice::filters::git_ssh_service_name(c.service));
    const auto &r = c.repository;
    require(!r.empty() && r.front() != '/' && r.front() != '-' && r.front() != '~' && r.back() != '/');
    require(std::none_of(r.begin(), r.end(), [](char ch) { return static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f; }));
    require(r.find("//") == std::string::npos && ("/" + r + "/").find("/../") == std::string::npos &&
            ("/" + r + "/").find("/./") == std::string::npos);
    require(sluice::filters::ssh_repository_matches({r}, r));
    require(sluice::filters::ssh_repository_matches({"/" + r}, r));
    require(sluice::filters::ssh_repository_matches({}, r));
  }
  auto line = sluice::filters::git_error_pkt_line(input);
  require(line.size() >= 9 && line.substr(4, 4) == "ERR " && line.back() == '\n');
  require(std::strtoul(line.substr(0, 4).c_str(), nullptr, 16) == line.size());
  return 0;
}
