// Zero-copy TX in dpdk::Queue (frame_send_payload): the payload is chained behind the header frame as an
// external-buffer mbuf from the attach pool, holding one reference to the net::SharedBuffer until the PMD
// frees the frame; without an attach mbuf it is copied into the header frame. On a real PMD (net_ring, whose TX
// queue is an rte_ring the test drains, tests/unit/dpdk_net_ring_port.hh).
#include <gtest/gtest.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/net/shared_buffer.hh"
#include "kernel-bypass/dpdk/dma_buffers.hh"
#include "kernel-bypass/dpdk/queue.hh"
#include "tests/unit/dpdk_net_ring_port.hh"

namespace kosoku::dpdk {
namespace {

using testing::NetRingPort;

constexpr size_t kHead = 54;        // Ethernet + IPv4 + TCP headers
constexpr size_t kPayload = 1448;

/// An attach pool as Port::open makes it (no data room, the shared info in the private area), `n` mbufs.
rte_mempool* attach_pool(unsigned n) {
  static int seq = 0;
  constexpr uint16_t kPriv = RTE_ALIGN(sizeof(rte_mbuf_ext_shared_info), RTE_MBUF_PRIV_ALIGN);
  return rte_pktmbuf_pool_create(absl::StrCat("zcap", seq++).c_str(), n, 0, kPriv, 0, SOCKET_ID_ANY);
}

/// A 4 KiB shared buffer whose byte i is i * mul.
net::SharedBuffer* patterned(int mul) {
  net::SharedBuffer* b = net::SharedBuffer::make(4096);
  for (size_t i = 0; i < 4096; ++i) b->data()[i] = static_cast<char>(i * mul);
  return b;
}

/// Builds a header frame of kHead bytes (0x11) and sends `payload_len` bytes of `buf` from offset 100 by
/// reference.
void send_one(Queue& q, net::SharedBuffer& buf) {
  std::span<uint8_t> f = q.frame_begin(kHead);
  ASSERT_EQ(f.size(), kHead);
  std::memset(f.data(), 0x11, kHead);
  q.frame_send_payload(kHead, buf, reinterpret_cast<const uint8_t*>(buf.data()) + 100, kPayload);
  q.flush();
}

// The frame on the wire is two segments: the header, then the payload pointing into the shared buffer itself;
// the buffer has one more reference until the frame is freed, then the attach mbuf is back in its pool.
TEST(DpdkZeroCopyTx, PayloadIsChainedByReferenceUntilTheFrameIsFreed) {
  NetRingPort p(64);
  ASSERT_TRUE(p.started) << p.error;
  rte_mempool* ap = attach_pool(63);
  ASSERT_NE(ap, nullptr);
  net::SharedBuffer* buf = patterned(7);
  {
    QueueConfig qc = p.queue_config(0);
    qc.attach_pool = ap;
    Queue q(qc);
    EXPECT_TRUE(q.tx_payload_by_reference());
    send_one(q, *buf);
    EXPECT_EQ(q.stats().tx_payload_by_reference, 1u);
    EXPECT_EQ(q.stats().tx_payload_copied, 0u);
    void* obj = nullptr;
    ASSERT_EQ(rte_ring_sc_dequeue(p.tx, &obj), 0);
    auto* m = static_cast<rte_mbuf*>(obj);
    EXPECT_EQ(m->nb_segs, 2);
    EXPECT_EQ(m->pkt_len, kHead + kPayload);
    EXPECT_EQ(m->data_len, kHead);
    rte_mbuf* seg = m->next;
    ASSERT_NE(seg, nullptr);
    EXPECT_TRUE(RTE_MBUF_HAS_EXTBUF(seg));
    EXPECT_EQ(seg->data_len, kPayload);
    EXPECT_EQ(rte_pktmbuf_mtod(seg, char*), buf->data() + 100);  // the buffer's own bytes, not a copy
    EXPECT_EQ(buf->refs(), 2u);
    EXPECT_EQ(rte_mempool_avail_count(ap), 62u);
    rte_pktmbuf_free(m);  // the PMD is done with it
    EXPECT_EQ(buf->refs(), 1u);
    EXPECT_EQ(rte_mempool_avail_count(ap), 63u);

    // A frame still queued when the queue goes away releases its reference too.
    std::span<uint8_t> f = q.frame_begin(kHead);
    ASSERT_EQ(f.size(), kHead);
    q.frame_send_payload(kHead, *buf, reinterpret_cast<const uint8_t*>(buf->data()), kPayload);
    EXPECT_EQ(buf->refs(), 2u);
  }
  EXPECT_EQ(buf->refs(), 1u);
  buf->unref();
  rte_mempool_free(ap);
}

// With the attach pool empty the payload is copied behind the header in one segment (counted), byte-exact,
// and the buffer gains no reference.
TEST(DpdkZeroCopyTx, EmptyAttachPoolFallsBackToACopy) {
  NetRingPort p(64);
  ASSERT_TRUE(p.started) << p.error;
  rte_mempool* ap = attach_pool(1);
  ASSERT_NE(ap, nullptr);
  rte_mbuf* taken = rte_pktmbuf_alloc(ap);  // the only one
  ASSERT_NE(taken, nullptr);
  net::SharedBuffer* buf = patterned(13);
  {
    QueueConfig qc = p.queue_config(0);
    qc.attach_pool = ap;
    Queue q(qc);
    send_one(q, *buf);
    EXPECT_EQ(q.stats().tx_payload_by_reference, 0u);
    EXPECT_EQ(q.stats().tx_payload_copied, 1u);
    EXPECT_EQ(buf->refs(), 1u);
    void* obj = nullptr;
    ASSERT_EQ(rte_ring_sc_dequeue(p.tx, &obj), 0);
    auto* m = static_cast<rte_mbuf*>(obj);
    EXPECT_EQ(m->nb_segs, 1);
    ASSERT_EQ(m->data_len, kHead + kPayload);
    const auto* bytes = rte_pktmbuf_mtod(m, const uint8_t*);
    EXPECT_EQ(bytes[kHead - 1], 0x11);
    EXPECT_EQ(std::memcmp(bytes + kHead, buf->data() + 100, kPayload), 0);
    rte_pktmbuf_free(m);
  }
  rte_pktmbuf_free(taken);
  buf->unref();
  rte_mempool_free(ap);
}

// A PMD that DMAs (payload_needs_iova, a PCI port): a payload of a DMA-able buffer (from DmaBufferPool, a real
// mempool) is attached with its IOVA, the buffer's plus the offset; one of ordinary memory is copied.
TEST(DpdkZeroCopyTx, DmaPortsTakePayloadsByReferenceOnlyWithAnIova) {
  NetRingPort p(64);
  ASSERT_TRUE(p.started) << p.error;
  rte_mempool* ap = attach_pool(63);
  ASSERT_NE(ap, nullptr);
  std::string err;
  DmaBufferPool* dma = DmaBufferPool::create("zcdma", SOCKET_ID_ANY, 4, &err);
  ASSERT_NE(dma, nullptr) << err;
  net::SharedBuffer::set_source(dma);
  net::SharedBuffer* with_iova = net::SharedBuffer::make(256 * 1024);
  net::SharedBuffer::set_source(nullptr);
  EXPECT_EQ(dma->available(), 3u);
  if (with_iova->iova() == net::SharedBuffer::kNoIova) {
    with_iova->unref();
    delete dma;
    rte_mempool_free(ap);
    GTEST_SKIP() << "this EAL gives mempool objects no IOVA";
  }
  net::SharedBuffer* plain = patterned(3);
  {
    QueueConfig qc = p.queue_config(0);
    qc.attach_pool = ap;
    qc.payload_needs_iova = true;
    Queue q(qc);
    send_one(q, *with_iova);
    send_one(q, *plain);
    EXPECT_EQ(q.stats().tx_payload_by_reference, 1u);
    EXPECT_EQ(q.stats().tx_payload_copied, 1u);
    void* obj[2] = {};
    ASSERT_EQ(rte_ring_sc_dequeue_bulk(p.tx, obj, 2, nullptr), 2u);
    auto* m = static_cast<rte_mbuf*>(obj[0]);
    ASSERT_EQ(m->nb_segs, 2);
    EXPECT_EQ(rte_pktmbuf_iova(m->next), with_iova->iova() + 100);
    EXPECT_EQ(with_iova->refs(), 2u);
    EXPECT_EQ(static_cast<rte_mbuf*>(obj[1])->nb_segs, 1);
    EXPECT_EQ(plain->refs(), 1u);
    rte_pktmbuf_free(m);
    rte_pktmbuf_free(static_cast<rte_mbuf*>(obj[1]));
  }
  with_iova->unref();  // back to its pool
  EXPECT_EQ(dma->available(), 4u);
  plain->unref();
  delete dma;
  rte_mempool_free(ap);
}

// Without an attach pool (a PCI port, or a core that relays its frames to another core) the queue says so, and
// the TCP stack copies payloads into frame_begin's buffer as before.
TEST(DpdkZeroCopyTx, NoAttachPoolMeansPayloadsAreCopied) {
  NetRingPort p(64);
  ASSERT_TRUE(p.started) << p.error;
  Queue q(p.queue_config(0));
  EXPECT_FALSE(q.tx_payload_by_reference());
}

}  // namespace
}  // namespace kosoku::dpdk
