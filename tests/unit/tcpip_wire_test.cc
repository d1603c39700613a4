// Wire formats and the IPv4 interface of kernel-bypass/tcpip: checksums, IPv4/TCP headers and options,
// ARP (answers, cache aging, queued frames, retries), ICMP echo, fragments dropped.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernel-bypass/tcpip/arp.hh"
#include "kernel-bypass/tcpip/byte_order.hh"
#include "kernel-bypass/tcpip/checksum.hh"
#include "kernel-bypass/tcpip/ethernet.hh"
#include "kernel-bypass/tcpip/interface.hh"
#include "kernel-bypass/tcpip/ipv4_header.hh"
#include "kernel-bypass/tcpip/tcp_segment.hh"
#include "tests/unit/tcpip_test_util.hh"

namespace kosoku::tcpip {
namespace {

using testing::CaptureIO;

const MacAddr kOurMac{{0x02, 0, 0, 0, 0, 0x01}};
const MacAddr kPeerMac{{0x02, 0, 0, 0, 0, 0x02}};
const Ipv4Addr kOurIp = *Ipv4Addr::parse("10.99.0.2");
const Ipv4Addr kPeerIp = *Ipv4Addr::parse("10.99.0.1");

std::vector<uint8_t> hex(const char* s) {
  std::vector<uint8_t> out;
  auto nib = [](char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; };
  while (*s) {
    if (*s == ' ') {
      ++s;
      continue;
    }
    out.push_back(static_cast<uint8_t>(nib(s[0]) << 4 | nib(s[1])));
    s += 2;
  }
  return out;
}

TEST(TcpipChecksum, Rfc1071Example) {
  // RFC 1071 §3: the words 0001 f203 f4f5 f6f7 sum to 0x2ddf0, folded 0xddf2, complemented 0x220d.
  std::vector<uint8_t> b = hex("0001f203f4f5f6f7");
  EXPECT_EQ(checksum_add(b), 0x2ddf0u);
  EXPECT_EQ(checksum_finish(checksum_add(b)), 0x220d);
  // Odd length: the last byte is padded with zero on the right.
  std::vector<uint8_t> odd = hex("0001f2");
  EXPECT_EQ(checksum_add(odd), 0x0001u + 0xf200u);
}

TEST(TcpipIpv4, ReadsARealHeaderAndItsChecksum) {
  // A UDP/IPv4 header as captured (192.168.0.1 -> 192.168.0.199, checksum 0xb861).
  std::vector<uint8_t> p = hex("450000730000400040 11b861c0a80001c0a800c7");
  p.resize(0x73);
  Ipv4Header h;
  ASSERT_EQ(Ipv4Header::read(p, &h), Ipv4Header::Error::kNone);
  EXPECT_EQ(h.total_len, 0x73);
  EXPECT_EQ(h.protocol, kProtoUdp);
  EXPECT_EQ(h.checksum, 0xb861);
  EXPECT_EQ(h.src.to_string(), "192.168.0.1");
  EXPECT_EQ(h.dst.to_string(), "192.168.0.199");
  EXPECT_FALSE(h.is_fragment());
  // Rewriting the same fields gives the same checksum.
  uint8_t out[20];
  h.write(out);
  EXPECT_EQ(load_be16(out + 10), 0xb861);
  p[10] ^= 1;
  EXPECT_EQ(Ipv4Header::read(p, &h), Ipv4Header::Error::kBadChecksum);
}

TEST(TcpipIpv4, RejectsMalformedHeaders) {
  Ipv4Header h;
  std::vector<uint8_t> p(19, 0);
  EXPECT_EQ(Ipv4Header::read(p, &h), Ipv4Header::Error::kTooShort);
  Ipv4Header w;
  w.total_len = 40;
  w.protocol = kProtoTcp;
  std::vector<uint8_t> q(40, 0);
  w.write(q.data());
  ASSERT_EQ(Ipv4Header::read(q, &h), Ipv4Header::Error::kNone);
  q[0] = 0x65;
  EXPECT_EQ(Ipv4Header::read(q, &h), Ipv4Header::Error::kBadVersion);
  q[0] = 0x44;
  EXPECT_EQ(Ipv4Header::read(q, &h), Ipv4Header::Error::kBadHeaderLength);
  w.total_len = 41;  // longer than the buffer
  w.write(q.data());
  EXPECT_EQ(Ipv4Header::read(q, &h), Ipv4Header::Error::kBadTotalLength);
}

TEST(TcpipTcpSegment, ParsesLinuxSynOptions) {
  // Linux's SYN option layout: MSS 1460, SACK-permitted, TS, NOP, WS 7.
  std::vector<uint8_t> opts = hex("020405b4 0402 080a 0001e240 00000000 01 030307");
  TcpOptions o;
  ASSERT_TRUE(parse_tcp_options(opts, &o));
  EXPECT_TRUE(o.has_mss);
  EXPECT_EQ(o.mss, 1460);
  EXPECT_TRUE(o.sack_permitted);
  EXPECT_TRUE(o.has_timestamps);
  EXPECT_EQ(o.ts_val, 123456u);
  EXPECT_EQ(o.ts_ecr, 0u);
  EXPECT_TRUE(o.has_window_scale);
  EXPECT_EQ(o.window_scale, 7);
}

TEST(TcpipTcpSegment, OptionErrorsAndUnknownKinds) {
  TcpOptions o;
  EXPECT_FALSE(parse_tcp_options(hex("0201"), &o));          // length < 2
  EXPECT_FALSE(parse_tcp_options(hex("020805b4"), &o));      // runs past the area
  EXPECT_FALSE(parse_tcp_options(hex("02"), &o));            // kind without length
  TcpOptions u;
  ASSERT_TRUE(parse_tcp_options(hex("1e06aabbccdd 020405b4"), &u));  // unknown kind 30 skipped
  EXPECT_TRUE(u.has_mss);
  EXPECT_EQ(u.mss, 1460);
  TcpOptions w;
  ASSERT_TRUE(parse_tcp_options(hex("0203ff 00 020405b4"), &w));  // MSS with length 3 ignored; EOL stops
  EXPECT_FALSE(w.has_mss);
}

TEST(TcpipTcpSegment, WriteParseRoundTripWithChecksum) {
  TcpHeader h;
  h.src_port = 80;
  h.dst_port = 40000;
  h.seq = SeqNum{0xfffffff0u};
  h.ack = SeqNum{12345};
  h.flags = tcp_flag::kAck | tcp_flag::kPsh;
  h.window = 501;
  TcpOptions o;
  o.has_timestamps = true;
  o.ts_val = 7;
  o.ts_ecr = 9;
  o.sack_count = 4;  // only 3 fit next to the timestamps (40-byte option space)
  for (int i = 0; i < 4; ++i) o.sack[i] = {SeqNum{100u * i}, SeqNum{100u * i + 50}};
  EXPECT_EQ(o.wire_size(), 12u + 4 + 3 * 8);
  std::vector<uint8_t> seg(60 + 5);
  size_t hl = write_tcp_header(h, o, seg.data());
  ASSERT_EQ(hl, 60u);
  std::memcpy(seg.data() + hl, "hello", 5);
  fill_tcp_checksum(seg, kOurIp, kPeerIp);
  TcpSegment s;
  ASSERT_EQ(parse_tcp_segment(seg, kOurIp, kPeerIp, true, &s), TcpParseError::kNone);
  EXPECT_EQ(s.header.seq, SeqNum{0xfffffff0u});
  EXPECT_EQ(s.header.ack.v, 12345u);
  EXPECT_EQ(s.header.header_len, 60);
  EXPECT_EQ(s.header.window, 501);
  EXPECT_EQ(s.header.flags, tcp_flag::kAck | tcp_flag::kPsh);
  EXPECT_EQ(s.options.sack_count, 3);
  EXPECT_EQ(s.options.sack[2].right.v, 250u);
  EXPECT_EQ(s.options.ts_ecr, 9u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(s.payload.data()), s.payload.size()), "hello");
  EXPECT_EQ(s.seq_len(), 5u);
  // Any flipped bit breaks the checksum; a wrong pseudo-header does too.
  seg[hl + 1] ^= 0x10;
  EXPECT_EQ(parse_tcp_segment(seg, kOurIp, kPeerIp, true, &s), TcpParseError::kBadChecksum);
  seg[hl + 1] ^= 0x10;
  EXPECT_EQ(parse_tcp_segment(seg, kOurIp, kOurIp, true, &s), TcpParseError::kBadChecksum);
  seg[12] = 0x40;  // data offset 16 bytes
  EXPECT_EQ(parse_tcp_segment(seg, kOurIp, kPeerIp, false, &s), TcpParseError::kBadDataOffset);
}

TEST(TcpipSeqNum, WrapAroundComparisons) {
  SeqNum a{0xfffffff0u};
  SeqNum b = a + 0x20;
  EXPECT_EQ(b.v, 0x10u);
  EXPECT_TRUE(a < b);
  EXPECT_TRUE(b > a);
  EXPECT_EQ(b - a, 0x20);
  EXPECT_EQ(a - b, -0x20);
  EXPECT_TRUE(a <= a);
}

// ---- Interface: ARP, IPv4, ICMP ----

std::vector<uint8_t> arp_frame(uint16_t op, MacAddr eth_dst, MacAddr smac, Ipv4Addr sip, MacAddr tmac, Ipv4Addr tip) {
  std::vector<uint8_t> f(EthernetHeader::kSize + ArpPacket::kSize);
  EthernetHeader{eth_dst, smac, kEtherTypeArp}.write(f.data());
  ArpPacket a{op, smac, sip, tmac, tip};
  a.write(f.data() + EthernetHeader::kSize);
  return f;
}

std::vector<uint8_t> ip_frame(uint8_t proto, std::vector<uint8_t> l4, uint16_t flags_fragment = 0) {
  std::vector<uint8_t> f(EthernetHeader::kSize + 20 + l4.size());
  EthernetHeader{kOurMac, kPeerMac, kEtherTypeIpv4}.write(f.data());
  Ipv4Header ip;
  ip.total_len = static_cast<uint16_t>(20 + l4.size());
  ip.protocol = proto;
  ip.flags_fragment = flags_fragment;
  ip.src = kPeerIp;
  ip.dst = kOurIp;
  ip.write(f.data() + 14);
  std::memcpy(f.data() + 34, l4.data(), l4.size());
  return f;
}

InterfaceConfig conf() {
  InterfaceConfig c;
  c.address = kOurIp;
  c.prefix_len = 24;
  c.gateway = *Ipv4Addr::parse("10.99.0.254");
  return c;
}

TEST(TcpipInterface, AnswersArpRequestsAndLearnsTheSender) {
  CaptureIO io(kOurMac);
  Interface ifc(io, conf());
  ifc.receive_frame(arp_frame(ArpPacket::kRequest, MacAddr::broadcast(), kPeerMac, kPeerIp, MacAddr{}, kOurIp), 0);
  ASSERT_EQ(io.sent.size(), 1u);
  auto eth = EthernetHeader::read(io.sent[0]);
  ASSERT_TRUE(eth);
  EXPECT_EQ(eth->dst, kPeerMac);
  EXPECT_EQ(eth->ether_type, kEtherTypeArp);
  auto reply = ArpPacket::read(std::span(io.sent[0]).subspan(14));
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->op, ArpPacket::kReply);
  EXPECT_EQ(reply->sender_mac, kOurMac);
  EXPECT_EQ(reply->sender_ip, kOurIp);
  EXPECT_EQ(reply->target_ip, kPeerIp);
  EXPECT_EQ(ifc.arp().lookup(kPeerIp, 1), kPeerMac);
  // A request for another address is not answered, and an unknown sender is not learnt.
  Ipv4Addr other = *Ipv4Addr::parse("10.99.0.77");
  MacAddr other_mac{{2, 0, 0, 0, 0, 9}};
  ifc.receive_frame(arp_frame(ArpPacket::kRequest, MacAddr::broadcast(), other_mac, other, MacAddr{}, kPeerIp), 0);
  EXPECT_EQ(io.sent.size(), 1u);
  EXPECT_FALSE(ifc.arp().lookup(other, 1));
  EXPECT_EQ(ifc.stats().arp_requests_in, 2u);
  EXPECT_EQ(ifc.stats().arp_replies_out, 1u);
}

