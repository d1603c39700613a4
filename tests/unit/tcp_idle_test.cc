// Idle connections in kosoku's TCP (kernel-bypass/tcpip/tcb_idle.cc): keep-alive probes per listening socket
// (nginx `listen ... so_keepalive=`, RFC 9293 §3.8.4 / RFC 1122 §4.2.3.6) and the memory connections hold
// (TcpStats::memory_bytes), through two stacks on the in-memory link.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <vector>

#include "kernel-bypass/tcpip/tcb.hh"
#include "kernel-bypass/tcpip/tcp_metrics.hh"
#include "tests/unit/tcp_pipe.hh"

namespace kosoku::tcpip {
namespace {

using testing::Link, testing::Sink, testing::Source;
using namespace tcp_flag;

constexpr uint16_t kPort = 80;

using testing::tcb;

// A client (side 0) connects to a listener (side 1) whose socket has the given so_keepalive settings, sends
// "hello" and stays idle. Every keep-alive probe the server sends is recorded.
struct Idle {
  Link link;
  Sink sink;
  Source source;
  config::ListenSocket ls;
  net::Stream* client = nullptr;
  uint64_t hello_at = 0;  // when the server received the client's last segment
  bool vanished = false;  // drop everything the client sends
  std::vector<uint64_t> probes;
  std::vector<SeqNum> probe_seqs;
  bool rst_out = false;

