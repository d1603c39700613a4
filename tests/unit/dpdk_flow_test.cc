// Flow steering across cores (kernel-bypass/dpdk/flow_hash.hh, steering.hh) and the source-port choice of
// connect() (TcpStack + FlowOwner): the Toeplitz hash against the published RSS verification vectors, the
// symmetric key, the core mapping, the frame classifier, and that active opens only use ports whose return
// traffic is steered back to the connecting core.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "kernel-bypass/dpdk/flow_hash.hh"
#include "kernel-bypass/dpdk/steering.hh"
#include "kernel-bypass/tcpip/byte_order.hh"
#include "kernel-bypass/tcpip/tcb.hh"
#include "tests/unit/tcp_pipe.hh"

namespace kosoku::dpdk {
namespace {

using tcpip::FourTuple;
using tcpip::Ipv4Addr;

Ipv4Addr ip(const char* s) { return *Ipv4Addr::parse(s); }

// The 40-byte key of Microsoft's "Verifying the RSS Hash Calculation" and its IPv4+TCP results
// (input: source address, destination address, source port, destination port).
constexpr uint8_t kMsKey[40] = {0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3,
                                0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3,
                                0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};

TEST(DpdkFlowHash, ToeplitzMatchesTheRssVerificationVectors) {
  ToeplitzHash h(kMsKey);
  struct Vector {
    const char* src;
    uint16_t sport;
    const char* dst;
    uint16_t dport;
    uint32_t tcp;
  } vectors[] = {
      {"66.9.149.187", 2794, "161.142.100.80", 1766, 0x51ccc178},
      {"199.92.111.2", 14230, "65.69.140.83", 4739, 0xc626b0ea},
      {"24.19.198.95", 12898, "12.22.207.184", 38024, 0x5c2b394a},
      {"38.27.205.30", 48228, "209.142.163.6", 2217, 0xafc7327f},
      {"153.39.163.191", 44251, "202.188.127.2", 1303, 0x10e828a2},
  };
  for (const Vector& v : vectors) {
    EXPECT_EQ(h.ipv4_tcp(ip(v.src), ip(v.dst), v.sport, v.dport), v.tcp) << v.src;
  }
  // The 8-byte (addresses only) input of the first vector: 0x323e8fc2.
  uint8_t in[8];
  tcpip::store_be32(in, ip("66.9.149.187").value);
  tcpip::store_be32(in + 4, ip("161.142.100.80").value);
  EXPECT_EQ(h.hash(in), 0x323e8fc2u);
}

TEST(DpdkFlowHash, SymmetricKeyHashesBothDirectionsAlike) {
  std::vector<uint8_t> key = symmetric_rss_key(40);
  ASSERT_EQ(key[0], 0x6d);
  ASSERT_EQ(key[1], 0x5a);
  ASSERT_EQ(key[39], 0x5a);
  ToeplitzHash sym(key), ms(kMsKey);
  std::mt19937 rng(7);
  int ms_asymmetric = 0;
  for (int i = 0; i < 2000; ++i) {
    Ipv4Addr a{static_cast<uint32_t>(rng())}, b{static_cast<uint32_t>(rng())};
    auto pa = static_cast<uint16_t>(rng()), pb = static_cast<uint16_t>(rng());
    EXPECT_EQ(sym.ipv4_tcp(a, b, pa, pb), sym.ipv4_tcp(b, a, pb, pa));
    if (ms.ipv4_tcp(a, b, pa, pb) != ms.ipv4_tcp(b, a, pb, pa)) ++ms_asymmetric;
  }
  EXPECT_GT(ms_asymmetric, 1900);  // the usual key is not symmetric: the property comes from the key
}

TEST(DpdkFlowHash, SteeringSpreadsFlowsEvenlyAndAgreesWithTheReta) {
  for (uint16_t cores : {1, 2, 3, 4}) {
    FlowSteering f(cores, 128);
    std::vector<int> count(cores);
    std::mt19937 rng(cores);
    constexpr int kFlows = 20000;
    for (int i = 0; i < kFlows; ++i) {
      FourTuple t{ip("10.0.0.2"), 80, Ipv4Addr{static_cast<uint32_t>(rng())}, static_cast<uint16_t>(rng())};
      uint16_t o = f.owner(t);
      ASSERT_LT(o, cores);
      EXPECT_EQ(o, f.reta_entry(f.hash(t) % 128));
      ++count[o];
    }
    for (int c : count) EXPECT_NEAR(c, kFlows / cores, kFlows / cores * 0.1) << cores << " cores";
  }
}

// An Ethernet + IPv4 + TCP frame from src:sport to dst:dport.
std::vector<uint8_t> tcp_frame(Ipv4Addr src, uint16_t sport, Ipv4Addr dst, uint16_t dport, uint16_t frag = 0x4000) {
  std::vector<uint8_t> f(14 + 20 + 20);
  tcpip::store_be16(f.data() + 12, 0x0800);
  uint8_t* p = f.data() + 14;
  p[0] = 0x45;
  tcpip::store_be16(p + 2, 40);
  tcpip::store_be16(p + 6, frag);
  p[8] = 64;
  p[9] = tcpip::kProtoTcp;
  tcpip::store_be32(p + 12, src.value);
  tcpip::store_be32(p + 16, dst.value);
  tcpip::store_be16(p + 20, sport);
  tcpip::store_be16(p + 22, dport);
  return f;
}

TEST(DpdkFlowHash, FrameClassifierFindsTheOwnerOfTcpFramesOnly) {
  FlowSteering f(2, 128);
  std::mt19937 rng(3);
  int owners[2] = {};
  for (int i = 0; i < 1000; ++i) {
    Ipv4Addr peer{static_cast<uint32_t>(rng())};
    auto port = static_cast<uint16_t>(rng());
    // The frame arrives from the peer; the stack's tuple is (local, 8080, peer, port).
    std::vector<uint8_t> fr = tcp_frame(peer, port, ip("10.99.1.2"), 8080);
    int o = CoreSteering::owner_of_frame(f, fr.data(), fr.size());
    ASSERT_EQ(o, f.owner(FourTuple{ip("10.99.1.2"), 8080, peer, port}));
    ++owners[o];
  }
  EXPECT_GT(owners[0], 300);
  EXPECT_GT(owners[1], 300);
  std::vector<uint8_t> fr = tcp_frame(ip("10.0.0.1"), 1, ip("10.0.0.2"), 2);
  EXPECT_GE(CoreSteering::owner_of_frame(f, fr.data(), fr.size()), 0);
  EXPECT_EQ(CoreSteering::owner_of_frame(f, fr.data(), 14 + 20 + 2), -1);  // ports cut off
  std::vector<uint8_t> frag = tcp_frame(ip("10.0.0.1"), 1, ip("10.0.0.2"), 2, 0x2000);  // MF
  EXPECT_EQ(CoreSteering::owner_of_frame(f, frag.data(), frag.size()), -1);
  std::vector<uint8_t> udp = tcp_frame(ip("10.0.0.1"), 1, ip("10.0.0.2"), 2);
  udp[14 + 9] = 17;
  EXPECT_EQ(CoreSteering::owner_of_frame(f, udp.data(), udp.size()), -1);
  std::vector<uint8_t> arp(42);
  tcpip::store_be16(arp.data() + 12, 0x0806);
  EXPECT_EQ(CoreSteering::owner_of_frame(f, arp.data(), arp.size()), -1);
}

// Core `core` of `cores`: the FlowOwner CoreSteering gives its TcpStack, without the rings.
class CoreOwner final : public tcpip::FlowOwner {
 public:
  CoreOwner(const FlowSteering& f, uint16_t core) : f_(f), core_(core) {}
  bool is_local(const FourTuple& t) const override { return f_.owner(t) == core_; }

