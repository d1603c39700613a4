// proxy::RefRing: the proxy's response buffer (proxy_buffers / proxy_busy_buffers_size): capacity bound,
// staged vs handed bytes, the busy limit, release by out position, wrap-around.
#include "core/proxy/ref_ring.hh"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kosoku::proxy {
namespace {

// A stand-in for the client stream: collects handed slices and counts out positions.
struct Sink {
  std::string data;
  uint64_t out = 0;
  std::vector<size_t> slices;
  uint64_t operator()(const char* p, size_t n) {
    data.append(p, n);
    slices.push_back(n);
    out += n;
    return out;
  }
};

TEST(RefRing, CapacityBoundsWhatIsAccepted) {
  RefRing r;
  r.reset(1024);
  EXPECT_EQ(r.memory(), 0u);  // allocated on first use
  EXPECT_EQ(r.free(), 1024u);
  r.append(std::string(1000, 'a'));
  EXPECT_EQ(r.memory(), 1024u);
  EXPECT_EQ(r.free(), 24u);
  EXPECT_EQ(r.staged(), 1000u);
  EXPECT_EQ(r.busy(), 0u);
  EXPECT_FALSE(r.idle());
}

TEST(RefRing, HandRespectsTheBusyLimitAndReleaseFreesSpace) {
  RefRing r;
  r.reset(4096);
  Sink s;
  std::string in;
  for (int i = 0; i < 4096; ++i) in.push_back(static_cast<char>('a' + i % 26));
  r.append(in);
  EXPECT_EQ(r.free(), 0u);
  EXPECT_EQ(r.hand(1000, std::ref(s)), 1000u);
  EXPECT_EQ(r.busy(), 1000u);
  EXPECT_EQ(r.staged(), 3096u);
  EXPECT_EQ(r.hand(1000, std::ref(s)), 0u);  // at the limit: nothing more until the stream sends
  r.release(999);                             // the slice is not fully sent yet
  EXPECT_EQ(r.busy(), 1000u);
  r.release(1000);
  EXPECT_EQ(r.busy(), 0u);
  EXPECT_EQ(r.free(), 1000u);
  EXPECT_EQ(r.hand(SIZE_MAX, std::ref(s)), 3096u);  // the response was read whole: no limit
  EXPECT_EQ(s.data, in);
  r.release(s.out);
  EXPECT_TRUE(r.idle());
  EXPECT_EQ(r.free(), 4096u);
}

TEST(RefRing, WrapsAroundWithTwoSlicesAndKeepsByteOrder) {
  RefRing r;
  r.reset(100);
  Sink s;
  std::string expect;
  char c = 0;
  // Keep a few bytes handed so the ring never empties (which would restart it at the beginning).
  for (int round = 0; round < 50; ++round) {
    std::string piece;
    for (size_t i = 0; i < r.free() && i < 37; ++i) piece.push_back(c++);
    r.append(piece);
    expect += piece;
    r.hand(60, std::ref(s));
    r.release(s.out > 10 ? s.out - 10 : 0);
  }
  r.hand(SIZE_MAX, std::ref(s));
  EXPECT_EQ(s.data, expect);
  bool wrapped = false;
  for (size_t n : s.slices) wrapped = wrapped || n < 37;
  EXPECT_TRUE(wrapped);
  EXPECT_LE(r.busy() + r.staged(), 100u);
}

TEST(RefRing, ResetKeepsMemoryOnlyForTheSameCapacity) {
  RefRing r;
  r.reset(512);
  r.append("x");
  EXPECT_EQ(r.memory(), 512u);
  Sink s;
  r.hand(SIZE_MAX, std::ref(s));
  r.release(s.out);
  r.reset(512);
  EXPECT_EQ(r.memory(), 512u);
  r.reset(1024);
  EXPECT_EQ(r.memory(), 0u);
  EXPECT_EQ(r.capacity(), 1024u);
}

}  // namespace
}  // namespace kosoku::proxy
