// kosoku's TCP (kernel-bypass/tcpip) against hostile or wasteful peers (issue 4): the out-of-order queue
// is bounded by recv_buffer_bytes, kAbort follows net::Stream's contract (RST only with unread input),
// TIME-WAIT connections hold no buffers and are capped per core, the ARP cache learns only on-link senders
// up to a cap, and a SYN+FIN to a listener is discarded. Two stacks through the in-memory link
// (tcp_pipe.hh); forged segments go through inject().
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <random>

#include "kernel-bypass/tcpip/tcb.hh"
#include "tests/unit/tcp_pipe.hh"

namespace kosoku::tcpip {
namespace {

using testing::Link;
using testing::Sink;
using testing::Source;
using testing::connect_kept_open;
using testing::pattern_bytes;
using namespace tcp_flag;

constexpr uint16_t kPort = 80;

using testing::tcb;

/// Sends `len` bytes of `payload` starting at payload offset `off` as client data at server sequence
/// base + off (a forged segment from side 0, no options).
void inject_data(Link& link, const Tcb& client, const Tcb& server, SeqNum base, const std::string& payload,
                 size_t off, size_t len) {
  TcpHeader h;
  h.src_port = client.tuple().local_port;
  h.dst_port = kPort;
  h.seq = base + static_cast<uint32_t>(off);
  h.ack = server.snd_nxt();
  h.flags = kAck;
  h.window = 65535;
  link.inject(0, h, TcpOptions{}, std::span(reinterpret_cast<const uint8_t*>(payload.data()) + off, len));
}

/// A connection whose client (side 0) stays quiet while the test forges its data with inject_data(); the
/// server's answers are dropped (the client never sent that data). `ok` is false if the handshake failed.
struct Forged {
  Link link;
  Sink sink;
  Source source;
  Tcb* client = nullptr;
  Tcb* server = nullptr;
  SeqNum base;  // the server's RCV.NXT when forging starts (payload offset 0)
  bool ok = false;

