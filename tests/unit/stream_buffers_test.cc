// The stream buffers both network backends share (core/net/in_buffer.hh, core/net/out_chain.hh) and the stack
// factory the workers get their stack from (core/net/stack_factory.hh), on their own. The backends' behaviour
// on top of them is pinned by the tcp_* suites (the TCB's send buffer) and the integration tests.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/net/in_buffer.hh"
#include "core/net/out_chain.hh"
#include "core/net/shared_buffer.hh"
#include "core/net/stack_factory.hh"

namespace kosoku::net {
namespace {

std::string str(std::span<const char> s) { return std::string(s.data(), s.size()); }

TEST(InBuffer, AppendConsumeCompactsAndGrowsThroughThePool) {
  InBufferPool pool(4);
  InBuffer in;
  std::string a(3000, 'a'), b(2000, 'b');
  EXPECT_TRUE(in.append(a.data(), a.size(), &pool));  // first memory: one pooled 4 KiB buffer
  EXPECT_EQ(in.capacity(), InBuffer::kFirstBytes);
  in.consume(2500);
  EXPECT_FALSE(in.append(b.data(), b.size(), &pool));  // fits once the unread 500 bytes move to the front
  EXPECT_EQ(str(in.view()), std::string(500, 'a') + b);
  std::string c(4000, 'c');
  EXPECT_TRUE(in.append(c.data(), c.size(), &pool));  // 6500 bytes: 8 KiB, the 4 KiB buffer back to the pool
  EXPECT_EQ(in.capacity(), 2 * InBuffer::kFirstBytes);
  EXPECT_EQ(pool.size(), 1u);
  EXPECT_EQ(str(in.view()), std::string(500, 'a') + b + c);
  in.consume(in.size());
  EXPECT_TRUE(in.empty());
  EXPECT_EQ(in.capacity(), 2 * InBuffer::kFirstBytes);  // consumed, memory kept until release
  in.release(&pool);
  EXPECT_EQ(in.capacity(), 0u);
  EXPECT_EQ(pool.size(), 1u);  // an 8 KiB buffer is not the pool's size: freed
}

TEST(OutChain, ThreeBlockKindsGatherInOrderAndSharedReferencesAreDropped) {
  SharedBuffer* buf = SharedBuffer::make(16 * 1024);
  std::memset(buf->data(), 's', 100);
  static const char kRef[] = "REF";
  BlockPool<1024, 2> pool;
  OutChain out;
  out.push_back(OutBlock::make_copied(1024));
  OutBlock* t = out.writable_tail(5);
  ASSERT_NE(t, nullptr);
  std::memcpy(t->data + t->end, "head:", 5);
  out.commit(5);
  out.push_back(OutBlock::make_ref(kRef, 3));
  out.push_back(OutBlock::make_shared(*buf, buf->data(), 100));
  EXPECT_EQ(buf->refs(), 2u);
  EXPECT_EQ(out.writable_tail(1), nullptr);  // the tail is a shared block: a new copied block is needed
  EXPECT_EQ(out.bytes(), 108u);
  iovec iov[8];
  ASSERT_EQ(out.gather(iov, 8), 3u);
  EXPECT_EQ(std::string(static_cast<char*>(iov[0].iov_base), iov[0].iov_len), "head:");
  EXPECT_EQ(std::string(static_cast<char*>(iov[1].iov_base), iov[1].iov_len), "REF");
  EXPECT_EQ(iov[2].iov_base, buf->data());
  EXPECT_EQ(iov[2].iov_len, 100u);
  auto give = [&](OutBlock* b) {
    if (!pool.keep(b)) OutBlock::destroy(b);
  };
  out.drop_front(7, give);  // the copied block emptied (to the pool), 1 byte of the ref block left
  EXPECT_EQ(pool.size(), 1u);
  EXPECT_EQ(out.front(), 7u);
  ASSERT_EQ(out.gather(iov, 8), 2u);
  EXPECT_EQ(std::string(static_cast<char*>(iov[0].iov_base), iov[0].iov_len), "F");
  out.drop_front(out.bytes(), give);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(buf->refs(), 1u);  // the shared block let go of its reference
  buf->unref();
}

TEST(OutChain, CopyOutAndSharedAtReadAtOffsetsAcrossSplitsDropsAndTruncation) {
  SharedBuffer* buf = SharedBuffer::make(64 * 1024);
  for (size_t i = 0; i < 64 * 1024; ++i) buf->data()[i] = static_cast<char>('A' + i % 26);
  auto copied = [](size_t left) { return OutBlock::make_copied(std::clamp<size_t>(left, 16, 4096)); };
  auto destroy = [](OutBlock* b) { OutBlock::destroy(b); };
  OutChain wait, send;
  send.copy_in("0123456789", 10, copied);
  wait.push_back(OutBlock::make_shared(*buf, buf->data(), 60000));
  // Split at a limit: the first 30000 bytes join the send chain, the rest continues the same buffer.
  send.push_back(wait.split_front(30000));
  send.push_back(wait.pop_front());
  EXPECT_TRUE(wait.empty());
  EXPECT_EQ(send.bytes(), 60010u);
  EXPECT_EQ(buf->refs(), 3u);
  char seg[1460];
  ASSERT_EQ(send.copy_out(5, seg, 10), 10u);  // across the copied and the shared block
  EXPECT_EQ(std::string(seg, 10), std::string("56789") + std::string(buf->data(), 5));
  const char* at = nullptr;
  EXPECT_EQ(send.shared_at(5, 100, &at), nullptr);  // starts in a copied block
  // Across the split: the two shared blocks continue each other in memory, so one reference covers it.
  EXPECT_EQ(send.shared_at(10 + 29000, 1460, &at), buf);
  EXPECT_EQ(at, buf->data() + 29000);
  // Acknowledged bytes trimmed at the front: offsets are from the new front, the cursor follows.
  send.drop_front(20010, destroy);
  EXPECT_EQ(send.front(), 20010u);
  ASSERT_EQ(send.copy_out(0, seg, 1460), 1460u);
  EXPECT_EQ(std::string(seg, 1460), std::string(buf->data() + 20000, 1460));
  EXPECT_EQ(send.shared_at(10000 - 100, 200, &at), buf);  // the split point, from the new front
  EXPECT_EQ(at, buf->data() + 29900);
  EXPECT_EQ(send.copy_out(39990, seg, 100), 10u);  // only 10 bytes left there
  // Unsent output dropped: the first 500 bytes stay.
  send.truncate(500, destroy);
  EXPECT_EQ(send.bytes(), 500u);
  EXPECT_EQ(buf->refs(), 2u);  // the second shared block went
  EXPECT_EQ(send.copy_out(0, seg, 1460), 500u);
  EXPECT_EQ(std::string(seg, 500), std::string(buf->data() + 20000, 500));
  send.clear(destroy);
  EXPECT_EQ(buf->refs(), 1u);
  buf->unref();
}

TEST(OutChain, DropFrontKeepsTheLastBlockWhenAskedAndTruncateZeroKeepsTheHead) {
  OutChain out;
  auto destroy = [](OutBlock* b) { OutBlock::destroy(b); };
  out.copy_in("abc", 3, [](size_t) { return OutBlock::make_copied(64); });
  OutBlock* kept = out.head();
  out.drop_front(3, destroy, [](const OutBlock& b) { return b.copied() && b.cap <= 64; });
  ASSERT_EQ(out.head(), kept);  // emptied but kept, from offset 0, for the next bytes
  EXPECT_EQ(kept->begin, 0u);
  EXPECT_EQ(out.writable_tail(64), kept);
  out.copy_in("defg", 4, [](size_t) { return OutBlock::make_copied(64); });
  EXPECT_EQ(out.head(), kept);
  out.truncate(0, destroy);
  EXPECT_EQ(out.head(), kept);
  EXPECT_EQ(out.bytes(), 0u);
  out.clear(destroy);
  EXPECT_TRUE(out.empty());
}

TEST(StackFactory, KernelBackendIsBuiltInAndAnUnstartedBackendIsAnError) {
  StackFactory stacks;
  EXPECT_NE(stacks.find(config::NetworkBackend::kKernel), nullptr);
  EXPECT_EQ(stacks.find(config::NetworkBackend::kDpdk), nullptr);
  reactor::Reactor reactor(0, 8);
  stats::CoreStats stats;
  config::MainConf conf;
  conf.network.backend = config::NetworkBackend::kDpdk;
  std::string err;
  EXPECT_EQ(stacks.make(reactor, stats, conf, 0, &err), nullptr);
  EXPECT_EQ(err, "network dpdk: the backend was not started");
  conf.network.backend = config::NetworkBackend::kKernel;
  conf.worker_connections = 16;
  std::unique_ptr<Stack> s = stacks.make(reactor, stats, conf, 0, &err);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->open_streams(), 0u);
  // A registered backend is asked by its kind.
  struct Counting final : Backend {
    int calls = 0;
    std::unique_ptr<Stack> make_stack(reactor::Reactor&, stats::CoreStats&, const config::MainConf&, int,
                                      std::string* e) override {
      ++calls;
      *e = "counted";
      return nullptr;
    }
  } counting;
  stacks.add(config::NetworkBackend::kDpdk, &counting);
  conf.network.backend = config::NetworkBackend::kDpdk;
  EXPECT_EQ(stacks.make(reactor, stats, conf, 3, &err), nullptr);
  EXPECT_EQ(counting.calls, 1);
  EXPECT_EQ(err, "counted");
}

}  // namespace
}  // namespace kosoku::net
