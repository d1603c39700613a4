// Operability of the DPDK backend (issue 4): the idle back-off's decisions (dpdk/idle_backoff.hh), the
// `idle_sleep` directive and `kosoku -t`'s EAL argument checks (config/eal_args.hh) with file:line:col errors,
// and, in kosoku's own TCP over the in-memory pipe: data on the ACK that completes a SYN cookie, the
// worker_connections alert, and the RSTs TcpStack::reset_all sends to the connections left at exit.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/base/log.hh"
#include "core/config/conf.hh"
#include "core/config/eal_args.hh"
#include "core/config/loader.hh"
#include "kernel-bypass/dpdk/idle_backoff.hh"
#include "kernel-bypass/tcpip/tcb.hh"
#include "tests/unit/tcp_pipe.hh"

namespace kosoku {
namespace {

using tcpip::SeqNum;
using tcpip::TcpHeader;
using tcpip::TcpOptions;
using tcpip::TcpSegment;
using namespace tcpip::tcp_flag;
using namespace tcpip::testing;

// ---------------------------------------------------------------- idle back-off

TEST(DpdkIdleBackoff, SpinsThenEscalatesToTheCap) {
  dpdk::IdleBackoff b(200'000);
  uint64_t t = 1'000'000'000;
  b.worked(t);
  EXPECT_EQ(b.next_sleep_ns(t + 50'000, UINT64_MAX), 0u);  // within the 100 us spin
  t += dpdk::IdleBackoff::kSpinNs;
  std::vector<uint64_t> steps;
  for (int i = 0; i < 7; ++i) steps.push_back(b.next_sleep_ns(t, UINT64_MAX));
  EXPECT_EQ(steps, (std::vector<uint64_t>{10'000, 20'000, 40'000, 80'000, 160'000, 200'000, 200'000}));
  b.worked(t + 1);  // any work: busy-poll again, the escalation restarts
  EXPECT_EQ(b.next_sleep_ns(t + 2, UINT64_MAX), 0u);
  EXPECT_EQ(b.next_sleep_ns(t + 1 + dpdk::IdleBackoff::kSpinNs, UINT64_MAX), 10'000u);
}

TEST(DpdkIdleBackoff, NeverSleepsPastTheNextTimer) {
  dpdk::IdleBackoff b(500'000);
  uint64_t t = 5'000'000'000;
  b.worked(t - 1'000'000);
  for (int i = 0; i < 6; ++i) b.next_sleep_ns(t, UINT64_MAX);  // escalated to 320 us
  EXPECT_EQ(b.next_sleep_ns(t, t + 30'000), 30'000u);       // cut at the deadline
  EXPECT_EQ(b.next_sleep_ns(t, t + 1'000), 0u);             // too close: keep polling
  EXPECT_EQ(b.next_sleep_ns(t, t), 0u);                     // due now
}

TEST(DpdkIdleBackoff, OffMeansBusyPoll) {
  dpdk::IdleBackoff b(0);
  EXPECT_FALSE(b.enabled());
  EXPECT_EQ(b.next_sleep_ns(10'000'000'000, UINT64_MAX), 0u);
  dpdk::IdleBackoff tiny(5'000);  // a cap below the first step
  tiny.worked(0);
  EXPECT_EQ(tiny.next_sleep_ns(1'000'000, UINT64_MAX), 5'000u);
}

// ---------------------------------------------------------------- configuration

std::string dpdk_conf(const std::string& eal, const std::string& extra = "", int workers = 1) {
  return "worker_processes " + std::to_string(workers) + ";\nnetwork dpdk;\ndpdk {\n    eal " + eal +
         ";\n    address 10.99.0.2/24;\n" + extra + "}\nhttp { server { listen 80; } }\n";
}

std::string load_error(const std::string& text) {
  config::LoadResult r = config::load_from_string(text, "t.conf");
  EXPECT_FALSE(r.ok()) << "expected an error for:\n" << text;
  return r.error.message;
}

TEST(DpdkConfig, IdleSleepDirective) {
  config::LoadResult r = config::load_from_string(dpdk_conf("-l 0 --no-huge"), "t.conf");
  ASSERT_TRUE(r.ok()) << r.error.message;
  EXPECT_EQ(r.conf->network.dpdk.idle_sleep_us, 200u);  // default
  for (auto [text, us] : std::vector<std::pair<std::string, uint32_t>>{
           {"off", 0}, {"1us", 1}, {"500us", 500}, {"2ms", 2000}, {"10ms", 10000}, {"1", 1000}, {"10", 10000}}) {
    r = config::load_from_string(dpdk_conf("-l 0", "    idle_sleep " + text + ";\n"), "t.conf");
    ASSERT_TRUE(r.ok()) << text << ": " << r.error.message;
    EXPECT_EQ(r.conf->network.dpdk.idle_sleep_us, us) << text;
  }
  EXPECT_EQ(load_error(dpdk_conf("-l 0", "    idle_sleep 11ms;\n")),
            "t.conf:6:16: invalid value \"11ms\" in \"idle_sleep\" directive, it must be \"off\" or 1us..10ms "
            "(\"200us\", \"1ms\", \"1\" = 1ms)");
  EXPECT_EQ(load_error(dpdk_conf("-l 0", "    idle_sleep 0us;\n")).substr(0, 12), "t.conf:6:16:");
  // A bare number is milliseconds (nginx's msec-valued directives): 200 is 200 ms, beyond the cap.
  EXPECT_EQ(load_error(dpdk_conf("-l 0", "    idle_sleep 200;\n")).substr(0, 12), "t.conf:6:16:");
  EXPECT_EQ(load_error(dpdk_conf("-l 0", "    idle_sleep 0;\n")).substr(0, 12), "t.conf:6:16:");
  EXPECT_EQ(load_error(dpdk_conf("-l 0", "    idle_sleep ms;\n")).substr(0, 12), "t.conf:6:16:");
  EXPECT_EQ(load_error(dpdk_conf("-l 0", "    idle_sleep off;\n    idle_sleep 1ms;\n")),
            "t.conf:7:5: \"idle_sleep\" directive is duplicate");
}

TEST(DpdkConfig, TcpTunables) {
  // `congestion_control cubic|reno;` (Linux tcp_congestion_control) and `rto_min TIME;` (Linux route rto_min;
  // nginx time syntax: a bare number is seconds).
  config::LoadResult r = config::load_from_string(dpdk_conf("-l 0 --no-huge"), "t.conf");
  ASSERT_TRUE(r.ok()) << r.error.message;
  EXPECT_EQ(r.conf->network.dpdk.congestion_control, config::TcpCongestionControl::kCubic);  // defaults
  EXPECT_EQ(r.conf->network.dpdk.rto_min_ms, 200u);
  r = config::load_from_string(dpdk_conf("-l 0", "    congestion_control reno;\n    rto_min 20ms;\n"), "t.conf");
  ASSERT_TRUE(r.ok()) << r.error.message;
  EXPECT_EQ(r.conf->network.dpdk.congestion_control, config::TcpCongestionControl::kReno);
  EXPECT_EQ(r.conf->network.dpdk.rto_min_ms, 20u);
  for (auto [text, ms] : std::vector<std::pair<std::string, uint32_t>>{{"1ms", 1}, {"1s", 1000}, {"60s", 60000},
                                                                        {"2", 2000}, {"1s500ms", 1500}}) {
    r = config::load_from_string(dpdk_conf("-l 0", "    rto_min " + text + ";\n"), "t.conf");
    ASSERT_TRUE(r.ok()) << text << ": " << r.error.message;
    EXPECT_EQ(r.conf->network.dpdk.rto_min_ms, ms) << text;
  }
  EXPECT_EQ(load_error(dpdk_conf("-l 0", "    congestion_control bbr;\n")),
            "t.conf:6:24: invalid value \"bbr\" in \"congestion_control\" directive, it must be \"cubic\" or "
            "\"reno\"");
  EXPECT_EQ(load_error(dpdk_conf("-l 0", "    rto_min 61s;\n")),
            "t.conf:6:13: invalid value \"61s\" in \"rto_min\" directive, it must be 1ms..60s (\"200ms\")");
  EXPECT_EQ(load_error(dpdk_conf("-l 0", "    rto_min 0;\n")).substr(0, 12), "t.conf:6:13:");
  EXPECT_EQ(load_error(dpdk_conf("-l 0", "    rto_min fast;\n")).substr(0, 12), "t.conf:6:13:");
  EXPECT_EQ(load_error(dpdk_conf("-l 0", "    rto_min 20ms;\n    rto_min 30ms;\n")),
            "t.conf:7:5: \"rto_min\" directive is duplicate");
}

TEST(DpdkConfig, TxZeroCopy) {
  // `tx_zero_copy on|off;` (default on) and `tx_zero_copy_buffers N;` (DMA-able 256 KiB buffers per core on a
  // PCI port, default 16, 1..4096).
  config::LoadResult r = config::load_from_string(dpdk_conf("-l 0 --no-huge"), "t.conf");
  ASSERT_TRUE(r.ok()) << r.error.message;
  EXPECT_TRUE(r.conf->network.dpdk.tx_zero_copy);
  EXPECT_EQ(r.conf->network.dpdk.tx_zero_copy_buffers, 16u);
  r = config::load_from_string(dpdk_conf("-l 0", "    tx_zero_copy off;\n    tx_zero_copy_buffers 64;\n"), "t.conf");
  ASSERT_TRUE(r.ok()) << r.error.message;
  EXPECT_FALSE(r.conf->network.dpdk.tx_zero_copy);
  EXPECT_EQ(r.conf->network.dpdk.tx_zero_copy_buffers, 64u);
  EXPECT_EQ(load_error(dpdk_conf("-l 0", "    tx_zero_copy yes;\n")),
            "t.conf:6:18: invalid value \"yes\" in \"tx_zero_copy\" directive, it must be \"on\" or \"off\"");
  EXPECT_EQ(load_error(dpdk_conf("-l 0", "    tx_zero_copy_buffers 0;\n")),
            "t.conf:6:26: invalid value \"0\" in \"tx_zero_copy_buffers\" directive, it must be 1..4096");
  EXPECT_EQ(load_error(dpdk_conf("-l 0", "    tx_zero_copy_buffers 4097;\n")).substr(0, 13), "t.conf:6:26: ");
}

TEST(DpdkConfig, EalArgumentsThatEalAccepts) {
  // The forms the repository's configs, tests and benches use.
  for (const char* eal : {
           "-l 0 --no-huge -m 128 --no-shconf --no-pci --no-telemetry --log-level=notice "
           "--vdev=net_tap0,iface=dtap0",
           "-l 0 --in-memory --iova-mode=pa --no-telemetry --log-level=notice",
           "-l0-1,3 --file-prefix kosoku-itest-1 --vdev=net_memif0,role=server,socket=/tmp/m.sock,socket-abstract=no",
           "-c 0x3 -n 4 --socket-mem=64,64 -a 0000:00:03.0 -b 00:04.1,foo=bar --proc-type=auto",
           "--lcores=(0,1)@(0-1),2@3 --vdev net_af_packet0,iface=veth0 --huge-unlink=always --syslog",
           "--main-lcore 0 -l 0 --vdev=eth_ring0 --vdev=net_null0 --vdev=net_virtio_user0,path=/dev/vhost-net",
       }) {
    config::LoadResult r = config::load_from_string(dpdk_conf(eal), "t.conf");
    EXPECT_TRUE(r.ok()) << eal << ": " << r.error.message;
  }
}

TEST(DpdkConfig, EalArgumentErrorsPointAtTheArgument) {
  // {eal arguments, error}: "    eal " is 8 columns, the first argument starts at 4:9.
  const std::pair<const char*, const char*> kCases[] = {
      {"-l 0 --no-hugepages",
       "t.conf:4:14: \"eal\": unknown EAL option \"--no-hugepages\" (DPDK 22.11)"},
      {"-w 00:03.0",
       "t.conf:4:9: \"eal\": unknown EAL option \"-w\" (removed in DPDK 21.11: use -a) (DPDK 22.11)"},
      {"--no-pci -l",
       "t.conf:4:18: \"eal\": EAL option \"-l\" needs a value"},
      {"--no-huge=yes",
       "t.conf:4:9: \"eal\": EAL option \"--no-huge\" takes no value"},
      {"-l 0-",
       "t.conf:4:12: \"eal\": invalid value of EAL option \"-l\": \"0-\" is not an lcore id or a range N-M"},
      {"-l 0,200",
       "t.conf:4:12: \"eal\": invalid value of EAL option \"-l\": lcore id 200 is not below 128 (RTE_MAX_LCORE)"},
      {"-c 0xg",
       "t.conf:4:12: \"eal\": invalid value of EAL option \"-c\": \"0xg\" is not a hexadecimal mask"},
      {"--lcores=(0,1@2",
       "t.conf:4:9: \"eal\": invalid value of EAL option \"--lcores\": unbalanced parentheses"},
      {"-l 0 --vdev=net_pcap0,iface=a",
       "t.conf:4:14: \"eal\": invalid value of EAL option \"--vdev\": --vdev \"net_pcap0\" names no driver "
       "linked into kosoku (net_tap, net_tun, net_af_packet, net_memif, net_ring, net_null, net_virtio_user)"},
      {"-l 0 --vdev=net_tap-0",
       "t.conf:4:14: \"eal\": invalid value of EAL option \"--vdev\": --vdev device name \"net_tap-0\" has "
       "a '-'"},
      {"-l 0 --vdev net_tap0,iface=a_very_long_name0",
       "t.conf:4:21: \"eal\": invalid value of EAL option \"--vdev\": iface=a_very_long_name0 of net_tap0 is "
       "not a Linux interface name (1..15 bytes)"},
      {"-l 0 --vdev=net_tap0,iface",
       "t.conf:4:14: \"eal\": invalid value of EAL option \"--vdev\": device argument \"iface\" of net_tap0 is "
       "not key=value"},
      {"-l 0 -a 0000:00:3.0",
       "t.conf:4:17: \"eal\": invalid value of EAL option \"-a\": \"0000:00:3.0\" is not a PCI address "
       "(DDDD:BB:DD.F or BB:DD.F)"},
      {"-l 0 --proc-type=main",
       "t.conf:4:14: \"eal\": invalid value of EAL option \"--proc-type\": \"main\" is not primary, secondary "
       "or auto"},
      {"-l 0 -m 1G",
       "t.conf:4:17: \"eal\": invalid value of EAL option \"-m\": \"1G\" is not a number"},
      {"-l 0 -c 1",
       "t.conf:4:17: \"eal\": EAL option \"-c\" repeats the lcores \"-l\" already set (use one of -l, -c, "
       "--lcores)"},
      {"-l 0 stray",
       "t.conf:4:14: \"eal\": unexpected EAL argument \"stray\" (not an option)"},
  };
  for (const auto& [eal, error] : kCases) EXPECT_EQ(load_error(dpdk_conf(eal)), error) << eal;
  // The vdev bus matches drivers by name prefix, as EAL does: "net_tapx0" is a net_tap device.
  EXPECT_TRUE(config::load_from_string(dpdk_conf("-l 0 --vdev=net_tapx0,iface=a"), "t.conf").ok());
  // Arguments spread over several `eal` lines keep their own positions.
  EXPECT_EQ(load_error("network dpdk;\ndpdk {\n    eal -l 0;\n    eal --no-huge\n        --vdev=foo0;\n"
                       "    address 10.99.0.2/24;\n}\n"),
            "t.conf:5:9: \"eal\": invalid value of EAL option \"--vdev\": --vdev \"foo0\" names no driver linked "
            "into kosoku (net_tap, net_tun, net_af_packet, net_memif, net_ring, net_null, net_virtio_user)");
}

TEST(DpdkConfig, EalLongOptionsTakeUniquePrefixes) {
  // rte_eal_init parses with getopt_long: a unique prefix is the option (checked against DPDK 22.11's EAL:
  // "--no-hu", "--vd=...", "--log-l=notice", "--main-l=0", "--no-te" start it; "--no-h", "--soc=1", "--hu" are
  // refused as ambiguous).
  for (const char* eal : {"-l 0 --no-hu -m 128 --no-shc --no-pc --no-te --log-l=notice --vd=net_tap0,iface=t0",
                          "-l 0 --in-mem --iova=va --main-l=0 --vde net_null0 --file-p kosoku-x",
                          "--lc=0@0 --socket-m=64 --trace-b=2M --trace-d=/tmp --huge-u=always"}) {
    config::LoadResult r = config::load_from_string(dpdk_conf(eal), "t.conf");
    EXPECT_TRUE(r.ok()) << eal << ": " << r.error.message;
  }
  const std::pair<const char*, const char*> kCases[] = {
      {"-l 0 --no-h",
       "t.conf:4:14: \"eal\": ambiguous EAL option \"--no-h\" (possibilities: --no-hpet --no-huge; DPDK 22.11)"},
      {"--soc=64 -l 0",
       "t.conf:4:9: \"eal\": ambiguous EAL option \"--soc\" (possibilities: --socket-limit --socket-mem; "
       "DPDK 22.11)"},
      {"-l 0 --l=notice",
       "t.conf:4:14: \"eal\": ambiguous EAL option \"--l\" (possibilities: --lcores --legacy-mem --log-level; "
       "DPDK 22.11)"},
      // A prefix resolves first, then the option's own rules apply under its full name.
      {"-l 0 --no-hug=1", "t.conf:4:14: \"eal\": EAL option \"--no-huge\" takes no value"},
      {"-l 0 --vd=net_pcap0",
       "t.conf:4:14: \"eal\": invalid value of EAL option \"--vdev\": --vdev \"net_pcap0\" names no driver "
       "linked into kosoku (net_tap, net_tun, net_af_packet, net_memif, net_ring, net_null, net_virtio_user)"},
      {"-l 0 --lc=1", "t.conf:4:14: \"eal\": EAL option \"--lcores\" repeats the lcores \"-l\" already set (use "
                      "one of -l, -c, --lcores)"},
      // Not a prefix of any option: unknown, as before.
      {"-l 0 --no-hugepages", "t.conf:4:14: \"eal\": unknown EAL option \"--no-hugepages\" (DPDK 22.11)"},
  };
  for (const auto& [eal, error] : kCases) EXPECT_EQ(load_error(dpdk_conf(eal)), error) << eal;
  // An exact name wins over the longer ones it is a prefix of (--trace vs --trace-dir, --trace-bufsz ...).
  EXPECT_TRUE(config::load_from_string(dpdk_conf("-l 0 --trace=eal --syslog"), "t.conf").ok());
}

TEST(DpdkConfig, EalLcoresLeaveRoomForTheWorkers) {
  // Every worker registers an lcore of its own (rte_thread_register): -l 0-99 leaves 28 for 100 workers.
  EXPECT_EQ(load_error(dpdk_conf("-l 0-99", "", 100)),
            "t.conf:4:12: \"eal\": the EAL lcores (100) plus worker_processes (100) exceed 128 (RTE_MAX_LCORE): "
            "every worker registers an lcore of its own");
  EXPECT_TRUE(config::load_from_string(dpdk_conf("-l 0-27", "", 100), "t.conf").ok());
  // The checker on its own: the index of the culprit (the value, not the option).
  std::vector<std::string> args = {"--no-pci", "-l", "0,x"};
  auto e = config::check_eal_args(args, 1);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->arg, 2u);
  EXPECT_FALSE(config::check_eal_args(std::vector<std::string>{"-l", "0"}, 127).has_value());
}

// ---------------------------------------------------------------- TCP

constexpr uint16_t kPort = 8080;

// Records the server's SYN-ACKs (ISN per client port) and drops them, so the test plays the client by hand.
struct HandshakeTap {
  std::vector<std::pair<uint16_t, uint32_t>> syn_acks;  // client port, server ISN
  void install(Link& link) {
    link.tap = [this](int from, const TcpSegment& seg) {
      if (from == 1 && seg.header.has(kSyn) && seg.header.has(kAck)) {
        syn_acks.emplace_back(seg.header.dst_port, seg.header.seq.v);
        return false;
      }
      return true;
    };
  }
};

void inject_syn(Link& link, uint16_t port, uint32_t seq) {
  TcpHeader h;
  h.src_port = port;
  h.dst_port = kPort;
  h.seq = SeqNum{seq};
  h.flags = kSyn;
  h.window = 65535;
  TcpOptions o;
  o.has_mss = true;
  o.mss = 1460;
  link.inject(0, h, o, {});
}

TEST(TcpSynCookie, DataOnTheCompletingAckIsAcceptedAtOnce) {
  Link link;
  Sink sink;
  HandshakeTap tap;
  tap.install(link);
  ASSERT_EQ(link.tcp(1).listen_port(kPort, 1, sink), 0);
  inject_syn(link, 41000, 1000);  // half-open: fills the backlog of one
  link.run_for(5);                // (ARP first, then the SYN-ACK)
  inject_syn(link, 41001, 5000);  // overflow: answered with a cookie
  link.run_for(5);
  ASSERT_EQ(tap.syn_acks.size(), 2u);
  EXPECT_EQ(link.tcp(1).stats().syn_cookies_sent, 1u);
  uint32_t cookie_isn = tap.syn_acks[1].second;
  // The third segment of the handshake carries the request (as a client with TCP Fast Open off may).
  const std::string request = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  TcpHeader h;
  h.src_port = 41001;
  h.dst_port = kPort;
  h.seq = SeqNum{5001};
  h.ack = SeqNum{cookie_isn + 1};
  h.flags = kAck | kPsh;
  h.window = 65535;
  link.inject(0, h, TcpOptions{}, std::span(reinterpret_cast<const uint8_t*>(request.data()), request.size()));
  EXPECT_EQ(link.tcp(1).stats().syn_cookies_ok, 1u);
  EXPECT_EQ(sink.accepted, 1);
  sink.drain();
  EXPECT_EQ(sink.received, request);  // delivered on arrival: no retransmission needed
  tcpip::Tcb& server = *static_cast<tcpip::Tcb*>(sink.stream);
  EXPECT_EQ(server.rcv_nxt().v, 5001u + request.size());
  // The server acknowledges the data (delayed ACK) and never asked for it again.
  link.run_for(100);
  bool acked = false;
  for (const SentSegment& s : link.log()) {
    if (s.from == 1 && s.header.dst_port == 41001 && s.header.has(kAck) && !s.header.has(kSyn) &&
        s.header.ack.v == 5001u + request.size()) {
      acked = true;
    }
    if (s.from == 1 && s.header.dst_port == 41001 && !s.header.has(kSyn)) {
      EXPECT_NE(s.header.ack.v, 5001u) << "the server ACKed the cookie ACK without its data";
    }
  }
  EXPECT_TRUE(acked);
}

TEST(TcpMaxStreams, DroppedSynsAreCountedAndLoggedOncePerSecond) {
  tcpip::TcpConfig conf;
  conf.max_streams = 1;
  Link link(conf);
  Sink sink;
  Source first;
  ASSERT_NE(connect_kept_open(link, sink, first, kPort), nullptr);
  base::ErrorLog& log = base::ErrorLog::global();
  base::LogLevel saved = log.level();
  log.set_level(base::LogLevel::kWarn);
  uint64_t before = log.lines();
  for (uint16_t p = 0; p < 3; ++p) inject_syn(link, static_cast<uint16_t>(42000 + p), 100 + p);
  EXPECT_EQ(link.tcp(1).stats().refused_max_streams, 3u);
  ASSERT_EQ(log.lines(), before + 1) << "one alert per second per core";
  std::vector<std::string> lines = log.recent(1);
  EXPECT_NE(lines.back().find("[alert]"), std::string::npos) << lines.back();
  EXPECT_NE(lines.back().find("1 worker_connections are not enough, connection from 10.0.0.1:42000 to port 8080 "
                              "dropped (1 open on this core; 1 refused so far)"),
            std::string::npos)
      << lines.back();
  link.clock().ms += 1000;  // a second later: the next drop is logged, with the suppressed count
  inject_syn(link, 42010, 500);
  ASSERT_EQ(log.lines(), before + 2);
  lines = log.recent(1);
  EXPECT_NE(lines.back().find("4 refused so far"), std::string::npos) << lines.back();
  EXPECT_NE(lines.back().find("2 similar messages suppressed"), std::string::npos) << lines.back();
  log.set_level(saved);
}

// SYNs that find the listen backlog full of half-open connections: counted, answered with cookies, and one warning
// per second per core (Linux's "Possible SYN flooding on port N"), with the suppressed count after it.
TEST(TcpSynBacklog, FullBacklogIsCountedAndLoggedOncePerSecond) {
  Link link;
  Sink sink;
  ASSERT_EQ(link.tcp(1).listen_port(kPort, 1, sink), 0);
  base::ErrorLog& log = base::ErrorLog::global();
  base::LogLevel saved = log.level();
  log.set_level(base::LogLevel::kWarn);
  inject_syn(link, 43000, 1000);  // half-open: fills the backlog of one
  uint64_t before = log.lines();
  for (uint16_t p = 1; p <= 3; ++p) inject_syn(link, static_cast<uint16_t>(43000 + p), 2000 + p);
  EXPECT_EQ(link.tcp(1).stats().syn_backlog_full, 3u);
  EXPECT_EQ(link.tcp(1).stats().syn_cookies_sent, 3u);
  ASSERT_EQ(log.lines(), before + 1) << "one warning per second per core";
  std::string line = log.recent(1).back();
  EXPECT_NE(line.find("[warn]"), std::string::npos) << line;
  EXPECT_NE(line.find("possible SYN flooding on port 8080: 1 half-open connections fill its backlog, sending SYN "
                      "cookies (1 such SYNs so far on this core)"),
            std::string::npos)
      << line;
  link.clock().ms += 1000;
  inject_syn(link, 43010, 3000);
  ASSERT_EQ(log.lines(), before + 2);
  line = log.recent(1).back();
  EXPECT_NE(line.find("(4 such SYNs so far on this core), 2 similar messages suppressed"), std::string::npos)
      << line;
  log.set_level(saved);
}

TEST(TcpResetAll, ConnectionsLeftOpenGetARst) {
  Link link;
  Sink sink;
  Source client;
  client.data = "GET /slow HTTP/1.1\r\n";  // a request still in progress when the worker stops
  ASSERT_NE(connect_kept_open(link, sink, client, kPort), nullptr);
  ASSERT_TRUE(link.run_until([&] { return sink.received.size() == client.data.size(); }, 1000));
  uint64_t rst_before = link.tcp(1).stats().rst_out;
  EXPECT_EQ(link.tcp(1).reset_all(), 1u);
  EXPECT_EQ(link.tcp(1).stats().rst_out, rst_before + 1);
  ASSERT_TRUE(link.run_until([&] { return client.closed; }, 1000));
  EXPECT_EQ(client.close_error, ECONNRESET);
  // Nothing left to reset on the client's side (its connection is gone), and TIME-WAIT is never reset.
  EXPECT_EQ(link.tcp(0).reset_all(), 0u);
}

}  // namespace
}  // namespace kosoku
