// connect() when the ephemeral ports are used up by TIME-WAIT connections (issue 4, Linux tcp_tw_reuse = 1):
// an active open takes over the oldest TIME-WAIT 4-tuple to the same destination once timestamps were
// negotiated on it and 1 s has passed since its last segment (RFC 7323 §5, RFC 6191); free ports come first,
// only FlowOwner-local ports are used, and without timestamps (or before 1 s) connect() still fails with
// EADDRNOTAVAIL. Two stacks through the in-memory link (tcp_pipe.hh); side 0 connects, side 1 listens.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kernel-bypass/tcpip/tcb.hh"
#include "tests/unit/tcp_pipe.hh"

namespace kosoku::tcpip {
namespace {

using testing::Link;
using testing::Sink;
using testing::Source;
using testing::pattern_bytes;

constexpr uint16_t kPort = 80;
constexpr uint16_t kFirst = 40000;

/// Client config whose ephemeral range is the `n` ports from kFirst.
TcpConfig small_range(uint16_t n) {
  TcpConfig c;
  c.ephemeral_first = kFirst;
  c.ephemeral_last = static_cast<uint16_t>(kFirst + n - 1);
  return c;
}

struct Fixture {
  Link link;
  Sink sink;
  std::vector<std::unique_ptr<Source>> sources;

  explicit Fixture(const TcpConfig& client) : link(client, TcpConfig{}) {}

