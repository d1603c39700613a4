// The per-core loop (core/reactor): the TSC-based LoopClock against CLOCK_MONOTONIC, and step 5's rule that a
// busy-polling loop enters the kernel only when SQEs are queued, completions wait as task work, or the
// 1 ms safety interval has passed — while completions (socket-like and io-wq), timers and wake() keep working,
// and an idle loop (kernel backend) still blocks in io_uring_enter.
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "core/reactor/loop_clock.hh"
#include "core/reactor/reactor.hh"

namespace kosoku::reactor {
namespace {

uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

TEST(LoopClock, TracksMonotonicAndNeverGoesBack) {
  LoopClock c;
  uint64_t prev = c.now_ns();
  uint64_t reads = 0;
  const uint64_t start = mono_ns();
  uint64_t max_err = 0;
  uint64_t syncs_calibrated = 0, reads_calibrated = 0;
  while (mono_ns() - start < 60'000'000) {  // 60 ms: past calibration (20 ms, every read syncs), ~35 re-syncs
    if (syncs_calibrated == 0 && mono_ns() - start >= 25'000'000) {
      syncs_calibrated = c.syncs();
      reads_calibrated = reads;
    }
    const uint64_t before = mono_ns();
    const uint64_t v = c.now_ns();
    const uint64_t after = mono_ns();
    ++reads;
    ASSERT_GE(v, prev) << "clock went backwards";
    prev = v;
    // v must lie in [before - slack, after + slack]; slack covers the clamp and the rate error over 1 ms.
    if (v + 50'000 < before) max_err = std::max(max_err, before - v);
    if (v > after + 50'000) max_err = std::max(max_err, v - after);
  }
  EXPECT_EQ(max_err, 0u) << "LoopClock strayed from CLOCK_MONOTONIC by " << max_err << " ns";
  EXPECT_EQ(c.tsc_active(), LoopClock::tsc_usable());
  if (c.tsc_active()) {
    // After calibration at most one re-sync per ms of running (35 ms here); reads are far more.
    const uint64_t syncs = c.syncs() - syncs_calibrated;
    EXPECT_LE(syncs, 35u + 5u) << reads - reads_calibrated << " reads";
    EXPECT_GT(reads - reads_calibrated, syncs * 10);
  }
  timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  EXPECT_LE(ts.tv_sec - c.wall_s(), 1);
}

// A poller that always reports work (like DPDK RX) and stops the loop after `ms` of the loop's clock.
class BusyPoller : public Poller {
 public:
  BusyPoller(Reactor& r, uint64_t ms) : r_(r), ms_(ms) {}
  bool poll() override {
    ++polls;
    if (start_ == 0) start_ = r_.now_ns();
    if (done_when != nullptr && done_when->load()) r_.stop();
    if (r_.now_ns() - start_ >= ms_ * 1'000'000) r_.stop();
    return true;
  }
  uint64_t polls = 0;
  std::atomic<bool>* done_when = nullptr;

 private:
  Reactor& r_;
  uint64_t ms_;
  uint64_t start_ = 0;
};

class ReadOp : public IoOp {
 public:
  void complete(int32_t r, uint32_t) override {
    res = r;
    at_ns = mono_ns();
    done.store(true);
  }
  int32_t res = -1;
  uint64_t at_ns = 0;
  std::atomic<bool> done{false};
  char buf[64] = {};
};

TEST(Reactor, BusyLoopWithNothingQueuedMakesFewSystemCalls) {
  Reactor r(0, 64);
  BusyPoller p(r, 40);
  r.add_poller(&p);
  const uint64_t t0 = mono_ns();
  r.run();
  const uint64_t ms = (mono_ns() - t0) / 1'000'000 + 1;
  EXPECT_GT(r.iterations(), 1000u);
  // The 1 ms safety interval allows one enter per ms (a descheduled loop makes fewer), plus the first one.
  EXPECT_LE(r.kernel_enters(), ms + 2) << r.iterations() << " iterations in " << ms << " ms";
}

TEST(Reactor, BusyLoopSeesCompletionsFromAnotherThreadPromptly) {
  Reactor r(0, 64);
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC | O_NONBLOCK), 0);
  ReadOp op;
  io_uring_prep_read(r.sqe(&op), fds[0], op.buf, sizeof(op.buf), 0);  // pipe empty: armed as a poll
  BusyPoller p(r, 3000);
  p.done_when = &op.done;
  r.add_poller(&p);
  std::atomic<uint64_t> wrote_ns{0};
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    wrote_ns.store(mono_ns());
    ASSERT_EQ(write(fds[1], "hello", 5), 5);
  });
  r.run();
  writer.join();
  ASSERT_TRUE(op.done.load());
  EXPECT_EQ(op.res, 5);
  EXPECT_STREQ(op.buf, "hello");
  // Seen through IORING_SQ_TASKRUN (or at worst the 1 ms interval): far less than the 3 s stop.
  EXPECT_LT(op.at_ns - wrote_ns.load(), 500'000'000u);
  close(fds[0]);
  close(fds[1]);
}

TEST(Reactor, BusyLoopCompletesOffloadedFileRead) {
  Reactor r(0, 64);
  int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ReadOp op;
  io_uring_sqe* s = r.sqe(&op);
  io_uring_prep_read(s, fd, op.buf, sizeof(op.buf) - 1, 0);
  s->flags |= IOSQE_ASYNC;  // an io-wq worker completes it: the case of a disk read that missed the page cache
  BusyPoller p(r, 3000);
  p.done_when = &op.done;
  r.add_poller(&p);
  r.run();
  ASSERT_TRUE(op.done.load());
  EXPECT_GT(op.res, 0);
  close(fd);
}

class CountTimer : public Timer {
 public:
  void fire() override {
    fired_ns = mono_ns();
    ++fires;
  }
  uint64_t fired_ns = 0;
  int fires = 0;
};

class StopTimer : public Timer {
 public:
  explicit StopTimer(Reactor& r) : r_(r) {}
  void fire() override { r_.stop(); }

 private:
  Reactor& r_;
};

TEST(Reactor, TimersFireOnTimeInBusyAndIdleLoops) {
  for (bool busy : {true, false}) {
    Reactor r(0, 64);
    BusyPoller p(r, 5000);
    if (busy) r.add_poller(&p);
    CountTimer t;
    StopTimer stop(r);
    r.update_clock();
    const uint64_t armed_ns = mono_ns();
    r.timers().arm(t, r.now_ms() + 10);
    r.timers().arm(stop, r.now_ms() + 30);
    r.run();
    EXPECT_EQ(t.fires, 1) << (busy ? "busy" : "idle");
    // Not early: the deadline is in whole ms of the loop clock (≤ 1 ms of rounding).
    EXPECT_GE(t.fired_ns - armed_ns, 9'000'000u) << (busy ? "busy" : "idle");
    if (!busy) EXPECT_LT(r.iterations(), 100u) << "an idle loop must block in the kernel, not spin";
  }
}

TEST(Reactor, WakeInterruptsABlockedLoop) {
  Reactor r(0, 64);
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    r.stop();
  });
  const uint64_t t0 = mono_ns();
  r.run();  // no pollers, no timers: blocks up to 1 s per wait unless woken
  stopper.join();
  EXPECT_LT(mono_ns() - t0, 500'000'000u);
}

}  // namespace
}  // namespace kosoku::reactor
