// D-SACK (RFC 2883 §4) for duplicates ABOVE RCV.NXT, in kosoku's TCP (Tcb::ooo_insert → Tcb::note_dsack,
// Tcb::sack_fill): a segment whose octets the out-of-order queue already holds is reported in the next ACK,
// sent at once, as the first SACK block, followed by the queued block holding it. Receiver tests forge the
// client's data segments into the server (Link::inject) and read the server's ACKs off the wire; the sender
// test runs two stacks through the in-memory link (tests/unit/tcp_pipe.hh).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "kernel-bypass/tcpip/rack.hh"
#include "kernel-bypass/tcpip/tcb.hh"
#include "tests/unit/tcp_pipe.hh"

namespace kosoku::tcpip {
namespace {

using testing::Link, testing::Sink, testing::Source, testing::pattern_bytes, testing::tcb;
using namespace tcp_flag;

constexpr uint16_t kPort = 80;

TcpConfig with_sack(bool on) {
  TcpConfig c;
  c.sack = on;
  return c;
}

// A connection whose server (side 1) receives forged client segments. Octet offsets are relative to the
// server's RCV.NXT after the handshake; the payload of [a, b) is stream[a, b), whatever segment carries it.
// Every server segment is recorded and kept off the wire (the client never sent that data).
struct Receiver {
  explicit Receiver(TcpConfig conf) : link(conf) {
    client = testing::connect_kept_open(link, sink, source, kPort);
    if (client == nullptr || sink.stream == nullptr) return;
    base = tcb(sink.stream).rcv_nxt();
    link.tap = [this](int from, const TcpSegment& seg) {
      if (from != 1) return true;
      acks.push_back(TcpSegment{seg.header, seg.options, {}});
      return false;
    };
  }
  bool ok() const { return client != nullptr && sink.stream != nullptr; }
  Tcb& server() { return tcb(sink.stream); }
  // The client's segment [a, b) arrives at the server now.
  void send(uint32_t a, uint32_t b) {
    const Tcb& c = tcb(client);
    TcpHeader h;
    h.src_port = c.tuple().local_port;
    h.dst_port = kPort;
    h.seq = base + a;
    h.ack = c.rcv_nxt();
    h.flags = kAck;
    h.window = 65535;
    std::span<const uint8_t> payload(reinterpret_cast<const uint8_t*>(stream.data()) + a, b - a);
    link.inject(0, h, TcpOptions{}, payload);
  }

