// One DPDK ethdev port, configured once by main() before the workers start (not thread-safe; the per-core
// RX/TX work happens in queue.hh on the owning core). Each queue pair gets its own mempool, created on the
// port's NUMA socket, so a core only ever allocates and frees mbufs from its own pool (shared-nothing).
//
// Queues: `queues` RX/TX pairs if the port supports that many and offers RSS (then RSS over IPv4/TCP is
// enabled); else open() fails with a message naming the port's limits. The configuration layer currently
// allows one worker (config/network_conf.hh), so one pair is what runs today.
// Checksums: kosoku's stack computes IPv4/TCP/ICMP checksums in software and verifies received ones in
// software; no checksum, TSO or LRO offload is requested from the port (tx_offloads = rx_offloads = 0).
// The offloads the port offers are reported (offers_*) so the stats page can show them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/stats/export.hh"
#include "kernel-bypass/tcpip/ipv4_addr.hh"

struct rte_mempool;

namespace kosoku::dpdk {

struct PortConfig {
  uint16_t port_id = 0;
  uint16_t queues = 1;              // RX/TX queue pairs = worker loops
  uint16_t rx_descriptors = 1024;   // per queue (rounded by the PMD to its limits)
  uint16_t tx_descriptors = 1024;
  uint32_t mbufs_per_queue = 8191;  // mempool size per queue pair (2^n - 1 is optimal for the ring)
  uint32_t mbuf_cache = 256;        // per-lcore mempool cache
  bool promiscuous = true;          // tap/virtio may filter unicast otherwise
};

class Port {
 public:
  /// Configures and starts the port (rte_eth_dev_configure, per-queue rte_pktmbuf_pool_create, queue setup,
  /// rte_eth_dev_start, promiscuous mode). EAL must be initialised. nullptr with *err on failure, e.g.
  /// "port 0: 2 queue pairs requested, the port supports 1 RX / 1 TX (no RSS)".
  static std::unique_ptr<Port> open(const PortConfig& conf, std::string* err);
  ~Port();  // stops and closes the port; mempools are freed
  Port(const Port&) = delete;
  Port& operator=(const Port&) = delete;

  uint16_t id() const { return conf_.port_id; }
  uint16_t queues() const { return conf_.queues; }
  rte_mempool* pool(uint16_t queue) const { return pools_[queue]; }
  tcpip::MacAddr mac() const { return mac_; }
  /// IPv4 MTU in bytes (rte_eth_dev_get_mtu, 1500 if the PMD does not say).
  uint16_t mtu() const { return mtu_; }
  const std::string& driver() const { return driver_; }
  bool offers_ipv4_tcp_tx_checksum() const { return offers_tx_csum_; }
  bool offers_rss() const { return offers_rss_; }

  /// rte_eth_stats_get as a stats section "dpdk_port" (labels port="N"): dpdk_rx_packets_total,
  /// dpdk_tx_packets_total, dpdk_rx_bytes_total, dpdk_tx_bytes_total, dpdk_rx_missed_total,
  /// dpdk_rx_errors_total, dpdk_tx_errors_total, dpdk_rx_nombuf_total, and the gauges dpdk_mempool_available
  /// (free mbufs, label queue="Q") and dpdk_link_up. Any thread (the PMD's counters may be a few µs stale).
  stats::ExtraSection stats_section() const;

 private:
  explicit Port(const PortConfig& conf) : conf_(conf) {}

  PortConfig conf_;
  std::vector<rte_mempool*> pools_;
  tcpip::MacAddr mac_;
  uint16_t mtu_ = 1500;
  std::string driver_;
  bool offers_tx_csum_ = false;
  bool offers_rss_ = false;
  bool started_ = false;
};

}  // namespace kosoku::dpdk
