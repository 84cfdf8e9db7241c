#include "certs/leaf_cache.hpp"

#include <algorithm>
#include <vector>

namespace sluice::certs {

leaf_cache::result leaf_cache::get(const std::string &host, bool is_ip) {
  auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(host);
    if (it != entries_.end() && now - it->second.minted < validity_ / 2) {
      return {it->second.cert, true};
    }
  }
  // Sign outside the lock: two sessions racing for a new host each mint, one entry wins.
  auto cert = share(ca_.mint(host, is_ip, validity_));
  std::lock_guard lock(mutex_);
  if (entries_.size() >= capacity_) {
    std::vector<std::pair<std::chrono::steady_clock::time_point, std::string>> ages;
    ages.reserve(entries_.size());
    for (auto &[h, e] : entries_) ages.emplace_back(e.minted, h);
    std::nth_element(ages.begin(), ages.begin() + ages.size() / 2, ages.end());
    for (std::size_t i = 0; i < ages.size() / 2 + 1; ++i) entries_.erase(ages[i].second);
  }
  entries_[host] = {cert, now};
  return {cert, false};
}

} // namespace sluice::certs
