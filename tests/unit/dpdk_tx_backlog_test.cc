// The TX backlog of a core with a TX queue of its own (dpdk::Queue, queue.hh) on a real PMD that refuses:
// DPDK's net_ring (rte_eth_from_rings) whose TX queue is an rte_ring of 64 slots that only the test drains —
// rte_eth_tx_burst enqueues into it and refuses what does not fit, as a NIC whose descriptor ring is full.
// EAL runs in-process without hugepages (dpdk_test_eal.hh). Checked: refused frames wait in order and go
// first on the next flush, new frames queue behind them, only frames beyond the bound are dropped (and
// counted), tx_room() is 0 while the backlog holds a frame; and, with kosoku's TCP on the queue sending 2 MiB
// through the 64-slot ring to a peer stack fed from the ring, the transfer is byte-exact with nothing dropped
// or retransmitted and every data segment on the wire in sequence (without the backlog the same transfer
// loses the refused frames and retransmits them).
#include <gtest/gtest.h>
#include <rte_ethdev.h>
#include <rte_eth_ring.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "core/config/conf.hh"
#include "core/reactor/reactor.hh"
#include "core/reactor/timer_wheel.hh"
#include "core/stats/counters.hh"
#include "kernel-bypass/dpdk/backend.hh"
#include "kernel-bypass/dpdk/idle_backoff.hh"
#include "kernel-bypass/dpdk/queue.hh"
#include "kernel-bypass/dpdk/steering.hh"
#include "kernel-bypass/tcpip/byte_order.hh"
#include "kernel-bypass/tcpip/interface.hh"
#include "kernel-bypass/tcpip/tcp_stack.hh"
#include "tests/unit/dpdk_net_ring_port.hh"
#include "tests/unit/dpdk_test_eal.hh"
#include "tests/unit/tcp_pipe.hh"
#include "tests/unit/tcpip_test_util.hh"

