// Hashed timer wheel with millisecond ticks (Varghese & Lauck): O(1) arm/cancel, per-core, no allocation.
// Used for HTTP header/body/send/keep-alive timeouts, and later TCP RTO/delayed-ACK and cache-lock waits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kosoku::reactor {

class TimerWheel;

/// A timer embedded in its owner (intrusive). fire() runs once per arm, from TimerWheel::expire().
class Timer {
 public:
  virtual void fire() = 0;
  bool armed() const { return wheel_ != nullptr; }
  uint64_t deadline_ms() const { return deadline_; }

 protected:
  ~Timer();

 private:
  friend class TimerWheel;
  TimerWheel* wheel_ = nullptr;
  Timer* prev_ = nullptr;
  Timer* next_ = nullptr;
  uint64_t deadline_ = 0;
};

class TimerWheel {
 public:
  /// slots: power of two; one slot per ms. Timers further away than `slots` ms stay in their slot and are
  /// re-checked each revolution.
  explicit TimerWheel(unsigned slots = 4096);
  ~TimerWheel();

  /// Arm (or re-arm) t to fire at deadline_ms (absolute, Reactor::now_ms() clock).
  void arm(Timer& t, uint64_t deadline_ms);
  void cancel(Timer& t);
  /// Fire every timer whose deadline <= now_ms. Returns how many fired.
  unsigned expire(uint64_t now_ms);
  /// Earliest deadline among armed timers, or UINT64_MAX if none (an upper bound is fine: the loop
  /// only uses it as its wait timeout).
  uint64_t next_deadline() const;
  size_t size() const { return count_; }

 private:
  std::vector<Timer*> slots_;
  uint64_t mask_;
  uint64_t current_ = 0;  // last expired tick
  size_t count_ = 0;
  uint64_t min_deadline_ = UINT64_MAX;
  void unlink(Timer& t);
};

}  // namespace kosoku::reactor
