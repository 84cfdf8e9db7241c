#pragma once
// The decider's client ([decider]): one per gateway, shared by every worker. A question is sent to
// the decider's transport (a program on a socket pair, or an HTTPS endpoint), and the asking
// coroutine waits on a timer of its own executor, which the answer cancels (posted to that
// executor) or which expires at the deadline (decider_timeout). Nothing blocks a gateway worker.
#include "filters/policy.hpp"
#include "gateway/decider/protocol.hpp"
#include "gateway/net.hpp"
#include "metrics/metrics.hpp"

#include <boost/json/object.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace sluice::gateway::decider {

// How questions reach the decider and answers come back (client.cpp: program, endpoint).
class transport {
public:
  virtual ~transport() = default;
  // Queues question `id`; false when it cannot be sent now (the decider is down, or too much waits).
  virtual bool send(std::uint64_t id, const boost::json::object &question) = 0;
  virtual void stop() = 0;
};

class client {
public:
  // Starts the decider (a program is spawned here: a program that cannot start throws, naming it).
  // `whole` gives an endpoint's trust ([tls]) and address rules ([upstream]).
  client(const filters::decider_config &cfg, const filters::config &whole, metrics::metrics *m);
  ~client();
  client(const client &) = delete;
  client &operator=(const client &) = delete;

  const filters::decider_config &config() const { return cfg_; }
  // Asks about `question` (from protocol.hpp), within the configured deadline. A cached answer
  // comes at once.
  net::awaitable<answer> decide(boost::json::object question);
  // Stops the transport; what waits gets `unavailable`. No answer is posted to a worker after it.
  void stop();

  // For transports: the answer to `id`, and every waiting question failed at once (`why`).
  void deliver(std::uint64_t id, answer a);
  void fail_all(const std::string &why);

private:
  struct waiter;
  filters::decider_config cfg_;
  metrics::metrics *metrics_;
  answer_cache cache_;
  std::unique_ptr<transport> transport_;
  std::mutex mutex_;
  bool stopped_ = false;
  std::uint64_t next_id_ = 0;
  std::map<std::uint64_t, std::shared_ptr<waiter>> waiting_;
};

} // namespace sluice::gateway::decider
