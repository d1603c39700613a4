#include "kernel-bypass/dpdk/backend.hh"

#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_prefetch.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/log.hh"
#include "kernel-bypass/dpdk/dma_buffers.hh"
#include "kernel-bypass/dpdk/eal.hh"
#include "kernel-bypass/dpdk/port.hh"
#include "kernel-bypass/tcpip/tcp_metrics.hh"

namespace kosoku::dpdk {

namespace {

constexpr uint64_t kArpTickMs = 100;
constexpr int kMaxCores = CoreTable::kMaxCores;

tcpip::InterfaceConfig interface_config(const config::DpdkConf& d) {
  tcpip::InterfaceConfig c;
  c.address.value = d.address;
  c.prefix_len = d.prefix_len;
  c.gateway.value = d.gateway;
  return c;
}

tcpip::TcpConfig tcp_config(const config::MainConf& conf) {
  tcpip::TcpConfig c;
  c.max_streams = conf.worker_connections;
  const config::DpdkConf& d = conf.network.dpdk;
  c.congestion_control = d.congestion_control == config::TcpCongestionControl::kReno
                             ? tcpip::CongestionAlgorithm::kReno
                             : tcpip::CongestionAlgorithm::kCubic;
  c.rto_min_ms = d.rto_min_ms;
  return c;
}

// Why EAL came up without a port: the devices the arguments name (--vdev X, -a X, --allow X) were refused by
// their driver or bus (DPDK's log lines say why), or none was named.
std::string no_port_message(const std::vector<std::string>& eal) {
  std::vector<std::string> devices, names;
  for (size_t i = 0; i < eal.size(); ++i) {
    std::string_view a = eal[i];
    for (std::string_view opt : {"--vdev", "--allow", "-a"}) {
      std::string_view value;
      if (a == opt && i + 1 < eal.size()) {
        value = eal[i + 1];
      } else if (a.size() > opt.size() && a.starts_with(opt) && (opt == "-a" || a[opt.size()] == '=')) {
        value = a.substr(opt.size() + (opt == "-a" ? 0 : 1));
      } else {
        continue;
      }
      devices.emplace_back(value);
      names.emplace_back(value.substr(0, value.find(',')));
      break;
    }
  }
  if (devices.empty()) {
    return "no DPDK port: the dpdk eal arguments name no device (--vdev=net_tap0,iface=... or -a PCI address)";
  }
  return absl::StrCat(
      "no DPDK port: the EAL refused the configured device(s) ", absl::StrJoin(devices, " "),
      log_excerpt(eal_init_log(), names),
      "; check that the interface a vdev names exists (net_af_packet, net_tap remote=) or can be created "
      "(net_tap: /dev/net/tun, CAP_NET_ADMIN, the name is free), that a memif socket path is reachable, and "
      "that a PCI device is bound to vfio-pci or uio_pci_generic");
}

}  // namespace

DpdkBackend::DpdkBackend() = default;

DpdkBackend::~DpdkBackend() { stop(); }

std::unique_ptr<net::Stack> DpdkBackend::make_stack(reactor::Reactor& reactor, stats::CoreStats& stats,
                                                    const config::MainConf& conf, int core, std::string* err) {
  if (port_ == nullptr || core < 0 || core >= port_->cores() || core >= kMaxCores) {
    if (err) *err = absl::StrCat("network dpdk: no port queue for worker ", core);
    return nullptr;
  }
  auto c = static_cast<uint16_t>(core);
  QueueConfig qc;
  qc.port = port_->id();
  bool own = c < port_->queue_pairs();
  qc.rx_queue = own ? c : -1;
  qc.tx_queue = own ? c : -1;
  qc.tx_ring = mesh_->tx(c);
  qc.pool = port_->pool(c);
  qc.mac = port_->mac();
  qc.mtu = port_->mtu();
  qc.tx_checksum_offload = port_->tx_checksum_offload();
  qc.rx_checksum_offload = port_->rx_checksum_offload();
  qc.rx_interrupt_fd = own ? port_->rx_interrupt_fd(c) : -1;
  qc.attach_pool = own ? port_->attach_pool(c) : nullptr;  // zero-copy TX only on a TX queue of its own
  qc.payload_needs_iova = port_->needs_iova();
  qc.dma_pool = qc.attach_pool != nullptr ? port_->dma_pool(c) : nullptr;
  // The TX backlog holds one more descriptor ring's worth of refused frames (queue.hh); the PortConfig default
  // when the PMD does not report its ring (rte_eth_tx_queue_info_get: net_tap, net_ring do not).
  rte_eth_txq_info txq{};
  if (own && rte_eth_tx_queue_info_get(qc.port, c, &txq) == 0 && txq.nb_desc >= Queue::kBurst) {
    qc.tx_backlog = txq.nb_desc;
  }
  return std::make_unique<CoreStack>(reactor, stats, conf, qc, cores_, *mesh_, *flows_, c);
}

std::unique_ptr<DpdkBackend> DpdkBackend::start(const config::MainConf& conf, std::string* err, std::string* note) {
  // rte_eal_init pins the calling thread to the first lcore; the main thread only waits for signals, so its
  // original affinity is restored (the workers pin themselves).
  cpu_set_t before;
  bool have_before = sched_getaffinity(0, sizeof(before), &before) == 0;
  int ports = init_eal(conf.network.dpdk.eal, err);
  if (have_before) sched_setaffinity(0, sizeof(before), &before);
  if (ports < 0) return nullptr;
  if (ports == 0) {
    if (err) *err = no_port_message(conf.network.dpdk.eal);
    return nullptr;
  }
  PortConfig pc;
  pc.port_id = rte_eth_find_next_owned_by(0, RTE_ETH_DEV_NO_OWNER);
  pc.cores = static_cast<uint16_t>(std::clamp(conf.worker_processes, 1, kMaxCores));
  pc.rx_interrupts = true;  // net_tap: the queue fd, for the idle sleep's wake
  pc.tx_zero_copy = conf.network.dpdk.tx_zero_copy;
  pc.dma_buffers_per_core = conf.network.dpdk.tx_zero_copy_buffers;
  std::unique_ptr<DpdkBackend> b(new DpdkBackend);
  b->port_ = Port::open(pc, err);
  if (b->port_ == nullptr) return nullptr;
  Port& port = *b->port_;
  b->flows_ = std::make_unique<FlowSteering>(pc.cores, port.rss_programmed() ? port.reta_size() : 128);
  b->mesh_ = CoreMesh::create(pc.cores, port.queue_pairs(), err);
  if (b->mesh_ == nullptr) return nullptr;
  if (note != nullptr) {
    *note = absl::StrCat("port ", port.id(), " (", port.driver(), "): ", pc.cores, " core(s) on ",
                         port.queue_pairs(), " queue pair(s), ",
                         pc.cores == 1                ? "no steering needed"
                         : port.rss_programmed() ? "RSS with the symmetric key"
                                                    : absl::StrCat("software flow steering (", port.rss_note(), ")"),
                         "; checksums: TX ", port.tx_checksum_offload() ? "offloaded" : "software", ", RX ",
                         port.rx_checksum_offload() ? "offloaded" : "software", "; TX payloads ",
                         !conf.network.dpdk.tx_zero_copy ? "copied (tx_zero_copy off)"
                         : port.attach_pool(0) == nullptr
                             ? absl::StrCat("copied", port.zero_copy_note().empty() ? "" : " (",
                                            port.zero_copy_note(), port.zero_copy_note().empty() ? "" : ")")
                         : port.needs_iova() ? "by reference from DMA-able buffers (zero-copy)"
                                                : "by reference (zero-copy)");
  }
  return b;
}

void DpdkBackend::stop() {
  mesh_.reset();  // frees the frames still in the rings (mbufs go back to the port's pools)
  port_.reset();
  flows_.reset();
}

stats::ExtraSection DpdkBackend::stats_section() const {
  if (port_ == nullptr) return stats::ExtraSection{"dpdk_port", {}};
  stats::ExtraSection s = port_->stats_section();
  constexpr auto kCounter = stats::ExtraMetric::Type::kCounter;
  for (int c = 0; c < kMaxCores; ++c) {
    const CoreStack* cs = cores_.stacks[c].load(std::memory_order_acquire);
    if (cs == nullptr) continue;
    std::vector<std::pair<std::string, std::string>> l = {{"core", absl::StrCat(c)}};
    const QueueStats& q = cs->queue().stats();
    const tcpip::InterfaceStats& i = cs->interface().stats();
    const tcpip::TcpStats& t = cs->tcp().stats();
    const SteeringStats& st = cs->steering().stats();
    auto add = [&](const char* name, const char* help, uint64_t v) {
      s.metrics.push_back(stats::ExtraMetric{name, help, kCounter, l, double(v)});
    };
    add("dpdk_queue_rx_packets_total", "Frames received on the core's RX queue", q.rx_packets);
    add("dpdk_queue_tx_packets_total", "Frames the core's TX queue (or TX relay ring) accepted", q.tx_packets);
    add("dpdk_queue_tx_refused_total",
        "Frames freed unsent: the TX relay ring was full, or the PMD refused them with the TX backlog full (TCP "
        "retransmits)",
        q.tx_refused);
    add("dpdk_queue_tx_backlogged_total", "Frames the PMD refused that waited in the core's TX backlog (sent later)",
        q.tx_backlogged);
    add("dpdk_queue_tx_backlog_dropped_total", "Frames dropped: the PMD refused them and the TX backlog was full",
        q.tx_backlog_dropped);
    auto gauge = [&](const char* name, const char* help, uint64_t v) {
      s.metrics.push_back(stats::ExtraMetric{name, help, stats::ExtraMetric::Type::kGauge, l, double(v)});
    };
    gauge("dpdk_queue_tx_backlog_frames", "Frames in the core's TX backlog now (refused by the PMD, sent first)",
          cs->queue().tx_backlog());
    gauge("dpdk_queue_tx_backlog_peak_frames", "Most frames the core's TX backlog held", q.tx_backlog_peak);
    if (const DmaBufferPool* dma = cs->queue().config().dma_pool) {
      gauge("dpdk_dma_buffers_available", "Free DMA-able 256 KiB buffers of the core (zero-copy TX on a PCI port)",
            dma->available());
    }
    gauge("dpdk_queue_tx_backlog_capacity_frames", "Bound of the core's TX backlog (0: refused frames are freed)",
          cs->queue().config().tx_backlog);
    add("dpdk_queue_tx_no_mbuf_total", "TX frames dropped for want of an mbuf", q.tx_no_mbuf);
    add("dpdk_queue_rx_multiseg_dropped_total", "Chained RX mbufs dropped", q.rx_multiseg_dropped);
    add("dpdk_queue_rx_l4_checksum_good_total", "TCP checksums the port verified good", q.rx_l4_checksum_good);
    add("dpdk_queue_rx_l4_checksum_bad_total", "TCP checksums the port found bad", q.rx_l4_checksum_bad);
    add("dpdk_queue_tx_checksum_offloaded_total", "Frames sent with checksum offload", q.tx_checksum_offloaded);
    add("dpdk_queue_tx_payload_by_reference_total", "Frames whose TCP payload was sent by reference (zero-copy)",
        q.tx_payload_by_reference);
    add("dpdk_queue_tx_payload_copied_total", "Zero-copy frames copied instead: no attach mbuf", q.tx_payload_copied);
    add("dpdk_steer_forwarded_out_total", "Frames handed to the core owning their flow", st.forwarded_out);
    add("dpdk_steer_forwarded_in_total", "Frames other cores handed to this one", st.forwarded_in);
    add("dpdk_steer_ring_full_drops_total", "Frames dropped: the steering ring was full", st.ring_full_drops);
    add("dpdk_steer_arp_replicated_out_total", "ARP entries sent to the other cores", st.arp_replicated_out);
    add("dpdk_steer_arp_replicated_in_total", "ARP entries received from other cores", st.arp_replicated_in);
    add("dpdk_steer_tx_relayed_total", "Frames transmitted for a core without a TX queue", st.tx_relayed);
    add("dpdk_ip_fragments_dropped_total", "IPv4 fragments dropped (no reassembly)", i.ip_fragments_dropped);
    add("dpdk_arp_queue_drops_total", "Frames dropped waiting for ARP", i.arp_queue_drops);
    add("dpdk_arp_not_on_link_total", "ARP senders not learned: outside the interface's subnet", i.arp_not_on_link);
    add("dpdk_arp_cache_full_total", "ARP entries not learned: the per-core cache was full", i.arp_cache_full);
    add("dpdk_icmp_errors_in_total", "ICMP errors received", i.icmp_errors_in);
    add("dpdk_tcp_active_opens_total", "Connections opened by connect()", t.active_opens);
    add("dpdk_tcp_passive_opens_total", "Connections opened by a SYN to a listener", t.passive_opens);
    add("dpdk_tcp_ephemeral_not_local_total", "Source ports skipped: their flow belongs to another core",
        t.ephemeral_not_local);
    add("dpdk_tcp_retransmits_total", "TCP segments retransmitted", t.retransmits);
    add("dpdk_tcp_tx_blocked_total",
        "TCP connections that held new segments back: the TX relay ring had less than a burst of room, or frames "
        "waited in the TX backlog",
        t.tx_blocked);
    add("dpdk_tcp_bad_checksum_total", "TCP segments with a bad checksum", t.bad_checksum);
    add("dpdk_tcp_resets_out_total", "TCP RSTs sent", t.rst_out);
    add("dpdk_tcp_syn_dropped_max_streams_total", "SYNs dropped: worker_connections are not enough",
        t.refused_max_streams);
    add("dpdk_tcp_syn_backlog_full_total",
        "SYNs that found the listen backlog full of half-open connections (answered with a SYN cookie, or dropped "
        "without syn cookies)",
        t.syn_backlog_full);
    add("dpdk_tcp_syn_cookies_sent_total", "SYN cookies sent", t.syn_cookies_sent);
    const IdleStats& idle = cs->idle_stats();
    add("dpdk_idle_sleeps_total", "Idle back-off sleeps (idle_sleep)", idle.sleeps);
    s.metrics.push_back(stats::ExtraMetric{"dpdk_idle_sleep_seconds_total", "Time spent in idle back-off sleeps",
                                           kCounter, l, double(idle.slept_ns) / 1e9});
    add("dpdk_idle_wakeups_sent_total", "Sleeping cores woken after frames were handed to them",
        idle.wakeups_sent);
    add("dpdk_idle_rx_wakeups_total", "Idle sleeps ended at once by a frame on the RX queue (its interrupt fd)",
        idle.rx_wakeups);
    tcpip::append_tcp_metrics(cs->tcp(), l, &s);  // memory per connection, SACK, RTO, keep-alive
  }
  return s;
}

CoreStack::CoreStack(reactor::Reactor& reactor, stats::CoreStats& stats, const config::MainConf& conf,
                     const QueueConfig& queue, CoreTable& cores, const CoreMesh& mesh, const FlowSteering& flows,
                     uint16_t core)
    : reactor_(reactor),
      cores_(cores),
      queue_(queue),
      steer_(mesh, flows, core),
      ip_(queue_, interface_config(conf.network.dpdk)),
      tcp_(ip_, reactor.timers(), *this, stats, tcp_config(conf)),
      idle_(uint64_t{conf.network.dpdk.idle_sleep_us} * 1000) {
  // One lcore per worker: a registered non-EAL thread gets an lcore id, hence its own mempool cache.
  registered_ = rte_thread_register() == 0;
  // On a port that DMAs, this core's large SharedBuffers (file chunks) come from its DMA-able pool first.
  if (queue.dma_pool != nullptr) net::SharedBuffer::set_source(queue.dma_pool);
  // Idle sleeps of 10..N us: the default 50 us timer slack of a normal thread would dominate them.
  if (idle_.enabled()) prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  ip_.set_arp_listener(&steer_);
  tcp_.set_flow_owner(&steer_);
  // TX backpressure (queue.hh): on the relay ring new segments wait while fewer than one burst of slots is
  // left, which keeps a burst for ACKs and retransmissions; on a TX queue of its own while frames the PMD
  // refused wait in the TX backlog (room 0). Without either (tx_backlog 0) the room is unknown: no check.
  if (queue.tx_queue < 0 || queue_.config().tx_backlog > 0) tcp_.set_tx_backpressure(&queue_, Queue::kBurst);
  reactor_.add_poller(this);
  reactor_.timers().arm(*this, reactor_.now_ms() + kArpTickMs);
  if (core == 0) ip_.announce();  // gratuitous ARP (RFC 5227 §3), once per port
  queue_.flush();
  if (core < kMaxCores) cores_.stacks[core].store(this, std::memory_order_release);
  if (queue.rx_interrupt_fd >= 0 && core < kMaxCores && idle_.enabled()) rx_wake_ = &cores_.rx_wake[core];
}

CoreStack::~CoreStack() {
  if (queue_.config().dma_pool != nullptr) net::SharedBuffer::set_source(nullptr);
  if (rx_wake_ != nullptr) rx_wake_->stats = nullptr;
  for (auto& c : cores_.stacks) {
    CoreStack* self = this;
    c.compare_exchange_strong(self, nullptr);
  }
  // The worker stopped (drain over or timed out): the peers of connections still open learn it now rather
  // than from retransmission timeouts against a port that no longer answers.
  size_t reset = tcp_.reset_all();
  if (reset > 0) KOSOKU_LOG(kNotice, "network dpdk: %zu connection(s) still open at exit were reset", reset);
  queue_.flush();
  if (registered_) rte_thread_unregister();
}

uint64_t CoreStack::now_ms() const { return reactor_.now_ms(); }
uint64_t CoreStack::now_us() const { return reactor_.now_ns() / 1000; }

bool CoreStack::poll() {
  unsigned work = queue_.flush();  // frames from timers and tasks of the previous iteration
  uint64_t now = reactor_.now_ms();
  // Up to 4 bursts per iteration, so disk completions and timers keep their turn under load.
  rte_mbuf* rx[Queue::kBurst];
  for (int b = 0; b < 4; ++b) {
    unsigned n = queue_.rx_burst(rx);
    for (unsigned i = 0; i < n; ++i) {
      if (i + 1 < n) rte_prefetch0(rte_pktmbuf_mtod(rx[i + 1], void*));
      if (!steer_.dispatch(rx[i])) queue_.deliver(ip_, rx[i], now);
    }
    steer_.flush();
    if (n > 0) {
      tcp_.reap();
      queue_.flush();
    }
    work += n;
    if (n < Queue::kBurst) break;
  }
  unsigned drained = steer_.drain(queue_, ip_, now);
  if (drained > 0) tcp_.reap();
  work += drained + queue_.flush();
  if (size_t resumed = tcp_.resume_tx(); resumed > 0) work += static_cast<unsigned>(resumed) + queue_.flush();
  if (work > 0) {
    idle_.worked(reactor_.now_ns());
    wake_peers();
  } else if (idle_.enabled()) {
    idle_wait();
  }
  return true;  // the loop must not sleep in DPDK mode: the idle back-off sleeps here
}

void CoreStack::idle_wait() {
  if (reactor_.has_tasks() || queue_.tx_pending() > 0) {
    idle_.worked(reactor_.now_ns());
    return;
  }
  // TX blocked: frames in the TX backlog the PMD keeps refusing, or connections waiting for room in the TX
  // relay ring. No iteration made progress (work 0), so only the NIC or the relaying core can: sleep, but in
  // steps of at most kTxBlockedSleepNs (idle_backoff.hh), and the next iteration's flush / resume_tx retries.
  bool tx_blocked = queue_.tx_backlog() > 0 || tcp_.tx_waiting() > 0;
  uint64_t next_ms = reactor_.timers().next_deadline();
  uint64_t deadline_ns = next_ms == UINT64_MAX ? UINT64_MAX : next_ms * 1'000'000;
  uint64_t start = reactor_.now_ns();
  uint64_t sleep_ns =
      idle_.next_sleep_ns(start, deadline_ns, tx_blocked ? IdleBackoff::kTxBlockedSleepNs : UINT64_MAX);
  if (sleep_ns == 0) return;
  // Announce the sleep, then look at the rings once more: a core that enqueued before seeing the flag left
  // its frames there (Dekker: seq_cst store here, fence + load in wake_peers on the other side).
  sleeping_.store(true, std::memory_order_seq_cst);
  if (unsigned n = steer_.drain(queue_, ip_, reactor_.now_ms()); n > 0) {
    sleeping_.store(false, std::memory_order_relaxed);
    tcp_.reap();
    queue_.flush();
    idle_.worked(start);
    return;
  }
  if (rx_wake_ != nullptr && !rx_wake_->armed) {  // a frame on the RX queue ends the sleep
    io_uring_prep_poll_add(reactor_.sqe(rx_wake_), queue_.config().rx_interrupt_fd, POLLIN);
    rx_wake_->armed = true;
    rx_wake_->stats = &idle_stats_;
  }
  __kernel_timespec ts{0, static_cast<long long>(sleep_ns)};
  io_uring_cqe* cqe = nullptr;
  io_uring_submit_and_wait_timeout(reactor_.ring(), &cqe, 1, &ts, nullptr);
  sleeping_.store(false, std::memory_order_relaxed);
  reactor_.update_clock();
  ++idle_stats_.sleeps;
  idle_stats_.slept_ns += reactor_.now_ns() - start;
}

void CoreStack::wake_if_sleeping() {
  if (sleeping_.load(std::memory_order_seq_cst)) reactor_.wake();
}

void CoreStack::wake_peers() {
  const SteeringStats& st = steer_.stats();
  uint64_t handed = st.forwarded_out + st.arp_replicated_out +
                    (queue_.config().tx_queue < 0 ? queue_.stats().tx_packets : 0);
  if (handed == handed_over_) return;
  handed_over_ = handed;
  std::atomic_thread_fence(std::memory_order_seq_cst);  // the ring enqueues before the flag loads
  for (int c = 0; c < kMaxCores; ++c) {
    CoreStack* peer = cores_.stacks[c].load(std::memory_order_acquire);
    if (peer == nullptr || peer == this || !peer->sleeping_.load(std::memory_order_seq_cst)) continue;
    peer->reactor_.wake();
    ++idle_stats_.wakeups_sent;
  }
}

void CoreStack::fire() {
  ip_.tick(reactor_.now_ms());
  queue_.flush();
  reactor_.timers().arm(*this, reactor_.now_ms() + kArpTickMs);
}

}  // namespace kosoku::dpdk