TEST(TcpipInterface, GratuitousArpAnnouncement) {
  CaptureIO io(kOurMac);
  Interface ifc(io, conf());
  ifc.announce();
  ASSERT_EQ(io.sent.size(), 1u);
  auto eth = EthernetHeader::read(io.sent[0]);
  EXPECT_TRUE(eth->dst.is_broadcast());
  auto a = ArpPacket::read(std::span(io.sent[0]).subspan(14));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->op, ArpPacket::kRequest);
  EXPECT_EQ(a->sender_ip, kOurIp);
  EXPECT_EQ(a->target_ip, kOurIp);
}

TEST(TcpipInterface, QueuesFramesUntilArpResolvesThenAges) {
  CaptureIO io(kOurMac);
  Interface ifc(io, conf());
  auto fill = [](std::span<uint8_t> l4) { std::memset(l4.data(), 0xab, l4.size()); };
  EXPECT_TRUE(ifc.send_ipv4(kPeerIp, kProtoUdp, 8, fill, 1000));
  EXPECT_TRUE(ifc.send_ipv4(kPeerIp, kProtoUdp, 8, fill, 1000));
  ASSERT_EQ(io.sent.size(), 1u);  // one ARP request, both packets wait
  auto req = ArpPacket::read(std::span(io.sent[0]).subspan(14));
  ASSERT_TRUE(req);
  EXPECT_EQ(req->target_ip, kPeerIp);
  ifc.receive_frame(arp_frame(ArpPacket::kReply, kOurMac, kPeerMac, kPeerIp, kOurMac, kOurIp), 1010);
  ASSERT_EQ(io.sent.size(), 3u);
  for (int i = 1; i < 3; ++i) {
    auto eth = EthernetHeader::read(io.sent[i]);
    EXPECT_EQ(eth->dst, kPeerMac);
    Ipv4Header ip;
    ASSERT_EQ(Ipv4Header::read(std::span(io.sent[i]).subspan(14), &ip), Ipv4Header::Error::kNone);
    EXPECT_EQ(ip.dst, kPeerIp);
    EXPECT_EQ(ip.flags_fragment, Ipv4Header::kFlagDontFragment);
    EXPECT_EQ(io.sent[i].back(), 0xab);
  }
  // Resolved: sent directly.
  EXPECT_TRUE(ifc.send_ipv4(kPeerIp, kProtoUdp, 8, fill, 2000));
  EXPECT_EQ(io.sent.size(), 4u);
  // Aged out after kReachableMs: the next packet triggers a new request.
  ifc.tick(1010 + ArpCache::kReachableMs);
  EXPECT_FALSE(ifc.arp().lookup(kPeerIp, 1010 + ArpCache::kReachableMs));
  EXPECT_TRUE(ifc.send_ipv4(kPeerIp, kProtoUdp, 8, fill, 1010 + ArpCache::kReachableMs));
  EXPECT_EQ(io.sent.size(), 5u);
  EXPECT_EQ(EthernetHeader::read(io.sent[4])->ether_type, kEtherTypeArp);
}