namespace kosoku::dpdk {
namespace {

using testing::kPoolMbufs, testing::NetRingPort;

// ---------------------------------------------------------------- the queue alone

/// Sends `n` 64-byte frames through `q` (frame_begin / frame_send: a full burst goes to the PMD at once), the
/// first 4 bytes of each its index (from `first`).
void send_indexed(Queue& q, uint32_t first, uint32_t n) {
  for (uint32_t i = first; i < first + n; ++i) {
    std::span<uint8_t> f = q.frame_begin(64);
    ASSERT_EQ(f.size(), 64u);
    std::memset(f.data(), 0, f.size());
    std::memcpy(f.data(), &i, sizeof(i));
    q.frame_send(64);
  }
}

/// The wire takes up to `max` frames off the TX ring; appends their indices to `out`. Returns how many.
unsigned take(rte_ring* r, unsigned max, std::vector<uint32_t>* out) {
  std::vector<void*> ms(max);
  unsigned n = rte_ring_sc_dequeue_burst(r, ms.data(), max, nullptr);
  for (unsigned i = 0; i < n; ++i) {
    auto* m = static_cast<rte_mbuf*>(ms[i]);
    uint32_t idx;
    std::memcpy(&idx, rte_pktmbuf_mtod(m, const uint8_t*), sizeof(idx));
    out->push_back(idx);
    rte_pktmbuf_free(m);
  }
  return n;
}

std::vector<uint32_t> range(uint32_t from, uint32_t to) {
  std::vector<uint32_t> v;
  for (uint32_t i = from; i < to; ++i) v.push_back(i);
  return v;
}

// The core's mbuf pool exhausted (every mbuf held elsewhere): frame_begin hands out nothing, each refused frame
// is counted, one crit line per second says so, and frames go again once mbufs come back. No wait, no crash.
TEST(DpdkTxBacklog, ExhaustedMbufPoolDropsFramesCountsThemAndLogsOncePerSecond) {
  NetRingPort p(64);
  ASSERT_TRUE(p.started) << p.error;
  base::ErrorLog& log = base::ErrorLog::global();
  const base::LogLevel saved = log.level();
  log.set_level(base::LogLevel::kWarn);
  {
    Queue q(p.queue_config(0));
    std::vector<rte_mbuf*> held;
    while (rte_mbuf* m = rte_pktmbuf_alloc(p.pool)) held.push_back(m);
    ASSERT_EQ(p.free_mbufs(), 0u);
    const uint64_t before = log.lines();
    for (int i = 0; i < 100; ++i) EXPECT_TRUE(q.frame_begin(64).empty());
    EXPECT_EQ(q.stats().tx_no_mbuf, 100u);
    ASSERT_EQ(log.lines(), before + 1) << "one line per second per core";
    const std::string line = log.recent(1).back();
    EXPECT_NE(line.find("[crit]"), std::string::npos) << line;
    EXPECT_NE(line.find("no mbuf for a TX frame on port"), std::string::npos) << line;
    EXPECT_NE(line.find("frame dropped (1 so far on this core)"), std::string::npos) << line;
    for (rte_mbuf* m : held) rte_pktmbuf_free(m);
    send_indexed(q, 0, 10);
    q.flush();
    std::vector<uint32_t> wire;
    take(p.tx, 64, &wire);
    EXPECT_EQ(wire, range(0, 10));
    EXPECT_EQ(q.stats().tx_no_mbuf, 100u);
  }
  log.set_level(saved);
}

// 200 frames into a 64-slot ring with a backlog of 100: 64 go, the next 100 wait, the last 36 are dropped
// (tail drop); the wire then gets 0..163 in order, and frames sent while the backlog holds come after it.
TEST(DpdkTxBacklog, RefusedFramesWaitInOrderAndOnlyThoseBeyondTheBoundAreDropped) {
  NetRingPort p(64);
  ASSERT_TRUE(p.started) << p.error;
  {
    Queue q(p.queue_config(100));
    EXPECT_EQ(q.tx_room(), SIZE_MAX);
    send_indexed(q, 0, 200);
    q.flush();
    EXPECT_EQ(rte_ring_count(p.tx), 64u);
    EXPECT_EQ(q.tx_backlog(), 100u);
    EXPECT_EQ(q.tx_pending(), 0u);
    EXPECT_EQ(q.tx_room(), 0u);  // TCP holds new data
    EXPECT_EQ(q.stats().tx_packets, 64u);
    EXPECT_EQ(q.stats().tx_backlogged, 100u);
    EXPECT_EQ(q.stats().tx_backlog_dropped, 36u);
    EXPECT_EQ(q.stats().tx_refused, 36u);
    EXPECT_EQ(q.stats().tx_backlog_peak, 100u);
    EXPECT_EQ(p.free_mbufs(), kPoolMbufs - 164);  // the 36 dropped went back to the pool

    std::vector<uint32_t> wire;
    EXPECT_EQ(take(p.tx, 40, &wire), 40u);  // the NIC sends 40: a flush refills exactly those, oldest first
    EXPECT_EQ(q.flush(), 40u);
    EXPECT_EQ(q.tx_backlog(), 60u);
    EXPECT_EQ(rte_ring_count(p.tx), 64u);
    EXPECT_EQ(q.flush(), 0u);  // nothing freed on the wire: nothing sent, nothing lost
    EXPECT_EQ(q.tx_backlog(), 60u);

    send_indexed(q, 200, 10);  // new frames (ACKs, retransmissions) while the backlog holds: behind it
    EXPECT_EQ(q.flush(), 0u);
    EXPECT_EQ(q.tx_backlog(), 70u);
    EXPECT_EQ(q.tx_room(), 0u);

    while (q.tx_backlog() > 0 || rte_ring_count(p.tx) > 0) {
      take(p.tx, 24, &wire);
      q.flush();
    }
    std::vector<uint32_t> want = range(0, 164);
    for (uint32_t i = 200; i < 210; ++i) want.push_back(i);
    EXPECT_EQ(wire, want);
    EXPECT_EQ(q.tx_room(), SIZE_MAX);  // empty again: TCP's waiting connections resume
    EXPECT_EQ(q.stats().tx_packets, 174u);
    EXPECT_EQ(q.stats().tx_backlogged, 110u);
    EXPECT_EQ(q.stats().tx_backlog_dropped, 36u);
    EXPECT_EQ(q.stats().tx_backlog_peak, 100u);

    send_indexed(q, 300, 5);  // the backlog left in the queue at destruction goes back to the pool
    q.flush();
    take(p.tx, 64, &wire);
    send_indexed(q, 400, 64 + 20);
    q.flush();
    EXPECT_EQ(q.tx_backlog(), 20u);
  }
  EXPECT_EQ(p.free_mbufs(), kPoolMbufs - 64);  // only the 64 frames the wire still holds
}

// tx_backlog 0: the behaviour before the backlog — refused frames are freed at once and tx_room() is unknown.
TEST(DpdkTxBacklog, WithoutABacklogRefusedFramesAreFreed) {
  NetRingPort p(64);
  ASSERT_TRUE(p.started) << p.error;
  Queue q(p.queue_config(0));
  send_indexed(q, 0, 100);
  q.flush();
  EXPECT_EQ(rte_ring_count(p.tx), 64u);
  EXPECT_EQ(q.tx_backlog(), 0u);
  EXPECT_EQ(q.tx_room(), SIZE_MAX);
  EXPECT_EQ(q.stats().tx_refused, 36u);
  EXPECT_EQ(q.stats().tx_backlogged, 0u);
  EXPECT_EQ(q.stats().tx_backlog_dropped, 0u);
  EXPECT_EQ(p.free_mbufs(), kPoolMbufs - 64);
}

// ---------------------------------------------------------------- kosoku's TCP on the queue

using tcpip::testing::pattern_bytes;

/// Side A: a TcpStack on a dpdk::Queue over the net_ring port (the core under test). Side B: a TcpStack on a
/// capturing PacketIO; the "wire" moves up to `per_ms` frames a simulated ms from the port's TX ring into B,
/// and B's frames into the port's RX ring. A runs one iteration of CoreStack::poll per frame slot.
class TcpOverNetRing {
 public:
  TcpOverNetRing(uint32_t backlog, unsigned per_ms)
      : port_(64),
        per_ms_(per_ms),
        queue_(port_.queue_config(backlog)),
        ip_a_(queue_, iface("10.0.0.1")),
        tcp_a_(ip_a_, timers_, clock_, stats_a_, tcpip::TcpConfig{}),
        peer_(kMacB),
        ip_b_(peer_, iface("10.0.0.2")),
        tcp_b_(ip_b_, timers_, clock_, stats_b_, tcpip::TcpConfig{}) {
    if (backlog > 0) tcp_a_.set_tx_backpressure(&queue_, Queue::kBurst);  // as CoreStack does
    // The neighbours are known (no ARP exchange on the wire).
    ip_a_.learn(ip_b_.address(), kMacB, clock_.ms);
    ip_b_.learn(ip_a_.address(), queue_.mac(), clock_.ms);
  }
  ~TcpOverNetRing() { free_peer_frames(); }

