#include "exec/view_ssh.hpp"
#include "exec/mount_view.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <strings.h>
#include <sys/stat.h>
#include <vector>

namespace sluice::exec {
namespace {

// The host's global known-hosts file: read by sluice (outside the view), merged, and sent to init
// with sluice's other files, whose message holds at most 256 KiB in all.
constexpr const char *host_known_hosts = "/etc/ssh/ssh_known_hosts";
constexpr std::size_t max_host_known_hosts = 128 * 1024;

// The first line of both files.
constexpr const char *served_note = "# sluice: the SSH hosts of the policy are served by sluice with this command's host key\n";

std::string base64(const unsigned char *data, std::size_t size) {
  std::string out(4 * ((size + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char *>(out.data()), data, static_cast<int>(size));
  out.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return out;
}

// The bytes of base64 `text`, or empty when it is not base64.
std::string unbase64(std::string_view text) {
  if (text.empty() || text.size() % 4 != 0) return {};
  std::string out(3 * text.size() / 4, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char *>(out.data()),
                          reinterpret_cast<const unsigned char *>(text.data()), static_cast<int>(text.size()));
  if (n < 0) return {};
  std::size_t pad = text.size() - text.find_last_not_of('=') - 1; // EVP_DecodeBlock counts '=' as bytes
  out.resize(static_cast<std::size_t>(n) - std::min<std::size_t>(pad, 2));
  return out;
}

// Whether a known_hosts host pattern names `name`: the same name in any case, or "|1|SALT|HASH"
// (HashKnownHosts), the HMAC-SHA1 of the name keyed with the salt.
bool pattern_names(std::string_view pattern, const std::string &name) {
  if (pattern.size() == name.size() && ::strncasecmp(pattern.data(), name.data(), name.size()) == 0) return true;
  if (pattern.rfind("|1|", 0) != 0) return false;
  auto bar = pattern.find('|', 3);
  if (bar == std::string_view::npos) return false;
  std::string salt = unbase64(pattern.substr(3, bar - 3));
  if (salt.empty()) return false;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_size = 0;
  if (!HMAC(EVP_sha1(), salt.data(), static_cast<int>(salt.size()), reinterpret_cast<const unsigned char *>(name.data()),
            name.size(), mac, &mac_size)) {
    return false;
  }
  return base64(mac, mac_size) == pattern.substr(bar + 1);
}

// One known_hosts line without the patterns that name a served host; empty when none is left.
std::string without_served(const std::string &line, const std::vector<std::string> &served) {
  auto start = line.find_first_not_of(" \t");
  if (start == std::string::npos || line[start] == '#') return line;
  if (line[start] == '@') start = line.find_first_not_of(" \t", line.find_first_of(" \t", start)); // a marker
  if (start == std::string::npos) return line;
  auto end = std::min(line.find_first_of(" \t", start), line.size());
  std::string kept;
  bool dropped = false;
  for (std::size_t at = start; at <= end;) {
    auto comma = std::min(line.find(',', at), end);
    std::string_view pattern(line.data() + at, comma - at);
    bool serves = std::any_of(served.begin(), served.end(), [&](const std::string &n) { return pattern_names(pattern, n); });
    if (serves) {
      dropped = true;
    } else {
      kept += (kept.empty() ? "" : ",") + std::string(pattern);
    }
    at = comma + 1;
  }
  if (!dropped) return line;
  if (kept.empty()) return {};
  return line.substr(0, start) + kept + line.substr(end);
}

} // namespace

std::string view_ssh_config() {
  // OpenSSH takes the first value it reads, and the view's empty home has no ~/.ssh/config to come
  // before these.
  std::string text = std::string(served_note) + "GlobalKnownHostsFile " + sandbox_files_dir + "/known_hosts\n"
                     "UserKnownHostsFile /dev/null\n"
                     "StrictHostKeyChecking yes\n"
                     "ForwardAgent no\n"
                     "ForwardX11 no\n\n";
  std::ifstream in("/etc/ssh/ssh_config", std::ios::binary);
  std::string host((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (host.size() > 1024 * 1024) host.clear();
  return text + host;
}

std::string merge_known_hosts(std::string_view host_text, std::string_view gateway_lines) {
  std::vector<std::string> served; // the first field of each of the gateway's lines
  for (std::size_t at = 0; at < gateway_lines.size();) {
    auto end = std::min(gateway_lines.find('\n', at), gateway_lines.size());
    auto line = gateway_lines.substr(at, end - at);
    if (!line.empty()) served.emplace_back(line.substr(0, line.find(' ')));
    at = end + 1;
  }
  std::string out = served_note;
  out += gateway_lines;
  if (host_text.empty()) return out;
  out += "# the host's " + std::string(host_known_hosts) + ", without entries for those hosts\n";
  for (std::size_t at = 0; at < host_text.size();) {
    auto nl = std::min(host_text.find('\n', at), host_text.size());
    std::string line = without_served(std::string(host_text.substr(at, nl - at)), served);
    if (!line.empty() || nl == at) out += line + "\n";
    at = nl + 1;
  }
  return out;
}

std::string view_ssh_known_hosts(std::string_view gateway_lines) {
  // Only what any user may read goes into the view: a root caller's command sees /etc as others do
  // (the id-mapped /etc, sandbox.cpp), and sluice reads this file as the caller.
  struct stat st {};
  if (::stat(host_known_hosts, &st) != 0 || !S_ISREG(st.st_mode) || !(st.st_mode & S_IROTH)) {
    return merge_known_hosts("", gateway_lines);
  }
  std::ifstream in(host_known_hosts, std::ios::binary);
  std::string host((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (host.size() > max_host_known_hosts) {
    std::fprintf(stderr, "sluice: %s is over %zu KiB, more than sluice hands into the sandbox; the view's copy "
                         "lists only the gateway's host key for the policy's SSH hosts\n",
                 host_known_hosts, max_host_known_hosts / 1024);
    host.clear();
  }
  return merge_known_hosts(host, gateway_lines);
}

} // namespace sluice::exec