  /// Opens a connection from side 0 sending `data` then closing first (TIME-WAIT on side 0 once done); null
  /// and *err on failure.
  net::Stream* open(const std::string& data, std::string* err, bool keep_open = false) {
    sources.push_back(std::make_unique<Source>());
    sources.back()->data = data;
    sources.back()->keep_open = keep_open;
    return link.tcp(0).connect(address(), sizeof(sockaddr_in), *sources.back(), err);
  }
  const sockaddr* address() {
    sa.sin_family = AF_INET;
    sa.sin_port = htons(kPort);
    sa.sin_addr.s_addr = htonl(link.addr(1).value);
    return reinterpret_cast<const sockaddr*>(&sa);
  }
  /// Opens `n` connections that close actively and runs until all are closed; their local ports, in order.
  std::vector<uint16_t> fill_time_wait(int n) {
    std::vector<uint16_t> ports;
    size_t first = sources.size();
    for (int i = 0; i < n; ++i) {
      std::string err;
      net::Stream* s = open("GET / HTTP/1.1\r\n\r\n", &err);
      EXPECT_NE(s, nullptr) << err;
      if (s == nullptr) return ports;
      ports.push_back(s->local_port());
    }
    bool done = link.run_until([&] {
      return std::all_of(sources.begin() + static_cast<long>(first), sources.end(),
                         [](const auto& s) { return s->closed; });
    }, 5000);
    EXPECT_TRUE(done);
    link.run_for(5);  // the server's last ACKs
    return ports;
  }
  sockaddr_in sa{};
};

constexpr char kNoAddress[] = "connect() failed (99: Cannot assign requested address)";

TEST(TcpTimeWaitReuse, ReusesTheOldestTimeWaitTupleAfterOneSecond) {
  Fixture f(small_range(4));
  ASSERT_EQ(f.link.tcp(1).listen_port(kPort, 16, f.sink), 0);
  std::vector<uint16_t> ports = f.fill_time_wait(4);
  ASSERT_EQ(ports.size(), 4u);
  const TcpStats& st = f.link.tcp(0).stats();
  ASSERT_EQ(st.time_wait, 4u);
  ASSERT_EQ(f.link.tcp(0).connections(), 4u);
  ASSERT_EQ(f.link.tcp(1).connections(), 0u);  // the server closed passively: nothing left there

  // Within 1 s of the last segment: no port.
  std::string err;
  EXPECT_EQ(f.open("x", &err), nullptr);
  EXPECT_EQ(err, kNoAddress);
  f.link.run_for(TcpStack::kTimeWaitReuseMs - 100);
  err.clear();
  EXPECT_EQ(f.open("x", &err), nullptr);
  EXPECT_EQ(err, kNoAddress);
  EXPECT_EQ(st.time_wait_reused, 0u);

  // After 1 s: the oldest TIME-WAIT tuple is taken over and the new incarnation carries data byte-exact.
  f.link.run_for(100);
  size_t before = f.sink.received.size();
  std::string body = pattern_bytes(200'000, 11);
  err.clear();
  net::Stream* s = f.open(body, &err);
  ASSERT_NE(s, nullptr) << err;
  EXPECT_EQ(s->local_port(), ports[0]);
  EXPECT_EQ(st.time_wait_reused, 1u);
  EXPECT_EQ(st.time_wait, 3u);
  Source& src = *f.sources.back();
  ASSERT_TRUE(f.link.run_until([&] { return src.closed; }, 10'000));
  EXPECT_EQ(src.close_error, 0);
  EXPECT_EQ(f.sink.accepted, 5);
  ASSERT_EQ(f.sink.received.size(), before + body.size());
  EXPECT_TRUE(f.sink.received.compare(before, body.size(), body) == 0);
  EXPECT_EQ(f.link.tcp(1).stats().paws_dropped, 0u);
  EXPECT_EQ(f.link.tcp(1).stats().resets_to_closed_port, 0u);
  // The new connection is in TIME-WAIT in place of the old one; the others are reused in order.
  f.link.run_for(5);
  EXPECT_EQ(st.time_wait, 4u);
  err.clear();
  s = f.open("x", &err);
  ASSERT_NE(s, nullptr) << err;
  EXPECT_EQ(s->local_port(), ports[1]);
  EXPECT_EQ(st.time_wait_reused, 2u);
}

TEST(TcpTimeWaitReuse, FreePortsComeFirst) {
  Fixture f(small_range(5));
  ASSERT_EQ(f.link.tcp(1).listen_port(kPort, 16, f.sink), 0);
  std::vector<uint16_t> ports = f.fill_time_wait(4);
  ASSERT_EQ(ports.size(), 4u);
  f.link.run_for(2000);
  std::string err;
  net::Stream* s = f.open("x", &err, /*keep_open=*/true);
  ASSERT_NE(s, nullptr) << err;
  EXPECT_EQ(std::count(ports.begin(), ports.end(), s->local_port()), 0);
  EXPECT_EQ(f.link.tcp(0).stats().time_wait_reused, 0u);
  EXPECT_EQ(f.link.tcp(0).stats().time_wait, 4u);
  // Now every port is taken: the next one reuses.
  s = f.open("x", &err);
  ASSERT_NE(s, nullptr) << err;
  EXPECT_EQ(s->local_port(), ports[0]);
  EXPECT_EQ(f.link.tcp(0).stats().time_wait_reused, 1u);
}

TEST(TcpTimeWaitReuse, WithoutTimestampsTimeWaitIsNotReused) {
  TcpConfig client = small_range(3);
  client.timestamps = false;
  Fixture f(client);
  ASSERT_EQ(f.link.tcp(1).listen_port(kPort, 16, f.sink), 0);
  ASSERT_EQ(f.fill_time_wait(3).size(), 3u);
  f.link.run_for(5000);
  std::string err;
  EXPECT_EQ(f.open("x", &err), nullptr);
  EXPECT_EQ(err, kNoAddress);
  EXPECT_EQ(f.link.tcp(0).stats().time_wait_reused, 0u);
  EXPECT_EQ(f.link.tcp(0).stats().time_wait, 3u);
  // Once 2·MSL is over the ports are free again.
  f.link.run_for(f.link.tcp(0).config().time_wait_ms);
  EXPECT_EQ(f.link.tcp(0).stats().time_wait, 0u);
  err.clear();
  EXPECT_NE(f.open("x", &err), nullptr) << err;
}

/// Accepts only even local ports (as if odd ones were steered to another core).
struct EvenPorts final : FlowOwner {
  bool is_local(const FourTuple& t) const override { return t.local_port % 2 == 0; }
};

TEST(TcpTimeWaitReuse, ReuseKeepsToFlowOwnerPorts) {
  Fixture f(small_range(6));
  EvenPorts owner;
  f.link.tcp(0).set_flow_owner(&owner);
  ASSERT_EQ(f.link.tcp(1).listen_port(kPort, 16, f.sink), 0);
  std::vector<uint16_t> ports = f.fill_time_wait(3);
  ASSERT_EQ(ports.size(), 3u);
  for (uint16_t p : ports) EXPECT_EQ(p % 2, 0);
  std::string err;
  EXPECT_EQ(f.open("x", &err), nullptr);  // odd ports are free but not ours
  EXPECT_GT(f.link.tcp(0).stats().ephemeral_not_local, 0u);
  f.link.run_for(TcpStack::kTimeWaitReuseMs);
  err.clear();
  net::Stream* s = f.open("x", &err);
  ASSERT_NE(s, nullptr) << err;
  EXPECT_EQ(s->local_port(), ports[0]);
  EXPECT_EQ(f.link.tcp(0).stats().time_wait_reused, 1u);
}

// Another destination port is a different 4-tuple: its free ports are not affected by TIME-WAIT to kPort,
// and TIME-WAIT tuples to kPort are never reused for it.
TEST(TcpTimeWaitReuse, TimeWaitIsPerDestination) {
  Fixture f(small_range(2));
  Sink other;
  ASSERT_EQ(f.link.tcp(1).listen_port(kPort, 16, f.sink), 0);
  ASSERT_EQ(f.link.tcp(1).listen_port(8080, 16, other), 0);
  ASSERT_EQ(f.fill_time_wait(2).size(), 2u);
  Source src;
  src.keep_open = true;
  std::string err;
  ASSERT_NE(f.link.tcp(0).connect_from(0, f.link.addr(1), 8080, src, &err), nullptr) << err;
  ASSERT_NE(f.link.tcp(0).connect_from(0, f.link.addr(1), 8080, src, &err), nullptr) << err;
  f.link.run_for(2000);
  EXPECT_EQ(f.link.tcp(0).connect_from(0, f.link.addr(1), 8080, src, &err), nullptr);
  EXPECT_EQ(f.link.tcp(0).stats().time_wait_reused, 0u);
}

}  // namespace
}  // namespace kosoku::tcpip
