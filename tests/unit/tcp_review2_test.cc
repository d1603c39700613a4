// Review of the cwnd - pipe send window before recovery (Tcb::output, RFC 6675 §5 step 2) and F-RTO's copy of
// the pre-timeout scoreboard (tcb_frto.cc). Two stacks through the in-memory link (tests/unit/tcp_pipe.hh: 1 ms
// one-way, a simulated clock in 1 ms steps).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "kernel-bypass/tcpip/tcb.hh"
#include "tests/unit/tcp_pipe.hh"

namespace kosoku::tcpip {
namespace {

using testing::Link, testing::Sink, testing::Source, testing::pattern_bytes, testing::tcb;

constexpr uint16_t kPort = 80;

// Reno without PRR sets cwnd = ssthresh = max(FlightSize / 2, 2 SMSS) when SACK recovery starts (RFC 6675 §5
// step 4.2). Before it the cwnd - pipe window lets FlightSize grow past cwnd by the SACKed octets while a
// reordered segment is late; RFC 5681 §3.2 step 2 says data sent beyond cwnd that way (limited transmit) MUST NOT
// count in FlightSize for ssthresh. A recovery must never end up with a larger window than it started from.
TEST(TcpReview2, RenoRecoveryNeverRaisesTheWindow) {
  TcpConfig c;
  c.congestion_control = CongestionAlgorithm::kReno;
  c.prr = false;
  Link link{c};
  // The reordering of TcpSackPipeSend.NewDataFlowsPastCwndWhileAReorderedSegmentIsLate: every 60th data segment
  // 6 ms late, so RACK (whose reo_wnd the D-SACKs widen) waits while SACKs clock out data past cwnd.
  for (int nth = 60; nth <= 600; nth += 60) {
    link.add_fault({.nth = nth, .action = testing::Action::kDelay, .delay_ms = 6});
  }
  Sink sink;
  ASSERT_EQ(link.tcp(1).listen_port(kPort, 16, sink), 0);
  Source source;
  source.data = pattern_bytes(1 << 20, 5);

  net::Stream* stream = nullptr;
  bool was_in = false;
  uint32_t cwnd_before = 0, flight_before = 0;
  unsigned episodes = 0, raised = 0, above_half = 0;
  double worst = 0;
  link.tap = [&](int from, const TcpSegment&) {
    if (from != 0 || stream == nullptr) return true;
    const Tcb& t = tcb(stream);
    bool in = t.in_fast_recovery();
    if (in && !was_in) {  // the first segment of a recovery: cwnd = ssthresh (no PRR)
      ++episodes;
      const double ratio = static_cast<double>(t.cwnd()) / cwnd_before;
      worst = std::max(worst, ratio);
      if (t.cwnd() > cwnd_before) ++raised;
      if (t.cwnd() > std::max(cwnd_before / 2, 2u * t.mss()) + t.mss()) ++above_half;
      std::printf("recovery %u: cwnd before %u (flight %u), after %u (x%.2f)\n", episodes, cwnd_before,
                  flight_before, t.cwnd(), ratio);
    }
    if (!in) {
      cwnd_before = t.cwnd();
      flight_before = t.snd_nxt() - t.snd_una();
    }
    was_in = in;
    return true;
  };
  std::string err;
  stream = link.tcp(0).connect_from(0, link.addr(1), kPort, source, &err);
  ASSERT_NE(stream, nullptr) << err;
  ASSERT_TRUE(link.run_until([&] { return sink.closed && source.closed; }, 600'000));
  EXPECT_EQ(sink.received, source.data);
  std::printf("%u recoveries, %u raised cwnd, %u above half of it, worst x%.2f\n", episodes, raised, above_half,
              worst);
  EXPECT_GT(episodes, 0u);
  EXPECT_EQ(raised, 0u);
  EXPECT_EQ(above_half, 0u);
}

// RACK off (RFC 6675 DupThresh): F-RTO undoes a timeout while ranges SACKed since it put DupThresh segments above
// SND.UNA, so IsLost(SND.UNA) holds but no fast recovery runs until the next ACK (the undo comes after that ACK's
// sack_maybe_enter_recovery). Until then the send window must stay cwnd - FlightSize, as with RACK's marks
// (50a7f56). Before the fix (tcb.cc output() checked RACK's marks only) cwnd - pipe left the lost holes out of
// the pipe and the ACK that undid the timeout sent the rest of the send buffer at once, before the holes were
// retransmitted: 23 new segments past SND.UNA + cwnd + 2 SMSS, up to 36,500 bytes past SND.UNA + cwnd.
// The losses of TcpFrtoScoreboard.LateOriginalBelowAnOldRangeIsStillSpurious: six holes (p0, p2 held, p4 ... p10),
// the peer's ACKs lost after two duplicates until the timer fires; p2 delivered at step 3 (an original: spurious).
TEST(TcpReview2, NoPipeWindowWhileDupThreshMarksALossAfterAnFrtoUndo) {
  TcpConfig c;
  c.timestamps = false;  // F-RTO, not Eifel
  c.rack = false;
  c.tail_loss_probe = false;
  c.rto_min_ms = 30;
  c.delayed_ack_ms = 10;
  Link link(c);
  Sink sink;
  Source source;
  net::Stream* s = testing::connect_kept_open(link, sink, source, kPort);
  ASSERT_NE(s, nullptr);
  Tcb& t = tcb(s);
  const uint32_t mss = t.mss();
  const size_t warm = 40 * mss, burst = 60 * mss;
  std::string data = pattern_bytes(warm + burst, 9);
  s->write(std::string_view(data).substr(0, warm));
  s->flush();
  ASSERT_TRUE(link.run_until([&] {
    sink.drain();
    return t.send_buffered() == 0;
  }, 1000));
  const SeqNum b0 = t.snd_nxt();
  const TcpStats& st = link.tcp(0).stats();
  std::vector<uint8_t> p2;
  TcpHeader p2_header;
  TcpOptions p2_options;
  int dups = 0;
  bool injected = false;
  unsigned early = 0;  // new segments past SND.UNA + cwnd + 2 SMSS outside recovery while SND.UNA is lost
  uint32_t most_past = 0;
  link.tap = [&](int from, const TcpSegment& seg) {
    if (from == 1) return st.rto_expired > 0 || seg.header.ack != b0 || ++dups <= 2;
    if (seg.payload.empty()) return true;
    const uint32_t off = seg.header.seq - b0, end = off + static_cast<uint32_t>(seg.payload.size());
    if (injected && !t.in_recovery()) {
      const SackScoreboard& sb = t.scoreboard();
      const uint32_t past = (b0 + end) - t.snd_una();
      if (!sb.empty() && sb.lost_boundary(t.snd_una(), mss) > t.snd_una() && past > t.cwnd() + 2 * mss) {
        ++early;
        most_past = std::max(most_past, past - t.cwnd());
      }
    }
    if (st.rto_expired > 0 || off >= burst || off % mss != 0) return true;
    const uint32_t i = off / mss;
    if (i == 2) {
      p2.assign(seg.payload.begin(), seg.payload.end());
      p2_header = seg.header;
      p2_options = seg.options;
    }
    return !(i <= 10 && i % 2 == 0);
  };
  s->write(std::string_view(data).substr(warm));
  s->flush();
  ASSERT_TRUE(link.run_until([&] {
    if (!injected && st.rto_expired > 0 && t.snd_una() - b0 >= static_cast<int32_t>(2 * mss)) {  // step 2 done
      injected = true;
      link.inject(0, p2_header, p2_options, p2);
    }
    sink.drain();
    return sink.received.size() == data.size() && t.send_buffered() == 0;
  }, 10'000));
  EXPECT_EQ(sink.received, data);
  std::printf("after the undo: %u new segments past SND.UNA + cwnd + 2 SMSS while SND.UNA was lost (at most %u "
              "bytes past SND.UNA + cwnd); spurious %llu, recoveries %llu\n", early, most_past,
              (unsigned long long)st.frto_spurious_rtos, (unsigned long long)st.sack_recoveries);
  EXPECT_EQ(st.rto_expired, 1u);
  EXPECT_EQ(st.frto_spurious_rtos, 1u);  // the scenario: F-RTO undid the timeout
  EXPECT_GE(st.sack_recoveries, 1u);     // the holes are then repaired by fast recovery
  EXPECT_EQ(early, 0u);
}

}  // namespace
}  // namespace kosoku::tcpip
