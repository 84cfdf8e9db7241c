#pragma once
// Requests held for a person's decision ([approvals], docs/policy.md "Approvals"): a request to an
// askable host that the allowlist refuses waits here until someone allows it once, for the run, or
// or for good (a block appended to the trusted policy file), or denies it, from the live page,
// `sluice approve` / `sluice deny`, a webhook, or the timeout. Shared by every
// worker (a mutex); a decision wakes the held session through the function it registered, which
// posts to that session's own thread. Private to gateway/.
#include "gateway/exchange/judge.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace sluice::gateway {

enum class approval { pending, once, run, always, deny, timeout, gone };
std::string_view to_string(approval a);

struct held_request {
  std::uint64_t id = 0;
  std::string client, method, scheme, host, path, profile, kind; // kind: "connect" or "request"
  std::string rule; // what lets it be asked about: "[approvals] hosts PATTERN"
  unsigned port = 0;
  std::chrono::system_clock::time_point since;
  std::chrono::milliseconds timeout{0};
};

class approvals : public exchange::run_approvals {
public:
  struct entry;
  using entry_ptr = std::shared_ptr<entry>;

  // `max_pending`: requests held at once; beyond it a request is refused at once. `policy_file`:
  // the trusted policy file "allow always" appends to (empty: none, as for the built-in policy).
  approvals(std::size_t max_pending, std::string policy_file) : max_(max_pending), file_(std::move(policy_file)) {}

  // Holds `r` (its id is assigned here); `wake` is called once, from any thread, when it is
  // decided. Null when max_pending requests are held already.
  entry_ptr hold(held_request r, std::function<void()> wake);
  static std::uint64_t id_of(const entry_ptr &e);
  // The decision so far; a held request whose time ran out is `timeout` and forgotten.
  approval result(const entry_ptr &e, bool timed_out);
  // Who decided (for the log): "page", "cli", "webhook" or empty.
  std::string decided_by(const entry_ptr &e);
  // The session gave up (its client left): forgotten, undecided.
  void forget(const entry_ptr &e);
  // A person's decision for request `id`; false when no such request is held any more.
  bool decide(std::uint64_t id, approval a, const std::string &by);
  // "Allow always": appends the block pending_json showed for request `id` to the policy file
  // (after checking that the file still loads with it), then decides `always` (the host passes for
  // the rest of the run, and from the file after). An empty string, or why nothing was written
  // and nothing decided.
  std::string allow_always(std::uint64_t id, const std::string &by);
  // The block "allow always" appends for `r`: a comment saying when and for what, and
  // [[approvals.allowed]] with the host (and its port when not the scheme's own).
  static std::string always_text(const held_request &r);
  // Hosts allowed for the rest of the run (host:port), by a decision "run" or "always".
  bool allowed_for_run(const std::string &host, unsigned port) const override;
  // The held requests, oldest first, as the JSON the page and the CLI read.
  std::string pending_json() const;
  std::size_t pending() const;

private:
  mutable std::mutex m_;
  std::size_t max_;
  std::string file_;
  std::mutex file_m_; // one append at a time
  std::uint64_t next_ = 1;
  std::map<std::uint64_t, entry_ptr> held_;
  std::set<std::string> run_;
};

} // namespace sluice::gateway
