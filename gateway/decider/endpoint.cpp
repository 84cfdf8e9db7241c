// A decider endpoint (transports.hpp): each question POSTed as {"input": ...} to an https:// URL,
// reached as any origin is (the [tls] trust, [upstream] pins and address rules), and answered with
// {"result": ...}: the shape of OPA's data API (POST /v1/data/PATH). A few threads of its own make
// the calls, each over a connection it keeps (https_session), so a slow endpoint never holds a
// gateway worker; the deadline is the client's.
#include "gateway/decider/transports.hpp"
#include "gateway/https_post.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <condition_variable>
#include <deque>
#include <optional>
#include <thread>

namespace sluice::gateway::decider {
namespace {

namespace js = boost::json;

class endpoint final : public transport {
public:
  endpoint(const filters::decider_config &cfg, const filters::config &whole, client &owner)
      : url_(cfg.url), whole_(whole), owner_(owner), limit_(cfg.max_in_flight) {
    std::size_t n = std::clamp<std::size_t>(cfg.max_in_flight, 1, 4);
    for (std::size_t i = 0; i < n; ++i) threads_.emplace_back([this] { run(); });
  }
  ~endpoint() override { stop(); }

  bool send(std::uint64_t id, const js::object &question) override {
    std::string body = js::serialize(js::object{{"input", question}});
    {
      std::lock_guard lock(mutex_);
      if (stopping_ || queue_.size() >= limit_) return false;
      queue_.emplace_back(id, std::move(body));
    }
    cv_.notify_one();
    return true;
  }

  void stop() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      queue_.clear();
    }
    cv_.notify_all();
    for (auto &t : threads_) {
      if (t.joinable()) t.join();
    }
  }

private:
  answer call(https_session &session, const std::string &body) {
    answer a;
    try {
      auto r = session.post(body, "application/json");
      if (r.status != 200) {
        a.message = "the decider endpoint answered HTTP " + std::to_string(r.status);
        return a;
      }
      error_code ec;
      auto v = js::parse(r.body, ec);
      if (ec || !v.is_object()) {
        a.message = "the decider endpoint's answer is not a JSON object";
        return a;
      }
      const auto *result = v.as_object().if_contains("result");
      if (!result) {
        // OPA answers {} for a rule that is not defined for this input: nothing decided, refused.
        a.message = "the decider endpoint's answer has no \"result\" (an undefined rule?)";
        return a;
      }
      return parse_result(*result);
    } catch (const std::exception &e) {
      a.message = std::string("the decider endpoint: ") + e.what();
      return a;
    }
  }

  void run() {
    // This thread's connection to the endpoint, kept between questions (a TLS handshake and a name
    // lookup per question otherwise); the URL was checked when the policy loaded.
    std::optional<https_session> session;
    std::string unusable; // why there is no session: each question's answer says it
    try {
      session.emplace(url_, whole_, "decider");
    } catch (const std::exception &e) {
      unusable = e.what();
    }
    for (;;) {
      std::pair<std::uint64_t, std::string> job;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      answer a;
      if (session) {
        a = call(*session, job.second);
      } else {
        a.message = unusable;
      }
      if (a.kind == answer::unavailable) std::fprintf(stderr, "sluice: [decider] %s\n", a.message.c_str());
      owner_.deliver(job.first, std::move(a));
    }
  }

  std::string url_;
  filters::config whole_;
  client &owner_;
  std::size_t limit_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::deque<std::pair<std::uint64_t, std::string>> queue_;
};

} // namespace

std::unique_ptr<transport> make_endpoint(const filters::decider_config &cfg, const filters::config &whole,
                                         client &owner) {
  return std::make_unique<endpoint>(cfg, whole, owner);
}

} // namespace sluice::gateway::decider
