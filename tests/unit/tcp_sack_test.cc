// SACK (RFC 2018) and RFC 6675 loss recovery in kosoku's TCP: the scoreboard's arithmetic on its own, then
// two stacks through the in-memory link (tests/unit/tcp_pipe.hh) with scripted losses, each scenario run
// with and without SACK and compared by the stacks' own counters and the segments on the wire.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "kernel-bypass/tcpip/sack_scoreboard.hh"
#include "kernel-bypass/tcpip/tcb.hh"
#include "tests/unit/tcp_pipe.hh"

namespace kosoku::tcpip {
namespace {

using testing::Link, testing::Sink, testing::Source, testing::pattern_bytes;
using namespace tcp_flag;

constexpr uint16_t kPort = 80;

using testing::tcb;
SackBlock blk(uint32_t l, uint32_t r) { return SackBlock{SeqNum{l}, SeqNum{r}}; }

// ---------------------------------------------------------------- scoreboard

TEST(SackScoreboard, UpdateMergesAndIgnoresInvalidBlocks) {
  SackScoreboard sb;
  SeqNum una{1000}, max{10000};
  EXPECT_EQ(sb.heap_bytes(), 0u);
  SackBlock b1[] = {blk(3000, 4000)};
  EXPECT_EQ(sb.update(una, max, b1), 1000u);
  EXPECT_EQ(sb.update(una, max, b1), 0u);  // nothing new: not a duplicate ACK by RFC 6675 §2
  SackBlock b2[] = {blk(5000, 6000), blk(4000, 4500)};  // the second touches the first range: merged
  EXPECT_EQ(sb.update(una, max, b2), 1500u);
  EXPECT_EQ(sb.ranges(), 2u);
  EXPECT_TRUE(sb.sacked(SeqNum{3000}));
  EXPECT_TRUE(sb.sacked(SeqNum{4499}));
  EXPECT_FALSE(sb.sacked(SeqNum{4500}));
  EXPECT_EQ(sb.sacked_end(SeqNum{3500}).v, 4500u);
  EXPECT_EQ(sb.sacked_end(SeqNum{4700}).v, 4700u);
  // Below SND.UNA (D-SACK), beyond SND.MAX, empty and inverted blocks change nothing.
  SackBlock bad[] = {blk(500, 1500), blk(9000, 10001), blk(7000, 7000), blk(8000, 7000)};
  EXPECT_EQ(sb.update(una, max, bad), 0u);
  EXPECT_EQ(sb.ranges(), 2u);
  // Edges more than 2^31 apart compare "backwards" modulo 2^32; offsets from SND.UNA reject them (found by
  // the tcp_segment fuzz target: corpus sack_block_beyond_2g).
  SackBlock far[] = {blk(0x4ff0e26c, 0x89fe097f)};
  EXPECT_EQ(sb.update(una, max, far), 0u);
  // One block spanning both ranges and the gap joins them.
  SackBlock span[] = {blk(3500, 5500)};
  EXPECT_EQ(sb.update(una, max, span), 500u);
  EXPECT_EQ(sb.ranges(), 1u);
  EXPECT_EQ(sb.sacked_bytes(), 3000u);
  EXPECT_EQ(sb.highest_sacked().v, 6000u);
  sb.advance(SeqNum{3200});  // cumulative ACK inside the range: its lower part goes
  EXPECT_EQ(sb.sacked_bytes(), 2800u);
  sb.advance(SeqNum{7000});
  EXPECT_TRUE(sb.empty());
}

TEST(SackScoreboard, SequenceWrapAround) {
  SackScoreboard sb;
  SeqNum una{0xfffff000u}, max{0x00002000u};
  SackBlock b[] = {blk(0xfffffc00u, 0x00000400u)};
  EXPECT_EQ(sb.update(una, max, b), 0x800u);
  EXPECT_TRUE(sb.sacked(SeqNum{0xffffffffu}));
  EXPECT_TRUE(sb.sacked(SeqNum{0}));
  EXPECT_FALSE(sb.sacked(SeqNum{0x400u}));
  EXPECT_EQ(sb.pipe(una, max, una, 4096), (0x3000u - 0x800u));  // one SACKed segment: nothing lost
}

TEST(SackScoreboard, IsLostPipeAndHoles) {
  // 10 segments of 1000 octets from 0; the peer SACKed segments 2, 4, 6 and 7 (0-based).
  SackScoreboard sb;
  SeqNum una{0}, max{10000};
  const uint32_t smss = 1000;
  SackBlock b[] = {blk(2000, 3000), blk(4000, 5000), blk(6000, 8000)};
  sb.update(una, max, b);
  // DupThresh (3) SACKed segments lie above everything below 4000: segments 0, 1 and 3 are lost; 5 is not
  // (only 2 SACKed segments = 2000 octets, not more than 2·SMSS, above it), nor are 8 and 9.
  EXPECT_EQ(sb.lost_boundary(una, smss).v, 4000u);
  EXPECT_TRUE(sb.is_lost(SeqNum{0}, una, smss));
  EXPECT_TRUE(sb.is_lost(SeqNum{3500}, una, smss));
  EXPECT_FALSE(sb.is_lost(SeqNum{2500}, una, smss));  // SACKed
  EXPECT_FALSE(sb.is_lost(SeqNum{5000}, una, smss));
  // pipe: not lost and not SACKed = segment 5, 8, 9 = 3000; nothing retransmitted yet.
  EXPECT_EQ(sb.pipe(una, max, una, smss), 3000u);
  // After retransmitting segments 0 and 1 (HighRxt = 2000) they count again.
  EXPECT_EQ(sb.pipe(una, max, SeqNum{2000}, smss), 5000u);
  SackBlock h;
  ASSERT_TRUE(sb.first_hole(una, sb.lost_boundary(una, smss), &h));  // NextSeg rule 1
  EXPECT_EQ(h, blk(0, 2000));
  ASSERT_TRUE(sb.first_hole(SeqNum{2000}, sb.lost_boundary(una, smss), &h));
  EXPECT_EQ(h, blk(3000, 4000));
  EXPECT_FALSE(sb.first_hole(SeqNum{4000}, sb.lost_boundary(una, smss), &h));
  ASSERT_TRUE(sb.first_hole(SeqNum{4000}, sb.highest_sacked(), &h));  // rule 3
  EXPECT_EQ(h, blk(5000, 6000));
  EXPECT_EQ(sb.highest_unsacked_end(una, max).v, 10000u);  // rule 4: the tail is unSACKed
  SackBlock tail[] = {blk(8000, 10000)};
  sb.update(una, max, tail);
  EXPECT_EQ(sb.highest_unsacked_end(una, max).v, 6000u);
  // More than (DupThresh - 1)·SMSS octets in one range above also makes the octets below it lost.
  SackScoreboard one;
  SackBlock big[] = {blk(1000, 3001)};
  one.update(una, max, big);
  EXPECT_EQ(one.lost_boundary(una, smss).v, 1000u);
  one.clear();
  EXPECT_TRUE(one.empty());
}

TEST(SackScoreboard, BoundedNumberOfRanges) {
  SackScoreboard sb;
  SeqNum una{0}, max{1'000'000};
  for (uint32_t i = 0; i < 2 * SackScoreboard::kMaxRanges; ++i) {
    SackBlock b[] = {blk(1000 + 2000 * i, 2000 + 2000 * i)};
    sb.update(una, max, b);
  }
  EXPECT_EQ(sb.ranges(), SackScoreboard::kMaxRanges);
  EXPECT_LE(sb.heap_bytes(), 2 * SackScoreboard::kMaxRanges * sizeof(SackBlock));
}

// ---------------------------------------------------------------- two stacks

TcpConfig with_sack(bool on) {
  TcpConfig c;
  c.sack = on;
  return c;
}

// Listens on side 1 and connects side 0, which sends `size` pattern bytes and closes. Returns the client.
net::Stream* start_transfer(Link& link, Sink& sink, Source& source, size_t size, uint32_t seed) {
  source.data = pattern_bytes(size, seed);
  EXPECT_EQ(link.tcp(1).listen_port(kPort, 16, sink), 0);
  std::string err;
  net::Stream* c = link.tcp(0).connect_from(0, link.addr(1), kPort, source, &err);
  EXPECT_NE(c, nullptr) << err;
  return c;
}

struct Outcome {
  bool done = false, exact = false;
  uint64_t wire_rtx = 0;  // retransmitted data segments seen on the wire
  uint64_t retransmits = 0, fast_retransmits = 0, rto = 0, sack_recoveries = 0;
  unsigned rounds = 0;  // retransmission rounds: a new one starts once the previous round was acknowledged
  uint64_t ms = 0;      // simulated time from connect to both sides closed
};

// Client (side 0) sends `size` bytes and closes. The first transmissions of the client's new-data segments
// whose 1-based index is in `lost` are dropped (retransmissions never are). A retransmission is a data
// segment below the highest sequence sent so far; it starts a new round when an ACK from the server has
// covered the first retransmission of the current round (one RTT later) — NewReno repairs one hole per
// round, RFC 6675 all holes the SACK blocks show.
// Reno windows (as measured; CUBIC's growth after the recovery hides the rounds in the total time).
Outcome transfer(bool sack, size_t size, const std::set<int>& lost) {
  TcpConfig c = with_sack(sack);
  c.congestion_control = CongestionAlgorithm::kReno;
  Link link(c);
  int new_segments = 0;
  bool have_max = false;
  SeqNum highest;
  Outcome o;
  SeqNum round_seq;
  bool round_acked = false;
  link.tap = [&](int from, const TcpSegment& seg) {
    if (from == 1) {
      if (o.rounds > 0 && seg.header.has(kAck) && seg.header.ack > round_seq) round_acked = true;
      return true;
    }
    if (seg.payload.empty()) return true;
    SeqNum end = seg.header.seq + static_cast<uint32_t>(seg.payload.size());
    if (have_max && seg.header.seq < highest) {
      ++o.wire_rtx;
      if (o.rounds == 0 || round_acked) {
        ++o.rounds;
        round_seq = seg.header.seq;
        round_acked = false;
      }
      return true;
    }
    if (!have_max || end > highest) highest = end;
    have_max = true;
    return !lost.count(++new_segments);
  };
  Sink sink;
  Source source;
  EXPECT_NE(start_transfer(link, sink, source, size, 7), nullptr);
  uint64_t start = link.clock().ms;
  o.done = link.run_until([&] { return sink.closed && source.closed; }, 120'000);
  o.ms = link.clock().ms - start;
  o.exact = sink.received == source.data;
  const TcpStats& st = link.tcp(0).stats();
  o.retransmits = st.retransmits;
  o.fast_retransmits = st.fast_retransmits;
  o.rto = st.rto_expired;
  o.sack_recoveries = st.sack_recoveries;
  return o;
}

void print(const char* what, const Outcome& with, const Outcome& without) {
  std::printf("%s: SACK %llu retransmitted segments in %u rounds, %llu RTOs, %llu ms; NewReno %llu in %u rounds, "
              "%llu RTOs, %llu ms\n",
              what, (unsigned long long)with.wire_rtx, with.rounds, (unsigned long long)with.rto,
              (unsigned long long)with.ms, (unsigned long long)without.wire_rtx, without.rounds,
              (unsigned long long)without.rto, (unsigned long long)without.ms);
}

TEST(TcpSack, NegotiatedOnSynAndSynAckOnlyWhenBothOffer) {
  for (int mode = 0; mode < 4; ++mode) {
    bool client = mode & 1, server = mode & 2;
    Link link(with_sack(client), with_sack(server));
    bool syn_offer = false, synack_offer = false;
    link.tap = [&](int from, const TcpSegment& seg) {
      if (seg.header.has(kSyn) && !seg.header.has(kAck)) syn_offer = seg.options.sack_permitted;
      if (seg.header.has(kSyn) && seg.header.has(kAck)) synack_offer = seg.options.sack_permitted;
      if (!seg.header.has(kSyn)) {
        EXPECT_FALSE(seg.options.sack_permitted);  // RFC 2018 §2: SYN only
      }
      return true;
    };
    Sink sink;
    Source source;
    net::Stream* c = testing::connect_kept_open(link, sink, source, kPort);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(syn_offer, client) << mode;
    EXPECT_EQ(synack_offer, client && server) << mode;  // a listener answers SACK-permitted only if offered
    EXPECT_EQ(tcb(c).sack_permitted(), client && server) << mode;
    EXPECT_EQ(tcb(sink.stream).sack_permitted(), client && server) << mode;
  }
}

TEST(TcpSack, OutOfOrderArrivalsPutSackBlocksOnTheWireMostRecentFirst) {
  Link link;
  // Data segments 3 and 5 of the client are lost; everything else arrives in order.
  link.add_fault({.from = 0, .match = testing::Match::kData, .nth = 3, .action = testing::Action::kDrop});
  link.add_fault({.from = 0, .match = testing::Match::kData, .nth = 5, .action = testing::Action::kDrop});
  std::vector<std::pair<SeqNum, uint32_t>> data;  // every data segment the client put on the wire
  std::vector<TcpSegment> acks;                   // server ACKs carrying SACK blocks (options only kept)
  link.tap = [&](int from, const TcpSegment& seg) {
    if (from == 0 && !seg.payload.empty()) data.emplace_back(seg.header.seq, seg.payload.size());
    if (from == 1 && seg.options.sack_count > 0) {
      EXPECT_LE(seg.options.sack_count, 3);  // with timestamps at most 3 blocks fit (RFC 2018 §3)
      acks.push_back(TcpSegment{seg.header, seg.options, {}});
    }
    return true;
  };
  Sink sink;
  Source source;
  ASSERT_NE(start_transfer(link, sink, source, 64 * 1024, 3), nullptr);
  ASSERT_TRUE(link.run_until([&] { return sink.closed && source.closed; }));
  EXPECT_TRUE(sink.received == source.data);
  ASSERT_GE(data.size(), 6u);
  auto range = [&](size_t i) { return SackBlock{data[i].first, data[i].first + data[i].second}; };
  // The first SACK: segment 4 arrived while 3 was missing → ACK = start of 3, one block = segment 4.
  ASSERT_FALSE(acks.empty());
  EXPECT_EQ(acks[0].header.ack, data[2].first);
  ASSERT_EQ(acks[0].options.sack_count, 1);
  EXPECT_EQ(acks[0].options.sack[0], range(3));
  // Once segment 6 arrived (5 missing too): the block with 6 first (most recent), then segment 4's block.
  auto with6 = std::find_if(acks.begin(), acks.end(), [&](const TcpSegment& a) {
    return a.options.sack[0].left == data[5].first;
  });
  ASSERT_NE(with6, acks.end());
  EXPECT_EQ(with6->header.ack, data[2].first);
  ASSERT_EQ(with6->options.sack_count, 2);
  EXPECT_EQ(with6->options.sack[0], range(5));
  EXPECT_EQ(with6->options.sack[1], range(3));
  EXPECT_GE(link.tcp(1).stats().sack_blocks_out, 2u);
}

TEST(TcpSack, SeveralLossesInOneWindowRecoverInFewerRoundsWithoutRto) {
  // Four non-adjacent client segments lost in one window (the window is ~30 segments by then).
  std::set<int> lost = {50, 54, 58, 62};
  Outcome with = transfer(true, 512 * 1024, lost);
  Outcome without = transfer(false, 512 * 1024, lost);
  print("4 losses in one window, 512 KiB", with, without);
  RecordProperty("sack_rounds", static_cast<int>(with.rounds));
  RecordProperty("newreno_rounds", static_cast<int>(without.rounds));
  ASSERT_TRUE(with.done);
  ASSERT_TRUE(without.done);
  EXPECT_TRUE(with.exact);
  EXPECT_TRUE(without.exact);
  EXPECT_EQ(with.rto, 0u);
  EXPECT_EQ(with.sack_recoveries, 1u);  // one recovery, one window reduction
  EXPECT_EQ(with.wire_rtx, 4u);         // exactly the lost segments, nothing spurious
  EXPECT_EQ(with.retransmits, 4u);
  // The first hole goes at once; the others as soon as pipe drains below the halved cwnd (one RTT).
  EXPECT_LE(with.rounds, 2u);
  EXPECT_EQ(without.sack_recoveries, 0u);
  EXPECT_EQ(without.rounds, 4u);        // NewReno: one hole per RTT (partial ACKs)
  EXPECT_LE(with.wire_rtx, without.wire_rtx);
  EXPECT_LT(with.ms, without.ms);
}

TEST(TcpSack, LossesSpreadOverTheWindowsOfALongTransfer) {
  std::set<int> lost;
  for (int i = 40; i < 700; i += 37) lost.insert(i);
  // Then every third segment for 30 segments: once the first of them halves cwnd to a few segments, the
  // others fall into windows too small for three duplicate ACKs without limited transmit (RFC 3042).
  for (int i = 300; i < 330; i += 3) lost.insert(i);
  Outcome with = transfer(true, 1 << 20, lost);
  Outcome without = transfer(false, 1 << 20, lost);
  print("28 losses over 1 MiB", with, without);
  ASSERT_TRUE(with.done && without.done);
  EXPECT_TRUE(with.exact);
  EXPECT_TRUE(without.exact);
  EXPECT_EQ(with.wire_rtx, lost.size());  // no spurious retransmission
  EXPECT_LT(with.rto, without.rto);
  EXPECT_LT(with.rounds, without.rounds);
  EXPECT_LT(with.ms, without.ms);
}

TEST(TcpSack, LostRetransmissionEndsInRtoThatClearsTheScoreboard) {
  // The 30th data segment is lost, and so is its fast retransmission: with RFC 6675's DupThresh rule alone
  // (RACK off) only the RTO can repair it. TcpRack.LostRetransmissionIsResentWithoutAnRto has RACK's answer.
  TcpConfig dupthresh;
  dupthresh.rack = false;
  Link link(dupthresh);
  std::set<uint32_t> target;
  int data_count = 0, target_sent = 0;
  link.tap = [&](int from, const TcpSegment& seg) {
    if (from != 0 || seg.payload.empty()) return true;
    if (++data_count == 30) target.insert(seg.header.seq.v);
    if (target.count(seg.header.seq.v) && ++target_sent <= 2) return false;
    return true;
  };
  Sink sink;
  Source source;
  net::Stream* c = start_transfer(link, sink, source, 256 * 1024, 5);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(link.run_until([&] { return link.tcp(0).stats().sack_recoveries == 1; }, 5000));
  ASSERT_TRUE(link.run_until([&] { return !tcb(c).scoreboard().empty(); }, 5000));
  ASSERT_TRUE(link.run_until([&] { return link.tcp(0).stats().rto_expired == 1; }, 5000));
  EXPECT_TRUE(tcb(c).scoreboard().empty());  // RFC 2018 §8 / RFC 6675 §5.1
  EXPECT_FALSE(tcb(c).in_recovery());
  ASSERT_TRUE(link.run_until([&] { return sink.closed && source.closed; }));
  EXPECT_TRUE(sink.received == source.data);
  EXPECT_EQ(target_sent, 3);  // original, fast retransmission, RTO retransmission
  EXPECT_EQ(link.tcp(0).stats().rto_expired, 1u);
}

TEST(TcpSack, RenegingPeerClearsTheScoreboard) {
  // Six client segments; segments 3..5 are lost. A forged ACK from the server's address SACKs segments 3 and
  // 4, which the server never had; the server's real cumulative ACK then stops at segment 3, the start of
  // data it had SACKed: to the sender that is a receiver that dropped SACKed data (reneged, RFC 2018 §8).
  TcpConfig no_tlp;
  no_tlp.tail_loss_probe = false;  // the RTO path (TcpTlp.* cover the probe)
  no_tlp.rack = false;             // DupThresh: two SACKed segments start no recovery (RACK would, as they
                                   // arrive in 0 simulated µs; TcpRack.RenegingPeer... covers RACK)
  Link link(no_tlp);
  SeqNum lost_from;
  bool drop = false;
  link.tap = [&](int from, const TcpSegment& seg) {
    return !(drop && from == 0 && !seg.payload.empty() && seg.header.seq >= lost_from);
  };
  Sink sink;
  Source source;
  net::Stream* c = testing::connect_kept_open(link, sink, source, kPort);
  ASSERT_NE(c, nullptr);
  Tcb& t = tcb(c);
  SeqNum una = t.snd_una();
  uint32_t mss = t.mss();
  lost_from = una + 3 * mss;
  drop = true;
  std::string data = pattern_bytes(6 * mss, 9);
  c->write(data);
  c->flush();
  ASSERT_EQ(t.snd_nxt() - una, static_cast<int32_t>(6 * mss));
  TcpHeader h;
  h.src_port = kPort;
  h.dst_port = t.tuple().local_port;
  h.seq = t.rcv_nxt();
  h.ack = una;
  h.flags = kAck;
  h.window = 8192;
  TcpOptions o;
  o.sack_count = 1;
  o.sack[0] = SackBlock{una + 3 * mss, una + 5 * mss};
  link.inject(1, h, o, {});
  EXPECT_EQ(t.scoreboard().sacked_bytes(), 2 * mss);
  EXPECT_FALSE(t.in_recovery());  // 2 SACKed segments: below DupThresh
  ASSERT_TRUE(link.run_until([&] { return t.snd_una() == una + 3 * mss; }, 1000));
  EXPECT_EQ(link.tcp(0).stats().sack_reneging, 1u);
  EXPECT_TRUE(t.scoreboard().empty());
  // The data stays queued until cumulatively acknowledged: the retransmission timer resends it.
  drop = false;
  ASSERT_TRUE(link.run_until([&] { return t.snd_una() == t.snd_nxt(); }, 10'000));
  EXPECT_GE(link.tcp(0).stats().rto_expired, 1u);
  sink.drain();
  EXPECT_TRUE(sink.received == data);
}

TEST(TcpSack, RandomLossBothWaysByteExact) {
  TcpConfig c;
  Link link(c);
  link.set_loss(0.05, 42);
  Sink sink;
  Source source;
  ASSERT_NE(start_transfer(link, sink, source, 512 * 1024, 11), nullptr);
  ASSERT_TRUE(link.run_until([&] { return sink.closed && source.closed; }, 600'000));
  EXPECT_TRUE(sink.received == source.data);
  EXPECT_GE(link.tcp(0).stats().sack_recoveries, 1u);
}

}  // namespace
}  // namespace kosoku::tcpip
