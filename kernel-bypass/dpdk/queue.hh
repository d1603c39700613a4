// One core's end of a Port: its RX queue (if it has one), its TX queue (or the ring to the core that
// transmits for it), and its mempool; the tcpip::PacketIO the core's Interface sends through.
//
// RX: rx_burst() takes one burst of up to kBurst mbufs (rte_eth_rx_burst); the core's CoreSteering forwards
// those another core owns, and deliver() hands the others to Interface::receive_frame, then frees the mbuf
// (the stack copies what it keeps). With RX checksum offload the mbuf's RTE_MBUF_F_RX_L4_CKSUM_* verdict is
// passed up (GOOD: no software check; BAD: dropped by TCP). Chained (multi-segment) mbufs are dropped and
// counted: with a 1500-byte MTU and 2 KiB data rooms they do not occur.
// TX: frame_begin() hands out the data room of a fresh mbuf from this core's mempool (no malloc; when the pool
// is exhausted the frame is dropped — TCP retransmits it — counted in tx_no_mbuf and logged at crit at most once
// per second per core); frame_send()
// appends it to a burst of up to kBurst frames, sent with rte_eth_tx_burst when the burst is full and by
// flush(), which the core's poller calls at the start and the end of every loop iteration (the loop busy-polls
// in DPDK mode, so a frame waits at most one iteration; timers and resumed requests run between two polls).
// With TX checksum offload, frame_send() marks IPv4 frames RTE_MBUF_F_TX_IPV4 | IP_CKSUM (| TCP_CKSUM for TCP)
// with l2_len/l3_len; the Interface left the IPv4 checksum 0 and the TCP pseudo-header sum in place.
// Zero-copy TX (QueueConfig::attach_pool, Port::attach_pool): frame_send_payload() chains the payload of a
// TCP segment — bytes of a net::SharedBuffer the TCB holds, i.e. file data as io_uring read it — behind the
// header frame as an external-buffer mbuf (rte_pktmbuf_attach_extbuf; its rte_mbuf_ext_shared_info lives in the
// attach mbuf's private area, so nothing is allocated per frame) holding one reference to the buffer, dropped
// by the free callback when the PMD frees the frame. If the attach pool is empty the payload is copied instead,
// and on a PMD that fetches by IOVA (payload_needs_iova: a PCI NIC) also when the buffer has no IOVA (it came
// from malloc because the core's DmaBufferPool was empty; dma_buffers.hh).
// A core without a TX queue enqueues its bursts on its tx ring instead (steering.hh); its TX core sends them.
// TX backpressure, so that TCP holds new data instead of the link losing frames it must then retransmit:
// - Through the relay ring: frames the ring refuses are freed at once and counted in tx_refused; tx_room()
//   reports the ring's free slots and the core's TcpStack holds new data segments back while fewer than a
//   burst are left (TcpStack::set_tx_backpressure).
// - On a TX queue of its own: frames the PMD refuses (its descriptor ring is full: line rate reached, pause
//   frames, link down) go, in order, to a bounded software TX backlog (QueueConfig::tx_backlog frames; the
//   role of Linux's qdisc or Seastar's per-core TX queue). Every flush sends the backlog first and new frames
//   only once it is empty, so frames are never reordered; only beyond the bound are frames freed (newest
//   first: tail drop) and counted in tx_backlog_dropped and tx_refused. While the backlog holds a frame,
//   tx_room() is 0: TCP sends no new data (ACKs and retransmissions still go, behind the backlog) and its
//   waiting connections resume once a flush has emptied it. The worker's loop flushes (retrying the
//   backlog) every iteration, idle or not (backend.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/base/log.hh"
#include "kernel-bypass/tcpip/interface.hh"
#include "kernel-bypass/tcpip/packet_io.hh"

struct rte_mbuf;
struct rte_mempool;
struct rte_ring;

namespace kosoku::dpdk {

class DmaBufferPool;

/// Per-queue counters (plain fields, owning core only).
struct QueueStats {
  uint64_t rx_packets = 0, rx_bursts = 0, rx_multiseg_dropped = 0;
  uint64_t tx_packets = 0, tx_bursts = 0, tx_no_mbuf = 0, tx_too_long = 0;
  uint64_t tx_refused = 0;          // frames freed unsent: the relay ring was full, or the PMD refused them and
                                    // the TX backlog was full (TCP retransmits them)
  uint64_t tx_backlogged = 0;       // frames the PMD refused that went to the TX backlog (each counted once)
  uint64_t tx_backlog_dropped = 0;  // frames freed because the TX backlog was full (also in tx_refused)
  uint64_t tx_backlog_peak = 0;     // largest TX backlog seen (frames)
  uint64_t rx_l4_checksum_good = 0, rx_l4_checksum_bad = 0;  // verdicts of the port (RX offload)
  uint64_t tx_checksum_offloaded = 0;                        // frames whose checksums the port completes
  uint64_t tx_payload_by_reference = 0;  // frames whose TCP payload went by reference (zero-copy TX)
  uint64_t tx_payload_copied = 0;        // of those asked for by reference, copied: the attach pool was empty,
                                         // or the PMD needs an IOVA and the buffer has none (DMA pool empty)
};

/// Where one core's Queue sends and receives (see the header comment).
struct QueueConfig {
  uint16_t port = 0;
  int rx_queue = -1;              // the port's RX queue this core polls; -1: none (frames come by ring)
  int tx_queue = -1;              // the port's TX queue this core sends on; -1: through tx_ring
  rte_ring* tx_ring = nullptr;    // with tx_queue -1: the ring to the core that transmits for this one
  rte_mempool* pool = nullptr;    // this core's mbufs
  tcpip::MacAddr mac;
  uint16_t mtu = 1500;            // IPv4 MTU (frames up to mtu + 14 bytes)
  bool tx_checksum_offload = false;
  bool rx_checksum_offload = false;
  int rx_interrupt_fd = -1;       // readable when the RX queue has frames (Port::rx_interrupt_fd), -1: none
  /// Zero-copy TX (Port::attach_pool): mbufs without a data room, each with a rte_mbuf_ext_shared_info in its
  /// private area, chained behind a header frame to carry payload bytes by reference; null: payloads are
  /// copied. Only for a TX queue of the core's own (the mbufs are freed, and the buffers unref'd, on it).
  rte_mempool* attach_pool = nullptr;
  /// The PMD fetches frames by IOVA (Port::needs_iova): a payload goes by reference only from a buffer with an
  /// IOVA (SharedBuffer::iova, from `dma_pool`, which the core's SharedBuffers come from first); others are copied.
  bool payload_needs_iova = false;
  DmaBufferPool* dma_pool = nullptr;
  /// PortConfig::tx_descriptors' default: the backlog when the PMD does not report its descriptor count.
  static constexpr uint32_t kDefaultTxBacklog = 1024;
  /// With a TX queue of its own: the most frames the PMD refused that are kept for the next flush (the TX
  /// backlog); 0: refused frames are freed at once (the behaviour before the backlog; tx_room() is then
  /// SIZE_MAX). backend.cc sizes it as the queue's TX descriptor count (one more descriptor ring's worth).
  uint32_t tx_backlog = kDefaultTxBacklog;
};

class Queue final : public tcpip::PacketIO {
 public:
  static constexpr unsigned kBurst = 32;

