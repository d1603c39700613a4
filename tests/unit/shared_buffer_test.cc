// net::SharedBuffer (core/net/shared_buffer.hh): reference counting, the per-core cache of freed buffers, and a
// core's Source of DMA-able blocks (buffers over 64 KiB come from it first, with their IOVA; when it is empty,
// or for small buffers, malloc). The Source here is a fixed array of blocks with made-up IOVAs: it stands for a
// DPDK port's mempool (kernel-bypass/dpdk/dma_buffers.hh, tested on a real mempool in dpdk_zero_copy_tx_test.cc).
#include "core/net/shared_buffer.hh"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace kosoku::net {
namespace {

class ArraySource final : public SharedBuffer::Source {
 public:
  static constexpr size_t kBlock = 256 * 1024 + 64;
  static constexpr uint64_t kIovaBase = 0x4000'0000;
  explicit ArraySource(unsigned blocks) : mem_(blocks * kBlock), free_(blocks) {
    for (unsigned i = 0; i < blocks; ++i) free_[i] = blocks - 1 - i;
  }
  void* take(uint64_t* iova) override {
    if (free_.empty()) return nullptr;
    unsigned i = free_.back();
    free_.pop_back();
    *iova = kIovaBase + i * kBlock;
    return mem_.data() + i * kBlock;
  }
  void give(void* block) override {
    free_.push_back(static_cast<unsigned>((static_cast<char*>(block) - mem_.data()) / kBlock));
  }
  size_t block_bytes() const override { return kBlock; }
  size_t available() const { return free_.size(); }
  const char* base() const { return mem_.data(); }

 private:
  std::vector<char> mem_;
  std::vector<unsigned> free_;
};

TEST(SharedBuffer, LastUnrefReturnsTheBufferToTheCoreCache) {
  SharedBuffer::trim_cache();
  SharedBuffer* b = SharedBuffer::make(100 * 1000);
  EXPECT_EQ(b->capacity(), 128u * 1024);  // power-of-two classes
  EXPECT_EQ(b->iova(), SharedBuffer::kNoIova);
  b->ref();
  b->unref();
  EXPECT_EQ(SharedBuffer::cached_buffers(), 0u);
  b->unref();
  EXPECT_EQ(SharedBuffer::cached_buffers(), 1u);
  EXPECT_EQ(SharedBuffer::cached_bytes(), 128u * 1024);
  SharedBuffer* again = SharedBuffer::make(70 * 1000);  // same class: the cached one, no malloc
  EXPECT_EQ(again, b);
  EXPECT_EQ(again->refs(), 1u);
  EXPECT_EQ(SharedBuffer::cached_buffers(), 0u);
  again->unref();
  SharedBuffer* huge = SharedBuffer::make(1 << 20);  // beyond 256 KiB: exact, never cached
  EXPECT_EQ(huge->capacity(), 1u << 20);
  huge->unref();
  EXPECT_EQ(SharedBuffer::cached_buffers(), 1u);
  SharedBuffer::trim_cache();
  EXPECT_EQ(SharedBuffer::cached_bytes(), 0u);
}

TEST(SharedBuffer, LiveBuffersAreCountedInTheCoreStats) {
  uint64_t buffers = 0, bytes = 0;
  SharedBuffer::set_stats(&buffers, &bytes);
  SharedBuffer* a = SharedBuffer::make(20 * 1000);  // 32 KiB class
  SharedBuffer* b = SharedBuffer::make(300 * 1000);  // exact
  EXPECT_EQ(buffers, 2u);
  EXPECT_EQ(bytes, 32u * 1024 + 300 * 1000);
  a->ref();
  a->unref();
  EXPECT_EQ(buffers, 2u);
  a->unref();  // to the cache: not alive any more
  b->unref();
  EXPECT_EQ(buffers, 0u);
  EXPECT_EQ(bytes, 0u);
  SharedBuffer* c = SharedBuffer::make(20 * 1000);  // from the cache: alive again
  EXPECT_EQ(buffers, 1u);
  c->unref();
  SharedBuffer::set_stats(nullptr, nullptr);
  SharedBuffer::trim_cache();
}

TEST(SharedBuffer, LargeBuffersComeFromTheSourceWithTheirIova) {
  ArraySource src(2);
  SharedBuffer::set_source(&src);
  SharedBuffer* a = SharedBuffer::make(256 * 1024);
  SharedBuffer* b = SharedBuffer::make(100 * 1000);
  ASSERT_EQ(src.available(), 0u);
  // data() is right after the header inside the block; the IOVA is the block's plus the same offset.
  uint64_t off_a = static_cast<uint64_t>(a->data() - src.base());
  EXPECT_EQ(a->iova(), ArraySource::kIovaBase + off_a);
  EXPECT_GE(a->capacity(), 256u * 1024);
  EXPECT_LE(a->data() + a->capacity(), src.base() + 2 * ArraySource::kBlock);
  EXPECT_NE(b->iova(), SharedBuffer::kNoIova);
  SharedBuffer* c = SharedBuffer::make(256 * 1024);  // the source is empty: malloc, no IOVA
  EXPECT_EQ(c->iova(), SharedBuffer::kNoIova);
  SharedBuffer* small = SharedBuffer::make(16 * 1024);  // small buffers never use the source
  EXPECT_EQ(small->iova(), SharedBuffer::kNoIova);
  a->unref();  // back to the source, not to the cache
  EXPECT_EQ(src.available(), 1u);
  SharedBuffer* d = SharedBuffer::make(200 * 1000);
  EXPECT_NE(d->iova(), SharedBuffer::kNoIova);
  EXPECT_EQ(src.available(), 0u);
  for (SharedBuffer* x : {b, c, small, d}) x->unref();
  EXPECT_EQ(src.available(), 2u);
  SharedBuffer::set_source(nullptr);
  SharedBuffer* e = SharedBuffer::make(256 * 1024);
  EXPECT_EQ(e->iova(), SharedBuffer::kNoIova);
  e->unref();
  SharedBuffer::trim_cache();
}

}  // namespace
}  // namespace kosoku::net
