// dpdk::Queue::tx_room() (queue.hh), the TX room a worker without a TX queue reports to its TcpStack (TX
// backpressure): the relay ring's free slots minus the frames of the pending burst. Runs on a real rte_ring
// made with the production flags (steering.cc: SP/SC, exact size) in plain memory — rte_ring_init needs no
// EAL — and stand-in mbuf pointers: the Queue only stores and enqueues them here (no refusal, no free), and
// the test dequeues them as the relaying core would.
#include <gtest/gtest.h>
#include <rte_ring.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "kernel-bypass/dpdk/queue.hh"
#include "kernel-bypass/dpdk/steering.hh"

namespace kosoku::dpdk {
namespace {

class QueueTxRoom : public ::testing::Test {
 protected:
  static constexpr unsigned kSlots = CoreMesh::kTxRing;

  void SetUp() override {
    // RING_F_EXACT_SZ: capacity kSlots, storage for the next power of two above it.
    ssize_t bytes = rte_ring_get_memsize(rte_align32pow2(kSlots + 1));
    ASSERT_GT(bytes, 0);
    mem_ = std::aligned_alloc(RTE_CACHE_LINE_SIZE, static_cast<size_t>(bytes));
    ring_ = static_cast<rte_ring*>(mem_);
    ASSERT_EQ(rte_ring_init(ring_, "bp_test", kSlots, RING_F_SP_ENQ | RING_F_SC_DEQ | RING_F_EXACT_SZ), 0);
    ASSERT_EQ(rte_ring_free_count(ring_), kSlots);
    fake_.resize(kSlots + Queue::kBurst);
  }
  void TearDown() override {
    void* m;
    while (rte_ring_sc_dequeue(ring_, &m) == 0) {
    }
    std::free(mem_);
  }

  /// Hands `n` stand-in frames to the queue (a full burst goes to the ring at once, as in production).
  void send(Queue& q, unsigned n) {
    for (unsigned i = 0; i < n; ++i) q.send_mbuf(reinterpret_cast<rte_mbuf*>(&fake_[next_++ % fake_.size()]));
  }
  /// The relaying core takes `n` frames off the ring.
  unsigned drain(unsigned n) {
    std::vector<void*> out(n);
    return rte_ring_sc_dequeue_burst(ring_, out.data(), n, nullptr);
  }

  void* mem_ = nullptr;
  rte_ring* ring_ = nullptr;
  std::vector<uint64_t> fake_;
  size_t next_ = 0;
};

TEST_F(QueueTxRoom, RelayRingRoomIsFreeSlotsMinusThePendingBurst) {
  QueueConfig qc;
  qc.tx_queue = -1;
  qc.tx_ring = ring_;
  Queue q(qc);
  EXPECT_EQ(q.tx_room(), kSlots);
  send(q, 5);  // pending in the burst, not in the ring yet
  EXPECT_EQ(q.tx_pending(), 5u);
  EXPECT_EQ(q.tx_room(), kSlots - 5);
  EXPECT_EQ(q.flush(), 5u);
  EXPECT_EQ(q.tx_room(), kSlots - 5);

  // Up to 100 frames of room left: 1,943 more, in bursts of 32 (the last 23 pending).
  send(q, kSlots - 100 - 5);
  EXPECT_EQ(q.tx_pending(), (kSlots - 105) % Queue::kBurst);
  EXPECT_EQ(rte_ring_free_count(ring_), 100u + q.tx_pending());
  EXPECT_EQ(q.tx_room(), 100u);  // below kRoomExact: exact

  // The relaying core drains 64: the room reported grows by them (the ring is read again when near).
  EXPECT_EQ(drain(64), 64u);
  EXPECT_EQ(q.tx_room(), 164u);
  q.flush();
  EXPECT_EQ(q.tx_room(), 164u);
  send(q, 164);  // the ring exactly full: room 0 and nothing refused
  q.flush();
  EXPECT_EQ(q.tx_room(), 0u);
  EXPECT_EQ(q.stats().tx_refused, 0u);
  EXPECT_EQ(q.stats().tx_packets, uint64_t{kSlots} + 64);

  // Far from full, the answer may be the lower bound the last read saw: never more than the real room.
  EXPECT_EQ(drain(kSlots), kSlots);
  size_t room = q.tx_room();
  EXPECT_EQ(room, kSlots);  // read again: it was 0 (< kRoomExact)
  EXPECT_EQ(drain(1), 0u);
  send(q, Queue::kBurst);  // one burst to the ring
  EXPECT_LE(q.tx_room(), rte_ring_free_count(ring_));
  EXPECT_GE(q.tx_room(), size_t{Queue::kRoomExact});
}

TEST_F(QueueTxRoom, OwnTxQueueIsUnbounded) {
  QueueConfig qc;
  qc.tx_queue = 0;  // a TX queue of its own: the PMD's room is not measured
  Queue q(qc);
  EXPECT_EQ(q.tx_room(), SIZE_MAX);
}

}  // namespace
}  // namespace kosoku::dpdk
