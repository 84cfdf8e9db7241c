// The ledger of [[limits.budget]]: token buckets, exchanges at once and byte counters by budget and
// client, under one lock (a request takes it once to be admitted and once to be settled).
#include "gateway/exchange/limits.hpp"

#include <cmath>
#include <tuple>
#include <map>
#include <mutex>

namespace sluice::gateway::exchange {

using steady = std::chrono::steady_clock;
using filters::budget_rule;

struct meter::account {
  budget_rule rule; // the limits of the policy in force at the last admission
  std::string client;
  double tokens = 0;
  steady::time_point last{};
  bool fresh = true;
  std::int64_t day = -1;
  std::uint64_t open = 0, requests = 0, refused = 0, used_out = 0, used_in = 0;
};

namespace {

// Orders (budget, client) keys, and finds one from string views: an admission looks its accounts
// up without building a key.
struct key_less {
  using is_transparent = void;
  template <class A, class B> bool operator()(const A &a, const B &b) const {
    if (int c = std::string_view(a.first).compare(std::string_view(b.first)); c != 0) return c < 0;
    return std::string_view(a.second) < std::string_view(b.second);
  }
};

} // namespace

struct ledger::state {
  mutable std::mutex m;
  // By budget name and client (empty for per = "run"): a map, so an account never moves, and the
  // snapshot comes sorted. Bounded by the budgets and the clients the policy names.
  std::map<std::pair<std::string, std::string>, meter::account, key_less> accounts;