TEST(TcpipInterface, OffLinkUsesTheGatewayAndUnresolvedGivesUp) {
  CaptureIO io(kOurMac);
  Interface ifc(io, conf());
  auto fill = [](std::span<uint8_t>) {};
  uint64_t t = 0;
  EXPECT_TRUE(ifc.send_ipv4(*Ipv4Addr::parse("192.0.2.1"), kProtoUdp, 4, fill, t));
  ASSERT_EQ(io.sent.size(), 1u);
  EXPECT_EQ(ArpPacket::read(std::span(io.sent[0]).subspan(14))->target_ip.to_string(), "10.99.0.254");
  // Retries every kRetryMs, kMaxRequests requests in all, then drops the queued frame.
  for (int i = 1; i <= 5; ++i) ifc.tick(t + i * ArpCache::kRetryMs);
  EXPECT_EQ(io.sent.size(), ArpCache::kMaxRequests);
  EXPECT_EQ(ifc.stats().arp_queue_drops, 1u);
  EXPECT_EQ(ifc.arp().size(), 0u);
  // No gateway: off-link is unreachable.
  InterfaceConfig c = conf();
  c.gateway = Ipv4Addr{};
  Interface lan_only(io, c);
  EXPECT_FALSE(lan_only.send_ipv4(*Ipv4Addr::parse("192.0.2.1"), kProtoUdp, 4, fill, t));
  EXPECT_EQ(lan_only.stats().ip_no_route, 1u);
}