  Link link;
  Sink sink;
  Source source;
  net::Stream* client = nullptr;
  SeqNum base;
  std::string stream = pattern_bytes(16 * 1024, 21);
  std::vector<TcpSegment> acks;  // headers and options of the server's segments, in order
};

// The SACK blocks of an ACK as [left, right) offsets from the server's initial RCV.NXT.
using Blocks = std::vector<std::pair<int32_t, int32_t>>;
Blocks blocks(const Receiver& r, const TcpSegment& s) {
  Blocks out;
  for (uint8_t i = 0; i < s.options.sack_count; ++i) {
    out.emplace_back(s.options.sack[i].left - r.base, s.options.sack[i].right - r.base);
  }
  return out;
}

TEST(TcpDsackOoo, DuplicateAboveRcvNxtIsAckedAtOnceFirstThenItsQueuedBlock) {
  Receiver r(with_sack(true));
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r.server().sack_permitted());
  // The hole [0, 1000) stays open; the queue holds [1000, 3000) (two segments, coalesced) and [4000, 5000).
  r.send(1000, 2000);
  r.send(2000, 3000);
  r.send(4000, 5000);
  ASSERT_EQ(r.acks.size(), 3u);  // each out-of-order segment: a duplicate ACK at once
  EXPECT_EQ(blocks(r, r.acks[2]), (Blocks{{4000, 5000}, {1000, 3000}}));
  // The client's segment [1500, 2500) again (a retransmission, or a network copy): the ACK goes out before
  // inject() returns, at RCV.NXT, with the duplicate first, the queued block holding it second, then the rest.
  uint64_t at = r.link.clock().ms;
  r.send(1500, 2500);
  ASSERT_EQ(r.acks.size(), 4u);
  EXPECT_EQ(r.link.clock().ms, at);
  EXPECT_EQ(r.acks[3].header.ack, r.base);
  EXPECT_EQ(blocks(r, r.acks[3]), (Blocks{{1500, 2500}, {1000, 3000}, {4000, 5000}}));
  // Reported once: the next out-of-order segment's ACK carries ordinary blocks only.
  r.send(5000, 6000);
  ASSERT_EQ(r.acks.size(), 5u);
  EXPECT_EQ(blocks(r, r.acks[4]), (Blocks{{4000, 6000}, {1000, 3000}}));
  // The holes filled, the server delivers each octet once, the first copy's.
  r.send(0, 1000);
  r.send(3000, 4000);
  r.sink.drain();
  EXPECT_EQ(r.server().rcv_nxt(), r.base + 6000);
  EXPECT_TRUE(r.sink.received == r.stream.substr(0, 6000));
  EXPECT_EQ(r.link.tcp(1).stats().out_of_order_in, 5u);
  EXPECT_EQ(r.link.tcp(1).stats().ooo_dropped, 0u);
}

TEST(TcpDsackOoo, InOrderSegmentOverlappingQueuedDataReportsTheOverlap) {
  Receiver r(with_sack(true));
  ASSERT_TRUE(r.ok());
  r.send(1000, 2000);
  r.send(3000, 4000);
  ASSERT_EQ(r.acks.size(), 2u);
  // A retransmission repacketized over the hole and past it: [0, 1500) is in order, [1000, 1500) was queued.
  // The ACK goes at once, for RCV.NXT 2000 (the queued [1000, 2000) joined), the duplicate as its D-SACK
  // (below the cumulative ACK), then the remaining queued block.
  r.send(0, 1500);
  ASSERT_EQ(r.acks.size(), 3u);
  EXPECT_EQ(r.acks[2].header.ack, r.base + 2000);
  EXPECT_EQ(blocks(r, r.acks[2]), (Blocks{{1000, 1500}, {3000, 4000}}));
  // In order and touching the queue only: no D-SACK.
  r.send(2000, 3000);
  ASSERT_EQ(r.acks.size(), 4u);
  EXPECT_EQ(r.acks[3].header.ack, r.base + 4000);
  EXPECT_EQ(blocks(r, r.acks[3]), Blocks{});
  r.sink.drain();
  EXPECT_TRUE(r.sink.received == r.stream.substr(0, 4000));
}

TEST(TcpDsackOoo, PartialOverlapReportsOnlyTheFirstOverlappingPart) {
  Receiver r(with_sack(true));
  ASSERT_TRUE(r.ok());
  r.send(1000, 2000);
  r.send(3000, 4000);
  ASSERT_EQ(r.acks.size(), 2u);
  // [500, 1500): new octets [500, 1000), duplicate [1000, 1500); the block holding it grew to [500, 2000).
  r.send(500, 1500);
  ASSERT_EQ(r.acks.size(), 3u);
  EXPECT_EQ(blocks(r, r.acks[2]), (Blocks{{1000, 1500}, {500, 2000}, {3000, 4000}}));
  // [1800, 3500) holds two duplicate stretches, [1800, 2000) and [3000, 3500), around new [2000, 3000):
  // only the first is reported; the queue is now one block.
  r.send(1800, 3500);
  ASSERT_EQ(r.acks.size(), 4u);
  EXPECT_EQ(blocks(r, r.acks[3]), (Blocks{{1800, 2000}, {500, 4000}}));
  // A duplicate tail: [3900, 4500) repeats [3900, 4000).
  r.send(3900, 4500);
  ASSERT_EQ(r.acks.size(), 5u);
  EXPECT_EQ(blocks(r, r.acks[4]), (Blocks{{3900, 4000}, {500, 4500}}));
  // New octets only, touching the queue: no D-SACK.
  r.send(4500, 5000);
  ASSERT_EQ(r.acks.size(), 6u);
  EXPECT_EQ(blocks(r, r.acks[5]), (Blocks{{500, 5000}}));
  r.send(0, 500);
  r.sink.drain();
  EXPECT_TRUE(r.sink.received == r.stream.substr(0, 5000));
}

TEST(TcpDsackOoo, DuplicateBelowRcvNxtWithNewOctetsIsAckedAtOnce) {
  // RFC 2883 §4.1.1's case, as before (the D-SACK below the cumulative ACK), but the segment also carries
  // new in-order octets: its ACK does not wait for the delayed-ACK timer as an in-order segment's does.
  Receiver r(with_sack(true));
  ASSERT_TRUE(r.ok());
  r.send(0, 1000);
  r.link.run_for(100);  // its ACK (the first read opens the window: a window update at once)
  ASSERT_EQ(r.acks.size(), 1u);
  uint64_t at = r.link.clock().ms;
  r.send(1000, 2000);  // one in-order segment: the delayed ACK
  EXPECT_EQ(r.acks.size(), 1u);
  ASSERT_TRUE(r.link.run_until([&] { return r.acks.size() == 2; }, 100));
  EXPECT_GE(r.link.clock().ms, at + r.link.tcp(1).config().delayed_ack_ms);
  EXPECT_EQ(r.acks[1].header.ack, r.base + 2000);
  EXPECT_EQ(r.acks[1].options.sack_count, 0);
  at = r.link.clock().ms;
  r.send(1500, 2500);  // duplicate [1500, 2000), new [2000, 2500)
  ASSERT_EQ(r.acks.size(), 3u);
  EXPECT_EQ(r.link.clock().ms, at);
  EXPECT_EQ(r.acks[2].header.ack, r.base + 2500);
  EXPECT_EQ(blocks(r, r.acks[2]), (Blocks{{1500, 2000}}));
  // The next in-order segment is one unacknowledged segment again: delayed as usual, no D-SACK.
  r.send(2500, 3500);
  EXPECT_EQ(r.acks.size(), 3u);
  ASSERT_TRUE(r.link.run_until([&] { return r.acks.size() == 4; }, 100));
  EXPECT_EQ(r.acks[3].header.ack, r.base + 3500);
  EXPECT_EQ(r.acks[3].options.sack_count, 0);
  r.sink.drain();
  EXPECT_TRUE(r.sink.received == r.stream.substr(0, 3500));
}

TEST(TcpDsackOoo, WithoutSackDuplicatesGetPlainDuplicateAcks) {
  // The client does not offer SACK-permitted: the same segments give the same ACK numbers and timing as
  // ever (a duplicate ACK at once for out-of-order data, the delayed ACK for in-order data), no options.
  Receiver r(with_sack(false));
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r.server().sack_permitted());
  r.send(1000, 2000);
  r.send(3000, 4000);
  r.send(1500, 2500);  // duplicate [1500, 2000) above RCV.NXT
  r.send(1000, 2000);  // duplicate, whole
  ASSERT_EQ(r.acks.size(), 4u);
  for (const TcpSegment& a : r.acks) {
    EXPECT_EQ(a.header.ack, r.base);
    EXPECT_EQ(a.options.sack_count, 0);
  }
  r.send(0, 1000);  // fills the first hole: ACK at once (RFC 5681 §4.2)
  ASSERT_EQ(r.acks.size(), 5u);
  EXPECT_EQ(r.acks[4].header.ack, r.base + 2500);
  r.send(2500, 3000);
  ASSERT_EQ(r.acks.size(), 6u);
  EXPECT_EQ(r.acks[5].header.ack, r.base + 4000);
  uint64_t at = r.link.clock().ms;
  r.send(3500, 4500);  // duplicate [3500, 4000) below RCV.NXT, new [4000, 4500): delayed ACK, unchanged
  EXPECT_EQ(r.acks.size(), 6u);
  ASSERT_TRUE(r.link.run_until([&] { return r.acks.size() == 7; }, 100));
  EXPECT_GE(r.link.clock().ms, at + r.link.tcp(1).config().delayed_ack_ms);
  EXPECT_EQ(r.acks[6].header.ack, r.base + 4500);
  EXPECT_EQ(r.acks[6].options.sack_count, 0);
  r.sink.drain();
  EXPECT_TRUE(r.sink.received == r.stream.substr(0, 4500));
  EXPECT_EQ(r.link.tcp(1).stats().sack_blocks_out, 0u);
}

