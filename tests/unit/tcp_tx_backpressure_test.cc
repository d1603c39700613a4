// TX backpressure in kosoku's TCP (TcpStack::set_tx_backpressure / resume_tx, the check in Tcb::send_next):
// two stacks through the in-memory link (tests/unit/tcp_pipe.hh), side 0's TX path modelled as the DPDK relay
// ring of a worker without a TX queue (dpdk::Queue over CoreMesh::kTxRing): a bounded number of slots that
// every frame side 0 sends occupies until the "relaying core" drains it at a set rate; a frame that finds the
// ring full is refused and lost, as dpdk::Queue::flush frees it. The ring's free slots are the PacketIO
// tx_room() the stack reads. Each step of the link runs like one iteration of CoreStack::poll: drain, then
// TcpStack::resume_tx.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <functional>

#include "kernel-bypass/tcpip/tcb.hh"
#include "tests/unit/tcp_pipe.hh"
#include "tests/unit/tcpip_test_util.hh"

namespace kosoku::tcpip {
namespace {

using testing::Link, testing::Sink, testing::Source, testing::pattern_bytes, testing::tcb;
using namespace tcp_flag;

constexpr uint16_t kPort = 80;

/// The relay ring's room as a PacketIO: only tx_room() is read (the stack's frames go through the link's own
/// End, which the Interface was built on; this object never carries one).
class RelayRing final : public PacketIO {
 public:
  RelayRing(size_t capacity, size_t drain_per_ms) : capacity(capacity), drain_per_ms(drain_per_ms) {}

  size_t tx_room() const override { return capacity > occupied ? capacity - occupied : 0; }
  std::span<uint8_t> frame_begin(size_t) override { return {}; }
  void frame_send(size_t) override {}
  MacAddr mac() const override { return MacAddr{}; }
  uint16_t mtu() const override { return 1500; }

  /// One frame from side 0 (the link's tap): takes a slot, or is refused when none is free.
  bool enqueue() {
    if (occupied >= capacity) {
      ++refused;
      return false;
    }
    ++occupied;
    ++accepted;
    if (occupied > peak) peak = occupied;
    return true;
  }
  /// The relaying core: drain_per_ms frames per simulated ms since the last call.
  void drain(uint64_t now_ms) {
    if (now_ms > last_ms_) {
      size_t n = static_cast<size_t>(now_ms - last_ms_) * drain_per_ms;
      occupied = occupied > n ? occupied - n : 0;
    }
    last_ms_ = now_ms;
  }
  /// Starts the model at `now_ms` with `occupied_slots` taken.
  void start(uint64_t now_ms, size_t occupied_slots) {
    last_ms_ = now_ms;
    occupied = occupied_slots;
  }

  size_t capacity;
  size_t drain_per_ms;
  size_t occupied = 0, peak = 0;
  uint64_t accepted = 0, refused = 0;

