// kosoku's TCP figures for the stats renderer (core/stats/export.hh ExtraSection): what one core's TcpStack
// holds (memory per connection, connections) and how it recovers (SACK, RTO, keep-alive). Called by the DPDK
// backend's stats section for each core; reads plain counters another core writes (values may be a few µs
// stale, as with every per-core counter).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/stats/export.hh"
#include "kernel-bypass/tcpip/tcp_stack.hh"

namespace kosoku::tcpip {

/// Appends to `out`, each with `labels` (e.g. {{"core","0"}}):
///   gauges   dpdk_tcp_memory_bytes (TCBs incl. TIME_WAIT + their buffers, bytes),
///            dpdk_tcp_idle_connection_bytes (the TCB of one connection without buffers, bytes),
///            dpdk_tcp_time_wait;
///   counters dpdk_tcp_time_wait_reused_total (active opens that took over a TIME-WAIT tuple, tcp_tw_reuse),
///   counters dpdk_tcp_{fast_retransmits,rto_expired,tlp_probes,rack_lost,lost_retransmits,dsacks_in,
///            dsack_undos,eifel_undos,spurious_rtos,frto_spurious_rtos,oow_acks_skipped,sack_recoveries,
///            sack_reneging,sack_blocks_out,keepalive_probes,keepalive_timeouts,timeouts,out_of_order_in}_total.
void append_tcp_metrics(const TcpStack& tcp, const std::vector<std::pair<std::string, std::string>>& labels,
                        stats::ExtraSection* out);

}  // namespace kosoku::tcpip
