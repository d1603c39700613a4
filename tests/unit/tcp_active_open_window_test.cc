// Active open (connect): the receive window after the SYN-ACK is anchored at the peer's ISN + 1, whatever the
// peer's ISN is (issue 4: an upstream stall over DPDK in about 1 connection of 16,000).
//
// Side 1 plays the origin by hand: everything side 0 sends is dropped before side 1's stack sees it, and the
// SYN-ACK and the response are injected with a chosen ISN. The bug: our SYN's window set the right edge of the
// advertised window (rcv_adv_) relative to a receive sequence that was not known yet (0); the SYN-ACK moved
// RCV.NXT to IRS + 1 but not the edge, so for IRS + 1 in about [2^31 - 196,609, 2^31 + 65,535] (256 KiB buffer)
// RCV.ADV - RCV.NXT was negative and never repaired: every in-window data segment failed the acceptability test
// (RFC 9293 §3.10.7.4) and got a bare `ack IRS+1` while we kept advertising a 256 KiB window.
#include <gtest/gtest.h>

#include <string>

#include "kernel-bypass/tcpip/tcb.hh"
#include "tests/unit/tcp_pipe.hh"

namespace kosoku::tcpip {
namespace {

using testing::Link;
using testing::Source;
using namespace tcp_flag;

constexpr uint16_t kOriginPort = 8090;
constexpr uint16_t kLocalPort = 42000;

struct OriginByHand {
  Link link;
  Source source;
  net::Stream* client = nullptr;
  TcpOptions syn_options;  // what our SYN carried
  SeqNum iss;

  void connect() {
    link.tap = [this](int from, const TcpSegment& seg) {
      if (from == 0 && seg.header.has(kSyn)) {
        iss = seg.header.seq;
        syn_options = seg.options;
      }
      return from != 0;  // side 1's stack never hears from side 0
    };
    source.keep_open = true;
    source.data = std::string(109, 'q');  // the proxied request
    std::string err;
    client = link.tcp(0).connect_from(kLocalPort, link.addr(1), kOriginPort, source, &err);
    ASSERT_NE(client, nullptr) << err;
    ASSERT_TRUE(link.run_until([this] { return syn_options.has_timestamps; }, 100));  // after ARP
  }

  // The origin's segment: seq, ack iss+1+109 (or iss+1 for the SYN-ACK), TS val, Linux's options.
  void inject(SeqNum seq, uint8_t flags, uint32_t ts_val, const std::string& payload) {
    TcpHeader h;
    h.src_port = kOriginPort;
    h.dst_port = kLocalPort;
    h.seq = seq;
    h.ack = iss + 1 + ((flags & kSyn) ? 0 : static_cast<uint32_t>(source.data.size()));
    h.flags = flags;
    h.window = (flags & kSyn) ? 65160 : 64;
    TcpOptions o;
    o.has_timestamps = true;
    o.ts_val = ts_val;
    o.ts_ecr = syn_options.ts_val;
    if (flags & kSyn) {
      o.has_mss = true;
      o.mss = 1460;
      o.sack_permitted = true;
      o.has_window_scale = true;
      o.window_scale = 10;
    }
    link.inject(1, h, o, std::span(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()));
  }

  // The last ACK side 0 put on the wire.
  const TcpHeader& last_ack_from_client() const {
    const TcpHeader* h = nullptr;
    for (const auto& s : link.log()) {
      if (s.from == 0 && s.header.has(kAck)) h = &s.header;
    }
    return *h;
  }
};

// The origin's ISN of the pcap in issue 4 (SYN-ACK seq 2147432153), the edges of the range where the old code
// lost every segment, and ordinary ISNs: the response is delivered and acknowledged in each case.
class ActiveOpenWindow : public ::testing::TestWithParam<uint32_t> {};

TEST_P(ActiveOpenWindow, ResponseAtRcvNxtIsAcceptedWhateverThePeerIsn) {
  OriginByHand o;
  ASSERT_NO_FATAL_FAILURE(o.connect());
  SeqNum irs{GetParam()};
  o.inject(irs, kSyn | kAck, 97625821, "");
  o.link.run_for(2);
  ASSERT_TRUE(o.source.connected);
  Tcb& c = *static_cast<Tcb*>(o.client);
  ASSERT_EQ(c.state(), TcpState::kEstablished);
  EXPECT_EQ(c.rcv_nxt(), irs + 1);

  const std::string head(202, 'h'), body(1024, 'b');
  o.inject(irs + 1, kAck | kPsh, 97625829, head);
  o.link.run_for(2);
  o.inject(irs + 1 + 202, kAck | kPsh | kFin, 97625829, body);
  o.link.run_for(50);
  EXPECT_EQ(o.source.received.size(), head.size() + body.size());
  EXPECT_TRUE(o.source.received == head + body);
  EXPECT_TRUE(o.source.peer_closed);
  EXPECT_EQ(c.rcv_nxt(), irs + 1 + 202 + 1024 + 1);  // the FIN too
  const TcpHeader& ack = o.last_ack_from_client();
  EXPECT_EQ(ack.ack, irs + 1 + 202 + 1024 + 1);
  // The advertised window never exceeds the receive buffer (wscale 3 as negotiated).
  EXPECT_EQ(o.syn_options.window_scale, 3);
  EXPECT_LE(static_cast<uint32_t>(ack.window) << 3, TcpConfig{}.recv_buffer_bytes);
  EXPECT_EQ(c.ts_recent(), 97625829u);  // TS.Recent moved past the SYN-ACK's TSval
}

INSTANTIATE_TEST_SUITE_P(PeerIsn, ActiveOpenWindow,
                         ::testing::Values(2147432153u,            // issue 4's pcap
                                           2147483648u - 196610u,  // first IRS the old code lost (IRS + 1 = 2^31 - 196,609)
                                           2147483647u,            // IRS + 1 = 2^31
                                           2147483648u + 65534u,   // last one
                                           2147483648u + 70000u,   // old code: window advertised beyond the buffer
                                           0u, 1000u, 0xFFFFFF00u));

}  // namespace
}  // namespace kosoku::tcpip
