// One DPDK ethdev port, configured once by main() before the workers start (not thread-safe; the per-core
// RX/TX work happens in queue.hh on the owning core). Each worker core gets its own mempool, created on the
// port's NUMA socket, so a core only ever allocates mbufs from its own pool (shared-nothing; an mbuf another
// core frees goes back to its pool through the pool's multi-consumer ring).
//
// Queues: min(cores, max RX queues, max TX queues) RX/TX pairs; pair i belongs to core i. Cores beyond that
// have no queue: the steering layer (steering.hh) hands them their frames and relays their TX.
// RSS: with more than one pair and a port that hashes IPv4/TCP, RSS is enabled with the symmetric Toeplitz
// key (flow_hash.hh) and the redirection table is programmed entry i = i mod pairs, so the NIC delivers each
// flow, both directions, to the queue of the core FlowSteering names. If the PMD refuses the key or the
// table (net_tap, whose kernel side picks queues by its own hash), rss_programmed() is false and software
// steering forwards what arrives on the wrong core; correctness never depends on the NIC's hash.
// Checksums: when the port offers IPv4+TCP TX checksum offload it is enabled (queue.hh marks the mbufs), and
// likewise RX IPv4+TCP checksum verification; otherwise the stack computes and verifies them in software.
// Which is in use is reported in the stats (dpdk_tx_checksum_offload / dpdk_rx_checksum_offload).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/stats/export.hh"
#include "kernel-bypass/tcpip/ipv4_addr.hh"

struct rte_mempool;

namespace kosoku::dpdk {

class DmaBufferPool;

struct PortConfig {
  uint16_t port_id = 0;
  uint16_t cores = 1;               // worker loops (one queue pair each, if the port has enough)
  uint16_t rx_descriptors = 1024;   // per queue (rounded by the PMD to its limits)
  uint16_t tx_descriptors = 1024;
  uint32_t mbufs_per_core = 8191;   // mempool size per core (2^n - 1 is optimal for the ring)
  uint32_t mbuf_cache = 256;        // per-lcore mempool cache
  bool promiscuous = true;          // tap/virtio may filter unicast otherwise
  bool checksum_offload = true;     // use the port's IPv4/TCP checksum offloads when it offers them
  bool tx_zero_copy = true;         // attach pools (and on a PCI port DMA-able buffers) for payloads by reference
  uint32_t dma_buffers_per_core = 16;  // DmaBufferPool size on a port that fetches by IOVA
  bool rx_interrupts = false;       // RX queue interrupts (intr_conf.rxq) where the PMD is known to give each
                                    // queue a pollable fd (net_tap: the queue's tap fd): an idle worker sleeps
                                    // until a frame arrives, and an empty burst on a readable queue raises the
                                    // PMD's RX signal (backend.cc); other PMDs: none
};

class Port {
 public:
  /// Configures and starts the port (rte_eth_dev_configure, per-queue rte_pktmbuf_pool_create, queue setup,
  /// rte_eth_dev_start, promiscuous mode, RSS redirection table). EAL must be initialised. nullptr with *err
  /// on failure, e.g. "port 0: rte_eth_dev_configure: -22 (Invalid argument)".
  static std::unique_ptr<Port> open(const PortConfig& conf, std::string* err);
  ~Port();  // stops and closes the port; mempools are freed
  Port(const Port&) = delete;
  Port& operator=(const Port&) = delete;

