// One RX/TX queue pair of a Port, owned by one core: the tcpip::PacketIO the core's Interface sends through.
//
// RX: receive() takes one burst of up to kBurst mbufs (rte_eth_rx_burst) and hands each frame to
// Interface::receive_frame, then frees the mbuf (the stack copies what it keeps). Chained (multi-segment)
// mbufs are dropped and counted: with a 1500-byte MTU and 2 KiB data rooms they do not occur.
// TX: frame_begin() hands out the data room of a fresh mbuf from this queue's mempool (no malloc); frame_send()
// appends it to a burst of up to kBurst frames, sent with rte_eth_tx_burst when the burst is full and by
// flush(), which the core's poller calls at the start and the end of every loop iteration (the loop busy-polls
// in DPDK mode, so a frame waits at most one iteration; timers and resumed requests run between two polls).
// Frames the PMD refuses (TX ring full) are freed at once and counted in tx_refused: TCP retransmits them.
#pragma once

#include <cstdint>
#include <span>

#include "kernel-bypass/tcpip/interface.hh"
#include "kernel-bypass/tcpip/packet_io.hh"

struct rte_mbuf;
struct rte_mempool;

namespace kosoku::dpdk {

/// Per-queue counters (plain fields, owning core only).
struct QueueStats {
  uint64_t rx_packets = 0, rx_bursts = 0, rx_multiseg_dropped = 0;
  uint64_t tx_packets = 0, tx_bursts = 0, tx_refused = 0, tx_no_mbuf = 0, tx_too_long = 0;
};

class Queue final : public tcpip::PacketIO {
 public:
  static constexpr unsigned kBurst = 32;

  /// mtu: IPv4 MTU (frames up to mtu + 14 bytes).
  Queue(uint16_t port, uint16_t queue, rte_mempool* pool, const tcpip::MacAddr& mac, uint16_t mtu);
  ~Queue();  // frees pending TX frames and the half-built one
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  /// One RX burst into `ifc`. Returns the number of frames received (0..kBurst).
  unsigned receive(tcpip::Interface& ifc, uint64_t now_ms);
  /// Sends the pending TX burst. Returns the number of frames the PMD accepted.
  unsigned flush();
  size_t tx_pending() const { return tx_count_; }

  // tcpip::PacketIO
  std::span<uint8_t> frame_begin(size_t max_len) override;
  void frame_send(size_t len) override;
  tcpip::MacAddr mac() const override { return mac_; }
  uint16_t mtu() const override { return mtu_; }

  const QueueStats& stats() const { return stats_; }

 private:
  uint16_t port_;
  uint16_t queue_;
  rte_mempool* pool_;
  tcpip::MacAddr mac_;
  uint16_t mtu_;
  rte_mbuf* building_ = nullptr;  // from frame_begin until frame_send
  rte_mbuf* tx_[kBurst] = {};
  unsigned tx_count_ = 0;
  QueueStats stats_;
};

}  // namespace kosoku::dpdk
