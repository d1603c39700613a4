// A FIN acknowledged after a retransmission timeout rewound SND.NXT (kernel-bypass/tcpip/tcb.cc
// process_ack). The RTO rewinds SND.NXT to SND.UNA and forgets that the FIN was sent; if the peer had received
// everything, its next ACK covers the FIN. Found by tests/integration/test_dpdk_tap.py
// (test_impaired_close_and_rst_paths, 10 % loss): the ACK was not taken as acknowledging the FIN, the
// connection sat in FIN-WAIT-1 with nothing to send and ended only by the 30 s lingering RST.
#include <gtest/gtest.h>

#include "kernel-bypass/tcpip/tcb.hh"
#include "tests/unit/tcp_pipe.hh"

namespace kosoku::tcpip {
namespace {

using testing::Link, testing::Sink, testing::Source, testing::pattern_bytes;

TEST(TcpFinAfterRto, AckCoveringTheFinAfterARewindEndsFinWait1) {
  Link link;
  Sink sink;
  Source source;
  net::Stream* client = testing::connect_kept_open(link, sink, source, 80);
  ASSERT_NE(client, nullptr);
  // The client's ACKs of the response and of the FIN are lost for 150 ms: the server's RTO (200 ms, the
  // minimum) fires and rewinds; the retransmission makes the client (which has everything) ACK past the FIN.
  uint64_t drop_until = link.clock().ms + 150;
  int dropped = 0;
  link.tap = [&](int from, const TcpSegment&) {
    if (from != 0 || link.clock().ms >= drop_until) return true;
    ++dropped;
    return false;
  };
  std::string body = pattern_bytes(3000, 1);
  sink.stream->write(body);
  sink.stream->flush();
  sink.stream->close(net::Stream::Close::kGraceful);
  Tcb& server = *static_cast<Tcb*>(sink.stream);
  ASSERT_TRUE(link.run_until([&] { return source.peer_closed; }, 1000));
  EXPECT_EQ(source.received, body);
  ASSERT_TRUE(link.run_until([&] { return link.tcp(1).stats().rto_expired > 0; }, 1000));
  EXPECT_GT(dropped, 0);
  ASSERT_TRUE(link.run_until([&] { return server.state() == TcpState::kFinWait2; }, 1000))
      << state_name(server.state());
  // The client's FIN then ends it at once (TIME-WAIT, on_closed), not the lingering timeout.
  client->close(net::Stream::Close::kGraceful);
  ASSERT_TRUE(link.run_until([&] { return sink.closed; }, 1000));
  EXPECT_EQ(link.tcp(1).stats().rst_out, 0u);
}

}  // namespace
}  // namespace kosoku::tcpip