  const std::string& error() const { return port_.error; }

  struct Result {
    bool exact = false;
    uint64_t ms = 0;
    uint64_t retransmits = 0, tx_blocked = 0, refused = 0, backlog_dropped = 0, backlogged = 0, peak = 0;
    uint64_t out_of_sequence = 0;  // data segments on the wire not starting where the previous one ended
    uint64_t data_segments = 0, data_bytes = 0;
  };

  /// Connects A to B, writes `size` pattern bytes on A and runs until B has them all (600 s simulated max).
  Result transfer(size_t size) {
    Result r;
    if (tcp_b_.listen_port(80, 16, sink_) != 0) return r;
    std::string err;
    source_.keep_open = true;
    net::Stream* c = tcp_a_.connect_from(0, ip_b_.address(), 80, source_, &err);
    if (c == nullptr || !run([&] { return source_.connected && sink_.accepted == 1; }, 1000)) return r;
    const std::string data = pattern_bytes(size, 41);
    uint64_t start = clock_.ms;
    c->write(data);
    c->flush();
    run([&] { return sink_.received.size() >= data.size(); }, 600'000);
    r.exact = sink_.received == data;
    r.ms = clock_.ms - start;
    r.retransmits = tcp_a_.stats().retransmits;
    r.tx_blocked = tcp_a_.stats().tx_blocked;
    r.refused = queue_.stats().tx_refused;
    r.backlog_dropped = queue_.stats().tx_backlog_dropped;
    r.backlogged = queue_.stats().tx_backlogged;
    r.peak = queue_.stats().tx_backlog_peak;
    r.out_of_sequence = out_of_sequence_;
    r.data_segments = data_segments_;
    r.data_bytes = data_bytes_;
    EXPECT_EQ(tcp_a_.tx_waiting(), 0u);
    return r;
  }

 private:
  static constexpr tcpip::MacAddr kMacB{{2, 0, 0, 0, 0, 2}};
  static tcpip::InterfaceConfig iface(const char* addr) {
    tcpip::InterfaceConfig ic;
    ic.address = *tcpip::Ipv4Addr::parse(addr);
    ic.prefix_len = 24;
    return ic;
  }

  /// One iteration of CoreStack::poll for side A: flush (the backlog first), an RX burst, flush, resume the
  /// connections waiting for TX room, flush.
  void poll_a() {
    queue_.flush();
    rte_mbuf* rx[Queue::kBurst];
    unsigned n = queue_.rx_burst(rx);
    for (unsigned i = 0; i < n; ++i) queue_.deliver(ip_a_, rx[i], clock_.ms);
    if (n > 0) {
      tcp_a_.reap();
      queue_.flush();
    }
    if (tcp_a_.resume_tx() > 0) queue_.flush();
  }

  /// The wire takes one frame off the TX ring (if any) into B; B's answers go to A's RX ring.
  void wire_one() {
    void* m = nullptr;
    if (rte_ring_sc_dequeue(port_.tx, &m) == 0) {
      auto* mb = static_cast<rte_mbuf*>(m);
      std::span<const uint8_t> f(rte_pktmbuf_mtod(mb, const uint8_t*), mb->data_len);
      check_sequence(f);
      ip_b_.receive_frame(f, clock_.ms);
      rte_pktmbuf_free(mb);
    }
    free_peer_frames(true);
  }

  /// Data segments from A must follow each other exactly (SEG.SEQ = previous SEG.SEQ + SEG.LEN).
  void check_sequence(std::span<const uint8_t> f) {
    if (f.size() < 54 || f[12] != 0x08 || f[13] != 0x00 || f[23] != 6) return;
    size_t ihl = (f[14] & 0x0fu) * 4u;
    size_t total = tcpip::load_be16(f.data() + 16);
    const uint8_t* tcp = f.data() + 14 + ihl;
    size_t doff = (tcp[12] >> 4) * 4u;
    size_t len = total - ihl - doff;
    if (len == 0) return;
    uint32_t seq = tcpip::load_be32(tcp + 4);
    if (data_segments_ > 0 && seq != next_seq_) ++out_of_sequence_;
    next_seq_ = seq + static_cast<uint32_t>(len);
    ++data_segments_;
    data_bytes_ += len;
  }

  /// B's frames into A's RX ring (deliver: true), or dropped at teardown.
  void free_peer_frames(bool deliver = false) {
    for (const std::vector<uint8_t>& f : peer_.sent) {
      if (!deliver) continue;
      rte_mbuf* m = rte_pktmbuf_alloc(port_.pool);
      ASSERT_NE(m, nullptr);
      std::memcpy(rte_pktmbuf_mtod(m, uint8_t*), f.data(), f.size());
      m->data_len = static_cast<uint16_t>(f.size());
      m->pkt_len = static_cast<uint32_t>(f.size());
      if (rte_ring_sp_enqueue(port_.rx, m) != 0) rte_pktmbuf_free(m);
    }
    peer_.sent.clear();
  }

  template <typename Done>
  bool run(Done done, uint64_t max_ms) {
    uint64_t end = clock_.ms + max_ms;
    while (!done()) {
      if (clock_.ms >= end) return false;
      for (unsigned i = 0; i < per_ms_; ++i) {
        poll_a();
        wire_one();
        poll_a();
      }
      tcp_b_.reap();
      timers_.expire(clock_.ms);
      tcp_a_.reap();
      tcp_b_.reap();
      queue_.flush();
      free_peer_frames(true);
      ++clock_.ms;
    }
    return true;
  }

  NetRingPort port_;  // first: outlives everything that holds its mbufs
  unsigned per_ms_;
  tcpip::testing::SimClock clock_;
  reactor::TimerWheel timers_{4096};
  stats::CoreStats stats_a_, stats_b_;
  tcpip::testing::Sink sink_;
  tcpip::testing::Source source_;
  Queue queue_;
  tcpip::Interface ip_a_;
  tcpip::TcpStack tcp_a_;
  tcpip::testing::CaptureIO peer_;
  tcpip::Interface ip_b_;
  tcpip::TcpStack tcp_b_;
  uint32_t next_seq_ = 0;
  uint64_t out_of_sequence_ = 0, data_segments_ = 0, data_bytes_ = 0;
};

// 2 MiB through a 64-slot TX ring the wire drains at 4 frames/ms. With the backlog (and TCP holding new data
// while it is non-empty): nothing dropped, nothing retransmitted, every payload byte on the wire once and in
// sequence, byte-exact delivery. Without it (tx_backlog 0, the old behaviour): the PMD's refusals are lost
// and TCP resends them (printed for comparison; exact values vary with the TCP's loss recovery: 65 refused,
// 65 retransmits, 129 segments out of sequence at the time of writing, and the same 363 ms, since the wire
// is the bottleneck either way).
TEST(DpdkTxBacklog, TcpThroughARefusingPmdLosesNothingWithTheBacklog) {
  constexpr size_t kSize = 2 * 1024 * 1024;
  TcpOverNetRing::Result on, off;
  {
    TcpOverNetRing t(QueueConfig::kDefaultTxBacklog, 4);
    ASSERT_TRUE(t.error().empty()) << t.error();
    on = t.transfer(kSize);
  }
  {
    TcpOverNetRing t(0, 4);
    ASSERT_TRUE(t.error().empty()) << t.error();
    off = t.transfer(kSize);
  }
  std::printf("2 MiB through a 64-slot net_ring TX ring drained at 4 frames/ms: with the TX backlog %llu ms, "
              "%llu data segments, %llu dropped, %llu retransmits, %llu out of sequence, %llu waits, %llu "
              "frames backlogged, peak %llu; without it %llu ms, %llu data segments, %llu refused (freed), %llu "
              "retransmits, %llu out of sequence\n",
              (unsigned long long)on.ms, (unsigned long long)on.data_segments, (unsigned long long)on.refused,
              (unsigned long long)on.retransmits, (unsigned long long)on.out_of_sequence,
              (unsigned long long)on.tx_blocked, (unsigned long long)on.backlogged, (unsigned long long)on.peak,
              (unsigned long long)off.ms, (unsigned long long)off.data_segments, (unsigned long long)off.refused,
              (unsigned long long)off.retransmits, (unsigned long long)off.out_of_sequence);
  EXPECT_TRUE(on.exact);
  EXPECT_EQ(on.refused, 0u);
  EXPECT_EQ(on.backlog_dropped, 0u);
  EXPECT_EQ(on.retransmits, 0u);
  EXPECT_EQ(on.out_of_sequence, 0u);
  EXPECT_EQ(on.data_bytes, kSize);  // every byte once
  EXPECT_GT(on.backlogged, 0u);     // the PMD did refuse; the backlog kept those frames
  EXPECT_GT(on.tx_blocked, 0u);     // and TCP waited for it to drain
  EXPECT_LE(on.peak, uint64_t{Queue::kBurst});  // new data stops at the first refusal: at most one burst waits

  EXPECT_TRUE(off.exact);
  EXPECT_GT(off.refused, 0u);
  EXPECT_GT(off.retransmits, 0u);
  EXPECT_GT(off.out_of_sequence, 0u);  // the retransmissions, behind later segments
  EXPECT_EQ(off.tx_blocked, 0u);
  EXPECT_LE(on.ms, off.ms);
}

// ---------------------------------------------------------------- the idle back-off while TX is blocked

// A core whose TX is blocked (backlog the PMD refuses, or connections waiting for relay-ring room) sleeps
// like an idle core, but each step is cut at kTxBlockedSleepNs; the escalation goes on underneath.
TEST(DpdkTxBacklog, IdleStepsAreCappedWhileTxIsBlocked) {
  IdleBackoff b(200'000);
  uint64_t t = 1'000'000'000;
  b.worked(t);
  EXPECT_EQ(b.next_sleep_ns(t + 50'000, UINT64_MAX, IdleBackoff::kTxBlockedSleepNs), 0u);  // still spinning
  t += IdleBackoff::kSpinNs;
  std::vector<uint64_t> steps;
  for (int i = 0; i < 6; ++i) steps.push_back(b.next_sleep_ns(t, UINT64_MAX, IdleBackoff::kTxBlockedSleepNs));
  EXPECT_EQ(steps, (std::vector<uint64_t>{10'000, 20'000, 40'000, 50'000, 50'000, 50'000}));
  EXPECT_EQ(b.next_sleep_ns(t, UINT64_MAX), 200'000u);  // unblocked and still idle: the full step
  EXPECT_EQ(b.next_sleep_ns(t, t + 30'000, IdleBackoff::kTxBlockedSleepNs), 30'000u);  // the timer still cuts it
  IdleBackoff off(0);  // idle_sleep off: always busy-polls
  EXPECT_EQ(off.next_sleep_ns(t + IdleBackoff::kSpinNs, UINT64_MAX, IdleBackoff::kTxBlockedSleepNs), 0u);
}

// The worker itself (CoreStack on its own thread, with its Reactor, as a worker runs it; idle_sleep 1 ms):
// the port's TX ring is full before it starts, so its gratuitous ARP is refused and waits in the backlog.
// With nothing else to do for 30 ms the loop keeps retrying it, sleeping between tries in steps of at most
// 50 us (uncapped, the escalation would reach 1 ms steps: ~35 sleeps in 30 ms); the first poll after the
// wire frees a slot sends it.
TEST(DpdkTxBacklog, IdleWorkerRetriesItsBacklogAndSleepsOnlyBriefly) {
  NetRingPort p(64);
  ASSERT_TRUE(p.started) << p.error;
  for (unsigned i = 0; i < 64; ++i) {  // frames of earlier traffic the NIC has not sent yet
    rte_mbuf* m = rte_pktmbuf_alloc(p.pool);
    ASSERT_NE(m, nullptr);
    std::memset(rte_pktmbuf_mtod(m, uint8_t*), 0, 60);
    m->data_len = m->pkt_len = 60;
    ASSERT_EQ(rte_ring_sp_enqueue(p.tx, m), 0);
  }
  struct {
    std::string err;
    size_t backlog_at_start = 0, backlog_blocked = 0, backlog_after = 0;
    uint64_t polls = 0, sleeps = 0, slept_ns = 0, sent_after = 0;
    uint16_t ether_type = 0;
  } r;
  std::thread worker([&] {
    reactor::Reactor reactor(0, 64);
    stats::CoreStats core_stats;
    config::MainConf conf;
    conf.network.dpdk.address = (10u << 24) | 1;  // 10.0.0.1/24
    conf.network.dpdk.idle_sleep_us = 1000;
    std::unique_ptr<CoreMesh> mesh = CoreMesh::create(1, 1, &r.err);
    if (mesh == nullptr) return;
    FlowSteering flows(1, 128);
    auto cores = std::make_unique<CoreTable>();
    CoreStack cs(reactor, core_stats, conf, p.queue_config(QueueConfig::kDefaultTxBacklog), *cores, *mesh, flows, 0);
    r.backlog_at_start = cs.queue().tx_backlog();
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(30);
    while (std::chrono::steady_clock::now() < until) {
      reactor.update_clock();
      cs.poll();
      ++r.polls;
    }
    r.backlog_blocked = cs.queue().tx_backlog();
    r.sleeps = cs.idle_stats().sleeps;
    r.slept_ns = cs.idle_stats().slept_ns;
    uint64_t before = cs.queue().stats().tx_packets;
    void* m = nullptr;
    if (rte_ring_sc_dequeue(p.tx, &m) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(m));  // the NIC sends one
    reactor.update_clock();
    cs.poll();
    r.backlog_after = cs.queue().tx_backlog();
    r.sent_after = cs.queue().stats().tx_packets - before;
  });
  worker.join();
  ASSERT_EQ(r.err, "");
  std::vector<void*> all(64);
  unsigned n = rte_ring_sc_dequeue_burst(p.tx, all.data(), 64, nullptr);
  ASSERT_EQ(n, 64u);
  auto* last = static_cast<rte_mbuf*>(all[63]);
  r.ether_type = tcpip::load_be16(rte_pktmbuf_mtod(last, const uint8_t*) + 12);
  for (unsigned i = 0; i < n; ++i) rte_pktmbuf_free(static_cast<rte_mbuf*>(all[i]));
  std::printf("TX blocked 30 ms: %llu polls, %llu sleeps, %.1f us per sleep\n", (unsigned long long)r.polls,
              (unsigned long long)r.sleeps, r.sleeps > 0 ? double(r.slept_ns) / double(r.sleeps) / 1000 : 0.0);
  EXPECT_EQ(r.backlog_at_start, 1u);  // the gratuitous ARP
  EXPECT_EQ(r.backlog_blocked, 1u);   // refused all along, never dropped
  // Uncapped: 10, 20, ... 640 us, then 1 ms steps: at most ~35 sleeps averaging ~0.85 ms. The margins leave
  // room for the scheduler's lateness on a loaded host (71 us per sleep measured at load ~3).
  EXPECT_GT(r.sleeps, 60u);
  EXPECT_LT(r.slept_ns / r.sleeps, 500'000u);
  EXPECT_EQ(r.sent_after, 1u);
  EXPECT_EQ(r.backlog_after, 0u);
  EXPECT_EQ(r.ether_type, 0x0806);  // the ARP, behind the frames that were there first
}

// Core 0 transmits for core 1 (no TX queue of its own: its frames come through its relay ring). While core 0's
// port refuses and its backlog holds frames, drain() leaves core 1's frames in the ring — whose room core 1's
// TCP watches — instead of piling them onto the backlog until it overflows into drops; once the backlog is
// sent they follow, in order, behind core 0's own frames.
TEST(DpdkTxBacklog, RelayedFramesWaitInTheirRingWhileTheBacklogHoldsFrames) {
  NetRingPort p(64);
  ASSERT_TRUE(p.started) << p.error;
  std::string err;
  std::unique_ptr<CoreMesh> mesh = CoreMesh::create(2, 1, &err);
  ASSERT_NE(mesh, nullptr) << err;
  FlowSteering flows(2, 128);
  {
    Queue q(p.queue_config(Queue::kBurst));  // the smallest sane bound: one refused burst always fits
    CoreSteering steering(*mesh, flows, 0);
    tcpip::InterfaceConfig ic;
    tcpip::Interface ifc(q, ic);
    send_indexed(q, 0, 64 + 10);  // core 0's own: 64 on the wire, 10 in the backlog
    q.flush();
    ASSERT_EQ(q.tx_backlog(), 10u);
    for (uint32_t i = 1000; i < 1000 + 40; ++i) {  // core 1's frames in its relay ring
      rte_mbuf* m = rte_pktmbuf_alloc(p.pool);
      ASSERT_NE(m, nullptr);
      std::memset(rte_pktmbuf_mtod(m, uint8_t*), 0, 64);
      std::memcpy(rte_pktmbuf_mtod(m, uint8_t*), &i, sizeof(i));
      m->data_len = m->pkt_len = 64;
      ASSERT_EQ(rte_ring_sp_enqueue(mesh->tx(1), m), 0);
    }
    EXPECT_EQ(steering.drain(q, ifc, 0), 0u);
    q.flush();
    EXPECT_EQ(rte_ring_count(mesh->tx(1)), 40u);  // untouched: a burst of 32 behind 10 would drop 10
    EXPECT_EQ(q.tx_backlog(), 10u);
    EXPECT_EQ(steering.stats().tx_relayed, 0u);

    std::vector<uint32_t> wire;
    while (rte_ring_count(mesh->tx(1)) > 0 || q.tx_backlog() > 0 || rte_ring_count(p.tx) > 0) {
      take(p.tx, 20, &wire);
      q.flush();
      steering.drain(q, ifc, 0);
      q.flush();
    }
    std::vector<uint32_t> want = range(0, 74);
    for (uint32_t i = 1000; i < 1040; ++i) want.push_back(i);
    EXPECT_EQ(wire, want);
    EXPECT_EQ(steering.stats().tx_relayed, 40u);
    EXPECT_EQ(q.stats().tx_backlog_dropped, 0u);
    EXPECT_EQ(q.stats().tx_refused, 0u);
  }
  EXPECT_EQ(p.free_mbufs(), kPoolMbufs);
}

}  // namespace
}  // namespace kosoku::dpdk