  explicit Forged(const TcpConfig& server_conf = TcpConfig{}) : link(TcpConfig{}, server_conf) {
    net::Stream* c = connect_kept_open(link, sink, source, kPort);
    if (c == nullptr) return;
    client = &tcb(c);
    server = &tcb(sink.stream);
    base = server->rcv_nxt();
    link.tap = [](int from, const TcpSegment&) { return from == 0; };
    ok = true;
  }
  void send(const std::string& payload, size_t off, size_t len) {
    inject_data(link, *client, *server, base, payload, off, len);
  }
};

// The reviewer's flood: 20,000 segments of 1400 bytes at RCV.NXT+1, +2, +3, ... One coalesced range of
// 21,399 bytes is held (not 28 MB), the SACK block describes it, and filling the hole delivers every byte.
TEST(TcpHardening, OverlappingOutOfOrderFloodIsCoalesced) {
  Forged f;
  ASSERT_TRUE(f.ok);
  Tcb& server = *f.server;
  ASSERT_TRUE(server.sack_permitted());
  TcpOptions last_ack;
  f.link.tap = [&](int from, const TcpSegment& seg) {
    if (from == 1) last_ack = seg.options;
    return from == 0;
  };
  SeqNum base = f.base;
  constexpr size_t kSegments = 20'000, kLen = 1400;
  std::string payload = pattern_bytes(kSegments + kLen, 11);
  size_t peak_memory = 0;
  for (size_t i = 1; i <= kSegments; ++i) {
    f.send(payload, i, kLen);
    peak_memory = std::max(peak_memory, server.memory_bytes());
  }
  EXPECT_EQ(server.ooo_segments(), 1u);
  EXPECT_EQ(server.ooo_bytes(), kSegments + kLen - 1);
  EXPECT_LE(peak_memory, sizeof(Tcb) + 2 * (kSegments + kLen));  // the string's doubling growth at most
  std::printf("ooo flood: %zu segments -> %zu bytes queued, peak memory_bytes %zu (sizeof(Tcb) %zu)\n",
              kSegments, server.ooo_bytes(), peak_memory, sizeof(Tcb));
  // The last segment repeats all but its last octet: that duplicate first (D-SACK, RFC 2883 §4), then the block.
  ASSERT_GE(last_ack.sack_count, 2);
  EXPECT_EQ(last_ack.sack[0].left, base + static_cast<uint32_t>(kSegments));
  EXPECT_EQ(last_ack.sack[0].right, base + static_cast<uint32_t>(kSegments + kLen - 1));
  EXPECT_EQ(last_ack.sack[1].left, base + 1);
  EXPECT_EQ(last_ack.sack[1].right, base + static_cast<uint32_t>(kSegments + kLen));
  f.send(payload, 0, 1);  // the hole
  EXPECT_EQ(server.ooo_segments(), 0u);
  EXPECT_EQ(f.sink.received, payload);
  EXPECT_EQ(f.link.tcp(1).stats().ooo_dropped, 0u);
}

// Disjoint out-of-order ranges (1-byte holes): the queue stops at max_ooo_segments ranges and never holds
// more than recv_buffer_bytes; the drops are counted.
TEST(TcpHardening, OutOfOrderQueueIsBoundedByTheReceiveBuffer) {
  TcpConfig small;
  small.recv_buffer_bytes = 16 * 1024;
  Forged f(small);
  ASSERT_TRUE(f.ok);
  Tcb& server = *f.server;
  std::string payload = pattern_bytes(64 * 1024, 12);
  for (size_t i = 0; i < 600; ++i) {
    f.send(payload, 2 + i * 101, 100);
    ASSERT_LE(server.ooo_bytes(), small.recv_buffer_bytes);
  }
  EXPECT_EQ(server.ooo_segments(), small.recv_buffer_bytes / 512);
  EXPECT_EQ(server.ooo_bytes(), server.ooo_segments() * 100);
  EXPECT_GT(f.link.tcp(1).stats().ooo_dropped, 0u);
  // Unread in-order data counts too: with 12 KB unconsumed, the queue takes at most 4 KB more.
  Forged g(small);
  ASSERT_TRUE(g.ok);
  g.sink.consume = false;
  g.link.tap = nullptr;  // a real transfer first
  g.client->write(std::string_view(payload.data(), 12 * 1024));
  g.client->flush();
  ASSERT_TRUE(g.link.run_until([&] { return g.sink.stream->input().size() == 12 * 1024; }, 2000));
  g.link.tap = [](int from, const TcpSegment&) { return from == 0; };
  g.base = g.server->rcv_nxt();
  for (size_t off = 1; off < 32 * 1024; off += 1000) g.send(payload, off, 1000);
  EXPECT_LE(g.server->ooo_bytes() + g.sink.stream->input().size(), small.recv_buffer_bytes);
  EXPECT_GT(g.server->ooo_bytes(), 0u);
}

// Random overlapping segments in random order: the queue holds exactly the union of what arrived (no byte
// twice), and the stream delivers the original bytes once the hole at RCV.NXT is filled.
TEST(TcpHardening, RandomOverlapsReassembleExactly) {
  Forged f;
  ASSERT_TRUE(f.ok);
  Tcb& server = *f.server;
  constexpr size_t kTotal = 30'000;
  std::string payload = pattern_bytes(kTotal, 13);
  std::vector<bool> covered(kTotal, false);
  std::mt19937 rng(5);
  for (int i = 0; i < 400; ++i) {
    size_t off = 1 + rng() % (kTotal - 2);
    size_t len = std::min<size_t>(1 + rng() % 1400, kTotal - off);
    f.send(payload, off, len);
    for (size_t k = off; k < off + len; ++k) covered[k] = true;
    ASSERT_EQ(server.ooo_bytes(), static_cast<size_t>(std::count(covered.begin(), covered.end(), true)));
  }
  for (size_t off = 0; off < kTotal; off += 1400) {
    f.send(payload, off, std::min<size_t>(1400, kTotal - off));
  }
  EXPECT_EQ(server.ooo_segments(), 0u);
  EXPECT_EQ(f.sink.received, payload);
}


// net::Stream::Close::kAbort with nothing unread: a FIN, no RST (nginx closing an idle keep-alive connection,
// SIGTERM on idle connections).
TEST(TcpHardening, AbortWithoutUnreadInputSendsFin) {
  Link link;
  Sink sink;
  Source source;
  net::Stream* c = connect_kept_open(link, sink, source, kPort);
  ASSERT_NE(c, nullptr);
  c->write("GET / HTTP/1.1\r\n\r\n");
  c->flush();
  ASSERT_TRUE(link.run_until([&] { return !sink.received.empty(); }, 1000));  // read and consumed
  sink.stream->close(net::Stream::Close::kAbort);
  ASSERT_TRUE(link.run_until([&] { return source.peer_closed; }, 1000));
  EXPECT_EQ(link.tcp(1).stats().rst_out, 0u);
  EXPECT_FALSE(source.closed);  // a FIN, not a reset: the client may still close in its own time
  c->close(net::Stream::Close::kGraceful);
  ASSERT_TRUE(link.run_until([&] { return source.closed && sink.closed; }, 5000));
  EXPECT_EQ(source.close_error, 0);
  EXPECT_EQ(link.tcp(0).stats().rst_in + link.tcp(1).stats().rst_in, 0u);
}

// kAbort with unread input: RST (RFC 2525 §2.17), the peer sees ECONNRESET.
TEST(TcpHardening, AbortWithUnreadInputSendsRst) {
  Link link;
  Sink sink;
  sink.consume = false;
  Source source;
  net::Stream* c = connect_kept_open(link, sink, source, kPort);
  ASSERT_NE(c, nullptr);
  c->write("unread");
  c->flush();
  ASSERT_TRUE(link.run_until([&] { return sink.stream->input().size() == 6; }, 1000));
  sink.stream->close(net::Stream::Close::kAbort);
  ASSERT_TRUE(link.run_until([&] { return source.closed; }, 1000));
  EXPECT_EQ(link.tcp(1).stats().rst_out, 1u);
  EXPECT_EQ(source.close_error, ECONNRESET);
}

// kAbort drops the output not sent yet: the peer gets a prefix of it, then the FIN right after the last byte
// that went out (no RST, no sequence gap). What was not taken is pending_output(): with the default 2 MiB
// send buffer (TcpConfig::send_buffer_bytes) the whole 1 MiB would be taken, so the buffer is 64 KiB here.
TEST(TcpHardening, AbortDropsUnsentOutputThenFin) {
  TcpConfig conf;
  conf.send_buffer_bytes = 64 * 1024;
  Link link(conf);
  Sink sink;
  Source source;
  net::Stream* c = connect_kept_open(link, sink, source, kPort);
  ASSERT_NE(c, nullptr);
  std::string big = pattern_bytes(1 << 20, 21);
  sink.stream->write(big);
  sink.stream->flush();  // the initial window sends a few segments; the rest waits for ACKs
  size_t pending = sink.stream->pending_output();
  sink.stream->close(net::Stream::Close::kAbort);
  ASSERT_TRUE(link.run_until([&] { return source.peer_closed; }, 5000));
  EXPECT_GT(source.received.size(), 0u);
  EXPECT_LT(source.received.size(), big.size());
  EXPECT_LT(big.size() - pending, source.received.size() + 1);
  EXPECT_EQ(source.received, big.substr(0, source.received.size()));
  EXPECT_EQ(link.tcp(1).stats().rst_out, 0u);
  (void)c;
}

/// Server that answers the first input with `reply` and closes at once (nginx closing a keep-alive
/// connection): the server is the active closer and ends in TIME-WAIT.
struct CloseFirst final : net::StreamHandler, net::AcceptHandler {
  std::string reply;
  int accepted = 0;
  net::StreamHandler* on_accept(net::Stream&, const config::ListenSocket&) override {
    ++accepted;
    return this;
  }
  void on_readable(net::Stream& s) override {
    s.consume(s.input().size());
    s.write(reply);
    s.flush();
    s.close(net::Stream::Close::kGraceful);
  }
  void on_peer_closed(net::Stream&) override {}
  void on_writable(net::Stream&) override {}
  void on_closed(net::Stream&, int) override {}
};

/// One request/response on a new connection to `server` (side 1), the client closing after the server.
void exchange(Link& link, const std::string& request) {
  Source client;
  client.keep_open = true;
  client.data = request;
  std::string err;
  net::Stream* c = link.tcp(0).connect_from(0, link.addr(1), kPort, client, &err);
  ASSERT_NE(c, nullptr) << err;
  ASSERT_TRUE(link.run_until([&] { return client.peer_closed; }, 5000));
  c->close(net::Stream::Close::kGraceful);
  ASSERT_TRUE(link.run_until([&] { return client.closed; }, 5000));
}

// A TIME-WAIT connection keeps only its TCB: no input buffer, no output block, no out-of-order queue.
TEST(TcpHardening, TimeWaitHoldsNoBuffers) {
  Link link;
  CloseFirst server;
  server.reply = pattern_bytes(20'000, 31);
  ASSERT_EQ(link.tcp(1).listen_port(kPort, 16, server), 0);
  exchange(link, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  link.run_for(10);
  ASSERT_EQ(link.tcp(1).stats().time_wait, 1u);
  ASSERT_EQ(link.tcp(1).connections(), 1u);
  EXPECT_EQ(link.tcp(1).stats().memory_bytes, sizeof(Tcb));
  std::printf("TIME-WAIT connection: %zu bytes (sizeof(Tcb); buffers freed)\n",
              static_cast<size_t>(link.tcp(1).stats().memory_bytes));
  // It still lasts 2·MSL, then goes with its memory.
  link.run_for(link.tcp(1).config().time_wait_ms + 10);
  EXPECT_EQ(link.tcp(1).connections(), 0u);
  EXPECT_EQ(link.tcp(1).stats().memory_bytes, 0u);
}

// Beyond max_time_wait per core, a closing connection skips TIME-WAIT (Linux tcp_max_tw_buckets) and is
// counted.
TEST(TcpHardening, TimeWaitIsCappedPerCore) {
  TcpConfig conf;
  conf.max_time_wait = 3;
  Link link(TcpConfig{}, conf);
  CloseFirst server;
  server.reply = "HTTP/1.1 204 No Content\r\n\r\n";
  ASSERT_EQ(link.tcp(1).listen_port(kPort, 16, server), 0);
  for (int i = 0; i < 5; ++i) exchange(link, "GET / HTTP/1.1\r\n\r\n");
  link.run_for(10);
  EXPECT_EQ(server.accepted, 5);
  EXPECT_EQ(link.tcp(1).stats().time_wait, 3u);
  EXPECT_EQ(link.tcp(1).stats().time_wait_overflow, 2u);
  EXPECT_EQ(link.tcp(1).connections(), 3u);
  EXPECT_EQ(link.tcp(1).stats().memory_bytes, 3 * sizeof(Tcb));
}

/// An ARP request from (sender_mac, sender) for `target`, broadcast.
std::vector<uint8_t> arp_request(const MacAddr& sender_mac, Ipv4Addr sender, Ipv4Addr target) {
  std::vector<uint8_t> f(EthernetHeader::kSize + ArpPacket::kSize);
  EthernetHeader{MacAddr::broadcast(), sender_mac, kEtherTypeArp}.write(f.data());
  ArpPacket a;
  a.op = ArpPacket::kRequest;
  a.sender_mac = sender_mac;
  a.sender_ip = sender;
  a.target_ip = target;
  a.write(f.data() + EthernetHeader::kSize);
  return f;
}

/// A port that counts what it sends.
struct CountingPort final : PacketIO {
  std::vector<uint8_t> buf;
  size_t frames = 0;
  std::span<uint8_t> frame_begin(size_t max_len) override {
    buf.assign(max_len, 0);
    return buf;
  }
  void frame_send(size_t) override { ++frames; }
  MacAddr mac() const override { return MacAddr{{2, 0, 0, 0, 0, 1}}; }
  uint16_t mtu() const override { return 1500; }
};

// The neighbour cache learns only on-link senders (still answering the others' requests) and at most
// ArpCache::kMaxEntries of them; the rest is counted. Traffic to ever new on-link addresses is bounded too.
TEST(TcpHardening, ArpCacheLearnsOnLinkSendersUpToTheCap) {
  CountingPort port;
  InterfaceConfig ic;
  ic.address = *Ipv4Addr::parse("10.1.0.1");
  ic.prefix_len = 16;
  Interface ifc(port, ic);
  MacAddr mac{{2, 0, 0, 0, 0, 7}};
  Ipv4Addr off_link = *Ipv4Addr::parse("192.168.7.7");
  ifc.receive_frame(arp_request(mac, off_link, ic.address), 0);
  EXPECT_FALSE(ifc.arp().contains(off_link));
  EXPECT_EQ(ifc.stats().arp_not_on_link, 1u);
  EXPECT_EQ(ifc.stats().arp_replies_out, 1u);  // answered all the same (the reply needs no entry)
  constexpr uint32_t kSenders = 3000;
  for (uint32_t i = 0; i < kSenders; ++i) {
    ifc.receive_frame(arp_request(mac, Ipv4Addr{ic.address.value + 1 + i}, ic.address), 0);
  }
  EXPECT_EQ(ifc.arp().size(), ArpCache::kMaxEntries);
  EXPECT_EQ(ifc.stats().arp_cache_full, kSenders - ArpCache::kMaxEntries);
  EXPECT_TRUE(ifc.arp().lookup(Ipv4Addr{ic.address.value + 1}, 1));  // the first ones stay usable
  // Replication from another core obeys the same cap.
  EXPECT_FALSE(ifc.learn(Ipv4Addr{ic.address.value + 9000}, mac, 0));
  // Sending to a new on-link address with a full cache: dropped, no entry.
  Ipv4Addr fresh{ic.address.value + 9001};
  EXPECT_FALSE(ifc.send_ipv4(fresh, kProtoTcp, 20, [](std::span<uint8_t>) {}, 0));
  EXPECT_FALSE(ifc.arp().contains(fresh));
  EXPECT_EQ(ifc.arp().size(), ArpCache::kMaxEntries);
}

// A SYN+FIN to a listener is discarded (counted), not answered with a SYN-ACK; a plain SYN still is.
TEST(TcpHardening, SynFinToAListenerIsDiscarded) {
  Link link;
  Sink sink;
  ASSERT_EQ(link.tcp(1).listen_port(kPort, 16, sink), 0);
  TcpHeader h;
  h.src_port = 40000;
  h.dst_port = kPort;
  h.seq = SeqNum{777};
  h.flags = kSyn | kFin;
  h.window = 65535;
  link.inject(0, h, TcpOptions{}, {});
  link.run_for(5);
  EXPECT_EQ(link.tcp(1).stats().syn_fin_dropped, 1u);
  EXPECT_EQ(link.tcp(1).stats().syn_in, 0u);
  EXPECT_EQ(link.tcp(1).connections(), 0u);
  EXPECT_EQ(link.tcp(1).stats().segments_out, 0u);
  h.flags = kSyn;
  link.inject(0, h, TcpOptions{}, {});
  EXPECT_EQ(link.tcp(1).stats().syn_in, 1u);
  EXPECT_EQ(link.tcp(1).connections(), 1u);
}

}  // namespace
}  // namespace kosoku::tcpip
