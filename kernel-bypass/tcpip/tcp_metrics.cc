#include "kernel-bypass/tcpip/tcp_metrics.hh"

namespace kosoku::tcpip {

void append_tcp_metrics(const TcpStack& tcp, const std::vector<std::pair<std::string, std::string>>& labels,
                        stats::ExtraSection* out) {
  const TcpStats& t = tcp.stats();
  auto add = [&](const char* name, const char* help, stats::ExtraMetric::Type type, uint64_t v) {
    out->metrics.push_back(stats::ExtraMetric{name, help, type, labels, static_cast<double>(v)});
  };
  constexpr auto kGauge = stats::ExtraMetric::Type::kGauge;
  constexpr auto kCounter = stats::ExtraMetric::Type::kCounter;
  add("dpdk_tcp_memory_bytes", "Bytes held by TCP connections (TCBs, TIME_WAIT included, and their buffers)",
      kGauge, t.memory_bytes);
  add("dpdk_tcp_idle_connection_bytes", "Bytes of one TCP connection's TCB, without buffers", kGauge,
      tcp.idle_connection_bytes());
  add("dpdk_tcp_time_wait", "TCP connections in TIME-WAIT", kGauge, t.time_wait);
  add("dpdk_tcp_time_wait_reused_total",
      "TCP active opens that took over a TIME-WAIT 4-tuple (tcp_tw_reuse: timestamps on, idle >= 1 s)", kCounter,
      t.time_wait_reused);
  add("dpdk_tcp_fast_retransmits_total", "TCP loss recoveries entered on duplicate ACKs or SACK", kCounter,
      t.fast_retransmits);
  add("dpdk_tcp_rto_expired_total", "TCP retransmission timeouts", kCounter, t.rto_expired);
  add("dpdk_tcp_tlp_probes_total", "TCP tail loss probes sent (RFC 8985 section 7)", kCounter, t.tlp_probes);
  add("dpdk_tcp_rack_lost_total", "TCP segments marked lost by RACK (RFC 8985 section 6)", kCounter, t.rack_lost);
  add("dpdk_tcp_lost_retransmits_total", "TCP retransmissions found lost again (RACK)", kCounter,
      t.lost_retransmits);
  add("dpdk_tcp_dsacks_in_total", "TCP ACKs carrying a D-SACK block (RFC 2883): spurious retransmissions", kCounter,
      t.dsacks_in);
  add("dpdk_tcp_dsack_undos_total",
      "TCP loss recoveries found spurious by D-SACKs (RFC 3708): the window reduction was undone", kCounter,
      t.dsack_undos);
  add("dpdk_tcp_eifel_undos_total",
      "TCP loss recoveries found spurious by timestamps (RFC 3522): the window reduction was undone", kCounter,
      t.eifel_undos);
  add("dpdk_tcp_spurious_rtos_total",
      "TCP retransmission timeouts found spurious (timestamps, RFC 3522, or F-RTO, RFC 5682): reduction undone, "
      "go-back stopped",
      kCounter, t.spurious_rtos);
  add("dpdk_tcp_frto_spurious_rtos_total",
      "TCP retransmission timeouts found spurious by F-RTO (RFC 5682, connections without timestamps); also in "
      "dpdk_tcp_spurious_rtos_total",
      kCounter, t.frto_spurious_rtos);
  add("dpdk_tcp_oow_acks_skipped_total",
      "TCP unacceptable pure ACKs (PAWS, outside the window) not answered: one reply per 500 ms per connection",
      kCounter, t.oow_acks_skipped);
  add("dpdk_tcp_sack_recoveries_total", "TCP RFC 6675 SACK loss recoveries", kCounter, t.sack_recoveries);
  add("dpdk_tcp_sack_reneging_total", "TCP peers seen discarding data they had SACKed", kCounter,
      t.sack_reneging);
  add("dpdk_tcp_sack_blocks_out_total", "TCP segments sent carrying SACK blocks", kCounter, t.sack_blocks_out);
  add("dpdk_tcp_keepalive_probes_total", "TCP keep-alive probes sent", kCounter, t.keepalive_probes);
  add("dpdk_tcp_keepalive_timeouts_total", "TCP connections aborted: keep-alive probes unanswered", kCounter,
      t.keepalive_timeouts);
  add("dpdk_tcp_timeouts_total", "TCP connections aborted: retransmissions unanswered", kCounter, t.timeouts);
  add("dpdk_tcp_out_of_order_in_total", "TCP segments received out of order", kCounter, t.out_of_order_in);
  add("dpdk_tcp_out_of_order_dropped_total",
      "TCP out-of-order segments (or their tails) dropped: beyond the receive buffer or the queue range limit",
      kCounter, t.ooo_dropped);
  add("dpdk_tcp_time_wait_overflow_total", "TCP connections closed without TIME-WAIT: the per-core cap was reached",
      kCounter, t.time_wait_overflow);
  add("dpdk_tcp_syn_fin_dropped_total", "SYN+FIN segments to a listener discarded", kCounter, t.syn_fin_dropped);
}

}  // namespace kosoku::tcpip