  // The account of `rule` for `client`, made on first use.
  meter::account &account(const budget_rule &rule, std::string_view client) {
    const std::pair<std::string_view, std::string_view> key{rule.name, client};
    auto it = accounts.find(key);
    if (it == accounts.end()) {
      it = accounts.try_emplace({rule.name, std::string(client)}).first;
      it->second.client = std::string(client);
    }
    return it->second;
  }
};

namespace {

std::int64_t utc_day() {
  using namespace std::chrono;
  return duration_cast<seconds>(system_clock::now().time_since_epoch()).count() / 86400;
}

double bucket_size(const budget_rule &r) { return r.burst > 0 ? r.burst : std::max(1.0, r.requests_per_second); }

bool same_rule(const budget_rule &a, const budget_rule &b) {
  return a.per == b.per && a.requests_per_second == b.requests_per_second && a.burst == b.burst &&
         a.connections == b.connections && a.bytes_out == b.bytes_out && a.bytes_in == b.bytes_in &&
         a.name == b.name && a.hosts == b.hosts && a.roles == b.roles;
}

// Brings an account up to now: the policy's current limits, the tokens since the last request, and
// a new day's zero for per = "day".
void sync(meter::account &a, const budget_rule &rule, std::int64_t day, steady::time_point now) {
  if (!same_rule(a.rule, rule)) a.rule = rule; // compared, not copied: a copy allocates each request
  if (rule.per == budget_rule::scope::day && a.day != day) {
    a.used_out = a.used_in = 0;
    a.day = day;
  }
  if (rule.requests_per_second > 0) {
    const double size = bucket_size(rule);
    if (a.fresh) {
      a.tokens = size;
    } else {
      a.tokens = std::min(size, a.tokens + std::chrono::duration<double>(now - a.last).count() * rule.requests_per_second);
    }
  }
  a.fresh = false;
  a.last = now;
}

std::string hosts_text(const budget_rule &r) {
  if (r.hosts.empty()) return "every host";
  std::string s;
  for (const auto &h : r.hosts) s += (s.empty() ? "" : ", ") + h;
  return s;
}

std::string whose(const meter::account &a) {
  if (a.rule.per == budget_rule::scope::run) return "all clients together";
  return a.client.empty() ? "this run" : "client " + a.client;
}

unsigned seconds_to_midnight() {
  using namespace std::chrono;
  auto now = duration_cast<seconds>(system_clock::now().time_since_epoch()).count();
  return static_cast<unsigned>(86400 - now % 86400);
}

admission exhausted(const meter::account &a, std::string_view kind, std::uint64_t used, std::uint64_t limit,
                    std::uint64_t wanted) {
  admission r;
  r.reason = "budget_exhausted";
  r.budget = a.rule.name;
  r.message = "sluice: budget " + a.rule.name + " (" + whose(a) + ", " + hosts_text(a.rule) + ") has used " +
              std::to_string(used) + " of its " + std::string(kind) + " = " + std::to_string(limit) + " bytes";
  if (wanted) r.message += "; this request needs " + std::to_string(wanted) + " more";
  if (a.rule.per == budget_rule::scope::day) {
    r.retry_after = seconds_to_midnight();
    r.message += ". It refills at 00:00 UTC, in " + std::to_string(r.retry_after) + " s";
  } else {
    r.message += std::string(". It does not refill while this ") +
                 (a.client.empty() && a.rule.per != budget_rule::scope::run ? "run" : "gateway") + " runs";
  }
  r.message += "; raise " + std::string(kind) + " in [[limits.budget]] " + a.rule.name + " if this is expected\n";
  return r;
}

admission limited(const meter::account &a, bool connections_full) {
  admission r;
  r.reason = "rate_limited";
  r.budget = a.rule.name;
  if (connections_full) {
    r.retry_after = 1;
    r.message = "sluice: budget " + a.rule.name + " (" + whose(a) + ", " + hosts_text(a.rule) + ") allows " +
                std::to_string(a.rule.connections) + " exchanges at once and all are in use; retry when one "
                "ends, or raise connections in [[limits.budget]] " + a.rule.name + "\n";
    return r;
  }
  const double wait = (1 - a.tokens) / a.rule.requests_per_second;
  r.retry_after = static_cast<unsigned>(std::max(1.0, std::ceil(wait)));
  char rate[32];
  std::snprintf(rate, sizeof rate, "%g", a.rule.requests_per_second);
  char burst[32];
  std::snprintf(burst, sizeof burst, "%g", bucket_size(a.rule));
  r.message = "sluice: budget " + a.rule.name + " (" + whose(a) + ", " + hosts_text(a.rule) + ") allows " + rate +
              " requests a second, " + burst + " at once; retry after " + std::to_string(r.retry_after) +
              " s (Retry-After), or raise requests_per_second in [[limits.budget]] " + a.rule.name + "\n";
  return r;
}

// The first refusal among `accounts` for a request of `wanted` bytes out: a spent budget before a
// rate (a rate passes with time, a budget does not).
admission first_refusal(const std::vector<meter::account *> &accounts, std::uint64_t wanted) {
  for (auto *a : accounts) {
    const auto &r = a->rule;
    if (r.bytes_out && (a->used_out >= r.bytes_out || wanted > r.bytes_out - a->used_out)) {
      return exhausted(*a, "bytes_out", a->used_out, r.bytes_out, wanted);
    }
    if (r.bytes_in && a->used_in >= r.bytes_in) return exhausted(*a, "bytes_in", a->used_in, r.bytes_in, 0);
  }
  for (auto *a : accounts) {
    const auto &r = a->rule;
    const bool full = r.connections && a->open >= r.connections;
    if (full || (r.requests_per_second > 0 && a->tokens < 1)) return limited(*a, full);
  }
  return {};
}

} // namespace

ledger::ledger() : state_(std::make_shared<state>()) {}
ledger::~ledger() = default;

admission ledger::admit(const filters::policy &pol, std::string_view client, std::string_view host,
                        std::string_view scheme, unsigned port, std::uint64_t head_bytes, std::uint64_t body_bytes) {
  if (pol.budgets().empty()) return {};
  thread_local std::vector<std::size_t> which; // reused: no allocation per request to find them
  which.clear();
  pol.budgets_for(host, scheme, port, which);
  if (which.empty()) return {};
  const auto &rules = pol.cfg().limits.budgets;
  const auto now = steady::now();
  const auto day = utc_day();
  std::lock_guard lock(state_->m);
  std::vector<meter::account *> accounts;
  accounts.reserve(which.size());
  for (auto i : which) {
    const auto &rule = rules[i];
    auto &a = state_->account(rule, rule.per == budget_rule::scope::run ? std::string_view() : client);
    sync(a, rule, day, now);
    accounts.push_back(&a);
  }
  if (auto no = first_refusal(accounts, head_bytes + body_bytes); !no.reason.empty()) {
    for (auto *a : accounts) ++a->refused;
    return no;
  }
  for (auto *a : accounts) {
    if (a->rule.requests_per_second > 0) a->tokens -= 1;
    ++a->open;
    ++a->requests;
    a->used_out += head_bytes;
  }
  admission yes;
  yes.charged = std::make_shared<meter>(state_, std::move(accounts));
  return yes;
}

shared_question ledger::ask(const filters::policy &pol, std::string_view client, std::string_view host,
                            std::string_view scheme, unsigned port, std::uint64_t head_bytes,
                            std::uint64_t body_bytes, std::string_view prefix) const {
  shared_question q;
  q.head = head_bytes;
  q.body = body_bytes;
  if (pol.budgets().empty()) return q;
  std::vector<std::size_t> which;
  pol.budgets_for(host, scheme, port, which);
  const auto &rules = pol.cfg().limits.budgets;
  const auto day = utc_day();
  for (auto i : which) {
    const auto &rule = rules[i];
    shared_account a;
    a.rule = i;
    a.client = rule.per == budget_rule::scope::run ? std::string() : std::string(client);
    a.key = std::string(prefix) + ":budget:" + rule.name + ":" + a.client;
    if (rule.per == budget_rule::scope::day) a.key += ":" + std::to_string(day);
    q.accounts.push_back(std::move(a));
  }
  return q;
}

admission ledger::fold(const filters::policy &pol, const shared_question &q, const shared_answer &ans,
                       std::shared_ptr<meter_sink> sink) {
  if (q.accounts.empty()) return {};
  const auto &rules = pol.cfg().limits.budgets;
  const auto now = steady::now();
  const auto day = utc_day();
  std::lock_guard lock(state_->m);
  std::vector<meter::account *> accounts;
  for (const auto &sa : q.accounts) {
    const auto &rule = rules[sa.rule];
    auto &a = state_->account(rule, sa.client);
    sync(a, rule, day, now);
    accounts.push_back(&a);
  }
  if (ans.kind != shared_answer::admitted) {
    auto &a = *accounts.at(std::min(ans.index, accounts.size() - 1));
    if (!ans.used.empty()) std::tie(a.used_out, a.used_in) = ans.used.front();
    for (auto *x : accounts) ++x->refused;
    switch (ans.kind) {
    case shared_answer::bytes_out:
      return exhausted(a, "bytes_out", a.used_out, a.rule.bytes_out, q.head + q.body);
    case shared_answer::bytes_in:
      return exhausted(a, "bytes_in", a.used_in, a.rule.bytes_in, 0);
    case shared_answer::connections:
      return limited(a, true);
    default:
      a.tokens = ans.tokens;
      return limited(a, false);
    }
  }
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < accounts.size(); ++i) {
    auto *a = accounts[i];
    if (i < ans.used.size()) std::tie(a->used_out, a->used_in) = ans.used[i];
    ++a->open;
    ++a->requests;
    keys.push_back(q.accounts[i].key);
  }
  admission yes;
  yes.charged = std::make_shared<meter>(state_, std::move(accounts), std::move(sink), std::move(keys));
  return yes;
}

