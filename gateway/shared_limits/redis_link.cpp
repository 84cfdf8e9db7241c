// The Redis link's thread: batches of queued commands written as one pipeline, their replies read
// in order, every step under the configured deadline.
#include "gateway/shared_limits/redis_link.hpp"

#include <hiredis/hiredis.h>

#include <sys/time.h>

namespace sluice::gateway::shared_limits {

namespace {

using steady = std::chrono::steady_clock;

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

std::string text_of(const redisReply *r) {
  if (r->type == REDIS_REPLY_INTEGER) return std::to_string(r->integer);
  if (r->type == REDIS_REPLY_NIL) return {};
  return std::string(r->str, r->len);
}

redis_link::reply flatten(const redisReply *r) {
  redis_link::reply out;
  if (!r) {
    out.error = "no reply";
    return out;
  }
  out.ok = r->type != REDIS_REPLY_ERROR;
  switch (r->type) {
  case REDIS_REPLY_ERROR:
    out.error = std::string(r->str, r->len);
    break;
  case REDIS_REPLY_INTEGER:
    out.integer = r->integer;
    break;
  case REDIS_REPLY_STRING:
  case REDIS_REPLY_STATUS:
    out.text = std::string(r->str, r->len);
    break;
  case REDIS_REPLY_ARRAY:
    for (std::size_t i = 0; i < r->elements; ++i) out.items.push_back(text_of(r->element[i]));
    break;
  default:
    break;
  }
  return out;
}

void fail(std::vector<std::function<void(redis_link::reply)>> &dones, const std::string &why) {
  for (auto &d : dones) {
    if (!d) continue;
    redis_link::reply r;
    r.error = why;
    d(std::move(r));
  }
}

} // namespace

redis_link::redis_link(std::string host, unsigned port, std::chrono::milliseconds timeout,
                       std::vector<std::string> every_ten_seconds)
    : host_(std::move(host)), port_(port), timeout_(timeout), heartbeat_(std::move(every_ten_seconds)) {
  thread_ = std::thread([this] { run(); });
}

redis_link::~redis_link() { stop(); }

void redis_link::submit(std::vector<std::string> argv, callback done) {
  bool stopped = false;
  {
    std::lock_guard lock(mutex_);
    stopped = stopping_;
    if (!stopped && queue_.size() < max_queued) {
      queue_.push_back({std::move(argv), std::move(done)});
      wake_.notify_one();
      return;
    }
  }
  if (done) {
    reply r;
    r.error = stopped ? "stopped" : "too many commands waiting for Redis";
    done(std::move(r));
  }
}

bool redis_link::up() const {
  std::lock_guard lock(mutex_);
  return up_;
}

void redis_link::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    wake_.notify_one();
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

bool redis_link::connect(std::string &why) {
  auto *c = redisConnectWithTimeout(host_.c_str(), static_cast<int>(port_), to_timeval(timeout_));
  if (!c || c->err) {
    why = c ? std::string(c->errstr) : std::string("out of memory");
    if (c) redisFree(c);
    return false;
  }
  redisSetTimeout(c, to_timeval(timeout_));
  ctx_ = c;
  beat_at_ = {}; // a new connection says it is alive at once
  return true;
}

void redis_link::send(std::vector<item> &batch) {
  auto *c = static_cast<redisContext *>(ctx_);
  for (auto &it : batch) {
    std::vector<const char *> argv;
    std::vector<std::size_t> lens;
    for (auto &a : it.argv) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data());
  }
  for (std::size_t i = 0; i < batch.size(); ++i) {
    void *raw = nullptr;
    if (redisGetReply(c, &raw) != REDIS_OK) {
      std::string why = c->errstr[0] ? c->errstr : "connection lost";
      std::vector<callback> rest;
      for (std::size_t j = i; j < batch.size(); ++j) rest.push_back(std::move(batch[j].done));
      redisFree(c);
      ctx_ = nullptr;
      {
        std::lock_guard lock(mutex_);
        up_ = false;
      }
      retry_at_ = steady::now() + std::chrono::seconds(1);
      fail(rest, why);
      return;
    }
    auto *r = static_cast<redisReply *>(raw);
    if (batch[i].done) batch[i].done(flatten(r));
    freeReplyObject(r);
  }
}

void redis_link::run() {
  for (;;) {
    std::vector<item> batch;
    {
      std::unique_lock lock(mutex_);
      wake_.wait_for(lock, std::chrono::seconds(1), [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) break;
      while (!queue_.empty() && batch.size() < 1024) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    const auto now = steady::now();
    if (!ctx_ && now < retry_at_) { // reconnecting: what asks now fails at once
      std::vector<callback> dones;
      for (auto &it : batch) dones.push_back(std::move(it.done));
      fail(dones, "Redis is unreachable; trying again");
      continue;
    }
    if (!ctx_) {
      std::string why;
      bool ok = connect(why);
      {
        std::lock_guard lock(mutex_);
        up_ = ok;
      }
      if (!ok) {
        retry_at_ = now + std::chrono::seconds(1);
        std::vector<callback> dones;
        for (auto &it : batch) dones.push_back(std::move(it.done));
        fail(dones, why);
        continue;
      }
    }
    if (!heartbeat_.empty() && now >= beat_at_) {
      batch.insert(batch.begin(), item{heartbeat_, nullptr});
      beat_at_ = now + std::chrono::seconds(10);
    }
    if (!batch.empty()) send(batch);
  }
  std::vector<callback> dones;
  {
    std::lock_guard lock(mutex_);
    for (auto &it : queue_) dones.push_back(std::move(it.done));
    queue_.clear();
  }
  fail(dones, "stopped");
  if (ctx_) redisFree(static_cast<redisContext *>(ctx_));
  ctx_ = nullptr;
}

} // namespace sluice::gateway::shared_limits