  explicit Queue(const QueueConfig& conf);
  ~Queue();  // frees pending TX frames, the TX backlog and the half-built one
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  /// One RX burst into out[0..kBurst). Returns the number of frames (0 without an RX queue).
  unsigned rx_burst(rte_mbuf** out);
  /// Hands one received frame to `ifc` and frees it.
  void deliver(tcpip::Interface& ifc, rte_mbuf* m, uint64_t now_ms);
  /// Appends a finished frame (relayed for a core without a TX queue) to the TX burst.
  void send_mbuf(rte_mbuf* m);
  /// Sends the TX backlog (if any), then the pending TX burst once the backlog is empty; what the PMD refuses
  /// joins the backlog's tail (see the header comment). Through the relay ring: sends the pending burst,
  /// freeing what the ring refuses. Returns the number of frames the PMD (or the tx ring) accepted. Cheap with
  /// nothing pending (two compares): the worker calls it every loop iteration.
  unsigned flush();
  /// Frames of the TX burst not yet handed to the PMD or ring.
  size_t tx_pending() const { return tx_count_; }
  /// Frames in the TX backlog (refused by the PMD, sent first by the next flush); 0 through the relay ring.
  size_t tx_backlog() const { return backlog_count_; }

  // tcpip::PacketIO
  std::span<uint8_t> frame_begin(size_t max_len) override;
  void frame_send(size_t len) override;
  tcpip::MacAddr mac() const override { return conf_.mac; }
  uint16_t mtu() const override { return conf_.mtu; }
  bool tx_checksum_offload() const override { return conf_.tx_checksum_offload; }
  /// Frames this core can still send without a refusal. Through the TX relay ring (tx_queue -1): the ring's
  /// free slots minus the frames of the pending burst (tx_pending), exact when below kRoomExact, otherwise a
  /// lower bound (the free count the last flush or read saw: only the relaying core frees slots, so the real
  /// count can only be larger); one read of the ring's consumer index (rte_ring_free_count) when near. With a
  /// TX queue of its own: 0 while the TX backlog holds a frame (the PMD refused; new data waits until a flush
  /// empties it), else SIZE_MAX, unknown (a PMD's free descriptors have no cheap portable measure).
  size_t tx_room() const override;
  bool tx_payload_by_reference() const override { return conf_.attach_pool != nullptr; }
  /// The header frame with the payload chained as an external buffer (rte_pktmbuf_attach_extbuf, one
  /// reference to `buf`, dropped by the mbuf's free callback once the PMD is done with it). If the attach pool
  /// is empty the payload is copied into the header frame's data room instead (counted).
  void frame_send_payload(size_t len, net::SharedBuffer& buf, const uint8_t* payload, size_t payload_len) override;
  static constexpr unsigned kRoomExact = 4 * kBurst;

  const QueueConfig& config() const { return conf_; }
  const QueueStats& stats() const { return stats_; }

 private:
  void mark_offloads(rte_mbuf* m);
  /// The PMD (own TX queue) or the relay ring for `n` frames from `m`; returns how many it took.
  unsigned transmit(rte_mbuf** m, unsigned n);
  /// Appends `n` refused frames to the TX backlog, in order; those beyond its bound are freed and counted.
  void keep(rte_mbuf** m, unsigned n);

  QueueConfig conf_;
  rte_mbuf* building_ = nullptr;  // from frame_begin until frame_send
  rte_mbuf* tx_[kBurst] = {};
  unsigned tx_count_ = 0;
  mutable unsigned ring_free_ = 0;  // relay ring: free slots at the last flush or tx_room() read (a lower bound)
  // The TX backlog (own TX queue): conf_.tx_backlog slots; the frames are backlog_[head, head + count), oldest
  // first (contiguous, so one rte_eth_tx_burst sends them; moved to the front when the tail has no room).
  std::unique_ptr<rte_mbuf*[]> backlog_;
  uint32_t backlog_head_ = 0, backlog_count_ = 0;
  QueueStats stats_;
  base::LogRateLimiter no_mbuf_log_{1000};  // "no mbuf for a TX frame": one line per second
};

}  // namespace kosoku::dpdk
