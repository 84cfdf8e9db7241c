#pragma once
// One connection to a Redis server, driven from a thread of its own (hiredis's blocking API with
// deadlines on connect, read and write), so that no gateway worker ever waits on Redis: workers
// queue commands and are called back from this thread. What is queued together goes out as one
// pipeline. A failure fails what is in flight and queued, and the next connection is tried a
// second later; meanwhile commands fail at once. Bounded: at most max_queued commands wait.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sluice::gateway::shared_limits {

class redis_link {
public:
  // A reply, flattened: an error (ok false, error set); an integer; a string or status (text); an
  // array of those (items, integers as text).
  struct reply {
    bool ok = false;
    std::string error;
    long long integer = 0;
    std::string text;
    std::vector<std::string> items;
  };
  using callback = std::function<void(reply)>; // called on the link's thread

  static constexpr std::size_t max_queued = 65536;

  // `every_ten_seconds`: a command sent every ten seconds and on each new connection (a replica's
  // heartbeat), or empty.
  redis_link(std::string host, unsigned port, std::chrono::milliseconds timeout,
             std::vector<std::string> every_ten_seconds);
  ~redis_link();
  redis_link(const redis_link &) = delete;
  redis_link &operator=(const redis_link &) = delete;

  // Queues one command (argv). `done` may be empty: nobody waits for the reply.
  void submit(std::vector<std::string> argv, callback done);
  // Stops the thread; what waits is failed ("stopped"). No callback runs after it returns.
  void stop();
  bool up() const;

private:
  struct item {
    std::vector<std::string> argv;
    callback done;
  };
  void run();
  void send(std::vector<item> &batch);
  bool connect(std::string &why);

  std::string host_;
  unsigned port_;
  std::chrono::milliseconds timeout_;
  std::vector<std::string> heartbeat_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<item> queue_;
  bool stopping_ = false;
  bool up_ = false;
  void *ctx_ = nullptr; // redisContext (hiredis stays out of this header)
  std::chrono::steady_clock::time_point retry_at_{};
  std::chrono::steady_clock::time_point beat_at_{};
  std::thread thread_;
};

} // namespace sluice::gateway::shared_limits
