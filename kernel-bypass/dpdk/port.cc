#include "kernel-bypass/dpdk/port.hh"

#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include "absl/strings/str_cat.h"

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
  if (conf.queues == 0) return fail("0 queues requested");
  rte_eth_dev_info info{};
  if (int rc = rte_eth_dev_info_get(conf.port_id, &info); rc != 0) return fail("rte_eth_dev_info_get: " + rc_text(rc));
  std::unique_ptr<Port> p(new Port(conf));
  p->driver_ = info.driver_name != nullptr ? info.driver_name : "";
  p->offers_rss_ = info.flow_type_rss_offloads != 0;
  const uint64_t csum = RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_TCP_CKSUM;
  p->offers_tx_csum_ = (info.tx_offload_capa & csum) == csum;
  if (conf.queues > info.max_rx_queues || conf.queues > info.max_tx_queues ||
      (conf.queues > 1 && !p->offers_rss_)) {
    return fail(absl::StrCat(conf.queues, " queue pairs requested, the port (", p->driver_, ") supports ",
                             info.max_rx_queues, " RX / ", info.max_tx_queues, " TX",
                             p->offers_rss_ ? "" : " (no RSS)"));
  }
  rte_eth_conf ec{};
  if (conf.queues > 1) {
    ec.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
    ec.rx_adv_conf.rss_conf.rss_hf = (RTE_ETH_RSS_IPV4 | RTE_ETH_RSS_NONFRAG_IPV4_TCP) & info.flow_type_rss_offloads;
  }
  if (int rc = rte_eth_dev_configure(conf.port_id, conf.queues, conf.queues, &ec); rc != 0) {
    return fail("rte_eth_dev_configure: " + rc_text(rc));
  }
  uint16_t rxd = conf.rx_descriptors, txd = conf.tx_descriptors;
  if (int rc = rte_eth_dev_adjust_nb_rx_tx_desc(conf.port_id, &rxd, &txd); rc != 0) {
    return fail("rte_eth_dev_adjust_nb_rx_tx_desc: " + rc_text(rc));
  }
  int socket = rte_eth_dev_socket_id(conf.port_id);
  if (socket < 0) socket = SOCKET_ID_ANY;
  for (uint16_t q = 0; q < conf.queues; ++q) {
    std::string name = absl::StrCat("kosoku_p", conf.port_id, "q", q);
    rte_mempool* mp = rte_pktmbuf_pool_create(name.c_str(), conf.mbufs_per_queue, conf.mbuf_cache, 0,
                                              RTE_MBUF_DEFAULT_BUF_SIZE, socket);
    if (mp == nullptr) return fail(absl::StrCat("rte_pktmbuf_pool_create(", name, "): ", rte_strerror(rte_errno)));
    p->pools_.push_back(mp);
    if (int rc = rte_eth_rx_queue_setup(conf.port_id, q, rxd, static_cast<unsigned>(socket), nullptr, mp); rc != 0) {
      return fail(absl::StrCat("rte_eth_rx_queue_setup(", q, "): ", rc_text(rc)));
    }
    if (int rc = rte_eth_tx_queue_setup(conf.port_id, q, txd, static_cast<unsigned>(socket), nullptr); rc != 0) {
      return fail(absl::StrCat("rte_eth_tx_queue_setup(", q, "): ", rc_text(rc)));
    }
  }
  if (int rc = rte_eth_dev_start(conf.port_id); rc != 0) return fail("rte_eth_dev_start: " + rc_text(rc));
  p->started_ = true;
  if (conf.promiscuous) rte_eth_promiscuous_enable(conf.port_id);  // not all PMDs support it: not fatal
  rte_ether_addr a{};
  if (int rc = rte_eth_macaddr_get(conf.port_id, &a); rc != 0) return fail("rte_eth_macaddr_get: " + rc_text(rc));
  for (int i = 0; i < 6; ++i) p->mac_.bytes[i] = a.addr_bytes[i];
  uint16_t mtu = 0;
  if (rte_eth_dev_get_mtu(conf.port_id, &mtu) == 0 && mtu >= 576) p->mtu_ = std::min<uint16_t>(mtu, 1500);
  return p;
}

Port::~Port() {
  if (started_) {
    rte_eth_dev_stop(conf_.port_id);
    rte_eth_dev_close(conf_.port_id);
  }
  for (rte_mempool* mp : pools_) rte_mempool_free(mp);
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
  for (size_t q = 0; q < pools_.size(); ++q) {
    add("dpdk_mempool_available", "Free mbufs in the queue's mempool", kGauge,
        double(rte_mempool_avail_count(pools_[q])), {{"port", port}, {"queue", absl::StrCat(q)}});
  }
  return s;
}

}  // namespace kosoku::dpdk
