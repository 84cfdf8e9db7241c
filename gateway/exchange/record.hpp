#pragma once
// The record of one request: its outcome, written exactly once (access log, metrics, live page,
// summary) when the record goes or is settled, whichever comes first. Codecs never write an
// outcome themselves: the scope that owns a request owns its record, so no path can forget it or
// write it twice (docs/architecture.md, "The exchange").
#include "gateway/exchange/exchange.hpp"

#include <utility>

namespace sluice::gateway::exchange {

// Where outcomes go (the session: it knows the client, its role and its listener).
class recorder {
public:
  virtual void record_outcome(outcome &o) noexcept = 0;

protected:
  ~recorder() = default;
};

// An outcome bound to its recorder. An outcome that never got a reason was never decided (the
// client left before sending a request, a CONNECT whose requests inside are recorded one by one):
// nothing is written for it.
class record : public outcome {
public:
  explicit record(recorder &to) : to_(&to) {}
  record(record &&other) noexcept : outcome(std::move(other)), to_(std::exchange(other.to_, nullptr)) {}
  record(const record &) = delete;
  record &operator=(const record &) = delete;
  record &operator=(record &&) = delete;
  ~record() { settle(); }

  // Writes the outcome now, if it was decided; later calls and the destructor write nothing.
  void settle() noexcept {
    if (auto *to = std::exchange(to_, nullptr); to && !reason.empty()) to->record_outcome(*this);
  }

private:
  recorder *to_;
};

} // namespace sluice::gateway::exchange
