// The decider's client (client.hpp): the cache, the questions waiting, the deadline.
#include "gateway/decider/client.hpp"
#include "gateway/decider/transports.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <vector>

namespace sluice::gateway::decider {

// One question waiting: its timer lives on the asking coroutine's executor, which is the only
// place it is waited on; the answer is handed over under the client's mutex and the timer
// cancelled by a handler posted there.
struct client::waiter {
  explicit waiter(const net::any_io_executor &ex) : timer(ex) {}
  net::steady_timer timer;
  answer got;
  bool done = false;
};

client::client(const filters::decider_config &cfg, const filters::config &whole, metrics::metrics *m)
    : cfg_(cfg), metrics_(m), cache_(cfg.cache_seconds, cfg.cache_entries) {
  transport_ = cfg.command.empty() ? make_endpoint(cfg, whole, *this) : make_program(cfg, *this);
}

client::~client() { stop(); }

void client::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopped_) return;
    stopped_ = true;
  }
  if (transport_) transport_->stop();
  fail_all("sluice is stopping");
}

void client::deliver(std::uint64_t id, answer a) {
  std::shared_ptr<waiter> w;
  {
    std::lock_guard lock(mutex_);
    auto it = waiting_.find(id);
    if (it == waiting_.end()) return; // answered after its deadline: the request was refused already
    w = std::move(it->second);
    waiting_.erase(it);
    if (w->done) return;
    w->done = true;
    w->got = std::move(a);
  }
  net::post(w->timer.get_executor(), [w] { w->timer.cancel(); });
}

void client::fail_all(const std::string &why) {
  std::vector<std::shared_ptr<waiter>> failed;
  {
    std::lock_guard lock(mutex_); // one lock for all: the waiters are handed over together
    for (auto &[id, w] : waiting_) {
      if (w->done) continue;
      w->done = true;
      w->got = answer{};
      w->got.message = why;
      failed.push_back(std::move(w));
    }
    waiting_.clear();
  }
  for (auto &w : failed) net::post(w->timer.get_executor(), [w] { w->timer.cancel(); });
}

net::awaitable<answer> client::decide(boost::json::object question) {
  const auto t0 = std::chrono::steady_clock::now();
  auto counted = [&](answer a) {
    if (metrics_) {
      metrics_->decider_call(a.cached ? "cached" : to_string(a.kind),
                             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return a;
  };
  if (auto hit = cache_.find(question)) co_return counted(std::move(*hit));
  auto w = std::make_shared<waiter>(co_await net::this_coro::executor);
  w->timer.expires_after(cfg_.timeout);
  std::uint64_t id = 0;
  std::string refused;
  {
    std::lock_guard lock(mutex_);
    if (stopped_) {
      refused = "sluice is stopping";
    } else if (waiting_.size() >= cfg_.max_in_flight) {
      refused = "more questions wait than [decider] max_in_flight allows";
    } else {
      id = ++next_id_;
      waiting_[id] = w;
    }
  }
  if (refused.empty() && !transport_->send(id, question)) {
    std::lock_guard lock(mutex_);
    waiting_.erase(id);
    refused = "the decider is not running (it is restarted; see sluice's messages)";
  }
  if (!refused.empty()) {
    answer a;
    a.message = std::move(refused);
    co_return counted(std::move(a));
  }
  co_await w->timer.async_wait(net::as_tuple(net::use_awaitable));
  answer a;
  {
    std::lock_guard lock(mutex_);
    if (!w->done) { // the deadline came first
      w->done = true;
      waiting_.erase(id);
      a.kind = answer::timeout;
      a.message = "no answer within [decider] timeout";
    } else {
      a = std::move(w->got);
    }
  }
  cache_.keep(question, a);
  co_return counted(std::move(a));
}

} // namespace sluice::gateway::decider
