#include "kernel-bypass/dpdk/queue.hh"

#include <rte_ethdev.h>
#include <rte_mbuf.h>

namespace kosoku::dpdk {

Queue::Queue(uint16_t port, uint16_t queue, rte_mempool* pool, const tcpip::MacAddr& mac, uint16_t mtu)
    : port_(port), queue_(queue), pool_(pool), mac_(mac), mtu_(mtu) {}

Queue::~Queue() {
  if (building_ != nullptr) rte_pktmbuf_free(building_);
  for (unsigned i = 0; i < tx_count_; ++i) rte_pktmbuf_free(tx_[i]);
}

unsigned Queue::receive(tcpip::Interface& ifc, uint64_t now_ms) {
  rte_mbuf* rx[kBurst];
  uint16_t n = rte_eth_rx_burst(port_, queue_, rx, kBurst);
  if (n == 0) return 0;
  ++stats_.rx_bursts;
  stats_.rx_packets += n;
  for (uint16_t i = 0; i < n; ++i) {
    if (i + 1 < n) rte_prefetch0(rte_pktmbuf_mtod(rx[i + 1], void*));
    rte_mbuf* m = rx[i];
    if (m->nb_segs != 1) {
      ++stats_.rx_multiseg_dropped;
    } else {
      ifc.receive_frame(std::span<const uint8_t>(rte_pktmbuf_mtod(m, const uint8_t*), m->data_len), now_ms);
    }
    rte_pktmbuf_free(m);
  }
  return n;
}

std::span<uint8_t> Queue::frame_begin(size_t max_len) {
  if (max_len > size_t{mtu_} + 14) {
    ++stats_.tx_too_long;
    return {};
  }
  if (building_ == nullptr) {
    building_ = rte_pktmbuf_alloc(pool_);
    if (building_ == nullptr) {
      ++stats_.tx_no_mbuf;
      return {};
    }
  }
  if (max_len > rte_pktmbuf_tailroom(building_)) {
    ++stats_.tx_too_long;
    return {};
  }
  return std::span<uint8_t>(rte_pktmbuf_mtod(building_, uint8_t*), max_len);
}

void Queue::frame_send(size_t len) {
  rte_mbuf* m = building_;
  if (m == nullptr) return;
  building_ = nullptr;
  m->data_len = static_cast<uint16_t>(len);
  m->pkt_len = static_cast<uint32_t>(len);
  tx_[tx_count_++] = m;
  if (tx_count_ == kBurst) flush();
}

unsigned Queue::flush() {
  if (tx_count_ == 0) return 0;
  uint16_t sent = rte_eth_tx_burst(port_, queue_, tx_, static_cast<uint16_t>(tx_count_));
  ++stats_.tx_bursts;
  stats_.tx_packets += sent;
  if (sent < tx_count_) {
    // Refused: the TX ring is full. Free them now rather than hold mbufs across iterations without bound.
    for (unsigned i = sent; i < tx_count_; ++i) rte_pktmbuf_free(tx_[i]);
    stats_.tx_refused += tx_count_ - sent;
  }
  tx_count_ = 0;
  return sent;
}

}  // namespace kosoku::dpdk
