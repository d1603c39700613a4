// The DPDK worker's idle back-off (`dpdk { idle_sleep 200us|off; }`, config/network_conf.hh), l3fwd-power
// style: a core that keeps polling an empty RX queue burns a host CPU for nothing, so after kSpinNs without
// work it sleeps in short, escalating steps (kFirstSleepNs, doubling, up to the configured cap), never past
// its next timer deadline, and goes back to pure busy-polling on the first work. Plain C++ (the decision
// only; CoreStack, backend.hh, does the sleeping in io_uring so a completion or a wake() ends it early, and
// where the port gives the RX queue an interrupt fd (net_tap) a poll on it ends the sleep when a frame comes).
// TX blocked (frames in the core's TX backlog that the PMD keeps refusing, or connections waiting for room in
// the TX relay ring; queue.hh): the core has output but can make no progress until the NIC or the relaying
// core frees room, so it is not idle work-wise yet polling again changes nothing. It then sleeps like an idle
// core but never longer than kTxBlockedSleepNs per step: the PMD refused because its descriptor ring was
// full, and a full ring of 1,024 full-size frames takes ~120 us to drain even at 100 Gb/s, so a sleep this
// short never leaves the wire idle; with the link paused or down the core stops burning its CPU. Any frame
// sent (progress) is work and ends the back-off.
#pragma once

#include <algorithm>
#include <cstdint>

namespace kosoku::dpdk {

struct IdleStats {
  uint64_t sleeps = 0;    // sleeps taken
  uint64_t slept_ns = 0;  // time spent in them (measured, ns)
  uint64_t wakeups_sent = 0;  // wake()s sent to sleeping cores this core forwarded frames to
  uint64_t rx_wakeups = 0;    // sleeps ended by a frame on the RX queue (its interrupt fd became readable)
};

class IdleBackoff {
 public:
  static constexpr uint64_t kSpinNs = 100'000;      // pure busy-poll for 100 us after the last work
  static constexpr uint64_t kFirstSleepNs = 10'000;  // then sleep 10 us, 20, 40, ... up to the cap
  static constexpr uint64_t kMinSleepNs = 2'000;     // shorter than this before a timer: keep polling
  static constexpr uint64_t kTxBlockedSleepNs = 50'000;  // cap of a step while TX is blocked (header comment)

  /// max_sleep_ns: the cap (idle_sleep); 0 turns the back-off off (busy-poll).
  explicit IdleBackoff(uint64_t max_sleep_ns) : max_ns_(max_sleep_ns) {}

  bool enabled() const { return max_ns_ != 0; }
  uint64_t max_sleep_ns() const { return max_ns_; }

  /// Work was done at now_ns (a frame received or sent, a task queued...): back to busy-polling.
  void worked(uint64_t now_ns) {
    last_work_ns_ = now_ns;
    step_ns_ = 0;
  }

  /// How long to sleep now (ns), or 0 to keep polling: 0 while within kSpinNs of the last work or when the
  /// next deadline (ns on the same clock, UINT64_MAX: none) is less than kMinSleepNs away; otherwise the next
  /// step of the escalation, cut at cap_ns (kTxBlockedSleepNs while TX is blocked) and at the deadline. Each
  /// non-zero answer advances the escalation (up to max_sleep_ns, whatever the cap).
  uint64_t next_sleep_ns(uint64_t now_ns, uint64_t deadline_ns, uint64_t cap_ns = UINT64_MAX) {
    if (max_ns_ == 0 || now_ns - last_work_ns_ < kSpinNs) return 0;
    step_ns_ = step_ns_ == 0 ? std::min(kFirstSleepNs, max_ns_) : std::min(step_ns_ * 2, max_ns_);
    uint64_t sleep = std::min(step_ns_, cap_ns);
    if (deadline_ns != UINT64_MAX) {
      if (deadline_ns <= now_ns + kMinSleepNs) return 0;
      sleep = std::min(sleep, deadline_ns - now_ns);
    }
    return sleep;
  }

 private:
  uint64_t max_ns_;
  uint64_t last_work_ns_ = 0;
  uint64_t step_ns_ = 0;
};

}  // namespace kosoku::dpdk
