// Unit tests for core/proxy/client_relay.hh (the client half of a proxied response: proxy_buffering's ring,
// proxy_busy_buffers_size, the room that paces an UpstreamFetch, draining before the response finishes). The
// relay's client is an Exchange that records what it is given and whose pending output the test sets, as a
// client stream that has sent that much would report it.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/config/loader.hh"
#include "core/http/exchange.hh"
#include "core/proxy/client_relay.hh"
#include "tests/unit/test_exchange.hh"

namespace kosoku::proxy {
namespace {

class RecordingClient final : public testing::TestExchange {
 public:
  struct Write {
    std::string bytes;
    bool by_ref;
  };
  std::vector<Write> writes;
  size_t pending = 0;        // what the stream still holds (set by the test as the client "reads")
  size_t low_water = SIZE_MAX;
  bool head_sent = false;

  // The bytes the client received so far, in order.
  std::string received() const {
    std::string s;
    for (const Write& w : writes) s += w.bytes;
    return s;
  }

  void send_head() override {
    head_sent = true;
    pending += 17;  // a head's bytes, queued like any output
  }
  void write(std::string_view d) override {
    writes.push_back({std::string(d), false});
    pending += d.size();
  }
  void write_ref(const char* p, size_t n) override {
    writes.push_back({std::string(p, n), true});
    pending += n;
  }
  size_t pending_output() const override { return pending; }
  void set_low_water(size_t bytes) override { low_water = bytes; }
};

ProxyLocationConf buffers(bool buffering, size_t num, size_t size, size_t busy, size_t buffer_size) {
  ProxyLocationConf c;
  c.buffering = buffering;
  c.buffers_num = num;
  c.buffers_size = size;
  c.busy_buffers_size = busy;
  c.buffer_size = buffer_size;
  return c;
}

std::string bytes(size_t n, char c) { return std::string(n, c); }

TEST(ClientRelay, BufferingHoldsProxyBuffersAndHandsAtMostTheBusySize) {
  RecordingClient client;
  const ProxyLocationConf conf = buffers(true, 8, 4096, 8192, 4096);
  ClientRelay relay;
  relay.reset(client, conf);
  relay.send_head();
  EXPECT_TRUE(client.head_sent);
  EXPECT_EQ(relay.room(), 8u * 4096);  // proxy_buffers 8 4k
  const std::string a = bytes(8u * 4096, 'a');
  const std::string_view span(a);
  relay.deliver(&span, 1, false);
  // Only proxy_busy_buffers_size went to the client, by reference; the rest is staged in the ring.
  ASSERT_EQ(client.writes.size(), 1u);
  EXPECT_TRUE(client.writes[0].by_ref);
  EXPECT_EQ(client.writes[0].bytes.size(), 8192u);
  // No room while the ring is full: the fetch pauses, and the client's low-water mark is set to come back.
  EXPECT_EQ(relay.room(), 0u);
  EXPECT_EQ(client.low_water, 4096u);  // half the busy bytes
  // The client took the head and the handed bytes: they are freed, more is handed, room comes back.
  client.pending = 0;
  EXPECT_EQ(relay.room(), 8192u);
  EXPECT_EQ(client.received().size(), 16384u);
  // The response was read whole: everything staged goes out; finished only once the client has it all.
  EXPECT_FALSE(relay.flush());
  EXPECT_EQ(client.low_water, 0u);
  EXPECT_EQ(client.received(), a);
  EXPECT_FALSE(relay.drained());
  client.pending = 0;
  EXPECT_TRUE(relay.drained());
}

TEST(ClientRelay, WithoutBufferingOneBufferAllInFlight) {
  RecordingClient client;
  const ProxyLocationConf conf = buffers(false, 8, 4096, 8192, 1000);
  ClientRelay relay;
  relay.reset(client, conf);
  EXPECT_EQ(relay.room(), 1000u);  // proxy_buffer_size
  const std::string a = bytes(1000, 'b');
  const std::string_view span(a);
  relay.deliver(&span, 1, false);
  ASSERT_EQ(client.writes.size(), 1u);  // passed on as it comes, not held for a busy limit
  EXPECT_EQ(client.writes[0].bytes.size(), 1000u);
  EXPECT_EQ(relay.room(), 0u);
  client.pending = 400;  // 600 bytes sent: not yet the whole slice
  EXPECT_EQ(relay.room(), 0u);
  client.pending = 0;
  EXPECT_EQ(relay.room(), 1000u);
}

TEST(ClientRelay, LastPieceWithNothingInFlightIsCopied) {
  // A small response read in one go never keeps the ring referenced: it is copied into the stream, so the
  // response finishes at once (and the next request may reuse the ring).
  RecordingClient client;
  const ProxyLocationConf conf = buffers(true, 8, 4096, 8192, 4096);
  ClientRelay relay;
  relay.reset(client, conf);
  const std::string_view spans[2] = {"hello ", "world"};
  relay.deliver(spans, 2, true);
  ASSERT_EQ(client.writes.size(), 2u);
  EXPECT_FALSE(client.writes[0].by_ref);
  EXPECT_FALSE(client.writes[1].by_ref);
  EXPECT_EQ(client.received(), "hello world");
  EXPECT_TRUE(relay.flush());
  EXPECT_EQ(relay.memory(), 0u);  // the ring was never needed
}

class EveryOtherByte final : public ClientRelay::Filter {
 public:
  explicit EveryOtherByte(RecordingClient& c) : client_(c) {}
  void write_content(const char* data, size_t len, bool) override {
    std::string kept;
    for (size_t i = 0; i < len; ++i) {
      if ((pos_++ & 1) == 0) kept.push_back(data[i]);
    }
    if (!kept.empty()) client_.write(kept);
  }

 private:
  RecordingClient& client_;
  uint64_t pos_ = 0;
};

TEST(ClientRelay, FilterSeesEveryByteAndWhatItQueuesIsCounted) {
  // The cache passes ranges of a 200 on (a filter): the ring's slices are freed by what the filter queued.
  RecordingClient client;
  const ProxyLocationConf conf = buffers(true, 2, 4, 8, 4);
  EveryOtherByte filter(client);
  ClientRelay relay;
  relay.reset(client, conf, &filter);
  EXPECT_EQ(relay.room(), 8u);
  const std::string_view a("abcdefgh");
  relay.deliver(&a, 1, false);
  EXPECT_EQ(client.received(), "aceg");
  client.pending = 0;
  EXPECT_EQ(relay.room(), 8u);
  const std::string_view b("ijkl");
  relay.deliver(&b, 1, true);
  EXPECT_EQ(client.received(), "acegik");
  client.pending = 0;
  EXPECT_TRUE(relay.flush());
}

}  // namespace
}  // namespace kosoku::proxy