TEST(TcpipInterface, IcmpEchoReplyAndFragmentsDropped) {
  CaptureIO io(kOurMac);
  Interface ifc(io, conf());
  ifc.arp().update(kPeerIp, kPeerMac, 0);
  std::vector<uint8_t> echo = hex("0800 0000 1234 0001 6162636465");  // id 0x1234 seq 1 "abcde"
  store_be16(echo.data() + 2, checksum_finish(checksum_add(echo)));
  ifc.receive_frame(ip_frame(kProtoIcmp, echo), 5);
  ASSERT_EQ(io.sent.size(), 1u);
  std::span<const uint8_t> reply(io.sent[0]);
  Ipv4Header ip;
  ASSERT_EQ(Ipv4Header::read(reply.subspan(14), &ip), Ipv4Header::Error::kNone);
  EXPECT_EQ(ip.dst, kPeerIp);
  EXPECT_EQ(ip.protocol, kProtoIcmp);
  std::span<const uint8_t> icmp = reply.subspan(34);
  ASSERT_EQ(icmp.size(), echo.size());
  EXPECT_EQ(icmp[0], 0);  // echo reply
  EXPECT_EQ(checksum_finish(checksum_add(icmp)), 0);
  EXPECT_TRUE(std::equal(icmp.begin() + 4, icmp.end(), echo.begin() + 4));
  EXPECT_EQ(ifc.stats().icmp_echo_reply_out, 1u);
  // A bad ICMP checksum is dropped, an ICMP error is counted.
  echo[9] ^= 1;
  ifc.receive_frame(ip_frame(kProtoIcmp, echo), 5);
  EXPECT_EQ(ifc.stats().icmp_bad, 1u);
  std::vector<uint8_t> unreach = hex("0303 0000 00000000");
  store_be16(unreach.data() + 2, checksum_finish(checksum_add(unreach)));
  ifc.receive_frame(ip_frame(kProtoIcmp, unreach), 5);
  EXPECT_EQ(ifc.stats().icmp_errors_in, 1u);
  // Fragments (MF set, or a non-zero offset) are dropped and counted.
  ifc.receive_frame(ip_frame(kProtoIcmp, echo, Ipv4Header::kFlagMoreFragments), 5);
  ifc.receive_frame(ip_frame(kProtoIcmp, echo, 3), 5);
  EXPECT_EQ(ifc.stats().ip_fragments_dropped, 2u);
  EXPECT_EQ(io.sent.size(), 1u);
}

}  // namespace
}  // namespace kosoku::tcpip
