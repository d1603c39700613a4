// The RTT estimator in µs (RFC 6298 §2 with samples from RACK's transmission record), spurious timeouts undone
// by timestamps (RFC 3522 / RFC 4015), and the rate limit on
// answers to unacceptable pure ACKs (RFC 7323 §5.3 R1, as Linux's tcp_invalid_ratelimit), through two stacks on
// the simulated link (1 ms one way: a 2 ms RTT).
#include <gtest/gtest.h>

#include <cstdio>

#include "kernel-bypass/tcpip/tcb.hh"
#include "tests/unit/tcp_pipe.hh"

namespace kosoku::tcpip {
namespace {

using testing::Action, testing::Fault, testing::Link, testing::Match, testing::Sink, testing::Source,
    testing::connect_kept_open, testing::pattern_bytes, testing::tcb;
using namespace tcp_flag;

constexpr uint16_t kPort = 80;

// Writes `n` bytes on the client and runs until the server has them all.
bool send_all(Link& link, Sink& sink, net::Stream* c, size_t n, uint32_t seed) {
  size_t want = sink.received.size() + n;
  c->write(pattern_bytes(n, seed));
  c->flush();
  return link.run_until([&] { return sink.received.size() == want; }, 10'000);
}

TEST(TcpRtt, SrttFollowsARiseOfOneMillisecond) {
  Link link;
  Sink sink;
  Source source;
  net::Stream* c = connect_kept_open(link, sink, source, kPort);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(send_all(link, sink, c, 256 * 1024, 1));
  uint64_t before = tcb(c).srtt_us();
  // From now on every data segment of the client takes 1 ms more: RTT 3 ms. The ms estimator stayed at 2 ms
  // here ((7 · 2 + 3) / 8 = 2 in integers); the µs one converges to 3,000 µs (within its rounding, 7 µs).
  link.add_fault(Fault{.from = 0, .match = Match::kData, .nth = 1, .count = 1 << 30, .action = Action::kDelay,
                       .delay_ms = 1});
  ASSERT_TRUE(send_all(link, sink, c, 512 * 1024, 2));
  uint64_t after = tcb(c).srtt_us();
  std::printf("SRTT %llu us at a 2 ms RTT, %llu us after 512 KiB at 3 ms\n", (unsigned long long)before,
              (unsigned long long)after);
  EXPECT_GE(before, 2000u);
  EXPECT_LT(before, 2600u);
  EXPECT_GE(after, 2990u);
  EXPECT_LT(after, 3600u);
  EXPECT_GE(tcb(c).rto_ms(), 200u);  // rto_min still bounds the RTO
}

// Sends from the client (side 0) a segment to the server with a TSval older than the server's TS.Recent.
void inject_stale(Link& link, Tcb& server, std::span<const uint8_t> payload) {
  TcpHeader h;
  h.src_port = server.tuple().remote_port;
  h.dst_port = kPort;
  h.seq = payload.empty() ? server.rcv_nxt() : server.rcv_nxt() - static_cast<uint32_t>(payload.size());
  h.ack = server.snd_nxt();
  h.flags = kAck;
  h.window = 1000;
  TcpOptions o;
  o.has_timestamps = true;
  o.ts_val = server.ts_recent() - 1000;
  link.inject(0, h, o, payload);
}

// Segments the server (side 1) put on the wire since log index `from`.
size_t server_segments_since(const Link& link, size_t from) {
  size_t n = 0;
  for (size_t i = from; i < link.log().size(); ++i) n += link.log()[i].from == 1;
  return n;
}

TEST(TcpOowAck, StalePureAcksGetOneAnswerPerHalfSecondDataAlways) {
  Link link;
  Sink sink;
  Source source;
  net::Stream* c = connect_kept_open(link, sink, source, kPort);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(send_all(link, sink, c, 3000, 3));
  link.run_for(300);  // delayed ACKs out, nothing pending
  Tcb& server = tcb(sink.stream);
  const TcpStats& st = link.tcp(1).stats();
  uint64_t paws0 = st.paws_dropped;

  size_t mark = link.log().size();
  for (int i = 0; i < 10; ++i) inject_stale(link, server, {});  // ten late ACKs (a reordering path's)
  EXPECT_EQ(st.paws_dropped, paws0 + 10);
  EXPECT_EQ(server_segments_since(link, mark), 1u);  // the first is answered (RFC 7323 R1), the rest not
  EXPECT_EQ(st.oow_acks_skipped, 9u);

  link.run_for(499);
  mark = link.log().size();
  inject_stale(link, server, {});
  EXPECT_EQ(server_segments_since(link, mark), 0u);
  EXPECT_EQ(st.oow_acks_skipped, 10u);

  link.run_for(1);  // 500 ms after the last answer
  mark = link.log().size();
  inject_stale(link, server, {});
  EXPECT_EQ(server_segments_since(link, mark), 1u);
  EXPECT_EQ(st.oow_acks_skipped, 10u);

  // A late data segment is always answered, inside the interval too: its D-SACK tells the sender its
  // retransmission was spurious.
  const uint8_t late[] = {'a', 'b'};
  mark = link.log().size();
  inject_stale(link, server, late);
  EXPECT_EQ(server_segments_since(link, mark), 1u);
  EXPECT_EQ(st.oow_acks_skipped, 10u);
  link.run_for(10);
  EXPECT_EQ(sink.received.size(), 3000u);  // nothing of the stale segments was taken
}

// The server's ACKs take 45 ms more from its 10th segment on (a delay spike on the return path): the client's
// RTO (30 ms) fires for data that was delivered. The first ACK after it echoes the TSval of an original, older
// than the retransmission's: with timestamps the timeout is undone (RFC 3522 / RFC 4015: cwnd back, no
// go-back); without them the client resends its whole flight.
TEST(TcpSpuriousRto, TimestampsUndoATimeoutForDelayedAcks) {
  auto run = [](bool timestamps) {
    TcpConfig c;
    c.rto_min_ms = 30;
    c.timestamps = timestamps;
    c.frto = false;  // "none" means no detection at all (F-RTO without timestamps: tcp_frto_test.cc)
    return testing::one_way_transfer(c, 256 * 1024, 7, [](Link& link) {
      link.add_fault(Fault{.from = 1, .match = Match::kAny, .nth = 10, .count = 1 << 20, .action = Action::kDelay,
                           .delay_ms = 45});
    });
  };
  testing::TransferResult eifel = run(true), plain = run(false);
  std::printf("ACKs delayed 45 ms, RTO 30 ms: timestamps %llu RTOs, %llu undone, %llu retransmissions, %llu ms; "
              "none %llu RTOs, %llu retransmissions, %llu ms\n",
              (unsigned long long)eifel.sender.rto_expired, (unsigned long long)eifel.sender.spurious_rtos,
              (unsigned long long)eifel.sender.retransmits, (unsigned long long)eifel.ms,
              (unsigned long long)plain.sender.rto_expired, (unsigned long long)plain.sender.retransmits,
              (unsigned long long)plain.ms);
  EXPECT_TRUE(eifel.exact);
  EXPECT_TRUE(plain.exact);
  EXPECT_EQ(eifel.sender.rto_expired, 1u);
  EXPECT_EQ(eifel.sender.spurious_rtos, 1u);
  EXPECT_EQ(plain.sender.spurious_rtos, 0u);
  EXPECT_GE(plain.sender.rto_expired, 1u);
  EXPECT_LT(eifel.sender.retransmits * 4, plain.sender.retransmits);  // no go-back of the flight
  EXPECT_LT(eifel.ms, plain.ms);
}

}  // namespace
}  // namespace kosoku::tcpip