 private:
  uint64_t last_ms_ = 0;
};

/// Routes side 0's TCP frames through `ring` (refused ones are lost) and, when `backpressure`, lets side 0's
/// stack read its room with `reserve` frames kept back.
void attach(Link& link, RelayRing& ring, bool backpressure, size_t reserve) {
  link.tap = [&ring](int from, const TcpSegment&) { return from != 0 || ring.enqueue(); };
  ring.start(link.clock().ms, 0);
  link.tcp(0).set_tx_backpressure(backpressure ? &ring : nullptr, reserve);
}

/// Runs the link as the DPDK loop runs: every step the ring drains for the time passed, then side 0 resumes
/// its waiting connections. Returns done().
bool run(Link& link, RelayRing& ring, const std::function<bool()>& done, uint64_t max_ms) {
  return link.run_until(
      [&] {
        ring.drain(link.clock().ms);
        link.tcp(0).resume_tx();
        return done();
      },
      max_ms);
}

/// A fresh link with one kept-open connection from side 0 to port kPort on side 1 (c: null if it failed).
struct OneConnection {
  Link link;
  Sink sink;
  Source source;
  net::Stream* c = testing::connect_kept_open(link, sink, source, kPort);
};

/// Data segments (and their payload bytes) side 0 put on the link from local port `port` (0: any).
struct DataOut {
  size_t segments = 0, bytes = 0;
};
DataOut data_out(const Link& link, uint16_t port = 0) {
  DataOut d;
  for (const testing::SentSegment& s : link.log()) {
    if (s.from != 0 || s.payload == 0 || (port != 0 && s.header.src_port != port)) continue;
    ++d.segments;
    d.bytes += s.payload;
  }
  return d;
}

// While the ring has fewer free slots than the reserve, no new data segment leaves: exactly the segments
// that fit above the reserve go, the connection waits (counted once), ACKs of what went change nothing, and
// no timer sends anything. Once the ring drains, the transfer completes byte-exact with every payload byte
// sent once: nothing was retransmitted or refused.
TEST(TcpTxBackpressure, NoNewSegmentWhileRoomIsBelowReserve) {
  OneConnection one;
  auto& [link, sink, source, c] = one;
  ASSERT_NE(c, nullptr);
  RelayRing ring(/*capacity=*/11, /*drain_per_ms=*/0);
  attach(link, ring, true, /*reserve=*/4);
  const std::string data = pattern_bytes(256 * 1024, 21);
  c->write(data);
  c->flush();
  // Room 11, 10, ..., 4: eight segments (below the initial window of ten), then room 3 < 4.
  EXPECT_EQ(data_out(link).segments, 8u);
  EXPECT_EQ(ring.occupied, 8u);
  EXPECT_EQ(link.tcp(0).stats().tx_blocked, 1u);
  EXPECT_EQ(link.tcp(0).tx_waiting(), 1u);

  ASSERT_FALSE(run(link, ring, [] { return false; }, 500));  // 500 ms, the ring never drains
  EXPECT_EQ(data_out(link).segments, 8u);
  EXPECT_EQ(tcb(c).snd_una(), tcb(c).snd_nxt());  // the eight were acknowledged; their ACKs sent nothing new
  EXPECT_EQ(link.tcp(0).stats().tx_blocked, 1u);   // re-checked on every ACK while waiting: counted once
  EXPECT_EQ(link.tcp(0).stats().retransmits, 0u);
  EXPECT_EQ(link.tcp(0).stats().tlp_probes, 0u);
  EXPECT_EQ(sink.received.size(), 8u * tcb(c).mss());

  ring.drain_per_ms = 16;  // the relaying core runs again
  ASSERT_TRUE(run(link, ring, [&] { return sink.received.size() == data.size(); }, 60'000));
  EXPECT_EQ(sink.received, data);
  DataOut out = data_out(link);
  EXPECT_EQ(out.bytes, data.size());  // every byte once
  EXPECT_EQ(out.segments, (data.size() + tcb(c).mss() - 1) / tcb(c).mss());
  EXPECT_EQ(link.tcp(0).stats().retransmits, 0u);
  EXPECT_EQ(ring.refused, 0u);
  EXPECT_LE(ring.peak, ring.capacity - 4 + 1);  // only new segments here, each sent with room >= 4
  EXPECT_GT(link.tcp(0).stats().tx_blocked, 1u);
  EXPECT_EQ(link.tcp(0).tx_waiting(), 0u);
}

struct Bulk {
  bool exact = false;
  uint64_t ms = 0, refused = 0, retransmits = 0, blocked = 0;
  size_t peak = 0, bytes_out = 0;
};

// One 2 MiB write over a kept-open connection into a 64-slot ring drained at 4 frames/ms (the 4 MiB send
// window lets cwnd run far past it), with or without backpressure (reserve 8).
Bulk bulk(bool backpressure) {
  OneConnection one;
  auto& [link, sink, source, c] = one;
  Bulk b;
  if (c == nullptr) return b;
  RelayRing ring(64, 4);
  attach(link, ring, backpressure, 8);
  const std::string data = pattern_bytes(2 * 1024 * 1024, 22);
  uint64_t start = link.clock().ms;
  c->write(data);
  c->flush();
  run(link, ring, [&] { return sink.received.size() >= data.size(); }, 600'000);
  b.exact = sink.received == data;
  b.ms = link.clock().ms - start;
  b.refused = ring.refused;
  b.retransmits = link.tcp(0).stats().retransmits;
  b.blocked = link.tcp(0).stats().tx_blocked;
  b.peak = ring.peak;
  b.bytes_out = data_out(link).bytes;
  return b;
}

// Without backpressure the ring overflows and TCP resends what it refused; with it the ring never fills
// (the reserve stays free for ACKs and retransmissions), nothing is resent, and the transfer is not slower.
TEST(TcpTxBackpressure, RelayRingNeverOverflowsWithBackpressure) {
  Bulk off = bulk(false);
  Bulk on = bulk(true);
  std::printf("2 MiB into a 64-slot ring drained at 4 frames/ms: without backpressure %llu ms, %llu refused, "
              "%llu retransmits, %zu payload bytes sent; with it %llu ms, %llu refused, %llu retransmits, %llu "
              "waits, peak %zu slots, %zu bytes sent\n",
              static_cast<unsigned long long>(off.ms), static_cast<unsigned long long>(off.refused),
              static_cast<unsigned long long>(off.retransmits), off.bytes_out,
              static_cast<unsigned long long>(on.ms), static_cast<unsigned long long>(on.refused),
              static_cast<unsigned long long>(on.retransmits), static_cast<unsigned long long>(on.blocked), on.peak,
              on.bytes_out);
  EXPECT_TRUE(off.exact);
  EXPECT_GT(off.refused, 0u);
  EXPECT_GT(off.retransmits, 0u);
  EXPECT_EQ(off.blocked, 0u);

  EXPECT_TRUE(on.exact);
  EXPECT_EQ(on.refused, 0u);
  EXPECT_EQ(on.retransmits, 0u);
  EXPECT_EQ(on.bytes_out, size_t{2 * 1024 * 1024});
  EXPECT_GT(on.blocked, 0u);
  EXPECT_LE(on.peak, 64u - 8u + 1u);
  EXPECT_LE(on.ms, off.ms);
}

/// A kept-open connection from side 0 to its own port and listener on side 1.
struct Conn {
  Sink sink;
  Source source;
  net::Stream* c = nullptr;
};

// Waiting connections resume in the order they began to wait; one that runs out of room again goes to the
// back and the pass stops there, so the next one does not send into a ring without room.
TEST(TcpTxBackpressure, WaitingConnectionsResumeInOrderAndStopWhenRoomRunsOut) {
  Link link;
  Conn a, b;
  a.c = testing::connect_kept_open(link, a.sink, a.source, kPort);
  b.c = testing::connect_kept_open(link, b.sink, b.source, kPort + 1);
  ASSERT_NE(a.c, nullptr);
  ASSERT_NE(b.c, nullptr);
  const uint16_t pa = tcb(a.c).tuple().local_port, pb = tcb(b.c).tuple().local_port;
  RelayRing ring(20, 0);
  attach(link, ring, true, 4);
  ring.occupied = 17;  // room 3: below the reserve
  const std::string da = pattern_bytes(64 * 1024, 23), db = pattern_bytes(64 * 1024, 24);
  a.c->write(da);
  a.c->flush();
  b.c->write(db);
  b.c->flush();
  EXPECT_EQ(data_out(link).segments, 0u);
  EXPECT_EQ(link.tcp(0).tx_waiting(), 2u);
  EXPECT_EQ(link.tcp(0).stats().tx_blocked, 2u);

  ring.occupied = 15;  // room 5: a can send two segments (room 5, 4), then waits again behind b
  EXPECT_EQ(link.tcp(0).resume_tx(), 1u);
  EXPECT_EQ(data_out(link, pa).segments, 2u);
  EXPECT_EQ(data_out(link, pb).segments, 0u);
  EXPECT_EQ(link.tcp(0).tx_waiting(), 2u);
  EXPECT_EQ(link.tcp(0).stats().tx_blocked, 3u);

  ring.occupied = 11;  // room 9: b first now (six segments, room 9..4), then a finds room 3 and is not run
  EXPECT_EQ(link.tcp(0).resume_tx(), 1u);
  EXPECT_EQ(data_out(link, pa).segments, 2u);
  EXPECT_EQ(data_out(link, pb).segments, 6u);
  EXPECT_EQ(link.tcp(0).resume_tx(), 0u);  // nothing runs without room

  ring.drain_per_ms = 8;
  ring.start(link.clock().ms, ring.occupied);
  ASSERT_TRUE(run(link, ring, [&] { return a.sink.received.size() == da.size() &&
                                           b.sink.received.size() == db.size(); }, 60'000));
  EXPECT_EQ(a.sink.received, da);
  EXPECT_EQ(b.sink.received, db);
  EXPECT_EQ(data_out(link).bytes, da.size() + db.size());
  EXPECT_EQ(link.tcp(0).stats().retransmits, 0u);
  EXPECT_EQ(ring.refused, 0u);
  EXPECT_EQ(link.tcp(0).tx_waiting(), 0u);
}

// A connection that ends while it waits (here: the peer's RST) leaves the list at once and is never run
// again after TcpStack::reap() freed it; the connections around it still resume and complete.
TEST(TcpTxBackpressure, ConnectionEndingWhileWaitingLeavesTheList) {
  Link link;
  Conn conns[3];
  for (int i = 0; i < 3; ++i) {
    conns[i].c = testing::connect_kept_open(link, conns[i].sink, conns[i].source, static_cast<uint16_t>(kPort + i));
    ASSERT_NE(conns[i].c, nullptr);
  }
  RelayRing ring(16, 0);
  attach(link, ring, true, 4);
  ring.occupied = 13;  // room 3
  std::string data[3];
  for (int i = 0; i < 3; ++i) {
    data[i] = pattern_bytes(32 * 1024, 30 + i);
    conns[i].c->write(data[i]);
    conns[i].c->flush();
  }
  EXPECT_EQ(link.tcp(0).tx_waiting(), 3u);

  Tcb& middle = tcb(conns[1].c);
  TcpHeader h;
  h.src_port = kPort + 1;
  h.dst_port = middle.tuple().local_port;
  h.seq = middle.rcv_nxt();
  h.flags = kRst;
  link.inject(1, h, TcpOptions{}, {});
  EXPECT_TRUE(conns[1].source.closed);
  EXPECT_EQ(conns[1].source.close_error, ECONNRESET);
  EXPECT_EQ(link.tcp(0).tx_waiting(), 2u);
  link.tcp(0).reap();  // the middle TCB is freed

  ring.drain_per_ms = 8;
  ring.start(link.clock().ms, 0);
  EXPECT_EQ(link.tcp(0).resume_tx(), 2u);
  ASSERT_TRUE(run(link, ring, [&] { return conns[0].sink.received.size() == data[0].size() &&
                                           conns[2].sink.received.size() == data[2].size(); }, 60'000));
  EXPECT_EQ(conns[0].sink.received, data[0]);
  EXPECT_EQ(conns[2].sink.received, data[2]);
  EXPECT_EQ(conns[1].sink.received.size(), 0u);
  EXPECT_EQ(link.tcp(0).tx_waiting(), 0u);
  EXPECT_EQ(link.tcp(0).stats().retransmits, 0u);
}

// Without a link (the default) or with an unbounded one (PacketIO's default tx_room), nothing is held.
TEST(TcpTxBackpressure, UnboundedLinkHoldsNothing) {
  OneConnection one;
  auto& [link, sink, source, c] = one;
  ASSERT_NE(c, nullptr);
  testing::CaptureIO unbounded(MacAddr{});
  link.tcp(0).set_tx_backpressure(&unbounded, 32);
  EXPECT_EQ(unbounded.tx_room(), SIZE_MAX);
  const std::string data = pattern_bytes(512 * 1024, 25);
  c->write(data);
  c->flush();
  ASSERT_TRUE(link.run_until([&] { return sink.received.size() == data.size(); }, 60'000));
  EXPECT_EQ(sink.received, data);
  EXPECT_EQ(link.tcp(0).stats().tx_blocked, 0u);
  EXPECT_EQ(link.tcp(0).resume_tx(), 0u);
}

}  // namespace
}  // namespace kosoku::tcpip
