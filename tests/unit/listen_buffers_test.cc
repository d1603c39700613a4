// nginx's `listen ... rcvbuf=SIZE sndbuf=SIZE` (config::ListenConf), read by both network backends: the kernel
// one sets SO_RCVBUF / SO_SNDBUF on the listening socket (accepted sockets inherit them); kosoku's own TCP gives
// connections accepted through the listener that receive buffer (advertised window, SYN-ACK window scale) and
// send buffer (TcpStack::listen_rcvbuf / listen_sndbuf, Tcb::set_buffer_limits). Driven over the in-memory pipe.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/config/conf.hh"
#include "core/config/loader.hh"
#include "core/config/values.hh"
#include "core/net/kernel_stack.hh"
#include "tests/unit/tcp_pipe.hh"

namespace kosoku {
namespace {

using namespace tcpip::testing;
using tcpip::TcpSegment;
using namespace tcpip::tcp_flag;

// ---------------------------------------------------------------- configuration

const config::ListenConf& listen_of(const config::MainConf& m, const std::string& text) {
  for (const config::ListenSocket& ls : m.http.listen_sockets) {
    if (ls.conf.text == text) return ls.conf;
  }
  static config::ListenConf none;
  ADD_FAILURE() << "no listen socket " << text;
  return none;
}

std::string err(const std::string& text) {
  config::LoadResult r = config::load_from_string(text, "t.conf");
  return r.ok() ? "" : r.error.message;
}

TEST(ListenBuffers, ParsesNginxSizes) {
  config::LoadResult r = config::load_from_string(
      "http {\n"
      " server { listen 127.0.0.1:8080 rcvbuf=64k sndbuf=1m; }\n"
      " server { listen 127.0.0.1:8081 sndbuf=12345; }\n"
      " server { listen 127.0.0.1:8082 rcvbuf=1g; }\n"
      " server { listen 127.0.0.1:8083; }\n"
      " server { listen 127.0.0.1:8084 rcvbuf=0 backlog=8; }\n"
      " server { listen 127.0.0.1:8085 default_server; listen 127.0.0.1:8086 rcvbuf=8K; }\n"
      "}\n",
      "t.conf");
  ASSERT_TRUE(r.ok()) << r.error.message;
  struct Want {
    const char* text;
    int rcvbuf, sndbuf;
  } wants[] = {{"127.0.0.1:8080", 65536, 1048576}, {"127.0.0.1:8081", -1, 12345}, {"127.0.0.1:8082", 1 << 30, -1},
               {"127.0.0.1:8083", -1, -1},         {"127.0.0.1:8084", 0, -1},     {"127.0.0.1:8085", -1, -1},
               {"127.0.0.1:8086", 8192, -1}};
  for (const Want& w : wants) {
    const config::ListenConf& l = listen_of(*r.conf, w.text);
    EXPECT_EQ(l.rcvbuf, w.rcvbuf) << w.text;
    EXPECT_EQ(l.sndbuf, w.sndbuf) << w.text;
  }
  EXPECT_EQ(listen_of(*r.conf, "127.0.0.1:8084").backlog, 8);
}

TEST(ListenBuffers, InvalidValuesPointAtTheParameter) {
  EXPECT_EQ(err("http { server { listen 80 rcvbuf=abc; } }"), "t.conf:1:27: invalid rcvbuf \"rcvbuf=abc\"");
  EXPECT_EQ(err("http { server { listen 80 sndbuf=; } }"), "t.conf:1:27: invalid sndbuf \"sndbuf=\"");
  EXPECT_EQ(err("http { server { listen 80 sndbuf=-1; } }"), "t.conf:1:27: invalid sndbuf \"sndbuf=-1\"");
  EXPECT_EQ(err("http { server { listen 80 sndbuf=64kb; } }"), "t.conf:1:27: invalid sndbuf \"sndbuf=64kb\"");
  EXPECT_EQ(err("http { server { listen 80 backlog=9 rcvbuf=2g; } }"),
            "t.conf:1:37: invalid rcvbuf \"rcvbuf=2g\": more than 1g");
  EXPECT_EQ(err("http { server { listen 80 sndbuf=1073741825; } }"),
            "t.conf:1:27: invalid sndbuf \"sndbuf=1073741825\": more than 1g");
  EXPECT_EQ(err("http { server { listen 80 rcvbufx=1k; } }"), "t.conf:1:27: invalid parameter \"rcvbufx=1k\"");
}

TEST(ListenBuffers, OneServerGivesTheOptionsOfAnAddress) {
  // As nginx: socket options for one address come from one listen line ("duplicate listen options").
  EXPECT_EQ(err("http {\n server { listen 80 rcvbuf=8k; }\n server { listen 80 sndbuf=8k; }\n}"),
            "t.conf:3:11: duplicate listen options for 0.0.0.0:80");
  EXPECT_EQ(err("http {\n server { listen 80 rcvbuf=8k; }\n server { listen 80 rcvbuf=8k; }\n}"),
            "t.conf:3:11: duplicate listen options for 0.0.0.0:80");
  // The other servers on that address name it without options and share the socket (and its buffers).
  config::LoadResult r = config::load_from_string(
      "http {\n server { listen 80; server_name a; }\n server { listen 80 sndbuf=32k; server_name b; }\n}",
      "t.conf");
  ASSERT_TRUE(r.ok()) << r.error.message;
  ASSERT_EQ(r.conf->http.listen_sockets.size(), 1u);
  EXPECT_EQ(r.conf->http.listen_sockets[0].conf.sndbuf, 32768);
  EXPECT_EQ(r.conf->http.listen_sockets[0].conf.rcvbuf, -1);
}

// ---------------------------------------------------------------- kernel backend

// The kernel backend's listening socket for 127.0.0.1 (ephemeral port) with these listen values.
int listen_with(int rcvbuf, int sndbuf) {
  config::ListenConf l;
  std::string e;
  EXPECT_TRUE(config::parse_listen_address("127.0.0.1:8080", &l, &e)) << e;
  reinterpret_cast<sockaddr_in*>(&l.addr)->sin_port = 0;  // any free port
  l.rcvbuf = rcvbuf;
  l.sndbuf = sndbuf;
  int fd = net::open_listen_socket(l, &e);
  EXPECT_GE(fd, 0) << e;
  return fd;
}

int sockopt(int fd, int name) {
  int v = 0;
  socklen_t len = sizeof(v);
  EXPECT_EQ(getsockopt(fd, SOL_SOCKET, name, &v, &len), 0);
  return v;
}

// What accepted sockets inherit is checked on the real binary with `ss -tm` (test_kernel_listen_buffers.py).
TEST(ListenBuffers, KernelListeningSocketCarriesThem) {
  // 48k and 24k stay below Linux's default rmem_max / wmem_max (212992): the kernel doubles what it is given.
  int fd = listen_with(48 * 1024, 24 * 1024);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(sockopt(fd, SO_RCVBUF), 2 * 48 * 1024);
  EXPECT_EQ(sockopt(fd, SO_SNDBUF), 2 * 24 * 1024);
  close(fd);
  // Not given: the system's defaults stay (net.ipv4.tcp_rmem / tcp_wmem); a tiny value meets Linux's floor.
  int plain = listen_with(-1, -1);
  int tiny = listen_with(1024, -1);
  ASSERT_GE(plain, 0);
  ASSERT_GE(tiny, 0);
  EXPECT_GE(sockopt(tiny, SO_RCVBUF), 2 * 1024);  // 2304 on Linux 6.x (SOCK_MIN_RCVBUF)
  EXPECT_LT(sockopt(tiny, SO_RCVBUF), sockopt(plain, SO_RCVBUF));
  EXPECT_EQ(sockopt(tiny, SO_SNDBUF), sockopt(plain, SO_SNDBUF));
  close(plain);
  close(tiny);
}

// ---------------------------------------------------------------- kosoku's TCP

constexpr uint16_t kPort = 8080;

config::ListenSocket socket_with(int rcvbuf, int sndbuf) {
  config::ListenSocket ls;
  ls.conf.rcvbuf = rcvbuf;
  ls.conf.sndbuf = sndbuf;
  return ls;
}

// The window and window scale of the server's (side 1) SYN-ACKs.
struct SynAckTap {
  int window = -1;
  int wscale = -1;
  void install(Link& link) {
    link.tap = [this](int from, const TcpSegment& seg) {
      if (from == 1 && seg.header.has(kSyn) && seg.header.has(kAck)) {
        window = seg.header.window;
        wscale = seg.options.has_window_scale ? seg.options.window_scale : -1;
      }
      return true;
    };
  }
};

TEST(ListenBuffers, SynAckWindowAndScaleFollowRcvbuf) {
  struct Case {
    int rcvbuf;
    int window, wscale;
    uint32_t limit;
  } cases[] = {
      {-1, 65535, 3, 256 * 1024},     // TcpConfig::recv_buffer_bytes (256 KiB): 256k >> 3 fits 16 bits
      {32 * 1024, 32768, 0, 32768},   // fits unscaled
      {1 << 20, 65535, 5, 1 << 20},   // 1m >> 4 = 65536 does not fit: scale 5
      {100, 4096, 0, 4096},           // raised to TcpStack::kMinRcvbuf
  };
  for (const Case& k : cases) {
    Link link;
    SynAckTap tap;
    tap.install(link);
    Sink sink;
    Source source;
    config::ListenSocket ls = socket_with(k.rcvbuf, -1);
    ASSERT_NE(connect_kept_open(link, sink, source, kPort, &ls), nullptr) << k.rcvbuf;
    EXPECT_EQ(tap.window, k.window) << k.rcvbuf;
    EXPECT_EQ(tap.wscale, k.wscale) << k.rcvbuf;
    ASSERT_NE(sink.stream, nullptr);
    EXPECT_EQ(tcb(sink.stream).recv_buffer_limit(), k.limit) << k.rcvbuf;
    EXPECT_EQ(tcb(sink.stream).rcv_wscale(), k.wscale) << k.rcvbuf;
  }
}

TEST(ListenBuffers, AdvertisedWindowNeverExceedsRcvbuf) {
  Link link;
  Sink sink;
  sink.consume = false;  // the application does not read: the window closes at the buffer's size
  Source source;
  source.data = pattern_bytes(200'000, 7);
  config::ListenSocket ls = socket_with(24 * 1024, -1);
  ASSERT_NE(connect_kept_open(link, sink, source, kPort, &ls), nullptr);
  link.run_for(3000);
  ASSERT_NE(sink.stream, nullptr);
  EXPECT_EQ(sink.stream->input().size(), 24u * 1024);  // exactly the buffer: then a zero window
  uint32_t max_right = 0;
  int zero_windows = 0;
  for (const SentSegment& s : link.log()) {
    if (s.from != 1 || s.header.has(kSyn)) continue;
    uint32_t wnd = static_cast<uint32_t>(s.header.window) << tcb(sink.stream).rcv_wscale();
    max_right = std::max(max_right, wnd);
    zero_windows += wnd == 0;
  }
  EXPECT_LE(max_right, 24u * 1024);
  EXPECT_GT(zero_windows, 0);
  // Reading reopens it and the rest arrives byte-exact.
  sink.consume = true;
  sink.drain();
  ASSERT_TRUE(link.run_until([&] {
    sink.drain();
    return sink.received.size() == source.data.size();
  }, 20'000));
  EXPECT_EQ(sink.received, source.data);
}

TEST(ListenBuffers, SndbufBoundsTheSendBufferAndTheTransferCompletes) {
  Link link;
  Sink sink;
  Source source;
  config::ListenSocket ls = socket_with(-1, 64 * 1024);
  net::Stream* client = connect_kept_open(link, sink, source, kPort, &ls);
  ASSERT_NE(client, nullptr);
  ASSERT_NE(sink.stream, nullptr);
  tcpip::Tcb& server = tcb(sink.stream);
  EXPECT_EQ(server.send_buffer_limit(), 64u * 1024);
  std::string body = pattern_bytes(2 << 20, 11);
  sink.stream->write_ref(body.data(), body.size());
  sink.stream->flush();
  EXPECT_EQ(server.send_buffered(), 64u * 1024);  // the rest waits, by reference
  EXPECT_EQ(sink.stream->pending_output(), body.size() - 64 * 1024);
  size_t max_buffered = 0;
  ASSERT_TRUE(link.run_until([&] {
    max_buffered = std::max(max_buffered, server.send_buffered());
    return source.received.size() == body.size();
  }, 60'000));
  EXPECT_LE(max_buffered, 64u * 1024);
  EXPECT_EQ(source.received, body);
  // The client's own connection (not accepted through the listener) keeps TcpConfig's sizes.
  EXPECT_EQ(tcb(client).send_buffer_limit(), tcpip::TcpConfig{}.send_buffer_bytes);
  EXPECT_EQ(tcb(client).recv_buffer_limit(), tcpip::TcpConfig{}.recv_buffer_bytes);
}

TEST(ListenBuffers, SynCookieConnectionsTakeThemToo) {
  // Backlog of one: the second SYN is answered with a cookie, whose SYN-ACK (no window scaling) offers
  // min(65535, rcvbuf); the connection the cookie completes gets the listener's buffers. The test plays the
  // client: the server's SYN-ACKs are recorded and kept from side 0's stack (which would reset them).
  Link link;
  Sink sink;
  std::vector<TcpSegment> syn_acks;
  link.tap = [&](int from, const TcpSegment& seg) {
    if (from != 1 || !seg.header.has(kSyn)) return true;
    syn_acks.push_back(seg);
    return false;
  };
  config::ListenSocket ls = socket_with(8 * 1024, 20 * 1024);
  ASSERT_EQ(link.tcp(1).listen_port(kPort, 1, sink, &ls), 0);
  tcpip::TcpHeader h;
  h.dst_port = kPort;
  h.flags = kSyn;
  h.window = 65535;
  h.seq = tcpip::SeqNum{5000};
  tcpip::TcpOptions mss;
  mss.has_mss = true;
  mss.mss = 1460;
  for (uint16_t port : {41000, 41001}) {  // half-open, then overflow
    h.src_port = port;
    link.inject(0, h, mss, {});
    link.run_for(5);
  }
  ASSERT_EQ(link.tcp(1).stats().syn_cookies_sent, 1u);
  ASSERT_EQ(syn_acks.size(), 2u);
  EXPECT_EQ(syn_acks[0].header.window, 8192);  // the regular SYN-ACK
  EXPECT_EQ(syn_acks[1].header.window, 8192);  // the cookie's
  EXPECT_FALSE(syn_acks[1].options.has_window_scale);
  h.src_port = 41001;
  h.seq = tcpip::SeqNum{5001};
  h.ack = syn_acks[1].header.seq + 1;
  h.flags = kAck;
  link.inject(0, h, tcpip::TcpOptions{}, {});
  ASSERT_EQ(link.tcp(1).stats().syn_cookies_ok, 1u);
  ASSERT_NE(sink.stream, nullptr);
  EXPECT_EQ(tcb(sink.stream).recv_buffer_limit(), 8192u);
  EXPECT_EQ(tcb(sink.stream).send_buffer_limit(), 20u * 1024);
}

}  // namespace
}  // namespace kosoku
