#include "kernel-bypass/dpdk/queue.hh"

#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include <algorithm>
#include <cstring>

namespace kosoku::dpdk {

Queue::Queue(const QueueConfig& conf) : conf_(conf) {
  if (conf_.tx_queue < 0) conf_.tx_backlog = 0;  // the relay ring's refusals are freed (tx_room holds TCP)
  if (conf_.tx_backlog > 0) backlog_ = std::make_unique<rte_mbuf*[]>(conf_.tx_backlog);
}

Queue::~Queue() {
  if (building_ != nullptr) rte_pktmbuf_free(building_);
  for (unsigned i = 0; i < tx_count_; ++i) rte_pktmbuf_free(tx_[i]);
  for (uint32_t i = 0; i < backlog_count_; ++i) rte_pktmbuf_free(backlog_[backlog_head_ + i]);
}

unsigned Queue::rx_burst(rte_mbuf** out) {
  if (conf_.rx_queue < 0) return 0;
  uint16_t n = rte_eth_rx_burst(conf_.port, static_cast<uint16_t>(conf_.rx_queue), out, kBurst);
  if (n == 0) return 0;
  ++stats_.rx_bursts;
  stats_.rx_packets += n;
  return n;
}

void Queue::deliver(tcpip::Interface& ifc, rte_mbuf* m, uint64_t now_ms) {
  if (m->nb_segs != 1) {
    ++stats_.rx_multiseg_dropped;
  } else {
    tcpip::RxChecksum l4 = tcpip::RxChecksum::kUnknown;
    if (conf_.rx_checksum_offload) {
      uint64_t f = m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK;
      if (f == RTE_MBUF_F_RX_L4_CKSUM_GOOD) {
        l4 = tcpip::RxChecksum::kGood;
        ++stats_.rx_l4_checksum_good;
      } else if (f == RTE_MBUF_F_RX_L4_CKSUM_BAD) {
        l4 = tcpip::RxChecksum::kBad;
        ++stats_.rx_l4_checksum_bad;
      }
    }
    ifc.receive_frame(std::span<const uint8_t>(rte_pktmbuf_mtod(m, const uint8_t*), m->data_len), now_ms, l4);
  }
  rte_pktmbuf_free(m);
}

std::span<uint8_t> Queue::frame_begin(size_t max_len) {
  if (max_len > size_t{conf_.mtu} + 14) {
    ++stats_.tx_too_long;
    return {};
  }
  if (building_ == nullptr) {
    building_ = rte_pktmbuf_alloc(conf_.pool);
    if (building_ == nullptr) {
      ++stats_.tx_no_mbuf;
      KOSOKU_LOG_LIMITED(no_mbuf_log_, base::coarse_monotonic_ms(), kCrit,
                         "network dpdk: no mbuf for a TX frame on port %u (the core's mbuf pool is exhausted, %u "
                         "free), frame dropped (%u so far on this core)",
                         conf_.port, rte_mempool_avail_count(conf_.pool), stats_.tx_no_mbuf);
      return {};
    }
  }
  if (max_len > rte_pktmbuf_tailroom(building_)) {
    ++stats_.tx_too_long;
    return {};
  }
  return std::span<uint8_t>(rte_pktmbuf_mtod(building_, uint8_t*), max_len);
}

void Queue::mark_offloads(rte_mbuf* m) {
  const uint8_t* f = rte_pktmbuf_mtod(m, const uint8_t*);
  if (m->data_len < 34 || f[12] != 0x08 || f[13] != 0x00) return;  // not IPv4
  m->l2_len = 14;
  m->l3_len = (f[14] & 0x0fu) * 4;
  m->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM;
  if (f[23] == 6) m->ol_flags |= RTE_MBUF_F_TX_TCP_CKSUM;
  ++stats_.tx_checksum_offloaded;
}

void Queue::frame_send(size_t len) {
  rte_mbuf* m = building_;
  if (m == nullptr) return;
  building_ = nullptr;
  m->data_len = static_cast<uint16_t>(len);
  m->pkt_len = static_cast<uint32_t>(len);
  if (conf_.tx_checksum_offload) mark_offloads(m);
  send_mbuf(m);
}

namespace {
// The free callback of a payload mbuf's rte_mbuf_ext_shared_info: the link is done with the bytes.
void release_payload(void*, void* opaque) { static_cast<net::SharedBuffer*>(opaque)->unref(); }
}  // namespace

void Queue::frame_send_payload(size_t len, net::SharedBuffer& buf, const uint8_t* payload, size_t payload_len) {
  rte_mbuf* m = building_;
  if (m == nullptr) return;
  bool no_iova = conf_.payload_needs_iova && buf.iova() == net::SharedBuffer::kNoIova;
  rte_mbuf* p = no_iova ? nullptr : rte_pktmbuf_alloc(conf_.attach_pool);
  if (p == nullptr) {  // copy (the data room holds a whole frame, frame_begin checked the MTU)
    std::memcpy(rte_pktmbuf_mtod_offset(m, uint8_t*, len), payload, payload_len);
    ++stats_.tx_payload_copied;
    frame_send(len + payload_len);
    return;
  }
  building_ = nullptr;
  auto* shinfo = static_cast<rte_mbuf_ext_shared_info*>(rte_mbuf_to_priv(p));
  shinfo->free_cb = release_payload;
  shinfo->fcb_opaque = &buf;
  rte_mbuf_ext_refcnt_set(shinfo, 1);
  buf.ref();
  // The IOVA matters only to a PMD that DMAs (the buffer's blocks are IOVA-contiguous); the others copy from
  // buf_addr.
  uint64_t offset = static_cast<uint64_t>(reinterpret_cast<const char*>(payload) - buf.data());
  rte_iova_t iova = conf_.payload_needs_iova ? buf.iova() + offset : RTE_BAD_IOVA;
  rte_pktmbuf_attach_extbuf(p, const_cast<uint8_t*>(payload), iova, static_cast<uint16_t>(payload_len), shinfo);
  p->data_len = static_cast<uint16_t>(payload_len);
  p->pkt_len = static_cast<uint32_t>(payload_len);
  m->data_len = static_cast<uint16_t>(len);
  m->pkt_len = static_cast<uint32_t>(len + payload_len);
  m->next = p;
  m->nb_segs = 2;
  if (conf_.tx_checksum_offload) mark_offloads(m);
  ++stats_.tx_payload_by_reference;
  send_mbuf(m);
}

void Queue::send_mbuf(rte_mbuf* m) {
  tx_[tx_count_++] = m;
  if (tx_count_ == kBurst) flush();
}

unsigned Queue::transmit(rte_mbuf** m, unsigned n) {
  ++stats_.tx_bursts;
  if (conf_.tx_queue >= 0) {
    return rte_eth_tx_burst(conf_.port, static_cast<uint16_t>(conf_.tx_queue), m, static_cast<uint16_t>(n));
  }
  return rte_ring_sp_enqueue_burst(conf_.tx_ring, reinterpret_cast<void* const*>(m), n, &ring_free_);
}

void Queue::keep(rte_mbuf** m, unsigned n) {
  const uint32_t cap = conf_.tx_backlog;
  if (backlog_head_ + backlog_count_ + n > cap && backlog_head_ > 0) {
    std::memmove(backlog_.get(), backlog_.get() + backlog_head_, backlog_count_ * sizeof(rte_mbuf*));
    backlog_head_ = 0;
  }
  unsigned fit = std::min<unsigned>(n, cap - backlog_count_);
  std::copy(m, m + fit, backlog_.get() + backlog_head_ + backlog_count_);
  backlog_count_ += fit;
  stats_.tx_backlogged += fit;
  stats_.tx_backlog_peak = std::max<uint64_t>(stats_.tx_backlog_peak, backlog_count_);
  if (fit < n) {
    // Beyond the bound: the newest frames go (tail drop), as a full qdisc would; TCP retransmits them.
    for (unsigned i = fit; i < n; ++i) rte_pktmbuf_free(m[i]);
    stats_.tx_backlog_dropped += n - fit;
    stats_.tx_refused += n - fit;
  }
}

unsigned Queue::flush() {
  unsigned sent = 0;
  if (backlog_count_ > 0) {  // the oldest frames first
    unsigned n = transmit(backlog_.get() + backlog_head_, backlog_count_);
    backlog_head_ += n;
    backlog_count_ -= n;
    if (backlog_count_ == 0) backlog_head_ = 0;
    sent = n;
  }
  if (tx_count_ > 0) {
    // New frames go to the PMD only behind an empty backlog; otherwise straight to its tail (never reordered).
    unsigned n = backlog_count_ == 0 ? transmit(tx_, tx_count_) : 0;
    sent += n;
    if (n < tx_count_) {
      if (conf_.tx_backlog > 0) {
        keep(tx_ + n, tx_count_ - n);
      } else {
        // Refused, no backlog (the relay ring, whose room TCP reads; or tx_backlog 0): free them now.
        for (unsigned i = n; i < tx_count_; ++i) rte_pktmbuf_free(tx_[i]);
        stats_.tx_refused += tx_count_ - n;
      }
    }
    tx_count_ = 0;
  }
  stats_.tx_packets += sent;
  return sent;
}

size_t Queue::tx_room() const {
  if (conf_.tx_queue >= 0 || conf_.tx_ring == nullptr) return backlog_count_ > 0 ? 0 : SIZE_MAX;
  if (ring_free_ < tx_count_ + kRoomExact) ring_free_ = rte_ring_free_count(conf_.tx_ring);
  return ring_free_ > tx_count_ ? ring_free_ - tx_count_ : 0;
}

}  // namespace kosoku::dpdk
