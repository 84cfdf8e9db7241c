// A decider program (transports.hpp): started by sluice with a socket pair as its standard input
// and output; one JSON object per line each way ({"id": N, "input": {...}} out, {"id": N,
// "result": ...} back, in any order). A program that exits is started again a second later; what
// waited meanwhile is refused (decider_unavailable), never let through.
#include "gateway/decider/transports.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <stdexcept>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char **environ;

namespace sluice::gateway::decider {
namespace {

namespace js = boost::json;
constexpr std::size_t max_line = 1 << 20;        // an answer longer than this ends the program
constexpr std::size_t max_unsent = 16 << 20;      // questions not yet taken by the program

class program final : public transport {
public:
  program(const filters::decider_config &cfg, client &owner) : argv_(cfg.command), owner_(owner) {
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("[decider]: pipe failed");
    std::string why = spawn();
    if (!why.empty()) {
      close_pipe();
      throw std::runtime_error("[decider] command \"" + cfg.command_text + "\" could not be started: " + why +
                               " (name a program on PATH or by its path)");
    }
    thread_ = std::thread([this] { run(); });
  }
  ~program() override {
    stop();
    close_pipe();
  }

  bool send(std::uint64_t id, const js::object &question) override {
    std::string line = js::serialize(js::object{{"id", id}, {"input", question}});
    line += '\n';
    std::lock_guard lock(mutex_);
    if (fd_ < 0 || stopping_ || out_.size() + line.size() > max_unsent) return false;
    out_ += line;
    flush_locked();
    if (!out_.empty()) poke(); // the rest goes when the program reads: the reader thread waits for it
    return true;
  }

  void stop() override {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
    }
    poke();
    if (thread_.joinable()) thread_.join();
  }

private:
  void close_pipe() {
    for (int &fd : wake_) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
  }
  void poke() {
    char c = 1;
    [[maybe_unused]] auto n = ::write(wake_[1], &c, 1);
  }
  void flush_locked() {
    while (!out_.empty()) {
      auto n = ::send(fd_, out_.data(), out_.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n <= 0) return;
      out_.erase(0, static_cast<std::size_t>(n));
    }
  }

  // The program, its standard input and output one end of a socket pair; its standard error is
  // sluice's. Returns why it did not start (empty: it did).
  std::string spawn() {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return std::strerror(errno);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, sv[1], 0);
    posix_spawn_file_actions_adddup2(&fa, sv[1], 1);
    std::vector<char *> args;
    for (auto &a : argv_) args.push_back(a.data());
    args.push_back(nullptr);
    pid_t pid = -1;
    int rc = ::posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(sv[1]);
    if (rc != 0) {
      ::close(sv[0]);
      return std::strerror(rc);
    }
    std::lock_guard lock(mutex_);
    fd_ = sv[0];
    pid_ = pid;
    in_.clear();
    return {};
  }

  // Ends the current program: its socket closed (it sees the end of its input), then SIGTERM, and
  // SIGKILL if it is still there a second later.
  void end_program() {
    int fd;
    pid_t pid;
    {
      std::lock_guard lock(mutex_);
      fd = std::exchange(fd_, -1);
      pid = std::exchange(pid_, -1);
      out_.clear();
    }
    if (fd >= 0) ::close(fd);
    if (pid <= 0) return;
    int status = 0;
    for (int i = 0; i < 100; ++i) {
      pid_t r = ::waitpid(pid, &status, WNOHANG);
      if (r == pid || (r < 0 && errno == ECHILD)) return;
      if (i == 10) ::kill(pid, SIGTERM);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }

  void take_lines() {
    std::size_t start = 0;
    for (auto nl = in_.find('\n'); nl != std::string::npos; nl = in_.find('\n', start)) {
      std::string_view line(in_.data() + start, nl - start);
      start = nl + 1;
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      error_code ec;
      auto v = js::parse(line, ec);
      if (ec || !v.is_object() || !v.as_object().if_contains("id") || !v.as_object().at("id").is_number()) {
        std::fprintf(stderr, "sluice: [decider] wrote a line that is not {\"id\": N, \"result\": ...}; ignored\n");
        continue;
      }
      auto &o = v.as_object();
      std::uint64_t id = o.at("id").to_number<std::uint64_t>();
      answer a;
      if (const auto *r = o.if_contains("result")) {
        a = parse_result(*r);
      } else {
        o.erase("id");
        a = parse_result(v);
      }
      if (a.kind == answer::unavailable) {
        std::fprintf(stderr, "sluice: [decider] answer %llu refused: %s\n", static_cast<unsigned long long>(id),
                     a.message.c_str());
      }
      owner_.deliver(id, std::move(a));
    }
    in_.erase(0, start);
  }

  // One program's life: answers read, questions written as it takes them, until it exits or
  // sluice stops.
  void serve_one() {
    char buf[64 * 1024];
    for (;;) {
      pollfd p[2]{{wake_[0], POLLIN, 0}, {-1, POLLIN, 0}};
      {
        std::lock_guard lock(mutex_);
        if (stopping_ || fd_ < 0) return; // fd_ < 0: it could not be started again; run() retries
        p[1].fd = fd_;
        if (!out_.empty()) p[1].events |= POLLOUT;
      }
      if (::poll(p, 2, -1) < 0 && errno != EINTR) return;
      if (p[0].revents) {
        while (::read(wake_[0], buf, sizeof buf) > 0) {
        }
      }
      if (p[1].revents & POLLOUT) {
        std::lock_guard lock(mutex_);
        flush_locked();
      }
      if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
        auto n = ::recv(p[1].fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return; // it closed: it exited
        if (n > 0) {
          in_.append(buf, static_cast<std::size_t>(n));
          take_lines();
          if (in_.size() > max_line) {
            std::fprintf(stderr, "sluice: [decider] wrote a line longer than 1 MiB; it is started again\n");
            return;
          }
        }
      }
    }
  }

  void run() {
    for (;;) {
      serve_one();
      end_program();
      bool stopping;
      {
        std::lock_guard lock(mutex_);
        stopping = stopping_;
      }
      if (stopping) return;
      std::fprintf(stderr, "sluice: [decider] program %s ended; requests that ask it are refused "
                           "(decider_unavailable) until it is started again, in a second\n", argv_[0].c_str());
      owner_.fail_all("the decider program ended");
      // A second between starts, cut short by stop().
      for (int i = 0; i < 10; ++i) {
        pollfd p{wake_[0], POLLIN, 0};
        ::poll(&p, 1, 100);
        std::lock_guard lock(mutex_);
        if (stopping_) return;
      }
      if (auto why = spawn(); !why.empty()) {
        std::fprintf(stderr, "sluice: [decider] program %s could not be started again: %s\n", argv_[0].c_str(),
                     why.c_str());
      }
    }
  }

  std::vector<std::string> argv_;
  client &owner_;
  int wake_[2] = {-1, -1};
  std::thread thread_;
  std::mutex mutex_;
  int fd_ = -1;
  pid_t pid_ = -1;
  bool stopping_ = false;
  std::string out_; // questions not yet taken (guarded by mutex_)
  std::string in_;  // answers read, not yet a whole line (reader thread only)
};

} // namespace

std::unique_ptr<transport> make_program(const filters::decider_config &cfg, client &owner) {
  return std::make_unique<program>(cfg, owner);
}

} // namespace sluice::gateway::decider
