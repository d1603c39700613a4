// The TCB's send buffer (kernel-bypass/tcpip/tcb_send_buffer.cc, TcpConfig::send_buffer_bytes): like a kernel
// socket, the TCB takes output over up to the limit — write_ref bytes are copied, so the caller's buffer is
// free at once — and pending_output() counts only what it has not taken. Two stacks on the in-memory link
// (tests/unit/tcp_pipe.hh); the server reuses its buffers as a write_ref writer may (two buffers, refilled
// when pending_output() has dropped by the bytes written after them; core/static did this before it moved to
// write_shared, tcp_shared_buffer_test.cc), so a byte the TCB still referenced after reporting it taken would
// arrive corrupted.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernel-bypass/tcpip/tcb.hh"
#include "tests/unit/tcp_pipe.hh"

namespace kosoku::tcpip {
namespace {

using testing::Link, testing::Sink, testing::Source, testing::pattern_bytes;

constexpr uint16_t kPort = 80;

using testing::tcb;

TcpConfig limited(uint32_t send_buffer, uint32_t send_window) {
  TcpConfig c;
  c.send_buffer_bytes = send_buffer;
  c.send_window_bytes = send_window;
  return c;
}

/// Server: on the first input byte streams `body` through two `chunk`-byte buffers by write_ref, refilling a
/// buffer once pending_output() <= bytes written after it (core/static's pump); each refill first scribbles
/// over the buffer. Closes gracefully when everything is queued (unless keep_open).
struct RefServer final : net::StreamHandler, net::AcceptHandler {
  std::string body;
  size_t chunk = 48 * 1024;
  bool keep_open = false;
  std::vector<char> buf[2];
  uint64_t written = 0;
  uint64_t end_mark[2] = {0, 0};
  size_t pos = 0;
  int next = 0;
  bool started = false, done = false, closed = false;
  int writable_calls = 0;
  net::Stream* stream = nullptr;
  std::vector<size_t> pending_after_write;  // pending_output() after each write_ref

