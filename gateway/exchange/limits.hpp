#pragma once
// [[limits.budget]] on the one judging step (docs/policy.md, "Limits and budgets"): every protocol
// admits an exchange here after the judge allowed it, and charges what it moved to the meter the
// admission hands out, so HTTP/1.1 requests, h2 streams, WebSocket sessions, tunnels and relayed
// connections count the same way. Counters live in a ledger the gateway keeps across reloads.
// No I/O.
#include "filters/policy.hpp"
#include "gateway/exchange/exchange.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::gateway::exchange {

class meter;

// The bytes a request's head takes on the way out, as HTTP/1.1 writes it (method, target, version,
// each field and its line end): the same count for every protocol, so a budget is spent alike
// over HTTP/1.1 and h2.
inline std::uint64_t head_bytes(const request &r) {
  std::uint64_t n = r.method.size() + 1 + r.target.size() + 11 + r.authority.size();
  if (r.fields) {
    for (const auto &[name, value] : *r.fields) n += name.size() + 2 + value.size() + 2;
  }
  return n + 2;
}

// What the admission of one exchange says.
struct admission {
  std::string_view reason;   // empty: admitted; "rate_limited" (429) or "budget_exhausted" (403)
  std::string budget;        // the budget that refused
  std::string message;       // what the client is told: the budget, its limit, when it refills
  unsigned retry_after = 0;  // seconds until a retry can pass (0: not before a reload or restart)
  std::shared_ptr<meter> charged; // admitted under at least one budget: the exchange's meter
};

// One budget's counter, as the metrics, the live page and the summary show it.
struct budget_row {
  std::string budget, per, client; // client: empty for per = "run"
  std::uint64_t requests = 0, refused = 0, open = 0;
  std::uint64_t bytes_out = 0, bytes_in = 0;             // used
  std::uint64_t bytes_out_limit = 0, bytes_in_limit = 0; // 0: none
  std::uint64_t connections_limit = 0;
  double requests_per_second = 0;
  std::int64_t refills_at = 0; // per = "day": the next 00:00 UTC (Unix seconds); else 0
};

// [limits.shared]: a store every replica shares keeps the counters (gateway/shared_limits/). The
// ledger puts the same admission to it: `shared_question` names each account (its key and its
// budget), the store answers for all of them at once, and ledger::fold turns the answer into the
// admission a local ledger gives, with a meter whose charges also go to the store.
class meter_sink {
public:
  // What an exchange moved since its last charge, added to each account's totals in the store.
  virtual void charge(const std::vector<std::string> &keys, std::uint64_t out, std::uint64_t in) = 0;
  // The exchange ended: its place among each account's `connections` is free again.
  virtual void release(const std::vector<std::string> &keys) = 0;

protected:
  ~meter_sink() = default;
};

struct shared_account {
  std::string key;    // PREFIX:budget:NAME:CLIENT, and :DAY for per = "day"
  std::size_t rule;   // into the policy's limits.budgets
  std::string client; // empty for per = "run"
};

struct shared_question {
  std::vector<shared_account> accounts; // empty: no budget applies
  std::uint64_t head = 0, body = 0;
};

struct shared_answer {
  enum kind_t { admitted, bytes_out, bytes_in, connections, rate } kind = admitted;
  std::size_t index = 0; // the account that refused
  double tokens = 0;     // rate: that account's tokens
  // Admitted: each account's totals after the head was charged (out, in). Refused: the refusing
  // account's, first.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> used;
};

class ledger {
public:
  ledger();
  ~ledger();
  ledger(const ledger &) = delete;
  ledger &operator=(const ledger &) = delete;

  // Admits one exchange of `client` (empty: exec's run, or an anonymous client) to `host`:`port`
  // under `pol`'s budgets: its head (`head_bytes`, sent at once) and the body it announces
  // (`body_bytes`, 0 when unknown) must fit the bytes_out left, the bytes_in budget must not be
  // spent, the rate must have a token and the exchanges at once a place. Admitted, the head is
  // charged and the meter holds the exchange's place until released.
  admission admit(const filters::policy &pol, std::string_view client, std::string_view host,
                  std::string_view scheme, unsigned port, std::uint64_t head_bytes, std::uint64_t body_bytes);
  // Every counter, sorted by budget and client. With [limits.shared], this process's view: the
  // totals the store last reported, and what this process counted since.
  std::vector<budget_row> snapshot() const;

  // [limits.shared]: the question admit() answers here, for the store (`prefix`: its keys').
  shared_question ask(const filters::policy &pol, std::string_view client, std::string_view host,
                      std::string_view scheme, unsigned port, std::uint64_t head_bytes, std::uint64_t body_bytes,
                      std::string_view prefix) const;
  // The store's answer to `q` as an admission: the same refusals and texts as admit(); admitted, a
  // meter on this process's mirror of the accounts (set to the store's totals) whose charges also
  // go to `sink`.
  admission fold(const filters::policy &pol, const shared_question &q, const shared_answer &a,
                 std::shared_ptr<meter_sink> sink);

  struct state; // the counters, shared with the meters that still charge them

private:
  std::shared_ptr<state> state_;
};

// One admitted exchange's share of its budgets.
class meter {
public:
  struct account; // a counter of the ledger (stable: the ledger never drops one)
  meter(std::shared_ptr<ledger::state> s, std::vector<account *> accounts,
        std::shared_ptr<meter_sink> sink = nullptr, std::vector<std::string> keys = {});
  ~meter();
  meter(const meter &) = delete;
  meter &operator=(const meter &) = delete;

  // The exchange has now moved `sent` bytes towards the origin and `received` back, in all (after
  // its head): the difference since the last call is charged. False once a byte budget it falls
  // under is spent: the codec stops relaying (a tunnel or a relay is cut; what is counted already
  // went).
  bool moved(std::uint64_t sent, std::uint64_t received);
  // moved() for one direction's total, as a relay of one direction (a tunnel's, a TCP relay's, a
  // WebSocket's) counts it: `to_origin` the client's bytes towards the origin, else the origin's.
  bool moved_one_way(bool to_origin, std::uint64_t total) { return to_origin ? moved(total, 0) : moved(0, total); }
  // The exchange ended: its place among `connections` is free again (the destructor does it too).
  void release();
  // The exchange ended having moved `sent` and `received` in all: moved() and release() under one
  // turn of the ledger's lock.
  void finish(std::uint64_t sent, std::uint64_t received);

private:
  bool settle(std::uint64_t sent, std::uint64_t received, bool end);

  std::shared_ptr<ledger::state> state_;
  std::vector<account *> accounts_;
  std::shared_ptr<meter_sink> sink_; // [limits.shared]: the store, told what moved and when it ends
  std::vector<std::string> keys_;    // the accounts' keys there
  std::uint64_t sent_ = 0, received_ = 0;
  bool released_ = false;
};

} // namespace sluice::gateway::exchange
