// Stream::write_shared on kosoku's TCP (kernel-bypass/tcpip/tcb_send_buffer.cc): the TCB keeps a reference to
// the writer's net::SharedBuffer in its send buffer instead of copying the bytes (core/static reads file chunks
// into such buffers with io_uring), segments are built from it, and the reference goes when the bytes are
// acknowledged, dropped (abort) or the connection ends; a write under 2 KiB is copied instead. A shared block
// bigger than the room under send_buffer_bytes is split at the limit; the rest waits, counted in
// pending_output(). Two stacks on the in-memory link (tests/unit/tcp_pipe.hh).
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "core/net/shared_buffer.hh"
#include "kernel-bypass/tcpip/tcb.hh"
#include "tests/unit/tcp_pipe.hh"

namespace kosoku::tcpip {
namespace {

using testing::Link, testing::Sink, testing::Source, testing::pattern_bytes, testing::tcb;

constexpr uint16_t kPort = 80;

net::SharedBuffer* filled(const std::string& bytes) {
  net::SharedBuffer* b = net::SharedBuffer::make(bytes.size());
  std::memcpy(b->data(), bytes.data(), bytes.size());
  return b;
}

struct Conn {
  Link link;
  Sink sink;
  Source source;
  net::Stream* c = nullptr;
  explicit Conn(const TcpConfig& conf = TcpConfig{}) : link(conf) {
    c = testing::connect_kept_open(link, sink, source, kPort);
  }
};

TcpConfig limited(uint32_t send_buffer) {
  TcpConfig c;
  c.send_buffer_bytes = send_buffer;
  c.send_window_bytes = send_buffer;
  return c;
}

// The bytes are not copied: the send buffer points into the writer's buffer (changed after write_shared,
// before the first segment left, the change is what the peer receives), holds one reference while the bytes
// are unacknowledged, and lets it go once they are.
TEST(TcpSharedBuffer, SegmentsAreBuiltFromTheWritersBufferNotACopy) {
  Conn conn;
  ASSERT_NE(conn.c, nullptr);
  net::Stream* c = conn.c;
  std::string body = pattern_bytes(200 * 1000, 1);
  net::SharedBuffer* b = filled(body);
  c->write_shared(*b, b->data(), body.size());
  EXPECT_EQ(b->refs(), 2u);  // the writer's and the send buffer's
  EXPECT_EQ(c->pending_output(), 0u);
  EXPECT_EQ(tcb(c).send_buffered(), body.size());
  EXPECT_GE(tcb(c).buffer_bytes(), body.size());  // counted in the connection's memory while held
  std::memset(b->data() + 1000, 'X', 500);
  body.replace(1000, 500, 500, 'X');
  b->unref();  // the writer lets go at once, as core/static does
  EXPECT_EQ(b->refs(), 1u);
  c->flush();
  ASSERT_TRUE(conn.link.run_until([&] { return conn.sink.received.size() == body.size(); }, 5000));
  EXPECT_TRUE(conn.sink.received == body);
  size_t cached = net::SharedBuffer::cached_buffers();
  ASSERT_TRUE(conn.link.run_until([&] { return tcb(c).send_buffered() == 0; }, 1000));
  EXPECT_EQ(net::SharedBuffer::cached_buffers(), cached + 1);  // acknowledged: back in the core's cache
  conn.link.run_for(1100);
  EXPECT_EQ(tcb(c).buffer_bytes(), 0u);
}

// A write shorter than 2 KiB (a small file) is copied behind what is already buffered: no reference is kept,
// the writer's buffer is free at once.
TEST(TcpSharedBuffer, SmallWritesAreCopied) {
  Conn conn;
  ASSERT_NE(conn.c, nullptr);
  net::Stream* c = conn.c;
  std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n\r\n";
  std::string body = pattern_bytes(1024, 6);
  c->write(head);
  net::SharedBuffer* b = filled(body);
  c->write_shared(*b, b->data(), body.size());
  EXPECT_EQ(b->refs(), 1u);
  EXPECT_EQ(tcb(c).send_buffered(), head.size() + body.size());
  std::memset(b->data(), 0, body.size());  // free at once: the peer still gets the original bytes
  b->unref();
  c->flush();
  ASSERT_TRUE(conn.link.run_until([&] { return conn.sink.received.size() == head.size() + body.size(); }, 5000));
  EXPECT_TRUE(conn.sink.received == head + body);
}

// Beyond send_buffer_bytes a shared block is split at the limit: the send buffer never holds more than the
// limit, the rest is pending (by reference, no copy), and every byte arrives in order behind committed bytes.
TEST(TcpSharedBuffer, SplitAtTheLimitAndTakenAsAcksMakeRoom) {
  const uint32_t kLimit = 64 * 1024;
  Conn conn(limited(kLimit));
  ASSERT_NE(conn.c, nullptr);
  net::Stream* c = conn.c;
  std::string head = "HTTP/1.1 200 OK\r\n\r\n";
  std::string body = pattern_bytes(250 * 1000, 2);
  c->write(head);
  net::SharedBuffer* b = filled(body);
  c->write_shared(*b, b->data(), 100 * 1000);
  c->write_shared(*b, b->data() + 100 * 1000, 150 * 1000);
  b->unref();
  EXPECT_EQ(tcb(c).send_buffered(), kLimit);
  EXPECT_EQ(c->pending_output(), head.size() + body.size() - kLimit);
  EXPECT_EQ(b->refs(), 3u);  // the part taken, the rest of the first write, the second write
  size_t max_buffered = 0;
  conn.link.tap = [&](int from, const TcpSegment&) {
    if (from == 0) max_buffered = std::max(max_buffered, tcb(c).send_buffered());
    return true;
  };
  c->flush();
  ASSERT_TRUE(conn.link.run_until([&] { return conn.sink.received.size() == head.size() + body.size(); }, 10000));
  EXPECT_TRUE(conn.sink.received == head + body);
  EXPECT_EQ(max_buffered, kLimit);
  EXPECT_EQ(c->pending_output(), 0u);
}

/// Server: on the first input byte streams `body` in `chunk`-byte shared buffers, a fresh one per chunk, and
/// lets go of each right after write_shared (the test keeps one reference in `seen` to watch the TCB's);
/// writing stops while more than one chunk is pending (core/static's pump). Closes gracefully at the end.
struct SharedServer final : net::StreamHandler, net::AcceptHandler {
  std::string body;
  size_t chunk = 64 * 1024;
  size_t pos = 0;
  bool started = false, closed = false;
  int closed_error = -1;
  net::Stream* stream = nullptr;
  std::vector<net::SharedBuffer*> seen;  // every buffer written (one reference kept by the test)

