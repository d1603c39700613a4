// Review of the cwnd - pipe send window before recovery (Tcb::output, RFC 6675 §5 step 2) and F-RTO's copy of
// the pre-timeout scoreboard (tcb_frto.cc). Two stacks through the in-memory link (tests/unit/tcp_pipe.hh: 1 ms
// one-way, a simulated clock in 1 ms steps).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

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

}  // namespace
}  // namespace kosoku::tcpip
