#include "scan/rules_cache.hpp"
#include "scan/literals.hpp"

#include <hs/hs.h>
#include <openssl/evp.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <utility>

namespace sluice::scan::detail {
namespace {

// Larger than any database of rules (the built-in rules serialize to about 90 KiB): a bound on
// what is read, not a limit a policy meets.
constexpr off_t most_bytes = 64 << 20;

struct fd_closer {
  int fd;
  ~fd_closer() {
    if (fd >= 0) ::close(fd);
  }
};

void add(EVP_MD_CTX *h, const void *p, std::size_t n) {
  const std::uint64_t len = n; // each part with its length: no two inputs run together alike
  EVP_DigestUpdate(h, &len, sizeof len);
  EVP_DigestUpdate(h, p, n);
}

bool write_all(int fd, const char *p, std::size_t n) {
  while (n > 0) {
    auto w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

// The oldest files past keep_files go (by their time: a file used is touched by load_rules), and
// so does a temporary file an hour old (a run killed between writing it and the rename).
void trim(const std::string &dir) {
  std::unique_ptr<DIR, int (*)(DIR *)> d(::opendir(dir.c_str()), &::closedir);
  if (!d) return;
  std::vector<std::pair<std::int64_t, std::string>> files;
  const auto now = std::time(nullptr);
  while (auto *e = ::readdir(d.get())) {
    std::string_view n = e->d_name;
    const bool temporary = n.starts_with(".rules-");
    if (!temporary && !(n.starts_with("rules-") && n.ends_with(".hs"))) continue;
    struct stat st {};
    if (::fstatat(::dirfd(d.get()), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    if (temporary) {
      if (st.st_mtim.tv_sec + 3600 < now) ::unlinkat(::dirfd(d.get()), e->d_name, 0);
      continue;
    }
    files.emplace_back(static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec, std::string(n));
  }
  if (files.size() <= keep_files) return;
  std::sort(files.begin(), files.end());
  for (std::size_t i = 0; i < files.size() - keep_files; ++i) ::unlinkat(::dirfd(d.get()), files[i].second.c_str(), 0);
}

} // namespace

std::string rules_cache_name(const rules_key_input &in) {
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX *)> h(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!h || EVP_DigestInit_ex(h.get(), EVP_sha256(), nullptr) != 1) return {};
  static constexpr char format[] = "sluice scan rules 1";
  add(h.get(), format, sizeof format - 1);
  const char *version = hs_version();
  add(h.get(), version, std::strlen(version));
  hs_platform_info_t platform{};
  hs_populate_platform(&platform);
  add(h.get(), &platform.tune, sizeof platform.tune);
  add(h.get(), &platform.cpu_features, sizeof platform.cpu_features);
  add(h.get(), &in.mode, sizeof in.mode);
  for (std::size_t i = 0; i < in.expressions.size(); ++i) {
    add(h.get(), in.expressions[i], std::strlen(in.expressions[i]));
    add(h.get(), &in.flags[i], sizeof in.flags[i]);
    add(h.get(), &in.ids[i], sizeof in.ids[i]);
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  if (EVP_DigestFinal_ex(h.get(), md, &len) != 1) return {};
  return "rules-" + hex_encode(std::string_view(reinterpret_cast<const char *>(md), len), false) + ".hs";
}

hs_database *load_rules(const std::string &dir, const std::string &name) {
  if (dir.empty() || name.empty()) return nullptr;
  fd_closer f{::open((dir + "/" + name).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)};
  struct stat st {};
  if (f.fd < 0 || ::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
      (st.st_mode & (S_IWGRP | S_IWOTH)) || st.st_size <= 0 || st.st_size > most_bytes) {
    return nullptr;
  }
  std::string bytes(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < bytes.size()) {
    auto n = ::read(f.fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return nullptr;
    got += static_cast<std::size_t>(n);
  }
  hs_database_t *db = nullptr;
  if (hs_deserialize_database(bytes.data(), bytes.size(), &db) != HS_SUCCESS) return nullptr;
  ::futimens(f.fd, nullptr); // used: the last to be let go
  return db;
}

void save_rules(const std::string &dir, const std::string &name, const hs_database *db) {
  if (dir.empty() || name.empty() || !db) return;
  char *bytes = nullptr;
  std::size_t size = 0;
  if (hs_serialize_database(db, &bytes, &size) != HS_SUCCESS) return;
  std::unique_ptr<char, void (*)(void *)> owned(bytes, &std::free);
  std::string tmp = dir + "/.rules-XXXXXX";
  fd_closer f{::mkostemp(tmp.data(), O_CLOEXEC)}; // 0600
  if (f.fd < 0) return;
  if (!write_all(f.fd, bytes, size) || ::rename(tmp.c_str(), (dir + "/" + name).c_str()) != 0) {
    ::unlink(tmp.c_str());
    return;
  }
  trim(dir);
}

} // namespace sluice::scan::detail
