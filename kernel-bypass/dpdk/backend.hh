// The DPDK network backend (`network dpdk`, config/network_conf.hh): one DpdkBackend object that main() starts
// once before the workers (EAL, the port, the steering rings) and adds to the net::StackFactory it hands them
// (core/net/stack_factory.hh); each worker gets its CoreStack from it. It owns everything the cores share —
// the Port, the CoreMesh, the FlowSteering table and the CoreTable (each core's stack and RX wake-up op) — and
// outlives the workers.
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
// sleeps (a per-core `sleeping` flag, seq_cst on both sides, re-checked after it is set; the cores find each
// other in the backend's CoreTable). ARP aging runs on a
// 100 ms timer. On destruction (the worker stopped: drain over) every connection still open gets a RST
// (TcpStack::reset_all) before the port stops.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "core/config/conf.hh"
#include "core/net/stack_factory.hh"
#include "core/net/stream.hh"
#include "core/reactor/reactor.hh"
#include "core/stats/export.hh"
#include "kernel-bypass/dpdk/idle_backoff.hh"
#include "kernel-bypass/dpdk/queue.hh"
#include "kernel-bypass/dpdk/steering.hh"
#include "kernel-bypass/tcpip/tcp_stack.hh"

namespace kosoku::dpdk {

class CoreStack;
class Port;

/// One-shot IORING_OP_POLL_ADD on a core's RX interrupt fd (CoreStack::idle_wait): its CQE ends the idle sleep.
struct RxWake final : reactor::IoOp {
  bool armed = false;
  IdleStats* stats = nullptr;  // the owning CoreStack's, while it lives
  void complete(int32_t res, uint32_t) override {
    armed = false;
    if (res > 0 && stats != nullptr) ++stats->rx_wakeups;
  }
};

/// The cores of one backend, by core number: each core's CoreStack while it lives (read by the other cores,
/// which wake a sleeping one, and by the stats section: counters are plain fields), and each core's RxWake,
/// which lives here because a poll armed at exit may complete after its CoreStack is gone.
struct CoreTable {
  static constexpr int kMaxCores = 128;
  std::atomic<CoreStack*> stacks[kMaxCores] = {};
  RxWake rx_wake[kMaxCores];
};

class DpdkBackend final : public net::Backend {
 public:
  /// Once per process, before the workers start: rte_eal_init with the dpdk block's `eal` arguments, open the
  /// first port for worker_processes cores (port.hh), create the steering rings (steering.hh). Returns the
  /// backend, or null with *err ("rte_eal_init failed: ...", "no DPDK port: ...", "port 0: ..."). *note
  /// describes the steering in use, for the error log ("2 cores on 2 queue pairs, RSS ... / software
  /// steering: ...; checksums: offloaded|software").
  static std::unique_ptr<DpdkBackend> start(const config::MainConf& conf, std::string* err,
                                            std::string* note = nullptr);
  /// stop().
  ~DpdkBackend() override;

  /// Core `core`'s CoreStack (its port queue pair if the port has that many, its mempool, the steering).
  std::unique_ptr<net::Stack> make_stack(reactor::Reactor& reactor, stats::CoreStats& stats,
                                         const config::MainConf& conf, int core, std::string* err) override;
  /// After the workers have stopped: frees the frames left in the rings, stops and closes the port. Calling it
  /// again does nothing; the object stays valid (stats_section() is then empty).
  void stop();
  /// Port counters (Port::stats_section) plus each core's queue, steering, interface, TCP and idle back-off
  /// counters (label core="C", same section); empty section once stopped.
  stats::ExtraSection stats_section() const;

 private:
  DpdkBackend();

  std::unique_ptr<Port> port_;
  std::unique_ptr<CoreMesh> mesh_;
  std::unique_ptr<FlowSteering> flows_;
  CoreTable cores_;
};

/// One core's DPDK-backed stack (see the header comment). Created on the core's thread; registers itself in
/// `cores` (which outlives it) under its core number.
class CoreStack final : public net::Stack, public reactor::Poller, public reactor::Timer, public tcpip::Clock {
 public:
  CoreStack(reactor::Reactor& reactor, stats::CoreStats& stats, const config::MainConf& conf,
            const QueueConfig& queue, CoreTable& cores, const CoreMesh& mesh, const FlowSteering& flows,
            uint16_t core);
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
  CoreTable& cores_;
  Queue queue_;
  CoreSteering steer_;
  tcpip::Interface ip_;
  tcpip::TcpStack tcp_;
  bool registered_ = false;  // rte_thread_register() succeeded (the thread has an lcore id)
  /// The one-shot io_uring poll on the RX queue's interrupt fd that ends an idle sleep when a frame arrives
  /// (backend.cc; null without such an fd). In the CoreTable: an armed poll may complete after this object.
  RxWake* rx_wake_ = nullptr;
  IdleBackoff idle_;
  IdleStats idle_stats_;
  std::atomic<bool> sleeping_{false};
  uint64_t handed_over_ = 0;  // steering forwarded_out + TX relayed frames at the last wake_peers()
};

}  // namespace kosoku::dpdk