  uint16_t id() const { return conf_.port_id; }
  uint16_t cores() const { return conf_.cores; }
  /// RX/TX queue pairs (≤ cores); core c < queue_pairs() owns pair c.
  uint16_t queue_pairs() const { return pairs_; }
  rte_mempool* pool(uint16_t core) const { return pools_[core]; }
  /// Zero-copy TX: core `core`'s pool of attach mbufs (QueueConfig::attach_pool), or null when payloads are
  /// copied: the PMD does not take chained mbufs (RTE_ETH_TX_OFFLOAD_MULTI_SEGS), or DPDK memory was short
  /// (zero_copy_note() says why).
  rte_mempool* attach_pool(uint16_t core) const { return core < attach_pools_.size() ? attach_pools_[core] : nullptr; }
  /// True if the PMD fetches frames by IOVA (a PCI NIC; not net_tap, net_memif, net_af_packet, which copy by
  /// virtual address): payloads go by reference only from DMA-able buffers, dma_pool(core)'s.
  bool needs_iova() const { return needs_iova_; }
  DmaBufferPool* dma_pool(uint16_t core) const { return core < dma_pools_.size() ? dma_pools_[core] : nullptr; }
  /// Why zero-copy TX is off on some core (a pool could not be created), empty if it is not.
  const std::string& zero_copy_note() const { return zero_copy_note_; }
  tcpip::MacAddr mac() const { return mac_; }
  /// IPv4 MTU in bytes (rte_eth_dev_get_mtu, 1500 if the PMD does not say).
  uint16_t mtu() const { return mtu_; }
  const std::string& driver() const { return driver_; }
  bool offers_ipv4_tcp_tx_checksum() const { return offers_tx_csum_; }
  bool offers_rss() const { return offers_rss_; }
  /// RSS with the symmetric key and kosoku's redirection table is active on the port.
  bool rss_programmed() const { return rss_programmed_; }
  /// Why RSS is not programmed ("one queue pair", "rte_eth_dev_rss_reta_update: -95 ..."), empty if it is.
  const std::string& rss_note() const { return rss_note_; }
  /// The port's RETA size (entries), 0 if it has none.
  uint32_t reta_size() const { return reta_size_; }
  bool tx_checksum_offload() const { return tx_csum_; }
  bool rx_checksum_offload() const { return rx_csum_; }
  /// The pollable fd that becomes readable when queue `q` has frames (rte_eth_dev_rx_intr_ctl_q_get_fd), or
  /// -1: no RX interrupts (not requested, not supported by the PMD, or the fd could not be had).
  int rx_interrupt_fd(uint16_t q) const { return q < rx_intr_fds_.size() ? rx_intr_fds_[q] : -1; }

  /// rte_eth_stats_get as a stats section "dpdk_port" (labels port="N"): dpdk_rx_packets_total,
  /// dpdk_tx_packets_total, dpdk_rx_bytes_total, dpdk_tx_bytes_total, dpdk_rx_missed_total,
  /// dpdk_rx_errors_total, dpdk_tx_errors_total, dpdk_rx_nombuf_total, and the gauges dpdk_mempool_available
  /// (free mbufs, label core="C"), dpdk_link_up, dpdk_queue_pairs, dpdk_rss_programmed, dpdk_tx_checksum_offload,
  /// dpdk_rx_checksum_offload (1 = the port does it, 0 = software), dpdk_rx_interrupts (queues with a wake
  /// fd), and every extended statistic of the PMD as dpdk_xstat_total{name="..."} (rte_eth_xstats_get). Any thread (the PMD's counters may be a few µs
  /// stale).
  stats::ExtraSection stats_section() const;

 private:
  explicit Port(const PortConfig& conf) : conf_(conf) {}
  bool program_rss(std::string* why);
  void make_zero_copy_pools(int socket);

  PortConfig conf_;
  std::vector<rte_mempool*> pools_;
  std::vector<rte_mempool*> attach_pools_;  // zero-copy TX, per core (empty or null: payloads are copied)
  // Per core, with needs_iova_. Never freed: a buffer can come back to its pool after the port is gone (a
  // connection's last reference dropped during exit); the memory goes with the process.
  std::vector<DmaBufferPool*> dma_pools_;
  bool needs_iova_ = false;
  std::string zero_copy_note_;
  tcpip::MacAddr mac_;
  uint16_t mtu_ = 1500;
  std::string driver_;
  bool offers_tx_csum_ = false;
  bool offers_rss_ = false;
  bool rss_programmed_ = false;
  std::string rss_note_;
  bool tx_csum_ = false, rx_csum_ = false;
  uint16_t pairs_ = 1;
  uint32_t reta_size_ = 0;
  std::vector<std::string> xstat_names_;
  std::vector<int> rx_intr_fds_;  // per queue pair, -1: none
  bool started_ = false;
};

}  // namespace kosoku::dpdk