  net::StreamHandler* on_accept(net::Stream& s, const config::ListenSocket&) override {
    stream = &s;
    buf[0].resize(chunk);
    buf[1].resize(chunk);
    return this;
  }
  void on_readable(net::Stream& s) override {
    s.consume(s.input().size());
    if (started) return;
    started = true;
    pump();
  }
  void pump() {
    while (pos < body.size()) {
      int b = next;
      uint64_t after = written - end_mark[b];
      if (end_mark[b] != 0 && stream->pending_output() > after) {
        stream->set_low_water(after);
        return;
      }
      size_t n = std::min(chunk, body.size() - pos);
      std::memset(buf[b].data(), 0x5a, chunk);  // the TCB must not read the old bytes any more
      std::memcpy(buf[b].data(), body.data() + pos, n);
      stream->write_ref(buf[b].data(), n);
      pending_after_write.push_back(stream->pending_output());
      stream->flush();
      written += n;
      end_mark[b] = written;
      next = 1 - b;
      pos += n;
    }
    if (!done) {
      done = true;
      if (!keep_open) stream->close(net::Stream::Close::kGraceful);
    }
  }
  void on_peer_closed(net::Stream&) override {}
  void on_writable(net::Stream&) override {
    ++writable_calls;
    pump();
  }
  void on_closed(net::Stream&, int) override {
    closed = true;
    stream = nullptr;
  }
};

/// A client (side 0) connected to a Sink (side 1), kept open; `c` is the client's stream (null on failure).
struct Conn {
  Link link;
  Sink sink;
  Source source;
  net::Stream* c = nullptr;
  explicit Conn(const TcpConfig& conf = TcpConfig{}) : link(conf) {
    c = testing::connect_kept_open(link, sink, source, kPort);
  }
};

struct Transfer {
  Link link;
  RefServer server;
  Source client;
  explicit Transfer(const TcpConfig& conf, std::string body, size_t chunk) : link(conf) {
    server.body = std::move(body);
    server.chunk = chunk;
    client.data = "G";
    client.keep_open = true;
  }
  bool start() {
    if (link.tcp(1).listen_port(kPort, 16, server) != 0) return false;
    std::string err;
    client.stream = link.tcp(0).connect_from(0, link.addr(1), kPort, client, &err);
    return client.stream != nullptr;
  }
};

// Under the limit a write_ref is copied at once: nothing is pending, the caller may reuse its buffer before
// a single byte was acknowledged, and the peer still gets the original bytes.
TEST(TcpSendBuffer, WriteRefIsCopiedAndTheBufferIsFreeAtOnce) {
  Conn conn;  // default: send_buffer_bytes 2 MiB
  ASSERT_NE(conn.c, nullptr);
  net::Stream* c = conn.c;
  std::string body = pattern_bytes(256 * 1024, 1);
  std::vector<char> mine(body.begin(), body.end());
  c->write_ref(mine.data(), mine.size());
  EXPECT_EQ(c->pending_output(), 0u);
  EXPECT_EQ(tcb(c).send_buffered(), body.size());
  EXPECT_EQ(tcb(c).send_waiting(), 0u);
  c->flush();
  std::fill(mine.begin(), mine.end(), '\0');  // reused at once, as pending_output() == 0 allows
  ASSERT_TRUE(conn.link.run_until([&] { return conn.sink.received.size() == body.size(); }, 5000));
  EXPECT_EQ(conn.sink.received, body);
  ASSERT_TRUE(conn.link.run_until([&] { return tcb(c).send_buffered() == 0; }, 1000));
  // Acknowledged: the copy blocks are freed, or kept as spares (at most 8 x 64 KiB) for the next copies;
  // after 1 s idle everything goes.
  EXPECT_LE(tcb(c).buffer_bytes(), 8u * 64 * 1024 + 16 * 1024 + 4096);
  conn.link.run_for(1100);
  EXPECT_EQ(tcb(c).buffer_bytes(), 0u);
  EXPECT_EQ(tcb(c).memory_bytes(), sizeof(Tcb));
}

// Beyond the limit the rest waits by reference: pending_output() is exactly the part not taken, drops as
// ACKs make room, and the buffer the TCB holds never exceeds the limit.
TEST(TcpSendBuffer, PendingOutputIsWhatTheLimitLeftWaiting) {
  const uint32_t kLimit = 64 * 1024;
  Conn conn(limited(kLimit, kLimit));
  ASSERT_NE(conn.c, nullptr);
  net::Stream* c = conn.c;
  std::string body = pattern_bytes(300 * 1000, 2);
  c->write_ref(body.data(), 100 * 1000);
  EXPECT_EQ(c->pending_output(), 100u * 1000 - kLimit);
  EXPECT_EQ(tcb(c).send_buffered(), kLimit);
  c->write_ref(body.data() + 100 * 1000, 200 * 1000);
  EXPECT_EQ(c->pending_output(), 300u * 1000 - kLimit);
  EXPECT_EQ(tcb(c).send_waiting(), 300u * 1000 - kLimit);
  size_t max_buffered = 0;
  conn.link.tap = [&](int from, const TcpSegment&) {
    if (from == 0) max_buffered = std::max(max_buffered, tcb(c).send_buffered());  // as data leaves
    return true;
  };
  c->flush();
  ASSERT_TRUE(conn.link.run_until([&] { return conn.sink.received.size() == body.size(); }, 10000));
  EXPECT_EQ(conn.sink.received, body);
  EXPECT_EQ(max_buffered, kLimit);
  EXPECT_EQ(c->pending_output(), 0u);
}

// Committed (reserve/commit) bytes beyond the limit stay where they are: the overshoot is pending; a
// write_ref behind it waits; both are taken in order.
TEST(TcpSendBuffer, CommittedOvershootCountsAsPending) {
  const uint32_t kLimit = 32 * 1024;
  Conn conn(limited(kLimit, kLimit));
  ASSERT_NE(conn.c, nullptr);
  net::Stream* c = conn.c;
  std::string head = pattern_bytes(50 * 1000, 3);
  std::string tail = pattern_bytes(20 * 1000, 4);
  c->write(head);
  EXPECT_EQ(c->pending_output(), 50u * 1000 - kLimit);
  c->write_ref(tail.data(), tail.size());
  EXPECT_EQ(c->pending_output(), 70u * 1000 - kLimit);
  EXPECT_EQ(tcb(c).send_waiting(), tail.size());
  c->write("!");  // behind waiting output: waits too
  EXPECT_EQ(tcb(c).send_waiting(), tail.size() + 1);
  c->flush();
  size_t total = head.size() + tail.size() + 1;
  ASSERT_TRUE(conn.link.run_until([&] { return conn.sink.received.size() == total; }, 10000));
  EXPECT_EQ(conn.sink.received, head + tail + "!");
  EXPECT_EQ(c->pending_output(), 0u);
}

// The static handler's pattern through a small send buffer: on_writable wakes the writer, buffers are
// reused as soon as pending_output() allows, the peer gets every byte in order.
TEST(TcpSendBuffer, ReusedBuffersThroughASmallLimitArriveIntact) {
  Transfer t(limited(64 * 1024, 64 * 1024), pattern_bytes(2 << 20, 5), 48 * 1024);
  ASSERT_TRUE(t.start());
  ASSERT_TRUE(t.link.run_until([&] { return t.client.peer_closed; }, 60000));
  EXPECT_EQ(t.client.received.size(), t.server.body.size());
  EXPECT_TRUE(t.client.received == t.server.body);
  EXPECT_GT(t.server.writable_calls, 10);
  EXPECT_TRUE(std::any_of(t.server.pending_after_write.begin(), t.server.pending_after_write.end(),
                          [](size_t p) { return p > 0; }));
}

// With the default 2 MiB buffer the same writer never waits: each write is taken whole (a 1 MiB response
// through two 256 KiB buffers, as core/static sends it).
TEST(TcpSendBuffer, DefaultLimitTakesAWholeResponse) {
  Transfer t(TcpConfig{}, pattern_bytes(1 << 20, 6), 256 * 1024);
  ASSERT_TRUE(t.start());
  ASSERT_TRUE(t.link.run_until([&] { return t.server.done; }, 1000));
  EXPECT_EQ(t.server.writable_calls, 0);
  for (size_t p : t.server.pending_after_write) EXPECT_EQ(p, 0u);
  ASSERT_TRUE(t.link.run_until([&] { return t.client.peer_closed; }, 60000));
  EXPECT_TRUE(t.client.received == t.server.body);
}

// Why the buffer exists: the static handler's two 256 KiB buffers used to be held by reference until
// acknowledged, so at most 512 KiB could be in flight whatever the window (one refill per round trip). Over a
// 22 ms round trip a 16 MiB response now fills the 1 MiB send window and finishes sooner than through a
// 512 KiB send buffer (which reproduces the old coupling).
TEST(TcpSendBuffer, InFlightIsNotBoundByTheWritersBuffers) {
  auto run = [](uint32_t send_buffer, uint32_t* max_in_flight) {
    TcpConfig conf;
    conf.send_buffer_bytes = send_buffer;
    conf.recv_buffer_bytes = 4 << 20;  // the receiver is not the limit
    Transfer t(conf, pattern_bytes(16 << 20, 9), 256 * 1024);
    for (int from : {0, 1}) {
      t.link.add_fault({.from = from, .match = testing::Match::kAny, .nth = 1, .count = 1 << 30,
                        .action = testing::Action::kDelay, .delay_ms = 10});
    }
    *max_in_flight = 0;
    t.link.tap = [&](int from, const TcpSegment&) {
      if (from == 1 && t.server.stream != nullptr) {
        Tcb& s = tcb(t.server.stream);
        *max_in_flight = std::max<uint32_t>(*max_in_flight, s.snd_nxt() - s.snd_una());
      }
      return true;
    };
    EXPECT_TRUE(t.start());
    uint64_t start = t.link.clock().ms;
    EXPECT_TRUE(t.link.run_until([&] { return t.client.peer_closed; }, 600000));
    EXPECT_TRUE(t.client.received == t.server.body);
    return t.link.clock().ms - start;
  };
  uint32_t in_flight_default = 0, in_flight_coupled = 0;
  uint64_t ms_default = run(TcpConfig{}.send_buffer_bytes, &in_flight_default);
  uint64_t ms_coupled = run(512 * 1024, &in_flight_coupled);
  std::printf("16 MiB over a 22 ms RTT: send buffer 2 MiB: %llu ms (max in flight %u B); 512 KiB: %llu ms (%u B)\n",
              static_cast<unsigned long long>(ms_default), in_flight_default,
              static_cast<unsigned long long>(ms_coupled), in_flight_coupled);
  EXPECT_LE(in_flight_coupled, 512u * 1024);
  EXPECT_GT(in_flight_default, 900u * 1024);
  EXPECT_LT(ms_default * 10, ms_coupled * 8);  // at least 20 % faster
}

// Random loss in both directions with SACK: recovery retransmits from the send buffer's copies (the
// writer's buffers were overwritten long before), byte-exact; the same without SACK (NewReno).
TEST(TcpSendBuffer, ByteExactUnderLossWithAndWithoutSack) {
  for (bool sack : {true, false}) {
    TcpConfig conf = limited(256 * 1024, 256 * 1024);
    conf.sack = sack;
    Transfer t(conf, pattern_bytes(3 << 20, 7), 100 * 1000);
    t.link.set_loss(0.02, sack ? 11 : 12);
    ASSERT_TRUE(t.start());
    ASSERT_TRUE(t.link.run_until([&] { return t.client.peer_closed; }, 600000)) << "sack " << sack;
    EXPECT_TRUE(t.client.received == t.server.body) << "sack " << sack;
    const TcpStats& st = t.link.tcp(1).stats();
    EXPECT_GT(st.retransmits + st.fast_retransmits, 0u);
    if (sack) {
      EXPECT_GT(st.sack_recoveries, 0u);
    } else {
      EXPECT_EQ(st.sack_recoveries, 0u);
    }
  }
}

// close(kAbort) drops only what the send buffer has not taken: the peer gets exactly the taken prefix,
// then a FIN (the kernel backend likewise drops what it has not handed to the kernel).
TEST(TcpSendBuffer, AbortDeliversWhatWasTakenAndDropsTheRest) {
  const uint32_t kLimit = 64 * 1024;
  Conn conn(limited(kLimit, kLimit));
  ASSERT_NE(conn.c, nullptr);
  net::Stream* c = conn.c;
  std::string body = pattern_bytes(200 * 1000, 8);
  c->write_ref(body.data(), body.size());
  c->flush();
  EXPECT_EQ(c->pending_output(), body.size() - kLimit);
  c->close(net::Stream::Close::kAbort);
  ASSERT_TRUE(conn.link.run_until([&] { return conn.sink.peer_closed; }, 10000));
  EXPECT_EQ(conn.sink.received, body.substr(0, kLimit));
  EXPECT_EQ(conn.link.tcp(0).stats().rst_out, 0u);
}

}  // namespace
}  // namespace kosoku::tcpip