  Idle(int so_keepalive, uint32_t idle_s, uint32_t intvl_s, uint32_t cnt, TcpConfig conf = TcpConfig{})
      : link(conf) {
    ls.conf.so_keepalive = so_keepalive;
    ls.conf.keepidle_s = idle_s;
    ls.conf.keepintvl_s = intvl_s;
    ls.conf.keepcnt = cnt;
    link.tap = [this](int from, const TcpSegment& seg) {
      if (from == 0) {
        if (vanished) return false;
        hello_at = link.clock().ms + 1;  // one-way latency 1 ms
        return true;
      }
      if (seg.header.has(kRst)) rst_out = true;
      if (sink.stream != nullptr && seg.payload.empty() && seg.header.flags == kAck &&
          seg.header.seq == tcb(sink.stream).snd_nxt() - 1) {
        probes.push_back(link.clock().ms);
        probe_seqs.push_back(seg.header.seq);
      }
      return true;
    };
    source.data = "hello";
    client = testing::connect_kept_open(link, sink, source, kPort, &ls);
    EXPECT_NE(client, nullptr);
    EXPECT_TRUE(link.run_until([&] { return sink.received == "hello"; }, 1000));
    link.run_for(100);  // delayed ACKs settle: both sides idle
  }
};

TEST(TcpKeepalive, IdleConnectionIsProbedAtTheConfiguredTimes) {
  Idle t(1, 10, 2, 3);  // so_keepalive=10s:2s:3
  ASSERT_TRUE(tcb(t.sink.stream).keepalive());
  EXPECT_FALSE(tcb(t.client).keepalive());  // active opens: off (no so_keepalive on connect)
  uint64_t quiet_since = t.hello_at;
  t.link.run_for(21'000);
  // The live client answers each probe, so the next one comes a full keepidle after that answer (which
  // arrives 2 ms after the probe, one round trip).
  ASSERT_EQ(t.probes.size(), 2u);
  EXPECT_NEAR(static_cast<double>(t.probes[0]), static_cast<double>(quiet_since + 10'000), 2);
  EXPECT_NEAR(static_cast<double>(t.probes[1]), static_cast<double>(t.probes[0] + 2 + 10'000), 2);
  EXPECT_EQ(t.link.tcp(1).stats().keepalive_probes, 2u);
  EXPECT_EQ(t.link.tcp(1).stats().keepalive_timeouts, 0u);
  EXPECT_EQ(tcb(t.sink.stream).state(), TcpState::kEstablished);
  EXPECT_FALSE(t.sink.closed);
  // Data from the peer also counts as an answer: no probe while the client keeps talking.
  for (int i = 0; i < 5; ++i) {
    t.client->write("ping");
    t.client->flush();
    t.link.run_for(5'000);
  }
  EXPECT_EQ(t.probes.size(), 2u);
  t.sink.drain();
  EXPECT_EQ(t.sink.received, "hellopingpingpingpingping");
}

TEST(TcpKeepalive, VanishedPeerIsAbortedAfterKeepcntUnansweredProbes) {
  Idle t(1, 10, 2, 3);
  SeqNum snd_nxt = tcb(t.sink.stream).snd_nxt();
  uint64_t quiet_since = t.hello_at;
  t.vanished = true;
  ASSERT_TRUE(t.link.run_until([&] { return t.sink.closed; }, 30'000));
  uint64_t closed_at = t.link.clock().ms;
  ASSERT_EQ(t.probes.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(static_cast<double>(t.probes[i]), static_cast<double>(quiet_since + 10'000 + 2'000 * i), 2) << i;
    EXPECT_EQ(t.probe_seqs[i], snd_nxt - 1);  // SEG.SEQ = SND.NXT - 1, no data (RFC 9293 §3.8.4)
  }
  // keepcnt probes unanswered: one more interval, then the connection is aborted.
  EXPECT_NEAR(static_cast<double>(closed_at), static_cast<double>(quiet_since + 10'000 + 3 * 2'000), 2);
  EXPECT_EQ(t.sink.close_error, ETIMEDOUT);
  EXPECT_TRUE(t.rst_out);
  EXPECT_EQ(t.link.tcp(1).stats().keepalive_probes, 3u);
  EXPECT_EQ(t.link.tcp(1).stats().keepalive_timeouts, 1u);
  EXPECT_EQ(t.link.tcp(1).open_streams(), 0u);
  EXPECT_EQ(t.link.tcp(1).connections(), 0u);
}

TEST(TcpKeepalive, OffByDefaultAndSoKeepaliveOnUsesTheStackDefaults) {
  TcpConfig conf;
  conf.keepalive_idle_ms = 3'000;  // what `so_keepalive=on` (or an empty field) stands for
  conf.keepalive_interval_ms = 500;
  conf.keepalive_probes = 2;
  {
    Idle t(-1, 0, 0, 0, conf);  // no so_keepalive: the system default, i.e. off
    EXPECT_FALSE(tcb(t.sink.stream).keepalive());
    t.vanished = true;
    t.link.run_for(20'000);
    EXPECT_TRUE(t.probes.empty());
    EXPECT_FALSE(t.sink.closed);
  }
  {
    Idle t(0, 0, 0, 0, conf);  // so_keepalive=off
    EXPECT_FALSE(tcb(t.sink.stream).keepalive());
  }
  {
    Idle t(1, 0, 0, 0, conf);  // so_keepalive=on
    uint64_t quiet_since = t.hello_at;
    t.vanished = true;
    ASSERT_TRUE(t.link.run_until([&] { return t.sink.closed; }, 10'000));
    ASSERT_EQ(t.probes.size(), 2u);
    EXPECT_NEAR(static_cast<double>(t.probes[0]), static_cast<double>(quiet_since + 3'000), 2);
    EXPECT_NEAR(static_cast<double>(t.probes[1]), static_cast<double>(quiet_since + 3'500), 2);
    EXPECT_NEAR(static_cast<double>(t.link.clock().ms), static_cast<double>(quiet_since + 4'000), 2);
    EXPECT_EQ(t.sink.close_error, ETIMEDOUT);
  }
  {
    Idle t(1, 0, 0, 1, conf);  // so_keepalive=::1 → idle and interval from the stack, one probe
    uint64_t quiet_since = t.hello_at;
    t.vanished = true;
    ASSERT_TRUE(t.link.run_until([&] { return t.sink.closed; }, 10'000));
    EXPECT_EQ(t.probes.size(), 1u);
    EXPECT_NEAR(static_cast<double>(t.link.clock().ms), static_cast<double>(quiet_since + 3'500), 2);
  }
}

TEST(TcpKeepalive, NoProbeWhileDataIsOutstanding) {
  // The server has unacknowledged data towards a vanished client: retransmissions, not probes, find out.
  TcpConfig conf;
  conf.max_retransmits = 3;
  Idle t(1, 1, 1, 5, conf);
  t.vanished = true;
  t.sink.stream->write(std::string(1000, 'x'));
  t.sink.stream->flush();
  ASSERT_TRUE(t.link.run_until([&] { return t.sink.closed; }, 60'000));
  EXPECT_TRUE(t.probes.empty());
  EXPECT_EQ(t.sink.close_error, ETIMEDOUT);
  EXPECT_EQ(t.link.tcp(1).stats().keepalive_timeouts, 0u);
  EXPECT_EQ(t.link.tcp(1).stats().timeouts, 1u);
}

TEST(TcpStackMemory, StatsReportWhatConnectionsHold) {
  Link link;
  Sink sinks[8];
  Source sources[8];
  net::Stream* clients[8];
  ASSERT_EQ(link.tcp(1).stats().memory_bytes, 0u);
  // One listener per connection so each Sink tracks its own stream.
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(link.tcp(1).listen_port(static_cast<uint16_t>(kPort + i), 16, sinks[i]), 0);
    sources[i].keep_open = true;
    sources[i].data = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    std::string err;
    clients[i] = link.tcp(0).connect_from(0, link.addr(1), static_cast<uint16_t>(kPort + i), sources[i], &err);
    ASSERT_NE(clients[i], nullptr) << err;
  }
  ASSERT_TRUE(link.run_until([&] {
    for (const Sink& s : sinks) {
      if (s.received.size() != sources[0].data.size()) return false;
    }
    return true;
  }, 1000));
  for (Sink& s : sinks) {
    s.stream->write(std::string(1000, 'r'));
    s.stream->flush();
  }
  link.run_for(200);
  size_t sum = 0;
  for (Sink& s : sinks) {
    ASSERT_EQ(s.stream->pending_output(), 0u);
    sum += tcb(s.stream).memory_bytes();
  }
  size_t per = tcb(sinks[0].stream).memory_bytes();
  EXPECT_EQ(link.tcp(1).stats().memory_bytes, sum);
  EXPECT_EQ(sum, 8 * per);  // idle connections all cost the same
  EXPECT_EQ(per, sizeof(Tcb) + tcb(sinks[0].stream).buffer_bytes());
  std::printf("idle keep-alive connection after one request/response: %zu B (TCB %zu B + input buffer + kept "
              "output block + RACK record %zu B); 8 connections: %zu B in TcpStats::memory_bytes\n",
              per, sizeof(Tcb), tcb(sinks[0].stream).buffer_bytes(), sum);
  RecordProperty("idle_connection_bytes", static_cast<int>(per));
  // The same figures in the stats renderer's section (what `stats` / the status location show per core).
  stats::ExtraSection section{"dpdk_port", {}};
  append_tcp_metrics(link.tcp(1), {{"core", "0"}}, &section);
  auto value = [&](const std::string& name) {
    for (const stats::ExtraMetric& m : section.metrics) {
      if (m.name == name) return m.value;
    }
    return -1.0;
  };
  EXPECT_EQ(value("dpdk_tcp_memory_bytes"), static_cast<double>(sum));
  EXPECT_EQ(value("dpdk_tcp_idle_connection_bytes"), static_cast<double>(sizeof(Tcb)));
  EXPECT_EQ(value("dpdk_tcp_sack_recoveries_total"), 0.0);
  EXPECT_EQ(section.metrics.front().labels.at(0).second, "0");
  // One second without traffic: the buffers go back, an idle keep-alive connection costs its TCB alone.
  link.run_for(1'100);
  for (Sink& s : sinks) EXPECT_EQ(tcb(s.stream).memory_bytes(), sizeof(Tcb));
  EXPECT_EQ(link.tcp(1).stats().memory_bytes, 8 * sizeof(Tcb));
  std::printf("idle for 1 s: %zu B per connection (the TCB; buffers freed)\n", tcb(sinks[0].stream).memory_bytes());
  RecordProperty("idle_1s_connection_bytes", static_cast<int>(tcb(sinks[0].stream).memory_bytes()));
  // The next request and response find fresh buffers.
  clients[3]->write("GET /again HTTP/1.1\r\n\r\n");
  clients[3]->flush();
  ASSERT_TRUE(link.run_until([&] { return sinks[3].received.size() > sources[3].data.size(); }, 1000));
  sinks[3].stream->write(std::string(3000, 's'));
  sinks[3].stream->flush();
  ASSERT_TRUE(link.run_until([&] { return sources[3].received.size() == 4000; }, 1000));
  EXPECT_EQ(sources[3].received.substr(1000), std::string(3000, 's'));
  EXPECT_GT(tcb(sinks[3].stream).memory_bytes(), sizeof(Tcb));
  // Connections closed by the client: the server side is freed at once; the client's TIME-WAIT TCBs stay
  // counted on its side until 2·MSL.
  for (net::Stream* c : clients) c->close(net::Stream::Close::kGraceful);
  ASSERT_TRUE(link.run_until([&] { return link.tcp(1).connections() == 0; }, 5000));
  EXPECT_EQ(link.tcp(1).stats().memory_bytes, 0u);
  EXPECT_GT(link.tcp(0).stats().memory_bytes, 0u);
}

}  // namespace
}  // namespace kosoku::tcpip
