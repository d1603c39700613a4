// Tail Loss Probe (RFC 8985 §7) in kosoku's TCP: two stacks through the in-memory link (tests/unit/tcp_pipe.hh,
// 1 ms one-way, so SRTT ≈ 2 ms and PTO = 2·SRTT ≈ 4 ms), tail losses scripted with the link's tap, and
// random loss with a fixed seed compared with the probe turned off (TcpConfig::tail_loss_probe).
#include <gtest/gtest.h>

#include <cstdio>

#include "kernel-bypass/tcpip/tcb.hh"
#include "tests/unit/tcp_pipe.hh"

namespace kosoku::tcpip {
namespace {

using testing::Link, testing::Sink, testing::Source, testing::pattern_bytes;
using namespace tcp_flag;

constexpr uint16_t kPort = 80;

using testing::tcb;

TcpConfig conf(bool sack, bool tlp, bool rack = true) {
  TcpConfig c;
  c.sack = sack;
  c.tail_loss_probe = tlp;
  c.rack = rack;
  return c;
}

struct TailLoss {
  bool exact = false;
  uint64_t ms = 0;  // from the write to the last byte delivered
  uint64_t rto = 0, probes = 0, sack_recoveries = 0;
  unsigned dropped = 0;
};

// A kept-open connection writes `size` bytes at once; the first transmissions of the last `tail` data segments
// of that burst (the PSH segment and the ones just before it) are dropped.
TailLoss tail_loss(TcpConfig c, size_t size, unsigned tail) {
  Link link(c);
  Sink sink;
  Source source;
  net::Stream* s = testing::connect_kept_open(link, sink, source, kPort);
  EXPECT_NE(s, nullptr);
  TailLoss r;
  if (s == nullptr) return r;
  std::string data = pattern_bytes(size, 3);
  SeqNum end = tcb(s).snd_nxt() + static_cast<uint32_t>(size);
  uint16_t mss = tcb(s).mss();
  bool seen[64] = {};
  link.tap = [&](int from, const TcpSegment& seg) {
    if (from != 0 || seg.payload.empty()) return true;
    SeqNum seg_end = seg.header.seq + static_cast<uint32_t>(seg.payload.size());
    uint32_t from_end = end - seg_end;  // octets after this segment
    unsigned index = (from_end + mss - 1) / mss;  // 0: the last segment of the burst
    if (index >= tail || index >= 64 || seen[index]) return true;
    seen[index] = true;
    ++r.dropped;
    return false;
  };
  uint64_t start = link.clock().ms;
  s->write(data);
  s->flush();
  link.run_until([&] { return sink.received.size() >= size; }, 10'000);
  r.ms = link.clock().ms - start;
  r.exact = sink.received == data;
  const TcpStats& st = link.tcp(0).stats();
  r.rto = st.rto_expired;
  r.probes = st.tlp_probes;
  r.sack_recoveries = st.sack_recoveries;
  return r;
}

TEST(TcpTlp, DroppedTailSegmentIsRecoveredByAProbeNotAnRto) {
  TailLoss r = tail_loss(conf(true, true), 8 * 1000, 1);
  std::printf("tail 1 with TLP: %llu ms, probes %llu, RTOs %llu\n", (unsigned long long)r.ms,
              (unsigned long long)r.probes, (unsigned long long)r.rto);
  EXPECT_EQ(r.dropped, 1u);
  EXPECT_TRUE(r.exact);
  EXPECT_EQ(r.rto, 0u);
  EXPECT_EQ(r.probes, 1u);
  // PTO = max(2·SRTT, 2 ms) after the last ACK, then one RTT: far below rto_min_ms (200 ms).
  EXPECT_LT(r.ms, 40u);
  // The same loss without the probe waits for the RTO.
  TailLoss off = tail_loss(conf(true, false), 8 * 1000, 1);
  EXPECT_TRUE(off.exact);
  EXPECT_EQ(off.probes, 0u);
  EXPECT_GE(off.rto, 1u);
  EXPECT_GE(off.ms, 200u);
}

TEST(TcpTlp, ProbeSackStartsRecoveryForSeveralTailLosses) {
  // The last three segments are lost: the probe (a retransmission of the last one) is SACKed, which shows
  // the two below it lost; RFC 6675 recovery repairs them without an RTO.
  TailLoss r = tail_loss(conf(true, true), 10 * 1000, 3);
  std::printf("tail 3 with TLP: %llu ms, probes %llu, RTOs %llu, recoveries %llu\n", (unsigned long long)r.ms,
              (unsigned long long)r.probes, (unsigned long long)r.rto, (unsigned long long)r.sack_recoveries);
  EXPECT_EQ(r.dropped, 3u);
  EXPECT_TRUE(r.exact);
  EXPECT_EQ(r.rto, 0u);
  EXPECT_EQ(r.probes, 1u);
  EXPECT_EQ(r.sack_recoveries, 1u);
  EXPECT_LT(r.ms, 60u);
}

TEST(TcpTlp, WholeFlightLostIsProbedOnce) {
  // Every segment of the burst is lost: one probe, its ACK (nothing else arrived) shows the rest lost.
  TailLoss r = tail_loss(conf(true, true), 4 * 1000, 8);
  EXPECT_TRUE(r.exact);
  EXPECT_EQ(r.probes, 1u);
  EXPECT_EQ(r.rto, 0u);
  EXPECT_LT(r.ms, 60u);
}

TEST(TcpTlp, NoProbeWithoutSack) {
  TailLoss r = tail_loss(conf(false, true), 8 * 1000, 1);
  EXPECT_TRUE(r.exact);
  EXPECT_EQ(r.probes, 0u);
  EXPECT_GE(r.rto, 1u);  // NewReno: only the RTO sees a tail loss
}

TEST(TcpTlp, NoProbeWithoutLoss) {
  TailLoss r = tail_loss(conf(true, true), 64 * 1000, 0);
  EXPECT_TRUE(r.exact);
  EXPECT_EQ(r.probes, 0u);  // every ACK re-arms the PTO; the last one cancels it
  EXPECT_EQ(r.rto, 0u);
}

struct Transfer {
  bool done = false, exact = false;
  uint64_t ms = 0, rto = 0, probes = 0;
};

Transfer random_loss(bool tlp, double p, uint32_t seed, size_t size) {
  TcpConfig c = conf(true, tlp, /*rack=*/false);
  c.prr = false;  // RFC 6675's cwnd = ssthresh and Reno, as when this was measured (TcpPrr.* compares PRR,
  c.congestion_control = CongestionAlgorithm::kReno;  // TcpCubic.* CUBIC; with CUBIC no tail is lost here)
  Link link(c);
  link.set_loss(p, seed);
  Sink sink;
  Source source;
  source.data = pattern_bytes(size, 11);
  EXPECT_EQ(link.tcp(1).listen_port(kPort, 16, sink), 0);
  std::string err;
  EXPECT_NE(link.tcp(0).connect_from(0, link.addr(1), kPort, source, &err), nullptr) << err;
  uint64_t start = link.clock().ms;
  Transfer t;
  t.done = link.run_until([&] { return sink.closed && source.closed; }, 600'000);
  t.ms = link.clock().ms - start;
  t.exact = sink.received == source.data;
  t.rto = link.tcp(0).stats().rto_expired;
  t.probes = link.tcp(0).stats().tlp_probes;
  return t;
}

TEST(TcpTlp, RandomLossCompletesFasterWithProbes) {
  // 512 KiB both ways lossy at 5 %, 30 fixed seeds: the probe replaces some tail-loss RTOs. RFC 6675's DupThresh
  // loss marking (RACK off), as when this was measured; TcpRack.RandomLoss* compares RACK. Seeds differ a lot
  // (a probe can also go into a window that then loses more), so the sums are what is asserted.
  uint64_t with_ms = 0, without_ms = 0, with_rto = 0, without_rto = 0, probes = 0;
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    Transfer with = random_loss(true, 0.05, seed, 512 * 1024);
    Transfer without = random_loss(false, 0.05, seed, 512 * 1024);
    ASSERT_TRUE(with.done && without.done) << seed;
    EXPECT_TRUE(with.exact) << seed;
    EXPECT_TRUE(without.exact) << seed;
    with_ms += with.ms;
    without_ms += without.ms;
    with_rto += with.rto;
    without_rto += without.rto;
    probes += with.probes;
  }
  std::printf("30 seeds: TLP %llu ms (%llu RTOs, %llu probes); no TLP %llu ms (%llu RTOs)\n",
              (unsigned long long)with_ms, (unsigned long long)with_rto, (unsigned long long)probes,
              (unsigned long long)without_ms, (unsigned long long)without_rto);
  // Measured over 7 runs (ISNs and timestamp clocks are random per run, RFC 6528, so the figures move a little):
  // 15,120-16,259 ms, 26-32 RTOs, 9-12 probes with the probe; 16,554-17,854 ms, 31-34 RTOs without — the
  // probe saves 2-6 RTOs and 0.8-2.0 s. (Seeds 42, 7 and 1234 alone gave 1,889 vs 2,289 ms before new data
  // went out by pipe ahead of recovery (tcb.cc output()); since then 1,006 vs 1,459 ms, RTO counts equal.)
  EXPECT_GE(probes, 5u);
  EXPECT_LE(with_rto, without_rto);
  EXPECT_LT(with_ms, without_ms);
}

}  // namespace
}  // namespace kosoku::tcpip
