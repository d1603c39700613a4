// Review of the congestion-control changes (PRR, CUBIC, cwnd validation, undo): each test pins one defect
// found in review, driving CongestionControl (congestion.hh) directly with exact byte values, or two stacks
// through the simulated link (tcp_pipe.hh).
#include <gtest/gtest.h>

#include <cstdint>

#include "kernel-bypass/tcpip/congestion.hh"
#include "kernel-bypass/tcpip/tcb.hh"
#include "tests/unit/tcp_pipe.hh"

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

// RFC 5681 §3.1: when the segment has already been retransmitted by the retransmission timer, ssthresh is
// held constant (Linux: no new ssthresh in the Loss state before an ACK makes progress). CUBIC's reduction is
// cwnd-based, and cwnd is 1 SMSS after the first RTO: a second, backed-off RTO set ssthresh = 2 SMSS and, by
// fast convergence, W_max = 0.85 SMSS, so the connection crawled from 2 SMSS after every outage of two RTOs.
TEST(TcpReview, CubicRepeatedRtoHoldsSsthresh) {
  CongestionControl cc = grown(20, CongestionAlgorithm::kCubic);
  cc.on_timeout(20 * kMss, SeqNum{50'000});
  ASSERT_EQ(cc.ssthresh(), 14 * kMss);
  ASSERT_EQ(cc.cwnd(), kMss);
  cc.on_timeout(20 * kMss, SeqNum{50'000});  // the same segment times out again: nothing was acknowledged
  EXPECT_EQ(cc.ssthresh(), 14 * kMss);        // was 2000
  EXPECT_EQ(cc.cubic().w_max(), 20 * kMss);   // was 850
  EXPECT_EQ(cc.cwnd(), kMss);
  // After progress, a new RTO is a new congestion event again.
  cc.on_ack(SeqNum{30'000}, kMss, 19 * kMss);
  cc.on_timeout(19 * kMss, SeqNum{50'000});
  EXPECT_EQ(cc.ssthresh(), 2 * kMss);  // max(0.7 · 2 SMSS, 2 SMSS)
}

// An RTO during NewReno fast recovery (no SACK) found cwnd inflated by the duplicate ACKs (RFC 6582 step 3),
// an artificial value the network never carried; CUBIC's cwnd-based reduction then set ssthresh above the
// window that had just lost data. The loss episode's ssthresh stands (Linux keeps it on an RTO in Recovery).
TEST(TcpReview, CubicRtoDuringNewRenoRecoveryIgnoresInflatedCwnd) {
  CongestionControl cc = grown(20, CongestionAlgorithm::kCubic);
  const SeqNum una{10'000}, max{30'000};
  for (int i = 0; i < 3; ++i) cc.on_dupack(una, max, 20 * kMss);
  ASSERT_TRUE(cc.in_recovery());
  ASSERT_EQ(cc.ssthresh(), 14 * kMss);
  for (int i = 0; i < 20; ++i) cc.on_dupack(una, max, 20 * kMss);
  ASSERT_EQ(cc.cwnd(), 37 * kMss);  // 14 + 3 + 20 SMSS of inflation
  cc.on_timeout(20 * kMss, max);
  EXPECT_LE(cc.ssthresh(), 14 * kMss);  // was 25900, above the 20 SMSS that lost data
  EXPECT_EQ(cc.cwnd(), kMss);
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

// CUBIC after idle (a keep-alive connection between two responses): W_cubic(t) counts from the epoch's start,
// so after 10 s without traffic the target is far above cwnd and clamped to 1.5·cwnd — cwnd then grew by half
// of every acknowledged byte, 50 % per RTT, as in slow start, for a window the path has not carried for 10 s
// (the inflation Linux's tcp_cubic fixed by shifting the epoch when sending starts after idle, RFC 9438 §5.8).
TEST(TcpReview, CubicCwndDoesNotJumpAfterIdle) {
  TcpConfig c;
  c.recv_buffer_bytes = 4 << 20;
  testing::Link link(c);
  int data_index = 0;
  link.tap = [&](int from, const TcpSegment& seg) {
    return from != 0 || seg.payload.empty() || ++data_index != 200;  // one loss: CUBIC's congestion avoidance
  };
  testing::Sink sink;
  testing::Source source;
  net::Stream* client = testing::connect_kept_open(link, sink, source, 80);
  ASSERT_NE(client, nullptr);
  client->write(testing::pattern_bytes(1 << 20, 1));
  client->flush();
  ASSERT_TRUE(link.run_until([&] { return sink.received.size() == 1u << 20; }, 60'000));
  link.run_for(5);  // the last ACKs
  const Tcb& t = testing::tcb(client);
  ASSERT_EQ(link.tcp(0).stats().sack_recoveries, 1u);
  ASSERT_GE(t.cc().cwnd(), t.cc().ssthresh());  // congestion avoidance
  const uint32_t before = t.cc().cwnd();
  link.run_for(10'000);  // idle
  client->write(testing::pattern_bytes(4 << 20, 2));
  client->flush();
  const size_t base = sink.received.size();
  ASSERT_TRUE(link.run_until([&] { return sink.received.size() >= base + 3 * size_t{before}; }, 60'000));
  EXPECT_LT(t.cc().cwnd(), before + before / 5) << "cwnd " << before << " before idle";
}

}  // namespace
}  // namespace kosoku::tcpip
