#include "core/reactor/loop_clock.hh"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstring>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace kosoku::reactor {

namespace {

inline uint64_t read_tsc() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return 0;
#endif
}

bool kernel_clocksource_is_tsc() {
#if defined(__x86_64__)
  int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[32] = {};
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  return n >= 3 && std::strncmp(buf, "tsc", 3) == 0 && (n == 3 || buf[3] == '\n');
#else
  return false;
#endif
}

}  // namespace

bool LoopClock::tsc_usable() {
  static const bool usable = kernel_clocksource_is_tsc();
  return usable;
}

LoopClock::LoopClock() : use_tsc_(tsc_usable()) { sync(use_tsc_ ? read_tsc() : 0); }

uint64_t LoopClock::now_ns() {
  if (mult_ != 0) {
    const uint64_t tsc = read_tsc();
    const uint64_t ticks = tsc - base_tsc_;
    if (ticks < resync_ticks_) {  // also false if the TSC went backwards (ticks wraps): re-sync
      const uint64_t ns = base_ns_ + static_cast<uint64_t>((static_cast<unsigned __int128>(ticks) * mult_) >> 32);
      if (ns > last_ns_) last_ns_ = ns;
      return last_ns_;
    }
    return sync(tsc);
  }
  return sync(use_tsc_ ? read_tsc() : 0);
}

uint64_t LoopClock::sync(uint64_t tsc) {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const uint64_t ns = static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  wall_s_ = ts.tv_sec;
  ++syncs_;
  if (use_tsc_) {
    if (syncs_ == 1) {
      tsc0_ = tsc;
      ns0_ = ns;
    } else if (ns - ns0_ >= kCalibrateNs && tsc > tsc0_) {
      // ns per tick over everything since construction (32.32 fixed point): the longer, the more exact.
      const unsigned __int128 m = (static_cast<unsigned __int128>(ns - ns0_) << 32) / (tsc - tsc0_);
      if (m > 0 && m < (static_cast<unsigned __int128>(1) << 40)) {  // sane: 1 tick is < 256 ns
        mult_ = static_cast<uint64_t>(m);
        resync_ticks_ = static_cast<uint64_t>((static_cast<unsigned __int128>(kResyncNs) << 32) / mult_);
      }
    }
    base_tsc_ = tsc;
    base_ns_ = ns;
  }
  if (ns > last_ns_) last_ns_ = ns;
  return last_ns_;
}

}  // namespace kosoku::reactor
