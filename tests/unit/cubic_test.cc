// CUBIC window arithmetic (kernel-bypass/tcpip/cubic.hh) against RFC 9438's formulas, evaluated here
// independently in segments and seconds: K = cbrt((W_max − cwnd_epoch)/C) (eq. 2), W_cubic(t) = C·(t−K)³ + W_max
// (eq. 1), target clamped to [cwnd, 1.5·cwnd], W_est += α·segments_acked/cwnd (eq. 4), ssthresh = β·cwnd,
// fast convergence W_max = cwnd·(1+β)/2, the §4.8 timeout rule and the §4.9.2 undo. SMSS = 1000 bytes, so one
// segment is 1000 bytes in every expectation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernel-bypass/tcpip/cubic.hh"

namespace kosoku::tcpip {
namespace {

constexpr uint32_t kSmss = 1000;
constexpr double kRfcC = 0.4;                                      // segments / s³ (§5.1)
constexpr double kRfcBeta = 0.7;                                   // §4.6
constexpr double kRfcAlpha = 3 * (1 - kRfcBeta) / (1 + kRfcBeta);  // §4.3: 0.9 / 1.7

// The RFC's functions in segments and seconds.
double rfc_k(double w_max_seg, double cwnd_epoch_seg) { return std::cbrt((w_max_seg - cwnd_epoch_seg) / kRfcC); }
double rfc_w_cubic(double t, double k, double w_max_seg) { return kRfcC * std::pow(t - k, 3) + w_max_seg; }
// One ACK of `acked` bytes outside the Reno-friendly region, in bytes: cwnd + (target − cwnd)/cwnd segments
// per segment acked, target = W_cubic(t + RTT) clamped to [cwnd, 1.5·cwnd].
double rfc_step(double cwnd, double acked, double t, double rtt, double k, double w_max_seg) {
  const double target = std::clamp(rfc_w_cubic(t + rtt, k, w_max_seg) * kSmss, cwnd, 1.5 * cwnd);
  return cwnd + (target - cwnd) / (cwnd / kSmss) * (acked / kSmss);
}

// A flow in congestion avoidance that is always cwnd-limited: each round of `rtt_us` delivers cwnd/SMSS
// full-sized ACKs, spread evenly over the round. Returns cwnd after `rounds` rounds from `start_us`.
uint32_t run_rounds(Cubic& c, uint32_t cwnd, uint64_t start_us, uint64_t rtt_us, unsigned rounds) {
  uint64_t now = start_us;
  for (unsigned r = 0; r < rounds; ++r) {
    const unsigned n = cwnd / kSmss;
    for (unsigned i = 0; i < n; ++i) cwnd = c.on_ack(cwnd, kSmss, now + rtt_us * i / n, rtt_us);
    now += rtt_us;
  }
  return cwnd;
}

TEST(Cubic, KIsTheCubeRootOfWmaxMinusCwndEpochOverC) {
  Cubic c(kSmss);
  EXPECT_EQ(c.on_congestion_event(100 * kSmss), 70 * kSmss);
  EXPECT_EQ(c.w_max(), 100 * kSmss);
  EXPECT_FALSE(c.in_epoch());
  EXPECT_EQ(c.k_us(), 0u);

  c.on_ack(70 * kSmss, kSmss, 5'000'000, 100'000);  // the first congestion avoidance ACK starts the epoch
  EXPECT_TRUE(c.in_epoch());
  EXPECT_EQ(c.epoch_start_us(), 5'000'000u);
  // K = cbrt((100 − 70) / 0.4) = cbrt(75) = 4.2172 s
  EXPECT_NEAR(rfc_k(100, 70), 4.2172, 1e-4);
  EXPECT_NEAR(static_cast<double>(c.k_us()), rfc_k(100, 70) * 1e6, 1.0);
  EXPECT_EQ(c.k_us(), 4'217'163u);
  EXPECT_NEAR(c.w_cubic(rfc_k(100, 70)), 100'000.0, 1e-6);  // the plateau is at W_max
  EXPECT_NEAR(c.w_cubic(0), 70'000.0, 1e-6);                // and the curve starts at cwnd_epoch
}

TEST(Cubic, SsthreshIsBetaTimesCwndWithATwoSegmentFloor) {
  Cubic c(1460);
  EXPECT_EQ(c.on_congestion_event(146'000), 102'200u);  // 0.7 · 100 segments of 1460
  EXPECT_EQ(c.ssthresh(), 102'200u);
  EXPECT_EQ(c.cwnd_prior(), 146'000u);
  EXPECT_EQ(c.on_congestion_event(10'001), 7'000u);  // ⌊7000.7⌋
  EXPECT_EQ(c.on_congestion_event(3'000), 2'920u);   // 0.7 · 3000 = 2100 < 2 · SMSS
  EXPECT_EQ(c.on_timeout(1'460), 2'920u);
  EXPECT_EQ(c.on_congestion_event(UINT32_MAX), static_cast<uint32_t>(uint64_t{UINT32_MAX} * 7 / 10));
}

TEST(Cubic, FastConvergenceReleasesBandwidthWhenCwndIsBelowTheLastWmax) {
  Cubic c(kSmss);
  c.on_congestion_event(100 * kSmss);
  EXPECT_EQ(c.w_max(), 100'000u);
  c.on_congestion_event(80 * kSmss);  // below W_max: W_max = 80 · (1 + 0.7) / 2 = 68 segments
  EXPECT_NEAR(c.w_max(), 80'000 * (1 + kRfcBeta) / 2, 1.0);
  EXPECT_NEAR(c.w_max(), 68'000, 1.0);
  EXPECT_EQ(c.cwnd_prior(), 80'000u);  // cwnd_prior is the cwnd itself either way
  c.on_congestion_event(120 * kSmss);  // above: W_max = cwnd
  EXPECT_EQ(c.w_max(), 120'000u);

  Cubic off(kSmss);
  off.set_fast_convergence(false);
  off.on_congestion_event(100 * kSmss);
  off.on_congestion_event(80 * kSmss);
  EXPECT_EQ(off.w_max(), 80'000u);
}

TEST(Cubic, ConcaveStepsTowardsWcubicOfTPlusRtt) {
  Cubic c(kSmss);
  c.on_congestion_event(100 * kSmss);
  const double k = rfc_k(100, 70), rtt = 0.1;
  // t = 0: W_cubic(0) = cwnd_epoch = 70 segments, but W_est = 70 + α·1/70 already exceeds it: the first ACK of
  // a stage is always Reno-friendly, cwnd = ⌊W_est⌋ = 70007.
  const uint32_t c1 = c.on_ack(70'000, kSmss, 1'000'000, 100'000);
  EXPECT_EQ(c1, static_cast<uint32_t>(70'000 + kRfcAlpha * kSmss * kSmss / 70'000));
  EXPECT_EQ(c1, 70'007u);
  // t = 2 s: W_cubic(2) = 95.6 segments is far above W_est (70.015): concave region, target = W_cubic(2.1) =
  // 0.4 · (2.1 − 4.2172)³ + 100 = 96.20 segments, well inside [cwnd, 1.5·cwnd]: +373.8 bytes for one segment.
  EXPECT_NEAR(rfc_w_cubic(2.1, k, 100), 96.20, 0.01);
  const uint32_t c2 = c.on_ack(c1, kSmss, 3'000'000, 100'000);
  EXPECT_NEAR(c2, rfc_step(c1, kSmss, 2.0, rtt, k, 100), 1.0);
  EXPECT_NEAR(c2 - c1, 374.2, 1.0);
  // A delayed ACK for two segments takes twice the step (byte counting).
  const uint32_t c3 = c.on_ack(c2, 2 * kSmss, 3'000'000, 100'000);
  EXPECT_NEAR(c3, rfc_step(c2, 2 * kSmss, 2.0, rtt, k, 100), 1.0);
  EXPECT_NEAR(c3 - c2, 2 * (rfc_step(c2, kSmss, 2.0, rtt, k, 100) - c2), 1.0);
}

TEST(Cubic, ConvexRegionBeyondWmaxAccelerates) {
  Cubic c(kSmss);
  c.on_congestion_event(100 * kSmss);
  c.on_ack(70'000, kSmss, 0, 100'000);
  const double k = rfc_k(100, 70);
  const uint64_t k_us = c.k_us();
  // t = K + 1: target = 100 + 0.4 · 1.1³ = 100.532 segments; cwnd 100 segments grows 5.3 bytes per segment.
  const uint32_t a = c.on_ack(100'000, kSmss, k_us + 1'000'000, 100'000);
  EXPECT_NEAR(a, rfc_step(100'000, kSmss, k + 1, 0.1, k, 100), 1.0);
  EXPECT_NEAR(a, 100'005.3, 1.0);
  // t = K + 3: target = 100 + 0.4 · 3.1³ = 111.916 segments; cwnd 105 segments grows 65.9 bytes per segment.
  const uint32_t b = c.on_ack(105'000, kSmss, k_us + 3'000'000, 100'000);
  EXPECT_NEAR(b, rfc_step(105'000, kSmss, k + 3, 0.1, k, 100), 1.0);
  EXPECT_NEAR(b - 105'000, 65.87, 1.0);
}

TEST(Cubic, TargetIsClampedAtOneAndAHalfCwndEvenAfterHoursOrYears) {
  Cubic c(kSmss);
  c.on_ack(100'000, kSmss, 0, 100'000);  // slow start ended without loss: W_max = cwnd_epoch, K = 0
  EXPECT_EQ(c.w_max(), 100'000u);
  EXPECT_EQ(c.k_us(), 0u);
  // t = 1 h: W_cubic is ~1.9e10 segments, target = 1.5 · cwnd: (150000 − 100000) / 100 = 500 bytes.
  EXPECT_EQ(c.on_ack(100'000, kSmss, 3'600'000'000ull, 100'000), 100'500u);
  // t = 10 years, cwnd near 4 GB: the step 2e9 · 1000 / 4e9 = 500 bytes, no overflow.
  const uint64_t ten_years_us = 10ull * 365 * 24 * 3600 * 1'000'000;
  EXPECT_EQ(c.on_ack(4'000'000'000u, kSmss, ten_years_us, 100'000), 4'000'000'500u);
  // A step that would pass 2³² − 1 saturates there.
  EXPECT_EQ(c.on_ack(4'000'000'000u, 1'000'000'000u, ten_years_us, 100'000), UINT32_MAX);
  EXPECT_EQ(c.on_ack(100'000, kSmss, UINT64_MAX, UINT64_MAX), 100'500u);
}

TEST(Cubic, RenoFriendlyRegionDominatesAtShortRtt) {
  Cubic c(kSmss);
  EXPECT_EQ(c.on_congestion_event(100 * kSmss), 70 * kSmss);
  // RTT 100 µs: in 40 rounds (4 ms) W_cubic moves 0.4 · 3K² · 0.004 ≈ 0.09 segments, W_est α = 0.529 per round.
  uint32_t cwnd = run_rounds(c, 70 * kSmss, 1'000'000, 100, 40);
  const double reno = 70'000 + 40 * kRfcAlpha * kSmss;  // 91176
  EXPECT_NEAR(cwnd, reno, 0.02 * 40 * kRfcAlpha * kSmss);
  EXPECT_LT(cwnd, reno);  // n = ⌊cwnd/SMSS⌋ ACKs a round, each α·SMSS²/cwnd: a little under α per round
  EXPECT_NEAR(cwnd, c.w_est(), 1.0);
  EXPECT_GT(cwnd, c.w_cubic(0.004) + 20'000);
  // Past cwnd_prior (100 segments) α is 1: one segment per round, like Reno.
  cwnd = run_rounds(c, cwnd, 1'004'000, 100, 25);
  ASSERT_GE(c.w_est(), c.cwnd_prior());
  const uint32_t before = cwnd;
  cwnd = run_rounds(c, cwnd, 1'006'500, 100, 10);
  EXPECT_NEAR(cwnd - before, 10 * kSmss, 0.02 * 10 * kSmss);
}

TEST(Cubic, CubicRegionAtLongRttPlateausAtWmaxAroundK) {
  // W_max = 1000 segments, RTT 100 ms: K = cbrt(300 / 0.4) = 9.09 s, while W_est gains only ~0.53 segment per
  // round (~750 at K), so the cubic function is in charge throughout. cwnd moves a gap's worth towards
  // W_cubic(t + RTT) per round, so it trails that target by about one RTT, i.e. it tracks W_cubic(t).
  Cubic c(kSmss);
  c.on_congestion_event(1000 * kSmss);
  const double k = rfc_k(1000, 700);
  EXPECT_NEAR(k, 9.0856, 1e-4);
  const uint64_t rtt = 100'000;
  uint32_t cwnd = run_rounds(c, 700 * kSmss, 0, rtt, 1);
  // Concave: the first round gains most of W_cubic(0.1) − 700 = 9.7 segments (Reno's rate would be +0.53).
  EXPECT_GT(cwnd, 700'000 + 0.5 * (rfc_w_cubic(0.1, k, 1000) - 700) * kSmss);
  EXPECT_LT(cwnd, rfc_w_cubic(0.2, k, 1000) * kSmss);  // no ACK of round 1 aimed past W_cubic(0.1 + RTT)
  const unsigned rounds_to_k = static_cast<unsigned>(k / 0.1);  // 90
  cwnd = run_rounds(c, cwnd, rtt, rtt, rounds_to_k - 1);
  // At t ≈ K cwnd sits on the plateau at W_max = 1000 segments ...
  EXPECT_NEAR(cwnd, 1'000'000, 0.002 * 1'000'000);
  const uint32_t at_k = cwnd;
  cwnd = run_rounds(c, cwnd, rounds_to_k * rtt, rtt, 1);
  EXPECT_LT(cwnd - at_k, 1'000u);  // ... where it hardly moves (W_cubic'(K) = 0): under a segment per round
  // ... and beyond it the convex profile takes over: at t = K + 3 s cwnd is near W_cubic(t) ≈ 1010.8 segments.
  cwnd = run_rounds(c, cwnd, (rounds_to_k + 1) * rtt, rtt, 30);
  const double t_end = (rounds_to_k + 31) * 0.1;
  EXPECT_NEAR(cwnd, rfc_w_cubic(t_end, k, 1000) * kSmss, 0.002 * 1'000'000);
  EXPECT_GT(cwnd, 1'008'000u);
  EXPECT_LT(c.w_est(), 800'000u);  // W_est never came near
}

TEST(Cubic, TimeoutThenSlowStartStartsANewEpochWithKZero) {
  Cubic c(kSmss);
  c.on_congestion_event(100 * kSmss);
  c.on_ack(70'000, kSmss, 0, 100'000);
  EXPECT_TRUE(c.in_epoch());
  EXPECT_EQ(c.on_timeout(90 * kSmss), 63 * kSmss);  // β · 90 segments
  EXPECT_NEAR(c.w_max(), 90'000 * (1 + kRfcBeta) / 2, 1.0);  // fast convergence as for any event: 76.5
  EXPECT_EQ(c.cwnd_prior(), 90'000u);
  EXPECT_FALSE(c.in_epoch());
  // The caller slow-starts from 1 SMSS to ssthresh; the first congestion avoidance ACK (at 10 s) starts the
  // epoch with W_max = W_est = cwnd_epoch and K = 0 (§4.8).
  const uint32_t c1 = c.on_ack(63'000, kSmss, 10'000'000, 100'000);
  EXPECT_TRUE(c.in_epoch());
  EXPECT_EQ(c.epoch_start_us(), 10'000'000u);
  EXPECT_EQ(c.k_us(), 0u);
  EXPECT_EQ(c.w_max(), 63'000u);
  // W_cubic(0) = 63000 < W_est = 63000 + α·1000·1000/63000 = 63008.4: Reno-friendly, cwnd = ⌊W_est⌋.
  EXPECT_EQ(c1, static_cast<uint32_t>(63'000 + kRfcAlpha * kSmss * kSmss / 63'000));
  EXPECT_EQ(c1, 63'008u);
  // t = 1 s: convex from the start: W_cubic(1.1) = 63 + 0.4 · 1.331 segments, above W_est (~63017).
  const uint32_t c2 = c.on_ack(c1, kSmss, 11'000'000, 100'000);
  EXPECT_NEAR(c2, rfc_step(c1, kSmss, 1.0, 0.1, 0, 63), 1.0);
  EXPECT_NEAR(c2 - c1, (63'532.4 - c1) * 1000 / c1, 1.0);
}

TEST(Cubic, SlowStartExitWithoutLossGrowsLikeRenoWithAlphaOne) {
  Cubic c(kSmss);
  const uint32_t c1 = c.on_ack(50'000, kSmss, 0, 100);
  EXPECT_EQ(c.w_max(), 50'000u);
  EXPECT_EQ(c.cwnd_prior(), 50'000u);  // §4.10: cwnd_prior = cwnd, so W_est ≥ cwnd_prior and α = 1
  EXPECT_EQ(c.k_us(), 0u);
  EXPECT_EQ(c1, 50'020u);  // 50000 + 1 · 1000 · 1000 / 50000
  const uint32_t cwnd = run_rounds(c, c1, 100, 100, 20);
  EXPECT_NEAR(cwnd - c1, 20 * kSmss, 0.03 * 20 * kSmss);
}

TEST(Cubic, AnEventEndsTheEpochAndTheNextStageRecomputesK) {
  Cubic c(kSmss);
  c.on_congestion_event(100 * kSmss);
  c.on_ack(70'000, kSmss, 0, 100'000);
  EXPECT_EQ(c.k_us(), 4'217'163u);
  EXPECT_EQ(c.on_congestion_event(90 * kSmss), 63'000u);
  EXPECT_FALSE(c.in_epoch());
  c.on_ack(63'000, kSmss, 20'000'000, 100'000);
  // W_max = 76.5 segments (fast convergence), K = cbrt((76.5 − 63) / 0.4) = cbrt(33.75) = 3.2317 s
  EXPECT_NEAR(static_cast<double>(c.k_us()), rfc_k(76.5, 63) * 1e6, 2.0);
  EXPECT_NEAR(c.k_us(), 3'231'700, 100);
  EXPECT_EQ(c.epoch_start_us(), 20'000'000u);
  EXPECT_EQ(c.w_est(), 63'000u + static_cast<uint32_t>(kRfcAlpha * kSmss * kSmss / 63'000));
}

TEST(Cubic, UndoRestoresTheStateBeforeTheSpuriousEvent) {
  Cubic c(kSmss);
  EXPECT_EQ(c.on_congestion_event(100 * kSmss), 70'000u);
  const uint32_t cwnd = run_rounds(c, 70'000, 1'000'000, 100'000, 5);
  const uint32_t w_max = c.w_max(), w_est = c.w_est(), prior = c.cwnd_prior();
  const uint64_t k = c.k_us(), start = c.epoch_start_us();
  ASSERT_EQ(w_max, 100'000u);
  ASSERT_EQ(start, 1'000'000u);

  EXPECT_EQ(c.on_congestion_event(cwnd), cwnd * 7 / 10);
  EXPECT_FALSE(c.in_epoch());
  EXPECT_EQ(c.undo_cwnd(), cwnd);
  const Cubic::Saved s = c.undo();
  EXPECT_EQ(s.cwnd, cwnd);
  EXPECT_EQ(s.ssthresh, 70'000u);
  EXPECT_EQ(c.ssthresh(), 70'000u);
  EXPECT_EQ(c.w_max(), w_max);
  EXPECT_EQ(c.w_est(), w_est);
  EXPECT_EQ(c.cwnd_prior(), prior);
  EXPECT_EQ(c.k_us(), k);
  EXPECT_TRUE(c.in_epoch());
  EXPECT_EQ(c.epoch_start_us(), start);  // the old epoch runs on: t = 3 s below is from 1 s
  EXPECT_NEAR(c.on_ack(cwnd, kSmss, 4'000'000, 100'000),
              rfc_step(cwnd, kSmss, 3.0, 0.1, rfc_k(100, 70), 100), 1.0);

  const Cubic::Saved none = c.undo();  // nothing left to undo
  EXPECT_EQ(none.cwnd, 0u);
  EXPECT_EQ(none.ssthresh, 0u);
  EXPECT_EQ(c.undo_cwnd(), 0u);
  EXPECT_EQ(c.w_max(), w_max);

  Cubic first(kSmss);  // undoing the very first event returns to the initial slow start
  first.on_timeout(50'000);
  const Cubic::Saved f = first.undo();
  EXPECT_EQ(f.cwnd, 50'000u);
  EXPECT_EQ(f.ssthresh, UINT32_MAX);
  EXPECT_EQ(first.w_max(), 0u);
  EXPECT_FALSE(first.in_epoch());
}

TEST(Cubic, ZeroRttZeroAckedAndAClockBeforeTheEpochAreHarmless) {
  Cubic c(kSmss);
  EXPECT_EQ(c.on_ack(70'000, 0, 0, 100'000), 70'000u);  // no new data: nothing starts
  EXPECT_FALSE(c.in_epoch());
  c.on_congestion_event(100 * kSmss);
  c.on_ack(70'000, kSmss, 1'000'000, 0);
  const uint64_t k_us = c.k_us();
  // RTT 0: target = W_cubic(t) itself; at t = K + 1 that is 100 + 0.4 segments: 100000 grows 4 bytes.
  EXPECT_NEAR(c.on_ack(100'000, kSmss, 1'000'000 + k_us + 1'000'000, 0), 100'004, 1);
  // A clock before the epoch counts as t = 0; cwnd never shrinks, whatever the caller passes.
  EXPECT_GE(c.on_ack(100'000, kSmss, 0, 0), 100'000u);
  EXPECT_EQ(c.on_ack(200'000, kSmss, 1'000'000, 100'000), 200'000u);  // above W_cubic and W_est: unchanged
  EXPECT_GE(c.on_ack(0, kSmss, 2'000'000, 100'000), 0u);
  EXPECT_GE(c.on_ack(1, kSmss, 2'000'000, 100'000), 1u);
}

TEST(Cubic, ApplicationLimitedTimeIsLeftOutOfT) {
  Cubic a(kSmss), b(kSmss);
  for (Cubic* c : {&a, &b}) {
    c->on_congestion_event(100 * kSmss);
    c->on_ack(70'000, kSmss, 0, 100'000);
  }
  a.on_app_limited(5'000'000);  // idle for 5 s
  EXPECT_EQ(a.epoch_start_us(), 5'000'000u);
  // a at 7 s has t = 2 s, as b at 2 s: the same target, the same step.
  const uint32_t ra = a.on_ack(75'000, kSmss, 7'000'000, 100'000);
  const uint32_t rb = b.on_ack(75'000, kSmss, 2'000'000, 100'000);
  EXPECT_EQ(ra, rb);
  EXPECT_NEAR(ra, rfc_step(75'000, kSmss, 2.0, 0.1, rfc_k(100, 70), 100), 1.0);
  a.restart_epoch();
  EXPECT_FALSE(a.in_epoch());
  EXPECT_EQ(a.w_max(), 100'000u);
}

}  // namespace
}  // namespace kosoku::tcpip
