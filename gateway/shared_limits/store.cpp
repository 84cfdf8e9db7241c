// [limits.shared]'s store: the admission script, the waiting coroutine, charges sent on.
#include "gateway/shared_limits/store.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <openssl/sha.h>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <optional>

namespace sluice::gateway::shared_limits {

namespace {

// The admission of exchange::ledger, on the server, for every account at once (a script runs
// atomically: replicas never interleave inside it). KEYS: the accounts. ARGV: replica, head,
// body, the heartbeat keys' prefix, then six values per account (rate, bucket, connections,
// bytes_out, bytes_in, ttl). Answers {0, 0, out1, in1, out2, in2, ...} when admitted (totals after
// the head), else {kind, index, out, in, tokens}: 1 bytes_out, 2 bytes_in, 3 connections, 4 rate.
// Open exchanges are a hash per account by replica; a replica whose heartbeat key has expired
// (it stopped 30 s ago) no longer counts, and its field goes.
constexpr const char *admission_script = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local head, body, alive = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local acc = {}
for i = 1, #KEYS do
  local b = 4 + (i - 1) * 6
  local a = {rps = tonumber(ARGV[b + 1]), burst = tonumber(ARGV[b + 2]), conns = tonumber(ARGV[b + 3]),
             outl = tonumber(ARGV[b + 4]), inl = tonumber(ARGV[b + 5]), ttl = tonumber(ARGV[b + 6])}
  local h = redis.call('HMGET', KEYS[i], 'tokens', 'last', 'out', 'in')
  a.out = tonumber(h[3]) or 0
  a.inn = tonumber(h[4]) or 0
  a.tokens = 0
  if a.rps > 0 then
    local tk = tonumber(h[1])
    if tk == nil then
      a.tokens = a.burst
    else
      a.tokens = math.min(a.burst, tk + math.max(0, now - (tonumber(h[2]) or now)) / 1000 * a.rps)
    end
  end
  a.open = 0
  if a.conns > 0 then
    local f = redis.call('HGETALL', KEYS[i] .. ':open')
    for j = 1, #f, 2 do
      if redis.call('EXISTS', alive .. f[j]) == 1 then
        a.open = a.open + tonumber(f[j + 1])
      else
        redis.call('HDEL', KEYS[i] .. ':open', f[j])
      end
    end
  end
  acc[i] = a
end
local function n(x) return string.format('%.0f', x) end
for i = 1, #KEYS do
  local a = acc[i]
  if a.outl > 0 and (a.out >= a.outl or head + body > a.outl - a.out) then return {1, i, n(a.out), n(a.inn), '0'} end
  if a.inl > 0 and a.inn >= a.inl then return {2, i, n(a.out), n(a.inn), '0'} end
end
for i = 1, #KEYS do
  local a = acc[i]
  if a.conns > 0 and a.open >= a.conns then return {3, i, n(a.out), n(a.inn), '0'} end
  if a.rps > 0 and a.tokens < 1 then return {4, i, n(a.out), n(a.inn), string.format('%.6f', a.tokens)} end
end
local r = {0, 0}
for i = 1, #KEYS do
  local a = acc[i]
  if a.rps > 0 then
    redis.call('HSET', KEYS[i], 'out', n(a.out + head), 'last', n(now), 'tokens', string.format('%.6f', a.tokens - 1))
  else
    redis.call('HSET', KEYS[i], 'out', n(a.out + head), 'last', n(now))
  end
  redis.call('HINCRBY', KEYS[i] .. ':open', ARGV[1], 1)
  if a.ttl > 0 then
    redis.call('EXPIRE', KEYS[i], a.ttl)
    redis.call('EXPIRE', KEYS[i] .. ':open', a.ttl)
  end
  r[#r + 1] = n(a.out + head)
  r[#r + 1] = n(a.inn)
end
return r
)lua";

std::string num(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.6f", v);
  return b;
}

std::uint64_t u64(const std::string &s) {
  std::uint64_t v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

// The script's answer, or nullopt when it is not one.
std::optional<exchange::shared_answer> answer_of(const redis_link::reply &r, std::size_t accounts) {
  if (!r.ok || r.items.size() < 2) return std::nullopt;
  exchange::shared_answer a;
  const auto kind = u64(r.items[0]);
  if (kind > 4) return std::nullopt;
  a.kind = static_cast<exchange::shared_answer::kind_t>(kind);
  if (kind == 0) {
    if (r.items.size() != 2 + 2 * accounts) return std::nullopt;
    for (std::size_t i = 0; i < accounts; ++i) a.used.emplace_back(u64(r.items[2 + 2 * i]), u64(r.items[3 + 2 * i]));
    return a;
  }
  if (r.items.size() != 5) return std::nullopt;
  const auto index = u64(r.items[1]);
  if (index < 1 || index > accounts) return std::nullopt;
  a.index = index - 1;
  a.used.emplace_back(u64(r.items[2]), u64(r.items[3]));
  a.tokens = std::strtod(r.items[4].c_str(), nullptr);
  return a;
}

// The script's SHA-1 in hex, as EVALSHA names it.
std::string script_sha1() {
  unsigned char d[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char *>(admission_script), std::strlen(admission_script), d);
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : d) {
    out += hex[c >> 4];
    out += hex[c & 15];
  }
  return out;
}

struct waiter {
  explicit waiter(const net::any_io_executor &ex) : timer(ex) {}
  net::steady_timer timer;
  std::optional<redis_link::reply> got;
};

} // namespace

bool split_redis_address(const std::string &text, std::string &host, unsigned &port) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return false;
  host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  unsigned p = 0;
  auto [end, ec] = std::from_chars(text.data() + colon + 1, text.data() + text.size(), p);
  if (ec != std::errc() || end != text.data() + text.size() || p == 0 || p > 65535) return false;
  port = p;
  return true;
}

static std::string host_of(const std::string &a) {
  std::string h;
  unsigned p = 0;
  return split_redis_address(a, h, p) ? h : a;
}

static unsigned port_of(const std::string &a) {
  std::string h;
  unsigned p = 0;
  return split_redis_address(a, h, p) ? p : 6379;
}

store::store(const filters::shared_limits_config &cfg, std::string replica)
    : cfg_(cfg), replica_(std::move(replica)), where_(cfg.redis), sha_(script_sha1()),
      link_(host_of(cfg.redis), port_of(cfg.redis), cfg.timeout,
            {"SET", cfg.key_prefix + ":replica:" + replica_, "1", "EX", "30"}) {}

store::~store() { stop(); }

void store::stop() { link_.stop(); }

void store::note(bool ok, const std::string &why) {
  if (healthy_.exchange(ok) == ok) return;
  if (ok) {
    std::fprintf(stderr, "sluice: [limits.shared] Redis at %s answers again; budgets are shared again\n", where_.c_str());
  } else {
    std::fprintf(stderr, "sluice: [limits.shared] Redis at %s did not answer (%s); %s until it does\n", where_.c_str(),
                 why.c_str(),
                 cfg_.fail_open ? "serving on this process's own counters (fail_open = true)"
                                : "requests under a budget are refused, 503 limits_unavailable (fail_open = false)");
  }
}

net::awaitable<exchange::admission> store::admit(exchange::ledger &local, const filters::policy &pol, std::string client,
                                                 std::string host, std::string scheme, unsigned port,
                                                 std::uint64_t head_bytes, std::uint64_t body_bytes) {
  auto q = local.ask(pol, client, host, scheme, port, head_bytes, body_bytes, cfg_.key_prefix);
  if (q.accounts.empty()) co_return exchange::admission{};
  // By its SHA: the server keeps scripts it has run; the first time (and after a restart of Redis) it
  // answers NOSCRIPT, and the script goes once with its text.
  auto argv = std::make_shared<std::vector<std::string>>(
      std::vector<std::string>{"EVALSHA", sha_, std::to_string(q.accounts.size())});
  for (const auto &a : q.accounts) argv->push_back(a.key);
  argv->insert(argv->end(), {replica_, std::to_string(head_bytes), std::to_string(body_bytes), cfg_.key_prefix + ":replica:"});
  const auto &rules = pol.cfg().limits.budgets;
  for (const auto &a : q.accounts) {
    const auto &r = rules[a.rule];
    const double bucket = r.burst > 0 ? r.burst : std::max(1.0, r.requests_per_second);
    argv->insert(argv->end(), {num(r.requests_per_second), num(bucket), std::to_string(r.connections),
                             std::to_string(r.bytes_out), std::to_string(r.bytes_in),
                             r.per == filters::budget_rule::scope::day ? "172800" : "0"});
  }
  auto w = std::make_shared<waiter>(co_await net::this_coro::executor);
  w->timer.expires_after(cfg_.timeout);
  auto deliver = [w](redis_link::reply r) {
    net::post(w->timer.get_executor(), [w, r = std::move(r)]() mutable {
      w->got = std::move(r);
      w->timer.cancel();
    });
  };
  // The link outlives its callbacks: stop() joins its thread before the store goes.
  link_.submit(*argv, [link = &link_, argv, deliver](redis_link::reply r) { // on the link's thread
    if (!r.ok && r.error.rfind("NOSCRIPT", 0) == 0) {
      (*argv)[0] = "EVAL";
      (*argv)[1] = admission_script;
      link->submit(std::move(*argv), deliver);
      return;
    }
    deliver(std::move(r));
  });
  co_await w->timer.async_wait(net::as_tuple(net::use_awaitable));
  std::optional<exchange::shared_answer> a;
  std::string why = "no answer within " + std::to_string(cfg_.timeout.count()) + " ms";
  if (w->got) {
    a = answer_of(*w->got, q.accounts.size());
    if (!a) why = w->got->ok ? "an answer sluice does not understand" : w->got->error;
  }
  if (a) {
    ++ok_;
    note(true, {});
    co_return local.fold(pol, q, *a, shared_from_this());
  }
  note(false, why);
  if (cfg_.fail_open) {
    ++failed_open_;
    co_return local.admit(pol, client, host, scheme, port, head_bytes, body_bytes);
  }
  ++failed_closed_;
  exchange::admission no;
  no.reason = "limits_unavailable";
  no.budget = pol.cfg().limits.budgets[q.accounts.front().rule].name;
  no.retry_after = 1;
  no.message = "sluice: the budgets' shared counters ([limits.shared], Redis at " + where_ + ") did not answer (" +
               why + "); a request under a budget is refused while they cannot be counted (fail_open = false). "
               "Retry shortly; an operator can set fail_open = true to serve on each replica's own counters\n";
  co_return no;
}

void store::charge(const std::vector<std::string> &keys, std::uint64_t out, std::uint64_t in) {
  for (const auto &k : keys) {
    if (out) link_.submit({"HINCRBY", k, "out", std::to_string(out)}, nullptr);
    if (in) link_.submit({"HINCRBY", k, "in", std::to_string(in)}, nullptr);
  }
}

void store::release(const std::vector<std::string> &keys) {
  for (const auto &k : keys) link_.submit({"HINCRBY", k + ":open", replica_, "-1"}, nullptr);
}

std::string store::prometheus() const {
  std::string s = "# HELP sluice_limits_shared_total Admissions asked of [limits.shared]'s Redis, by outcome "
                  "(ok; fail_open: served on local counters; fail_closed: refused, limits_unavailable).\n"
                  "# TYPE sluice_limits_shared_total counter\n";
  s += "sluice_limits_shared_total{outcome=\"ok\"} " + std::to_string(ok_.load()) + "\n";
  s += "sluice_limits_shared_total{outcome=\"fail_open\"} " + std::to_string(failed_open_.load()) + "\n";
  s += "sluice_limits_shared_total{outcome=\"fail_closed\"} " + std::to_string(failed_closed_.load()) + "\n";
  s += "# HELP sluice_limits_shared_up Whether the link to [limits.shared]'s Redis is connected.\n"
       "# TYPE sluice_limits_shared_up gauge\n";
  s += "sluice_limits_shared_up " + std::string(link_.up() ? "1" : "0") + "\n";
  return s;
}

} // namespace sluice::gateway::shared_limits