// ---------------------------------------------------------------- two stacks

struct SpuriousRun {
  bool exact = false;
  int dsack_above = 0, dsack_below = 0;  // the server's ACKs carrying a D-SACK block, by side of RCV.NXT
  TcpSegment first_dsack;                 // header and options of the first
  SeqNum hole, delayed;                   // the lost segment, and the segment held back
  uint32_t delayed_len = 0;
  unsigned reo_wnd_mult = 0;              // the client's largest RACK reo_wnd multiplier during the run
  TcpStats client;
};

// The client sends 256 KiB; its 30th data segment is lost, and so is its first retransmission (the hole stays
// open for two rounds). With `hold`, the 34th data segment is held back 3 ms: RACK (no reordering seen yet)
// marks it lost with the 30th and retransmits it; the original arrives first, so the retransmission reaches
// the server as a duplicate above RCV.NXT.
SpuriousRun spurious_above_hole(bool hold) {
  SpuriousRun r;
  Link link{TcpConfig{}};
  int index = 0, passed = 0, hole_sent = 0;
  link.tap = [&](int from, const TcpSegment& seg) {
    if (from == 1) {
      const TcpOptions& o = seg.options;
      bool below = o.sack_count > 0 && o.sack[0].left < seg.header.ack;
      bool above = !below && o.sack_count > 1 && o.sack[1].left <= o.sack[0].left &&
                   o.sack[0].right <= o.sack[1].right;
      if ((above || below) && r.dsack_above + r.dsack_below == 0) r.first_dsack = TcpSegment{seg.header, o, {}};
      r.dsack_above += above;
      r.dsack_below += below;
      return true;
    }
    if (seg.payload.empty()) return true;
    if (++index == 30) r.hole = seg.header.seq;
    if (index >= 30 && seg.header.seq == r.hole && ++hole_sent <= 2) return false;
    ++passed;  // the link's own count of data segments (faults' `nth`) skips what the tap dropped
    if (index == 34 && hold) {
      r.delayed = seg.header.seq;
      r.delayed_len = static_cast<uint32_t>(seg.payload.size());
      link.add_fault({.from = 0, .match = testing::Match::kData, .nth = passed, .action = testing::Action::kDelay,
                      .delay_ms = 3});
    }
    return true;
  };
  Sink sink;
  Source source;
  source.data = pattern_bytes(256 * 1024, 4);
  EXPECT_EQ(link.tcp(1).listen_port(kPort, 16, sink), 0);
  std::string err;
  net::Stream* c = link.tcp(0).connect_from(0, link.addr(1), kPort, source, &err);
  EXPECT_NE(c, nullptr) << err;
  if (c == nullptr) return r;
  EXPECT_TRUE(link.run_until([&] {
    if (!source.closed) r.reo_wnd_mult = std::max(r.reo_wnd_mult, tcb(c).rack().reo_wnd_mult());
    return sink.closed && source.closed;
  }, 60'000));
  r.exact = sink.received == source.data;
  r.client = link.tcp(0).stats();
  return r;
}

TEST(TcpDsackOoo, SpuriousRetransmissionAboveAHoleIsCountedAndWidensReoWnd) {
  SpuriousRun held = spurious_above_hole(true), control = spurious_above_hole(false);
  std::printf("held back: %d D-SACKs above RCV.NXT, %d below, reo_wnd_mult %u, %llu retransmissions, %llu undos; "
              "control: %d/%d, reo_wnd_mult %u, %llu retransmissions\n",
              held.dsack_above, held.dsack_below, held.reo_wnd_mult, (unsigned long long)held.client.retransmits,
              (unsigned long long)held.client.dsack_undos, control.dsack_above, control.dsack_below,
              control.reo_wnd_mult, (unsigned long long)control.client.retransmits);
  EXPECT_TRUE(held.exact && control.exact);
  // The server's one D-SACK: at the hole, first block exactly the held-back segment, second the queued block
  // holding it (which starts right after the hole).
  ASSERT_EQ(held.dsack_above, 1);
  EXPECT_EQ(held.dsack_below, 0);
  const TcpSegment& d = held.first_dsack;
  EXPECT_EQ(d.header.ack, held.hole);
  ASSERT_GE(d.options.sack_count, 2);
  EXPECT_EQ(d.options.sack[0], (SackBlock{held.delayed, held.delayed + held.delayed_len}));
  EXPECT_EQ(d.options.sack[1].left, held.hole + held.delayed_len);  // full-sized segments: the hole is one MSS
  EXPECT_TRUE(held.delayed + held.delayed_len <= d.options.sack[1].right);
  // The client counts it and RACK widens reo_wnd (RFC 8985 §6.2 step 4), as for a D-SACK below the
  // cumulative ACK (TcpRack.DuplicateDataIsReportedWithDsackAndWidensTheReorderingWindow).
  EXPECT_EQ(held.client.dsacks_in, 1u);
  EXPECT_EQ(held.reo_wnd_mult, 2u);
  // The recovery also repaired a real loss (the hole, twice): its reduction stays.
  EXPECT_EQ(held.client.sack_recoveries, 1u);
  EXPECT_EQ(held.client.retransmits, 3u);
  EXPECT_EQ(held.client.dsack_undos, 0u);
  EXPECT_EQ(held.client.rto_expired, 0u);
  // Nothing held back: the same losses, no duplicate, no D-SACK, reo_wnd untouched.
  EXPECT_EQ(control.dsack_above + control.dsack_below, 0);
  EXPECT_EQ(control.client.dsacks_in, 0u);
  EXPECT_EQ(control.reo_wnd_mult, 1u);
}

}  // namespace
}  // namespace kosoku::tcpip
