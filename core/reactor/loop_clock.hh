// The loop's cheap monotonic clock: the TSC between re-syncs with clock_gettime (docs: reactor.hh, step 1).
//
// A busy-polling loop (DPDK) reads the clock once per iteration; two clock_gettime calls per iteration were
// ~10 % of a loaded iteration and most of an empty one (bench/results/2026-11-29-dpdk-memif.md). This clock
// reads the TSC (rdtsc, ~25-40 cycles) and converts ticks to ns with a multiplier calibrated against
// CLOCK_MONOTONIC; it re-syncs with clock_gettime(CLOCK_MONOTONIC) (and CLOCK_REALTIME_COARSE for the wall
// clock) whenever kResyncNs have passed since the last sync, so an extrapolation error is bounded by the
// rate error over at most kResyncNs (sub-µs). Values never go backwards (clamped at a re-sync).
//
// The TSC is used only on x86-64 when the kernel's clocksource is "tsc" (the kernel found it invariant and
// synchronised across CPUs); otherwise, and until the rate is calibrated (the first kCalibrateNs after
// construction), every read is a clock_gettime, exactly as before.
#pragma once

#include <cstdint>

namespace kosoku::reactor {

class LoopClock {
 public:
  /// Re-sync period: at most this many ns are extrapolated from the TSC (1 ms, the timer wheel's tick).
  static constexpr uint64_t kResyncNs = 1'000'000;
  /// Calibration interval: the TSC rate is measured over at least this long before it is used (20 ms),
  /// then refined at every re-sync over the whole time since construction.
  static constexpr uint64_t kCalibrateNs = 20'000'000;

  LoopClock();

  /// Monotonic ns (CLOCK_MONOTONIC's epoch). Cheap except once per kResyncNs.
  uint64_t now_ns();
  /// Wall clock seconds since the epoch (CLOCK_REALTIME_COARSE) as of the last re-sync (≤ kResyncNs old).
  int64_t wall_s() const { return wall_s_; }
  /// Whether TSC extrapolation is in use (false: every read is a clock_gettime).
  bool tsc_active() const { return mult_ != 0; }
  /// clock_gettime re-syncs so far (stats, tests).
  uint64_t syncs() const { return syncs_; }

  /// True if this process may use the TSC (x86-64, kernel clocksource "tsc"); evaluated once.
  static bool tsc_usable();

 private:
  uint64_t sync(uint64_t tsc);

  bool use_tsc_;
  uint64_t tsc0_ = 0;        // calibration start
  uint64_t ns0_ = 0;
  uint64_t base_tsc_ = 0;    // last re-sync
  uint64_t base_ns_ = 0;
  uint64_t mult_ = 0;        // ns per tick, 32.32 fixed point; 0 = not calibrated
  uint64_t resync_ticks_ = 0;
  uint64_t last_ns_ = 0;     // monotonic clamp
  int64_t wall_s_ = 0;
  uint64_t syncs_ = 0;
};

}  // namespace kosoku::reactor
