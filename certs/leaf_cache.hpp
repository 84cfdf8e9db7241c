#pragma once
#include "certs/certificate_authority.hpp"

#include <mutex>
#include <string>
#include <unordered_map>

namespace sluice::certs {

// Leaves minted per host, shared by every session of every worker thread. Bounded: when full, the
// oldest-minted half is dropped. An entry is re-minted once it is past half its validity.
class leaf_cache {
public:
  leaf_cache(const certificate_authority &ca, std::chrono::seconds validity,
             std::size_t capacity = 10'000)
      : ca_(ca), validity_(validity), capacity_(capacity) {}

  struct result {
    shared_x509 cert;
    bool cached = false;
  };
  result get(const std::string &host, bool is_ip);

private:
  struct entry {
    shared_x509 cert;
    std::chrono::steady_clock::time_point minted;
  };
  const certificate_authority &ca_;
  std::chrono::seconds validity_;
  std::size_t capacity_;
  std::mutex mutex_;
  std::unordered_map<std::string, entry> entries_;
};

} // namespace sluice::certs
