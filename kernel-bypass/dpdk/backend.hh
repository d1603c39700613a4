// The DPDK network backend (`network dpdk`, config/network_conf.hh): what main() starts once before the
// workers, and the per-core stack each worker gets through net::dpdk_stack_factory() (core/net/stack_factory.hh).
//
// Every worker (worker_processes N) is one core of the stack: worker i gets the port's queue pair i (if the
// port has that many; port.hh), its own mempool, an Interface (IPv4/ARP/ICMP) with the dpdk block's address,
// a TcpStack (tcpip/tcp_stack.hh) listening on the same ports as every other core, and a CoreSteering
// (steering.hh): each TCP/IPv4 4-tuple belongs to exactly one core (FlowSteering over the symmetric Toeplitz
// hash, flow_hash.hh); with RSS programmed the NIC delivers it there, otherwise the core that received it
// forwards it over an SPSC ring. connect() only uses source ports whose flow this core owns. ARP entries
// learned on one core are replicated to the others; only core 0 sends the gratuitous ARP at start.
//
// CoreStack is the worker's net::Stack (it forwards to the TcpStack) and its reactor::Poller: every loop
// iteration it flushes TX frames queued since the last poll (timers, resumed requests), takes up to 4 RX
// bursts (steering each frame), drains the rings from the other cores, frees finished connections
// (TcpStack::reap), and flushes TX again. poll() always returns true: the loop itself never sleeps in DPDK
// mode; the idle back-off (idle_backoff.hh, `idle_sleep`) is done here instead: after IdleBackoff::kSpinNs
// without work (no frame in or out, nothing from the other cores, no queued task) the poller waits on the
// core's io_uring for the next escalating step (a completion, Reactor::wake() or the timeout ends it; never
// past the next timer). A core that forwards frames to another core (steering or TX relay) wakes it if it
// sleeps (a per-core `sleeping` flag, seq_cst on both sides, re-checked after it is set). ARP aging runs on a
// 100 ms timer. On destruction (the worker stopped: drain over) every connection still open gets a RST
// (TcpStack::reset_all) before the port stops.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "core/config/conf.hh"
#include "core/net/stream.hh"
#include "core/reactor/reactor.hh"
#include "core/stats/export.hh"
#include "kernel-bypass/dpdk/idle_backoff.hh"
#include "kernel-bypass/dpdk/queue.hh"
#include "kernel-bypass/dpdk/steering.hh"
#include "kernel-bypass/tcpip/tcp_stack.hh"

namespace kosoku::dpdk {

/// Once per process, before the workers start: rte_eal_init with the dpdk block's `eal` arguments, open the
/// first port for worker_processes cores (port.hh), create the steering rings (steering.hh), install the
/// per-core stack factory. Returns 0 or -errno with *err ("rte_eal_init failed: ...", "no DPDK port: ...",
/// "port 0: ..."). *note describes the steering in use, for the error log ("2 cores on 2 queue pairs, RSS
/// ... / software steering: ...; checksums: offloaded|software").
int start_backend(const config::MainConf& conf, std::string* err, std::string* note = nullptr);
/// After the workers have stopped: stops and closes the port. Safe to call when not started.
void stop_backend();
/// Port counters (Port::stats_section) plus each core's queue, steering, interface, TCP and idle back-off
/// counters (label core="C", same section); empty section if the backend is not started.
stats::ExtraSection backend_stats_section();

/// One core's DPDK-backed stack (see the header comment). Created on the core's thread.
class CoreStack final : public net::Stack, public reactor::Poller, public reactor::Timer, public tcpip::Clock {
 public:
  CoreStack(reactor::Reactor& reactor, stats::CoreStats& stats, const config::MainConf& conf,
            const QueueConfig& queue, const CoreMesh& mesh, const FlowSteering& flows, uint16_t core);
  ~CoreStack() override;

  // net::Stack (forwarded to the TcpStack)
  int listen(const std::vector<config::ListenSocket>& sockets, net::AcceptHandler& handler,
             std::string* err) override {
    return tcp_.listen(sockets, handler, err);
  }
  net::Stream* connect(const sockaddr* addr, socklen_t addr_len, net::StreamHandler& handler,
                       std::string* err) override {
    return tcp_.connect(addr, addr_len, handler, err);
  }
  void stop_accepting() override { tcp_.stop_accepting(); }
  size_t open_streams() const override { return tcp_.open_streams(); }

  bool poll() override;                // reactor::Poller
  void fire() override;                // reactor::Timer: ARP aging every 100 ms
  uint64_t now_ms() const override;    // tcpip::Clock over the reactor's clock
  uint64_t now_us() const override;

  const Queue& queue() const { return queue_; }
  const tcpip::Interface& interface() const { return ip_; }
  const tcpip::TcpStack& tcp() const { return tcp_; }
  const CoreSteering& steering() const { return steer_; }
  const IdleStats& idle_stats() const { return idle_stats_; }
  /// Interrupts this core's idle sleep (any thread); a no-op unless it sleeps.
  void wake_if_sleeping();

 private:
  /// The idle back-off step: sleeps on the io_uring if IdleBackoff says so and nothing is pending.
  void idle_wait();
  /// After this core handed frames to other cores: wakes those that sleep.
  void wake_peers();

  reactor::Reactor& reactor_;
  Queue queue_;
  CoreSteering steer_;
  tcpip::Interface ip_;
  tcpip::TcpStack tcp_;
  bool registered_ = false;  // rte_thread_register() succeeded (the thread has an lcore id)
  /// The one-shot io_uring poll on the RX queue's interrupt fd that ends an idle sleep when a frame arrives
  /// (backend.cc; null without such an fd). Static storage: an armed poll may complete after this object.
  struct RxWake* rx_wake_ = nullptr;
  IdleBackoff idle_;
  IdleStats idle_stats_;
  std::atomic<bool> sleeping_{false};
  uint64_t handed_over_ = 0;  // steering forwarded_out + TX relayed frames at the last wake_peers()
};

}  // namespace kosoku::dpdk
