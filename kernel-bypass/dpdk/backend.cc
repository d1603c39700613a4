#include "kernel-bypass/dpdk/backend.hh"

#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <sched.h>

#include <atomic>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "core/net/stack_factory.hh"
#include "kernel-bypass/dpdk/eal.hh"
#include "kernel-bypass/dpdk/port.hh"

namespace kosoku::dpdk {

namespace {

constexpr uint64_t kArpTickMs = 100;

std::unique_ptr<Port> g_port;
// Each core's stack, for the stats section (read from other threads: counters are plain fields).
constexpr int kMaxCores = 128;
std::atomic<CoreStack*> g_cores[kMaxCores];

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
  return c;
}

std::unique_ptr<net::Stack> make_core_stack(reactor::Reactor& reactor, stats::CoreStats& stats,
                                            const config::MainConf& conf, int core, std::string* err) {
  if (g_port == nullptr || core < 0 || core >= g_port->queues() || core >= kMaxCores) {
    if (err) *err = absl::StrCat("network dpdk: no port queue for worker ", core);
    return nullptr;
  }
  auto q = static_cast<uint16_t>(core);
  auto s = std::make_unique<CoreStack>(reactor, stats, conf, g_port->id(), q, g_port->pool(q), g_port->mac(),
                                       g_port->mtu());
  return s;
}

}  // namespace

int start_backend(const config::MainConf& conf, std::string* err) {
  // rte_eal_init pins the calling thread to the first lcore; the main thread only waits for signals, so its
  // original affinity is restored (the workers pin themselves).
  cpu_set_t before;
  bool have_before = sched_getaffinity(0, sizeof(before), &before) == 0;
  int ports = init_eal(conf.network.dpdk.eal, err);
  if (have_before) sched_setaffinity(0, sizeof(before), &before);
  if (ports < 0) return ports;
  if (ports == 0) {
    if (err) *err = "no DPDK port: the dpdk eal arguments name no device (--vdev=net_tap0,iface=... or -a PCI)";
    return -ENODEV;
  }
  PortConfig pc;
  pc.port_id = rte_eth_find_next_owned_by(0, RTE_ETH_DEV_NO_OWNER);
  pc.queues = static_cast<uint16_t>(conf.worker_processes);
  g_port = Port::open(pc, err);
  if (g_port == nullptr) return -EINVAL;
  net::dpdk_stack_factory() = &make_core_stack;
  return 0;
}

void stop_backend() {
  net::dpdk_stack_factory() = nullptr;
  g_port.reset();
}

stats::ExtraSection backend_stats_section() {
  if (g_port == nullptr) return stats::ExtraSection{"dpdk_port", {}};
  stats::ExtraSection s = g_port->stats_section();
  constexpr auto kCounter = stats::ExtraMetric::Type::kCounter;
  for (int c = 0; c < kMaxCores; ++c) {
    const CoreStack* cs = g_cores[c].load(std::memory_order_acquire);
    if (cs == nullptr) continue;
    std::vector<std::pair<std::string, std::string>> l = {{"core", absl::StrCat(c)}};
    const QueueStats& q = cs->queue().stats();
    const tcpip::InterfaceStats& i = cs->interface().stats();
    const tcpip::TcpStats& t = cs->tcp().stats();
    auto add = [&](const char* name, const char* help, uint64_t v) {
      s.metrics.push_back(stats::ExtraMetric{name, help, kCounter, l, double(v)});
    };
    add("dpdk_queue_tx_refused_total", "Frames the PMD refused (freed; TCP retransmits)", q.tx_refused);
    add("dpdk_queue_tx_no_mbuf_total", "TX frames dropped for want of an mbuf", q.tx_no_mbuf);
    add("dpdk_queue_rx_multiseg_dropped_total", "Chained RX mbufs dropped", q.rx_multiseg_dropped);
    add("dpdk_ip_fragments_dropped_total", "IPv4 fragments dropped (no reassembly)", i.ip_fragments_dropped);
    add("dpdk_arp_queue_drops_total", "Frames dropped waiting for ARP", i.arp_queue_drops);
    add("dpdk_icmp_errors_in_total", "ICMP errors received", i.icmp_errors_in);
    add("dpdk_tcp_retransmits_total", "TCP segments retransmitted", t.retransmits);
    add("dpdk_tcp_bad_checksum_total", "TCP segments with a bad checksum", t.bad_checksum);
    add("dpdk_tcp_resets_out_total", "TCP RSTs sent", t.rst_out);
  }
  return s;
}

CoreStack::CoreStack(reactor::Reactor& reactor, stats::CoreStats& stats, const config::MainConf& conf,
                     uint16_t port, uint16_t queue, rte_mempool* pool, const tcpip::MacAddr& mac, uint16_t mtu)
    : reactor_(reactor),
      queue_(port, queue, pool, mac, mtu),
      ip_(queue_, interface_config(conf.network.dpdk)),
      tcp_(ip_, reactor.timers(), *this, stats, tcp_config(conf)) {
  // One lcore per worker: a registered non-EAL thread gets an lcore id, hence its own mempool cache.
  registered_ = rte_thread_register() == 0;
  reactor_.add_poller(this);
  reactor_.timers().arm(*this, reactor_.now_ms() + kArpTickMs);
  ip_.announce();  // gratuitous ARP (RFC 5227 §3)
  queue_.flush();
  if (queue < kMaxCores) g_cores[queue].store(this, std::memory_order_release);
}

CoreStack::~CoreStack() {
  for (auto& c : g_cores) {
    CoreStack* self = this;
    c.compare_exchange_strong(self, nullptr);
  }
  queue_.flush();
  if (registered_) rte_thread_unregister();
}

uint64_t CoreStack::now_ms() const { return reactor_.now_ms(); }
uint64_t CoreStack::now_us() const { return reactor_.now_ns() / 1000; }

bool CoreStack::poll() {
  queue_.flush();  // frames from timers and tasks of the previous iteration
  // Up to 4 bursts per iteration, so disk completions and timers keep their turn under load.
  for (int i = 0; i < 4 && queue_.receive(ip_, reactor_.now_ms()) == Queue::kBurst; ++i) {
    tcp_.reap();
    queue_.flush();
  }
  tcp_.reap();
  queue_.flush();
  return true;  // busy-poll: the loop must not sleep in DPDK mode
}

void CoreStack::fire() {
  ip_.tick(reactor_.now_ms());
  queue_.flush();
  reactor_.timers().arm(*this, reactor_.now_ms() + kArpTickMs);
}

}  // namespace kosoku::dpdk
