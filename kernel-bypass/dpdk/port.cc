#include "kernel-bypass/dpdk/port.hh"

#include "kernel-bypass/dpdk/dma_buffers.hh"

#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernel-bypass/dpdk/flow_hash.hh"

namespace kosoku::dpdk {

namespace {
std::string rc_text(int rc) { return absl::StrCat(rc, " (", rte_strerror(rc < 0 ? -rc : rc), ")"); }
}  // namespace

std::unique_ptr<Port> Port::open(const PortConfig& conf, std::string* err) {
  auto fail = [&](std::string msg) -> std::unique_ptr<Port> {
    if (err) *err = absl::StrCat("port ", conf.port_id, ": ", msg);
    return nullptr;
  };
  if (!rte_eth_dev_is_valid_port(conf.port_id)) return fail("no such port (check the dpdk eal --vdev/-a list)");
  if (conf.cores == 0) return fail("0 cores requested");
  rte_eth_dev_info info{};
  if (int rc = rte_eth_dev_info_get(conf.port_id, &info); rc != 0) return fail("rte_eth_dev_info_get: " + rc_text(rc));
  std::unique_ptr<Port> p(new Port(conf));
  p->driver_ = info.driver_name != nullptr ? info.driver_name : "";
  p->pairs_ = std::max<uint16_t>(1, std::min({conf.cores, info.max_rx_queues, info.max_tx_queues}));
  constexpr uint64_t kRssTypes = RTE_ETH_RSS_IPV4 | RTE_ETH_RSS_NONFRAG_IPV4_TCP;
  p->offers_rss_ = (info.flow_type_rss_offloads & RTE_ETH_RSS_NONFRAG_IPV4_TCP) != 0;
  const uint64_t tx_csum = RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_TCP_CKSUM;
  const uint64_t rx_csum = RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_TCP_CKSUM;
  p->offers_tx_csum_ = (info.tx_offload_capa & tx_csum) == tx_csum;
  p->tx_csum_ = conf.checksum_offload && p->offers_tx_csum_;
  p->rx_csum_ = conf.checksum_offload && (info.rx_offload_capa & rx_csum) == rx_csum;
  rte_eth_conf ec{};
  std::vector<uint8_t> key;
  if (p->pairs_ > 1 && p->offers_rss_) {
    key = symmetric_rss_key(info.hash_key_size > 0 ? info.hash_key_size : 40);
    ec.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
    ec.rx_adv_conf.rss_conf.rss_key = key.data();
    ec.rx_adv_conf.rss_conf.rss_key_len = static_cast<uint8_t>(key.size());
    ec.rx_adv_conf.rss_conf.rss_hf = kRssTypes & info.flow_type_rss_offloads;
  }
  // RX interrupts only where each queue's fd is known to be pollable: net_tap's is the queue's tap fd itself.
  bool rx_intr = conf.rx_interrupts && p->driver_ == "net_tap";
  if (rx_intr) ec.intr_conf.rxq = 1;
  // Zero-copy TX needs chained mbufs. PMDs that copy frames out by virtual address take any memory; others
  // (PCI NICs) DMA by IOVA and get payloads by reference only from DMA-able buffers (dma_buffers.hh).
  bool by_reference = conf.tx_zero_copy && (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) != 0;
  p->needs_iova_ = !(p->driver_ == "net_tap" || p->driver_ == "net_memif" || p->driver_ == "net_af_packet");
  if (p->tx_csum_) ec.txmode.offloads = tx_csum;
  if (by_reference) ec.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
  if (p->rx_csum_) ec.rxmode.offloads = rx_csum;
  if (int rc = rte_eth_dev_configure(conf.port_id, p->pairs_, p->pairs_, &ec); rc != 0) {
    return fail("rte_eth_dev_configure: " + rc_text(rc));
  }
  uint16_t rxd = conf.rx_descriptors, txd = conf.tx_descriptors;
  if (int rc = rte_eth_dev_adjust_nb_rx_tx_desc(conf.port_id, &rxd, &txd); rc != 0) {
    return fail("rte_eth_dev_adjust_nb_rx_tx_desc: " + rc_text(rc));
  }
  int socket = rte_eth_dev_socket_id(conf.port_id);
  if (socket < 0) socket = SOCKET_ID_ANY;
  for (uint16_t c = 0; c < conf.cores; ++c) {
    std::string name = absl::StrCat("kosoku_p", conf.port_id, "c", c);
    rte_mempool* mp = rte_pktmbuf_pool_create(name.c_str(), conf.mbufs_per_core, conf.mbuf_cache, 0,
                                              RTE_MBUF_DEFAULT_BUF_SIZE, socket);
    if (mp == nullptr) {
      return fail(absl::StrCat("rte_pktmbuf_pool_create(", name, "): ", rte_strerror(rte_errno), " (each core needs ",
                               (uint64_t{conf.mbufs_per_core} * (RTE_MBUF_DEFAULT_BUF_SIZE + 192)) >> 20,
                               " MiB of DPDK memory: raise the eal -m MB or the hugepages)"));
    }
    p->pools_.push_back(mp);
  }
  rte_eth_rxconf rxc = info.default_rxconf;
  rxc.offloads = ec.rxmode.offloads;
  rte_eth_txconf txc = info.default_txconf;
  txc.offloads = ec.txmode.offloads;
  for (uint16_t q = 0; q < p->pairs_; ++q) {
    if (int rc = rte_eth_rx_queue_setup(conf.port_id, q, rxd, static_cast<unsigned>(socket), &rxc, p->pools_[q]);
        rc != 0) {
      return fail(absl::StrCat("rte_eth_rx_queue_setup(", q, "): ", rc_text(rc)));
    }
    if (int rc = rte_eth_tx_queue_setup(conf.port_id, q, txd, static_cast<unsigned>(socket), &txc); rc != 0) {
      return fail(absl::StrCat("rte_eth_tx_queue_setup(", q, "): ", rc_text(rc)));
    }
  }
  if (int rc = rte_eth_dev_start(conf.port_id); rc != 0) return fail("rte_eth_dev_start: " + rc_text(rc));
  p->started_ = true;
  if (by_reference) p->make_zero_copy_pools(socket);
  p->rx_intr_fds_.assign(p->pairs_, -1);
  for (uint16_t q = 0; rx_intr && q < p->pairs_; ++q) {
    int fd = rte_eth_dev_rx_intr_ctl_q_get_fd(conf.port_id, q);
    p->rx_intr_fds_[q] = fd >= 0 ? fd : -1;
    if (fd >= 0) rte_eth_dev_rx_intr_enable(conf.port_id, q);  // net_tap's fd is readable either way
  }
  p->reta_size_ = info.reta_size;
  if (p->pairs_ == 1) {
    p->rss_note_ = conf.cores == 1 ? "one core" : "one queue pair";
  } else if (!p->offers_rss_) {
    p->rss_note_ = "the port does not hash IPv4/TCP";
  } else {
    p->rss_programmed_ = p->program_rss(&p->rss_note_);
  }
  if (conf.promiscuous) rte_eth_promiscuous_enable(conf.port_id);  // not all PMDs support it: not fatal
  rte_ether_addr a{};
  if (int rc = rte_eth_macaddr_get(conf.port_id, &a); rc != 0) return fail("rte_eth_macaddr_get: " + rc_text(rc));
  for (int i = 0; i < 6; ++i) p->mac_.bytes[i] = a.addr_bytes[i];
  uint16_t mtu = 0;
  if (rte_eth_dev_get_mtu(conf.port_id, &mtu) == 0 && mtu >= 576) p->mtu_ = std::min<uint16_t>(mtu, 1500);
  int nx = rte_eth_xstats_get_names(conf.port_id, nullptr, 0);
  if (nx > 0) {
    std::vector<rte_eth_xstat_name> names(static_cast<size_t>(nx));
    nx = rte_eth_xstats_get_names(conf.port_id, names.data(), static_cast<unsigned>(nx));
    for (int i = 0; i < nx; ++i) p->xstat_names_.emplace_back(names[static_cast<size_t>(i)].name);
  }
  return p;
}

void Port::make_zero_copy_pools(int socket) {
  // After the queues: what DPDK memory is left goes to zero-copy TX, and a shortage only costs copies.
  // Attach mbufs: no data room, the external buffer's rte_mbuf_ext_shared_info in the private area; enough for
  // the TX descriptors and backlog in flight.
  constexpr uint16_t kPriv = RTE_ALIGN(sizeof(rte_mbuf_ext_shared_info), RTE_MBUF_PRIV_ALIGN);
  const unsigned attach = std::min<unsigned>(conf_.mbufs_per_core, 4095);
  for (uint16_t c = 0; c < conf_.cores; ++c) {
    std::string name = absl::StrCat("kosoku_p", conf_.port_id, "a", c);
    rte_mempool* ap = rte_pktmbuf_pool_create(name.c_str(), attach, conf_.mbuf_cache, kPriv, 0, socket);
    DmaBufferPool* dma = nullptr;
    std::string err;
    if (ap != nullptr && needs_iova_) {
      dma = DmaBufferPool::create(absl::StrCat("kosoku_p", conf_.port_id, "d", c).c_str(), socket,
                                  conf_.dma_buffers_per_core, &err);
    }
    if (ap == nullptr || (needs_iova_ && dma == nullptr)) {
      if (ap != nullptr) rte_mempool_free(ap);
      if (zero_copy_note_.empty()) {
        zero_copy_note_ = ap == nullptr ? absl::StrCat("rte_pktmbuf_pool_create(", name, "): ", rte_strerror(rte_errno))
                                        : err;
      }
      attach_pools_.push_back(nullptr);
      dma_pools_.push_back(nullptr);
      continue;
    }
    attach_pools_.push_back(ap);
    dma_pools_.push_back(dma);
  }
}

bool Port::program_rss(std::string* why) {
  if (reta_size_ == 0) {
    *why = "the port has no RSS redirection table";
    return false;
  }
  if (reta_size_ % RTE_ETH_RETA_GROUP_SIZE != 0) {
    *why = absl::StrCat("RETA size ", reta_size_, " is not a multiple of ", RTE_ETH_RETA_GROUP_SIZE);
    return false;
  }
  // The NIC indexes the table with the hash's low bits; FlowSteering uses hash mod reta_size, the same.
  FlowSteering flows(conf_.cores, reta_size_);
  std::vector<rte_eth_rss_reta_entry64> reta(reta_size_ / RTE_ETH_RETA_GROUP_SIZE);
  for (uint32_t i = 0; i < reta_size_; ++i) {
    rte_eth_rss_reta_entry64& g = reta[i / RTE_ETH_RETA_GROUP_SIZE];
    g.mask |= uint64_t{1} << (i % RTE_ETH_RETA_GROUP_SIZE);
    g.reta[i % RTE_ETH_RETA_GROUP_SIZE] = static_cast<uint16_t>(flows.reta_entry(i) % pairs_);
  }
  if (int rc = rte_eth_dev_rss_reta_update(conf_.port_id, reta.data(), static_cast<uint16_t>(reta_size_)); rc != 0) {
    *why = "rte_eth_dev_rss_reta_update: " + rc_text(rc);
    return false;
  }
  // Check that the PMD kept the symmetric key (some ignore rss_key at configure time).
  std::vector<uint8_t> key(64);
  rte_eth_rss_conf rc{};
  rc.rss_key = key.data();
  rc.rss_key_len = static_cast<uint8_t>(key.size());
  if (rte_eth_dev_rss_hash_conf_get(conf_.port_id, &rc) != 0 || rc.rss_key_len < 16) {
    *why = "the RSS key cannot be read back";
    return false;
  }
  std::vector<uint8_t> want = symmetric_rss_key(rc.rss_key_len);
  if (!std::equal(want.begin(), want.end(), key.begin())) {
    *why = "the port did not take the symmetric RSS key";
    return false;
  }
  return true;
}

Port::~Port() {
  if (started_) {
    rte_eth_dev_stop(conf_.port_id);
    rte_eth_dev_close(conf_.port_id);
  }
  for (rte_mempool* mp : pools_) rte_mempool_free(mp);
  for (rte_mempool* mp : attach_pools_) {
    if (mp != nullptr) rte_mempool_free(mp);
  }
}

stats::ExtraSection Port::stats_section() const {
  stats::ExtraSection s;
  s.name = "dpdk_port";
  std::string port = absl::StrCat(conf_.port_id);
  auto add = [&](const char* name, const char* help, stats::ExtraMetric::Type t, double v,
                 std::vector<std::pair<std::string, std::string>> labels) {
    s.metrics.push_back(stats::ExtraMetric{name, help, t, std::move(labels), v});
  };
  constexpr auto kCounter = stats::ExtraMetric::Type::kCounter;
  constexpr auto kGauge = stats::ExtraMetric::Type::kGauge;
  rte_eth_stats st{};
  if (rte_eth_stats_get(conf_.port_id, &st) == 0) {
    add("dpdk_rx_packets_total", "Packets received by the port", kCounter, double(st.ipackets), {{"port", port}});
    add("dpdk_tx_packets_total", "Packets sent by the port", kCounter, double(st.opackets), {{"port", port}});
    add("dpdk_rx_bytes_total", "Bytes received by the port", kCounter, double(st.ibytes), {{"port", port}});
    add("dpdk_tx_bytes_total", "Bytes sent by the port", kCounter, double(st.obytes), {{"port", port}});
    add("dpdk_rx_missed_total", "Packets dropped by the port (RX queue full)", kCounter, double(st.imissed),
        {{"port", port}});
    add("dpdk_rx_errors_total", "Erroneous packets received", kCounter, double(st.ierrors), {{"port", port}});
    add("dpdk_tx_errors_total", "Failed transmissions", kCounter, double(st.oerrors), {{"port", port}});
    add("dpdk_rx_nombuf_total", "RX mbuf allocation failures", kCounter, double(st.rx_nombuf), {{"port", port}});
  }
  rte_eth_link link{};
  if (rte_eth_link_get_nowait(conf_.port_id, &link) == 0) {
    add("dpdk_link_up", "1 if the port's link is up", kGauge, link.link_status ? 1 : 0, {{"port", port}});
  }
  for (size_t c = 0; c < pools_.size(); ++c) {
    add("dpdk_mempool_available", "Free mbufs in the core's mempool", kGauge,
        double(rte_mempool_avail_count(pools_[c])), {{"port", port}, {"core", absl::StrCat(c)}});
  }
  add("dpdk_queue_pairs", "RX/TX queue pairs in use (one per core up to the port's limit)", kGauge, pairs_,
      {{"port", port}});
  add("dpdk_rss_programmed", "1 if RSS runs with the symmetric key and kosoku's RETA (else software steering)",
      kGauge, rss_programmed_ ? 1 : 0, {{"port", port}});
  add("dpdk_tx_checksum_offload", "1 if the port computes IPv4/TCP checksums on TX, 0 if software", kGauge,
      tx_csum_ ? 1 : 0, {{"port", port}});
  add("dpdk_rx_checksum_offload", "1 if the port verifies IPv4/TCP checksums on RX, 0 if software", kGauge,
      rx_csum_ ? 1 : 0, {{"port", port}});
  add("dpdk_rx_interrupts", "RX queues whose frames wake an idle worker at once (idle_sleep; net_tap)", kGauge,
      double(std::count_if(rx_intr_fds_.begin(), rx_intr_fds_.end(), [](int fd) { return fd >= 0; })),
      {{"port", port}});
  if (!xstat_names_.empty()) {
    std::vector<rte_eth_xstat> xs(xstat_names_.size());
    int n = rte_eth_xstats_get(conf_.port_id, xs.data(), static_cast<unsigned>(xs.size()));
    for (int i = 0; i < n && static_cast<size_t>(i) < xs.size(); ++i) {
      if (xs[static_cast<size_t>(i)].id >= xstat_names_.size()) continue;
      add("dpdk_xstat_total", "Extended port statistic (rte_eth_xstats_get), by name", kCounter,
          double(xs[static_cast<size_t>(i)].value),
          {{"port", port}, {"name", xstat_names_[xs[static_cast<size_t>(i)].id]}});
    }
  }
  return s;
}

}  // namespace kosoku::dpdk
