// The per-core run-to-completion loop.
// One Reactor per worker thread, pinned to one CPU, owning one io_uring ring used for both socket I/O and
// disk I/O. Nothing here is thread-safe: every method is called on the owning core, except
// Reactor::stop() / wake(), which any thread may call.
//
// Each iteration, in order:
//   1. clock: ms/ns clock and the cached HTTP Date value advance once (LoopClock: the TSC, re-synced with
//      clock_gettime every ms, so a busy iteration makes no clock system call);
//   2. reap CQEs: each CQE's user_data is an IoOp*, whose complete() runs (receive, protocol processing,
//      handlers; handlers may queue more SQEs); then every Poller runs;
//   3. run posted tasks (requests resumed after disk completions or deferred work);
//   4. expire timers;
//   5. submit SQEs and wait (io_uring_submit_and_wait_timeout) until a CQE or the next timer deadline.
//      When the loop must not sleep (a busy poller, e.g. DPDK RX, or queued tasks) it enters the kernel only
//      if there is something to do there: SQEs queued, completions waiting as task work (IORING_SQ_TASKRUN,
//      the ring is set up with IORING_SETUP_TASKRUN_FLAG) or a CQ overflow — and at least every
//      kBusyEnterIntervalNs (1 ms) as a safety net. A busy-polling iteration with nothing queued makes no
//      system call (one io_uring_enter per iteration was ~60 % of a loaded DPDK core's CPU time).
#pragma once

#include <liburing.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/reactor/loop_clock.hh"
#include "core/reactor/timer_wheel.hh"

namespace kosoku::reactor {

/// An operation submitted to the core's io_uring. The SQE's user_data is the IoOp*; complete() receives the
/// CQE's res (bytes, or -errno) and flags (IORING_CQE_F_MORE, IORING_CQE_F_BUFFER...). An op must stay alive
/// until its last CQE (a multishot op: until a CQE without IORING_CQE_F_MORE).
class IoOp {
 public:
  virtual void complete(int32_t res, uint32_t cqe_flags) = 0;

 protected:
  ~IoOp() = default;
};

/// Work run at step 3 of the current or next iteration (e.g. resuming a request). Intrusive, no allocation.
class Task {
 public:
  virtual void run() = 0;

 protected:
  ~Task() = default;

 private:
  friend class Reactor;
  Task* next_task_ = nullptr;
  bool queued_ = false;
};

/// Work checked once per iteration, after CQE dispatch (e.g. a DPDK RX burst, cross-core mailboxes, the
/// shutdown flag). poll() returns true if it did work (the loop then does not sleep in this iteration).
class Poller {
 public:
  virtual bool poll() = 0;

 protected:
  ~Poller() = default;
};

class Reactor {
 public:
  /// core_id: 0..workers-1. ring_entries: SQ size (CQ is 4×). Throws std::system_error if io_uring setup fails.
  Reactor(int core_id, unsigned ring_entries = 1024);
  ~Reactor();
  Reactor(const Reactor&) = delete;
  Reactor& operator=(const Reactor&) = delete;

  int core_id() const { return core_id_; }
  io_uring* ring() { return &ring_; }

  /// The next free SQE, with user_data = op. Submits pending SQEs first if the SQ is full; never null.
  io_uring_sqe* sqe(IoOp* op);

  /// Coarse monotonic clock, updated once per iteration (step 1).
  uint64_t now_ms() const { return now_ms_; }
  uint64_t now_ns() const { return now_ns_; }
  /// Wall clock seconds since the epoch, updated once per iteration.
  int64_t wall_time() const { return wall_s_; }
  /// RFC 9110 §5.6.7 IMF-fixdate for the current second, e.g. "Sun, 06 Nov 1994 08:49:37 GMT".
  std::string_view http_date() const { return std::string_view(http_date_, 29); }

  TimerWheel& timers() { return timers_; }

  /// Queue t to run at step 3; a no-op if it is already queued.
  void post(Task* t);

  /// Register a poller (owned by the caller, must outlive the loop).
  void add_poller(Poller* p) { pollers_.push_back(p); }
  /// Tasks are queued for step 3 (a poller that may sleep, e.g. the DPDK idle back-off, checks it first).
  bool has_tasks() const { return tasks_head_ != nullptr; }

  /// Run until stop(). Returns when stopped.
  void run();
  /// Ask the loop to return from run() (any thread).
  void stop();
  bool stopping() const { return stop_.load(std::memory_order_relaxed); }
  /// Interrupt the wait in step 5 (any thread): an io_uring msg / eventfd write.
  void wake();

  /// Refresh the clock now (used by code that needs a precise time, e.g. $request_time). Cheap (TSC).
  void update_clock();

  /// Loop iterations so far (stats).
  uint64_t iterations() const { return iterations_; }
  /// io_uring_enter calls made by step 5 so far (stats, tests: a busy loop with nothing queued makes few).
  uint64_t kernel_enters() const { return kernel_enters_; }
  /// The loop's clock (tests, stats: whether the TSC is in use, re-syncs so far).
  const LoopClock& clock() const { return clock_; }

  /// Longest time a busy loop goes without entering the kernel (ns): bounds how late a completion that
  /// raised no IORING_SQ_TASKRUN flag (none is known) would be seen.
  static constexpr uint64_t kBusyEnterIntervalNs = 1'000'000;

 private:
  class WakeOp;
  void arm_wake();
  void run_tasks();
  bool kernel_has_work() const;

  int core_id_;
  io_uring ring_{};
  uint64_t now_ms_ = 0;
  uint64_t now_ns_ = 0;
  int64_t wall_s_ = 0;
  int64_t date_s_ = -1;
  char http_date_[32] = {};
  TimerWheel timers_;
  Task* tasks_head_ = nullptr;
  Task* tasks_tail_ = nullptr;
  std::atomic<bool> stop_{false};
  uint64_t iterations_ = 0;
  uint64_t kernel_enters_ = 0;
  uint64_t last_enter_ns_ = 0;
  LoopClock clock_;
  std::vector<Poller*> pollers_;
  int wake_fd_ = -1;
  WakeOp* wake_op_ = nullptr;
};

}  // namespace kosoku::reactor