std::vector<budget_row> ledger::snapshot() const {
  std::vector<budget_row> rows;
  const auto day = utc_day();
  std::lock_guard lock(state_->m);
  rows.reserve(state_->accounts.size());
  for (const auto &[key, a] : state_->accounts) {
    const bool daily = a.rule.per == budget_rule::scope::day;
    const bool stale = daily && a.day != day; // a new day that no request has started yet
    budget_row r;
    r.budget = key.first;
    r.per = filters::scope_name(a.rule.per);
    r.client = a.client;
    r.requests = a.requests;
    r.refused = a.refused;
    r.open = a.open;
    r.bytes_out = stale ? 0 : a.used_out;
    r.bytes_in = stale ? 0 : a.used_in;
    r.bytes_out_limit = a.rule.bytes_out;
    r.bytes_in_limit = a.rule.bytes_in;
    r.connections_limit = a.rule.connections;
    r.requests_per_second = a.rule.requests_per_second;
    r.refills_at = daily ? (day + 1) * 86400 : 0;
    rows.push_back(std::move(r));
  }
  return rows;
}

meter::meter(std::shared_ptr<ledger::state> s, std::vector<account *> accounts, std::shared_ptr<meter_sink> sink,
             std::vector<std::string> keys)
    : state_(std::move(s)), accounts_(std::move(accounts)), sink_(std::move(sink)), keys_(std::move(keys)) {}

meter::~meter() { release(); }

bool meter::moved(std::uint64_t sent, std::uint64_t received) { return settle(sent, received, false); }

void meter::release() { settle(sent_, received_, true); }

void meter::finish(std::uint64_t sent, std::uint64_t received) { settle(sent, received, true); }

// What moved since the last call charged to every account, and with `end` the exchange's place
// given back (once), under one turn of the lock; the store told after it. False once a byte
// budget is spent.
bool meter::settle(std::uint64_t sent, std::uint64_t received, bool end) {
  const std::uint64_t ds = sent > sent_ ? sent - sent_ : 0, dr = received > received_ ? received - received_ : 0;
  sent_ = std::max(sent_, sent);
  received_ = std::max(received_, received);
  bool within = true, freed = false;
  {
    std::lock_guard lock(state_->m);
    if (end && !released_) freed = released_ = true;
    for (auto *a : accounts_) {
      a->used_out += ds;
      a->used_in += dr;
      if (freed) --a->open;
      if ((a->rule.bytes_out && a->used_out > a->rule.bytes_out) ||
          (a->rule.bytes_in && a->used_in > a->rule.bytes_in)) {
        within = false;
      }
    }
  }
  if (sink_ && (ds || dr)) sink_->charge(keys_, ds, dr);
  if (sink_ && freed) sink_->release(keys_);
  return within;
}

} // namespace sluice::gateway::exchange
