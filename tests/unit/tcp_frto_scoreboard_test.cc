// F-RTO (RFC 5682 §3, kernel-bypass/tcpip/tcb_frto.cc) with SACK ranges the peer reported BEFORE the
// timeout. The scoreboard is cleared at the timeout for the go-back (RFC 2018 §8 / RFC 6675 §5.1); F-RTO keeps
// the old ranges (Tcb::frto_sacked_) so that in step 3 such a range, acknowledged again, is not taken for an
// original newly delivered. Two stacks through the in-memory link (tests/unit/tcp_pipe.hh); the peer is
// kosoku's own receiver, and one data segment is put on the wire again by the test (inject) at step 3.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernel-bypass/tcpip/tcb.hh"
#include "tests/unit/tcp_pipe.hh"

namespace kosoku::tcpip {
namespace {

using testing::Link;
using testing::Sink;
using testing::Source;
using testing::tcb;

constexpr uint32_t kMss = 1460;                         // 1500-byte MTU, no timestamp option
constexpr size_t kWarmUp = 40 * kMss;                   // slow start grows cwnd past 10 segments first
constexpr size_t kBurst = 60 * kMss;                    // the flight the losses hit
constexpr uint32_t kHoles[] = {0, 2, 4, 6, 8, 10};      // segments of the burst lost: six holes below p11
constexpr uint32_t kLate = 2;                           // the hole the "late original" variant delays

// What happens to the burst's segment p2, and which segment the test puts on the wire at step 3.
enum class Variant {
  kRealLoss,      // p2 is lost too; at step 3 the network delivers a second copy of p3 (received long ago)
  kLateOriginal,  // p2 is held in the network and delivered at step 3: an original arrives after the timeout
};

struct Outcome {
  bool exact = false;
  size_t sacked_ranges_at_rto = 0;   // the sender's scoreboard when the timer fired
  bool recovery_at_rto = true;       // fast recovery running then (F-RTO would not run)
  bool p3_known_at_step3 = true;     // p3 in the scoreboard after step 2 (re-reported since the timeout)
  bool injected = false;
  uint32_t una_at_inject = 0;        // SND.UNA (offset from the burst) when the segment went in
  uint32_t nxt_at_inject = 0;        // SND.NXT then: past step 2b's two new segments
  std::vector<uint32_t> after_inject;  // burst offsets of the data segments the sender sent after it
  uint32_t cwnd_at_next = 0, ssthresh_at_next = 0;  // when the first of them went out
  uint32_t flight_at_rto = 0;        // SND.NXT - SND.UNA when the timer fired
  TcpStats sender;
};

// Warm-up, then the burst with kHoles lost (p2 held instead in kLateOriginal). Side 1's ACKs of the burst
// reach the sender only up to the second duplicate ACK (SACKing p1, then p3 and p1) until the timer fires:
// two SACKed segments stay below RFC 6675's DupThresh (TcpConfig::rack off), so no fast recovery runs and the
// timeout gets F-RTO. (With RACK the same state needs ACK delays that put RACK's loss time past the RTO.)
// The timeout resends p0; its ACK (SND.UNA p2) re-reports the four most recently reported of the five ranges
// above p2 (p11-, p9, p7, p5), not p3; step 2b sends two new segments; then the test injects one segment.
Outcome run(Variant v) {
  TcpConfig c;
  c.timestamps = false;
  c.sack = true;
  c.rack = false;
  c.tail_loss_probe = false;  // the timeout, not a probe, answers the silence
  c.rto_min_ms = 30;          // the 2 ms RTT gives RTO = rto_min
  c.delayed_ack_ms = 10;
  Link link(c);
  Sink sink;
  Source source;
  Outcome o;
  net::Stream* s = testing::connect_kept_open(link, sink, source, 80);
  EXPECT_NE(s, nullptr);
  if (s == nullptr) return o;
  Tcb& t = tcb(s);
  std::string data = testing::pattern_bytes(kWarmUp + kBurst, 5);
  s->write(std::string_view(data).substr(0, kWarmUp));
  s->flush();
  EXPECT_TRUE(link.run_until([&] {
    sink.drain();
    return sink.received.size() == kWarmUp && t.send_buffered() == 0;
  }, 1000));
  const SeqNum b0 = t.snd_nxt();
  EXPECT_GE(t.cwnd(), 14 * kMss);  // room for the six holes and five ranges above them

  struct Held {
    TcpHeader header;
    TcpOptions options;
    std::string payload;
  } held;  // the segment the test puts on the wire at step 3
  int dup_acks = 0;
  link.tap = [&](int from, const TcpSegment& seg) {
    const TcpStats& st = link.tcp(0).stats();
    if (from == 1) {  // pre-timeout: the first two duplicate ACKs of the burst only
      if (st.rto_expired > 0 || seg.header.ack != b0) return true;
      return ++dup_acks <= 2;
    }
    if (seg.payload.empty()) return true;
    uint32_t off = seg.header.seq - b0;
    if (o.injected) {
      if (o.after_inject.empty()) {
        o.cwnd_at_next = t.cwnd();
        o.ssthresh_at_next = t.cc().ssthresh();
      }
      o.after_inject.push_back(off);
    }
    if (st.rto_expired > 0 || off % kMss != 0 || off >= kBurst) return true;
    uint32_t i = off / kMss;
    bool keep = (v == Variant::kRealLoss && i == 3) || (v == Variant::kLateOriginal && i == kLate);
    if (keep) {
      held.header = seg.header;
      held.options = seg.options;
      held.payload.assign(reinterpret_cast<const char*>(seg.payload.data()), seg.payload.size());
    }
    for (uint32_t h : kHoles) {
      if (i == h) return false;  // lost (p2 of kLateOriginal: held, sent again at step 3)
    }
    return true;
  };
  s->write(std::string_view(data).substr(kWarmUp));
  s->flush();
  link.run_until([&] {
    const TcpStats& st = link.tcp(0).stats();
    if (st.rto_expired == 0) {
      o.sacked_ranges_at_rto = t.scoreboard().ranges();
      o.recovery_at_rto = t.in_recovery();
      o.flight_at_rto = t.snd_nxt() - t.snd_una();
    } else if (!o.injected && t.snd_una() - b0 >= static_cast<int32_t>(2 * kMss)) {  // step 2's ACK is in
      o.p3_known_at_step3 = t.scoreboard().sacked(b0 + 3 * kMss);
      o.una_at_inject = t.snd_una() - b0;
      o.nxt_at_inject = t.snd_nxt() - b0;
      o.injected = true;
      link.inject(0, held.header, held.options,
                  {reinterpret_cast<const uint8_t*>(held.payload.data()), held.payload.size()});
    }
    sink.drain();
    return sink.received.size() == data.size() && t.send_buffered() == 0;
  }, 10'000);
  o.exact = sink.received == data;
  o.sender = link.tcp(0).stats();
  return o;
}

// The scenario the fix is about, as set up (two ranges SACKed before the timeout, no fast recovery, p3 not
// re-reported by step 2's ACK: five ranges above SND.UNA, four blocks), and F-RTO's verdict on it: `spurious`
// timeouts undone (0 or 1), and the first data segment sent after the injection at offset `next`.
void expect_episode(const Outcome& o, uint64_t spurious, uint32_t next) {
  EXPECT_TRUE(o.exact);
  EXPECT_EQ(o.sacked_ranges_at_rto, 2u);  // p1 and p3
  EXPECT_FALSE(o.recovery_at_rto);
  ASSERT_TRUE(o.injected);
  EXPECT_EQ(o.una_at_inject, 2 * kMss);  // step 2: the ACK of the timeout's p0 (p1 held by the peer)
  EXPECT_FALSE(o.p3_known_at_step3);
  EXPECT_EQ(o.sender.rto_expired, 1u);
  EXPECT_EQ(o.sender.spurious_rtos, spurious);
  EXPECT_EQ(o.sender.frto_spurious_rtos, spurious);
  ASSERT_FALSE(o.after_inject.empty());
  EXPECT_EQ(o.after_inject[0], next);
}

// Six segments really lost. At step 3 the peer receives p3 a second time (a duplicate the network made) and
// answers at once with a duplicate ACK: a D-SACK of p3, the range holding it (p3, SACKed before the timeout
// and not since), then its recent blocks, none above "recover". Nothing it acknowledges was unknown before
// the timeout: a duplicate ACK, step 3a (real): cwnd = 3·SMSS and the go-back resumes at SND.UNA (p2).
// Checked without Tcb::frto_sacked_ (the scoreboard's pre-timeout ranges forgotten): p3 looked newly SACKed,
// the timeout was undone (spurious_rtos 1) and the holes were left to a fast recovery that the ACK of step
// 2b's first new segment started one ACK later (sack_recoveries 1).
TEST(TcpFrtoScoreboard, RangeSackedBeforeTheTimeoutIsNoSpuriousEvidence) {
  Outcome o = run(Variant::kRealLoss);
  expect_episode(o, 0, 2 * kMss);  // the go-back at SND.UNA, not new data
  EXPECT_GE(o.sender.dsacks_in, 1u);
  EXPECT_EQ(o.cwnd_at_next, 3 * kMss);             // RFC 5682 step 3a
  EXPECT_LT(o.ssthresh_at_next, o.flight_at_rto);  // the timeout's reduction stands
  EXPECT_EQ(o.sender.sack_recoveries, 0u);         // the go-back repairs the holes
}

// The same losses, but p2 was only late: delivered at step 3, it moves the peer's cumulative ACK from p2 to
// p4 (p3 was held). p2 was never retransmitted nor SACKed before the timeout — an original the timeout did
// not need to resend — so step 3b declares the timeout spurious and undoes it; the go-back does not resume.
// p3, swallowed by the same ACK, is no evidence; a coarser rule, "only octets above the highest one SACKed
// before the timeout", misses p2 below p3 and calls this timeout real (checked by hand).
TEST(TcpFrtoScoreboard, LateOriginalBelowAnOldRangeIsStillSpurious) {
  Outcome o = run(Variant::kLateOriginal);
  expect_episode(o, 1, o.nxt_at_inject);  // new data after step 2b's, not the go-back at p4
  EXPECT_GE(o.ssthresh_at_next, o.flight_at_rto);  // RFC 4015: pipe_prev = max(FlightSize, ssthresh)
}

}  // namespace
}  // namespace kosoku::tcpip