 private:
  const FlowSteering& f_;
  uint16_t core_;
};

TEST(DpdkFlowHash, ConnectPicksSourcePortsWhoseReturnTrafficLandsOnTheSameCore) {
  FlowSteering f(2, 128);
  for (uint16_t core : {0, 1}) {
    tcpip::testing::Link link;
    CoreOwner owner(f, core);
    link.tcp(0).set_flow_owner(&owner);
    tcpip::testing::Sink sink;
    ASSERT_EQ(link.tcp(1).listen_port(8080, 256, sink), 0);
    std::vector<tcpip::testing::Source> sources(100);
    std::set<uint16_t> ports;
    for (auto& src : sources) {
      std::string err;
      net::Stream* s = link.tcp(0).connect_from(0, link.addr(1), 8080, src, &err);
      ASSERT_NE(s, nullptr) << err;
      const FourTuple& t = static_cast<tcpip::Tcb*>(s)->tuple();
      ports.insert(t.local_port);
      EXPECT_EQ(f.owner(t), core);
      // The server's view of the same connection (its local is our remote) hashes to the same core: a frame
      // the peer sends back is steered to `core`.
      std::vector<uint8_t> back = tcp_frame(t.remote, t.remote_port, t.local, t.local_port);
      EXPECT_EQ(CoreSteering::owner_of_frame(f, back.data(), back.size()), core);
    }
    EXPECT_EQ(ports.size(), 100u);
    EXPECT_GT(link.tcp(0).stats().ephemeral_not_local, 0u);
    link.run_for(5000);  // SYNs beyond the 16 queued behind the first ARP resolution are retried after 1 s
    EXPECT_EQ(link.tcp(0).stats().active_opens, 100u);
    EXPECT_EQ(link.tcp(1).stats().passive_opens, 100u);
  }
}

}  // namespace
}  // namespace kosoku::dpdk
