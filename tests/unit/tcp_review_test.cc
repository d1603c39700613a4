// Review of the congestion-control changes (PRR, CUBIC, cwnd validation, undo): each test pins one defect
// found in review, driving CongestionControl (congestion.hh) directly with exact byte values.
#include <gtest/gtest.h>

#include <cstdint>

#include "kernel-bypass/tcpip/congestion.hh"

namespace kosoku::tcpip {
namespace {

constexpr uint32_t kMss = 1000;

// Slow start from the 10 SMSS initial window to `segments` SMSS: one SMSS per cwnd-limited ACK.
CongestionControl grown(unsigned segments, CongestionAlgorithm a) {
  CongestionControl cc(kMss);
  cc.set_algorithm(a);
  for (unsigned i = 10; i < segments; ++i) cc.on_ack(SeqNum{(i - 9) * kMss}, kMss, 0);
  return cc;
}

// A D-SACK undo inside a PRR recovery (every retransmission reported as a duplicate before the cumulative ACK
// reaches RecoveryPoint) restores ssthresh to its value before the recovery — UINT32_MAX in the first slow
// start. The exit from recovery then must not set cwnd = ssthresh: cwnd would be 4 GiB and the sender would
// burst the whole peer window. The undone recovery ends with cwnd = max(cwnd, cwnd before the recovery), as
// Linux's tcp_undo_cwnd_reduction.
TEST(TcpReview, PrrExitAfterUndoInFirstSlowStartKeepsCwndBounded) {
  CongestionControl cc = grown(20, CongestionAlgorithm::kReno);
  ASSERT_EQ(cc.cwnd(), 20 * kMss);
  cc.enter_sack_recovery(20 * kMss, SeqNum{100'000});
  cc.prr_ack(kMss, 18 * kMss);
  cc.undo_reduction();          // D-SACKs showed the retransmissions spurious; recovery runs on
  ASSERT_EQ(cc.ssthresh(), UINT32_MAX);
  cc.prr_ack(kMss, 18 * kMss);  // SSRB: cwnd = pipe + max(2000 - 0, 1000) + 1000
  EXPECT_EQ(cc.cwnd(), 21 * kMss);
  EXPECT_TRUE(cc.on_sack_recovery_ack(SeqNum{100'000}));
  EXPECT_EQ(cc.cwnd(), 21 * kMss);  // was UINT32_MAX
  EXPECT_EQ(cc.ssthresh(), UINT32_MAX);
}

// The same with CUBIC after an earlier congestion event: the restored ssthresh (0.7 of an older cwnd) is
// below the cwnd before the undone recovery, and an exit with cwnd = ssthresh threw the undo away.
TEST(TcpReview, PrrExitAfterUndoRestoresCwndBeforeRecovery) {
  CongestionControl cc = grown(20, CongestionAlgorithm::kCubic);
  cc.enter_sack_recovery(20 * kMss, SeqNum{100'000});  // first event: ssthresh 14000
  ASSERT_TRUE(cc.on_sack_recovery_ack(SeqNum{100'000}));
  ASSERT_EQ(cc.cwnd(), 14 * kMss);
  // Congestion avoidance (cwnd-limited, 10 ms RTT) until cwnd is back above 20 SMSS.
  SeqNum ack{100'000};
  uint64_t now = 1'000'000;
  while (cc.cwnd() < 20 * kMss) {
    ack = ack + kMss;
    now += 1'000;
    cc.on_ack(ack, kMss, 0, true, now, 10'000);
  }
  const uint32_t before = cc.cwnd();
  cc.enter_sack_recovery(before, SeqNum{500'000});  // the spurious one
  cc.prr_ack(kMss, before - 2 * kMss);
  cc.undo_reduction();
  ASSERT_LT(cc.ssthresh(), before);  // max(0.7·before, the first event's 14000)
  cc.prr_ack(kMss, before - 3 * kMss);
  EXPECT_TRUE(cc.on_sack_recovery_ack(SeqNum{500'000}));
  EXPECT_GE(cc.cwnd(), before);  // was 14000: the undo was lost at the exit
}

// CUBIC, convex region: a round in which the sender was not cwnd-limited (application- or rwnd-limited) must
// not restart the cubic curve from the current cwnd (W_max = cwnd, K = 0: a flat start again): RFC 9438 §5.8
// and Linux (tcp_cubic, "better follow cubic curve after idle period") keep the curve's shape and shift it
// later by the time the window was not used. A flow that is app-limited every 5th round from 3 s on (16 such
// rounds of 100 ms) must therefore end where a flow that never paused is 16 rounds earlier.
TEST(TcpReview, CubicAppLimitedRoundsShiftTheCurveInsteadOfRestartingIt) {
  constexpr uint64_t kRtt = 100'000;  // µs
  auto run = [&](int rounds, bool pause) {
    CongestionControl cc = grown(40, CongestionAlgorithm::kCubic);
    cc.enter_sack_recovery(40 * kMss, SeqNum{1'000'000});  // W_max 40000, cwnd 28000
    EXPECT_TRUE(cc.on_sack_recovery_ack(SeqNum{1'000'000}));
    SeqNum ack{1'000'000};
    uint64_t now = 10'000'000;
    for (int round = 0; round < rounds; ++round) {  // a cwnd's worth of ACKs per RTT
      bool limited = !(pause && round >= 30 && round % 5 == 0);
      uint32_t n = cc.cwnd() / kMss;
      for (uint32_t i = 0; i < n; ++i) {
        ack = ack + kMss;
        cc.on_ack(ack, kMss, 0, limited, now + kRtt * i / n, kRtt);
      }
      now += kRtt;
    }
    return cc.cwnd();
  };
  uint32_t paused = run(110, true);  // rounds 30, 35, ..., 105 app-limited: 16
  uint32_t steady = run(110 - 16, false);
  ASSERT_GT(steady, 40 * kMss);  // the steady flow is in the convex region
  EXPECT_GE(paused, steady - steady / 20);
}

}  // namespace
}  // namespace kosoku::tcpip