  net::StreamHandler* on_accept(net::Stream& s, const config::ListenSocket&) override {
    stream = &s;
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
      if (stream->pending_output() > chunk) {
        stream->set_low_water(chunk);
        return;
      }
      size_t n = std::min(chunk, body.size() - pos);
      net::SharedBuffer* b = filled(body.substr(pos, n));
      b->ref();
      seen.push_back(b);
      stream->write_shared(*b, b->data(), n);
      b->unref();
      stream->flush();
      pos += n;
    }
    stream->close(net::Stream::Close::kGraceful);
    pos = body.size() + 1;
  }
  void on_peer_closed(net::Stream&) override {}
  void on_writable(net::Stream&) override {
    if (pos <= body.size()) pump();
  }
  void on_closed(net::Stream&, int error) override {
    closed = true;
    closed_error = error;
    stream = nullptr;
  }
  ~SharedServer() {
    for (net::SharedBuffer* b : seen) b->unref();
  }
};

/// A client that sends "G" and never reads: its window closes and the server's output stays queued.
struct LazyClient final : net::StreamHandler {
  net::Stream* stream = nullptr;
  void on_connected(net::Stream& s) override {
    s.write("G");
    s.flush();
  }
  void on_readable(net::Stream&) override {}
  void on_peer_closed(net::Stream&) override {}
  void on_writable(net::Stream&) override {}
  void on_closed(net::Stream&, int) override { stream = nullptr; }
};

struct Transfer {
  Link link;
  SharedServer server;
  Source client;
  LazyClient lazy;
  bool use_lazy = false;
  Transfer(const TcpConfig& conf, std::string body, size_t chunk) : link(conf) {
    server.body = std::move(body);
    server.chunk = chunk;
    client.data = "G";
    client.keep_open = true;
  }
  bool start() {
    if (link.tcp(1).listen_port(kPort, 16, server) != 0) return false;
    std::string err;
    if (use_lazy) {
      lazy.stream = link.tcp(0).connect_from(0, link.addr(1), kPort, lazy, &err);
      return lazy.stream != nullptr;
    }
    client.stream = link.tcp(0).connect_from(0, link.addr(1), kPort, client, &err);
    return client.stream != nullptr;
  }
  /// Buffers the TCB still references (the test's own reference excluded).
  size_t held() const {
    return static_cast<size_t>(std::count_if(server.seen.begin(), server.seen.end(),
                                             [](net::SharedBuffer* b) { return b->refs() > 1; }));
  }
};

// Random loss both ways, with SACK and without, copying payloads and sending them by reference (zero-copy
// TX: the server's link end takes full-sized payloads through PacketIO::frame_send_payload, the TCP checksum
// summed over header and payload in software, which the client checks): every retransmission is built from
// the shared buffers (the writer kept none), byte-exact, and when the transfer is over no buffer is
// referenced any more.
TEST(TcpSharedBuffer, RetransmissionsComeFromTheSharedBuffersByteExact) {
  for (int run = 0; run < 4; ++run) {
    bool sack = run % 2 == 0, by_reference = run >= 2;
    TcpConfig conf = limited(256 * 1024);
    conf.sack = sack;
    Transfer t(conf, pattern_bytes(3 << 20, 3), 100 * 1000);
    t.link.set_loss(0.02, sack ? 21 : 22);
    t.link.end(1).by_reference = by_reference;
    ASSERT_TRUE(t.start());
    size_t max_held = 0;
    t.link.tap = [&](int, const TcpSegment&) {
      max_held = std::max(max_held, t.held());
      return true;
    };
    ASSERT_TRUE(t.link.run_until([&] { return t.client.peer_closed; }, 600000)) << "sack " << sack;
    EXPECT_TRUE(t.client.received == t.server.body) << "sack " << sack;
    const TcpStats& st = t.link.tcp(1).stats();
    EXPECT_GT(st.retransmits + st.fast_retransmits, 0u);
    // At most the 256 KiB send buffer plus one chunk waiting: 4 buffers of 100 KB (the first and last
    // partly taken), never the whole 3 MiB.
    EXPECT_LE(max_held, 5u) << "sack " << sack;
    EXPECT_GE(max_held, 3u) << "sack " << sack;
    EXPECT_EQ(t.link.tcp(0).stats().bad_checksum, 0u);
    if (by_reference) {
      // Full segments by reference: all but those that straddle two 100 KB buffers (3 MiB / 1448 ≈ 2,172
      // segments and 32 buffers) and the retransmissions that do.
      EXPECT_GT(t.link.end(1).payload_frames, 2100u) << "sack " << sack;
    } else {
      EXPECT_EQ(t.link.end(1).payload_frames, 0u);
    }
    t.link.tap = nullptr;
    ASSERT_TRUE(t.link.run_until([&] { return t.held() == 0; }, 10000)) << "sack " << sack;
  }
}

// A connection reset in mid-transfer lets go of every buffer: the ones in the send buffer and the ones
// still waiting.
TEST(TcpSharedBuffer, ResetReleasesEveryBuffer) {
  TcpConfig conf = limited(64 * 1024);
  conf.recv_buffer_bytes = 32 * 1024;
  Transfer t(conf, pattern_bytes(1 << 20, 4), 48 * 1024);
  t.use_lazy = true;  // never reads: the window closes, output stays queued
  ASSERT_TRUE(t.start());
  ASSERT_TRUE(t.link.run_until([&] { return t.held() >= 2; }, 5000));
  t.link.run_for(200);
  EXPECT_GE(t.held(), 2u);
  t.lazy.stream->close(net::Stream::Close::kAbort);  // unread input: RST
  ASSERT_TRUE(t.link.run_until([&] { return t.server.closed; }, 5000));
  EXPECT_EQ(t.server.closed_error, ECONNRESET);
  EXPECT_EQ(t.held(), 0u);
}

// close(kAbort) without unread input drops what the send buffer has not taken, releasing those references
// at once; the taken prefix is still delivered, then the references go too.
TEST(TcpSharedBuffer, AbortDropsTheWaitingReferences) {
  const uint32_t kLimit = 64 * 1024;
  Conn conn(limited(kLimit));
  ASSERT_NE(conn.c, nullptr);
  net::Stream* c = conn.c;
  std::string body = pattern_bytes(200 * 1000, 5);
  net::SharedBuffer* first = filled(body.substr(0, 50 * 1000));
  net::SharedBuffer* second = filled(body.substr(50 * 1000));
  c->write_shared(*first, first->data(), 50 * 1000);
  c->write_shared(*second, second->data(), 150 * 1000);
  EXPECT_EQ(first->refs(), 2u);
  EXPECT_EQ(second->refs(), 3u);  // split: its taken part and the waiting rest
  c->flush();
  c->close(net::Stream::Close::kAbort);
  EXPECT_EQ(second->refs(), 2u);  // the waiting rest is gone
  ASSERT_TRUE(conn.link.run_until([&] { return conn.sink.peer_closed; }, 10000));
  EXPECT_EQ(conn.sink.received, body.substr(0, kLimit));
  ASSERT_TRUE(conn.link.run_until([&] { return first->refs() == 1 && second->refs() == 1; }, 5000));
  first->unref();
  second->unref();
}

}  // namespace
}  // namespace kosoku::tcpip
