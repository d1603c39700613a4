// Before loss recovery starts, SACKed octets have left the network: new data is clocked by cwnd − pipe, not
// cwnd − FlightSize (RFC 6675 §5 step 2; Linux counts tcp_packets_in_flight in every congestion state). Two
// stacks through the in-memory link (tests/unit/tcp_pipe.hh: 1 ms one-way, a simulated clock in 1 ms steps).
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

// Every 60th data segment is held back 6 ms (reordered behind the ones sent after it). While such a hole is
// open outside fast recovery (RACK waits out reo_wnd, which the D-SACKs of the first spurious retransmissions
// widen), the duplicate ACKs SACKing later segments release new data further than cwnd past SND.UNA. With
// FlightSize as the bound only RFC 3042 limited transmit could go past it, by two segments.
TEST(TcpSackPipeSend, NewDataFlowsPastCwndWhileAReorderedSegmentIsLate) {
  Link link{TcpConfig{}};
  for (int nth = 60; nth <= 600; nth += 60) {
    link.add_fault({.from = 0, .match = testing::Match::kData, .nth = nth, .action = testing::Action::kDelay,
                    .delay_ms = 6});
  }
  Sink sink;
  Source source;
  source.data = pattern_bytes(1 << 20, 5);
  ASSERT_EQ(link.tcp(1).listen_port(kPort, 16, sink), 0);

  // Side 0's new data segments sent outside fast recovery: how many reached further than cwnd + 2·SMSS past
  // SND.UNA, and the most octets past SND.UNA + cwnd, in SMSS.
  net::Stream* stream = nullptr;
  SeqNum snd_max{0};
  bool have_max = false;
  unsigned beyond = 0, outside = 0;
  double most = -1e9;
  link.tap = [&](int from, const TcpSegment& seg) {
    if (from != 0 || seg.payload.empty() || stream == nullptr) return true;
    const Tcb& t = tcb(stream);
    const SeqNum end = seg.header.seq + static_cast<uint32_t>(seg.payload.size());
    if (have_max && !(snd_max < end)) return true;  // a retransmission
    snd_max = end;
    have_max = true;
    if (t.in_fast_recovery()) return true;
    ++outside;
    const double past = static_cast<double>(end - t.snd_una()) - t.cwnd();
    most = std::max(most, past / t.mss());
    if (past > 2.0 * t.mss()) ++beyond;
    return true;
  };
  std::string err;
  stream = link.tcp(0).connect_from(0, link.addr(1), kPort, source, &err);
  ASSERT_NE(stream, nullptr) << err;
  ASSERT_TRUE(link.run_until([&] { return sink.closed && source.closed; }, 600'000));
  EXPECT_EQ(sink.received, source.data);
  const TcpStats& s = link.tcp(0).stats();
  std::printf("outside fast recovery: %u new segments, %u of them past SND.UNA + cwnd + 2 SMSS (at most %.1f SMSS "
              "past SND.UNA + cwnd); %llu retransmits, %llu D-SACKs, %llu undos, %llu RTOs\n",
              outside, beyond, most, (unsigned long long)s.retransmits, (unsigned long long)s.dsacks_in,
              (unsigned long long)(s.dsack_undos + s.eifel_undos), (unsigned long long)s.rto_expired);
  EXPECT_EQ(s.rto_expired, 0u);
  EXPECT_GT(beyond, 0u);
}

}  // namespace
}  // namespace kosoku::tcpip
