// One core's end of a Port: its RX queue (if it has one), its TX queue (or the ring to the core that
// transmits for it), and its mempool; the tcpip::PacketIO the core's Interface sends through.
//
// RX: rx_burst() takes one burst of up to kBurst mbufs (rte_eth_rx_burst); the core's CoreSteering forwards
// those another core owns, and deliver() hands the others to Interface::receive_frame, then frees the mbuf
// (the stack copies what it keeps). With RX checksum offload the mbuf's RTE_MBUF_F_RX_L4_CKSUM_* verdict is
// passed up (GOOD: no software check; BAD: dropped by TCP). Chained (multi-segment) mbufs are dropped and
// counted: with a 1500-byte MTU and 2 KiB data rooms they do not occur.
// TX: frame_begin() hands out the data room of a fresh mbuf from this core's mempool (no malloc); frame_send()
// appends it to a burst of up to kBurst frames, sent with rte_eth_tx_burst when the burst is full and by
// flush(), which the core's poller calls at the start and the end of every loop iteration (the loop busy-polls
// in DPDK mode, so a frame waits at most one iteration; timers and resumed requests run between two polls).
// With TX checksum offload, frame_send() marks IPv4 frames RTE_MBUF_F_TX_IPV4 | IP_CKSUM (| TCP_CKSUM for TCP)
// with l2_len/l3_len; the Interface left the IPv4 checksum 0 and the TCP pseudo-header sum in place.
// A core without a TX queue enqueues its bursts on its tx ring instead (steering.hh); its TX core sends them.
// Frames the PMD or the ring refuse are freed at once and counted in tx_refused: TCP retransmits them. To keep
// that from happening on the ring, tx_room() reports its free slots and the core's TcpStack holds new data
// segments back while fewer than a burst are left (TX backpressure, TcpStack::set_tx_backpressure).
#pragma once

#include <cstdint>
#include <span>

#include "kernel-bypass/tcpip/interface.hh"
#include "kernel-bypass/tcpip/packet_io.hh"

struct rte_mbuf;
struct rte_mempool;
struct rte_ring;

namespace kosoku::dpdk {

/// Per-queue counters (plain fields, owning core only).
struct QueueStats {
  uint64_t rx_packets = 0, rx_bursts = 0, rx_multiseg_dropped = 0;
  uint64_t tx_packets = 0, tx_bursts = 0, tx_refused = 0, tx_no_mbuf = 0, tx_too_long = 0;
  uint64_t rx_l4_checksum_good = 0, rx_l4_checksum_bad = 0;  // verdicts of the port (RX offload)
  uint64_t tx_checksum_offloaded = 0;                        // frames whose checksums the port completes
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
};

class Queue final : public tcpip::PacketIO {
 public:
  static constexpr unsigned kBurst = 32;

  explicit Queue(const QueueConfig& conf);
  ~Queue();  // frees pending TX frames and the half-built one
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  /// One RX burst into out[0..kBurst). Returns the number of frames (0 without an RX queue).
  unsigned rx_burst(rte_mbuf** out);
  /// Hands one received frame to `ifc` and frees it.
  void deliver(tcpip::Interface& ifc, rte_mbuf* m, uint64_t now_ms);
  /// Appends a finished frame (relayed for a core without a TX queue) to the TX burst.
  void send_mbuf(rte_mbuf* m);
  /// Sends the pending TX burst. Returns the number of frames the PMD (or the tx ring) accepted.
  unsigned flush();
  size_t tx_pending() const { return tx_count_; }

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
  /// TX queue of its own: SIZE_MAX, unknown (a PMD's free descriptors have no cheap portable measure; its
  /// refusals are still counted in tx_refused).
  size_t tx_room() const override;
  static constexpr unsigned kRoomExact = 4 * kBurst;

  const QueueConfig& config() const { return conf_; }
  const QueueStats& stats() const { return stats_; }

 private:
  void mark_offloads(rte_mbuf* m);

  QueueConfig conf_;
  rte_mbuf* building_ = nullptr;  // from frame_begin until frame_send
  rte_mbuf* tx_[kBurst] = {};
  unsigned tx_count_ = 0;
  mutable unsigned ring_free_ = 0;  // relay ring: free slots at the last flush or tx_room() read (a lower bound)
  QueueStats stats_;
};

}  // namespace kosoku::dpdk
