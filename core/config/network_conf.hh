// `network kernel|dpdk;` and `dpdk { ... }` (main context, config/directives_dpdk.cc): which network backend
// the workers run on. Plain C++: nothing here depends on DPDK, so core/ and `kosoku -t` can read it.
//
//   network dpdk;
//   dpdk {
//       eal -l 0 --no-huge --no-shconf --no-pci --no-telemetry --vdev=net_tap0,iface=dtap0;
//       address 10.99.0.2/24;     # the stack's IPv4 address and prefix length
//       gateway 10.99.0.1;        # optional: next hop for off-link destinations
//       idle_sleep 200us;         # optional: idle back-off cap (1us..10ms, a bare number is ms, or off =
//                                 # busy-poll); default 200us
//       tx_zero_copy on;          # optional: file payloads leave by reference (default on; off: copied)
//       tx_zero_copy_buffers 16;  # optional: DMA-able 256 KiB buffers per core on a PCI NIC (1..4096)
//   }
//
// idle_sleep: a worker that found nothing to do (no frame received or sent, nothing from the other cores,
// no queued task) for 100 us sleeps in io_uring (an io_uring completion, a frame forwarded by another core
// or shutdown wake it early) for 10 us, then 20, 40, ... up to idle_sleep, never past its next timer, and
// goes back to busy-polling on the first frame (l3fwd-power style). An idle appliance then uses a few % of
// a core instead of 100 %; the cost is up to idle_sleep of extra latency on the first packet after a quiet
// period. `off` keeps the pure busy-poll.
//
// `eal` arguments are checked by `kosoku -t` without starting the EAL: option names (DPDK 22.11; long ones
// also as unique prefixes, as getopt_long takes them), required values, -l/-c/--lcores syntax (lcore ids < 128, leaving room for the worker_processes
// threads the workers register), --vdev=DRIVER[,key=value...] with a linked driver, -a/-b PCI addresses.
//
// Limits checked at configuration time (finalize_dpdk): `network dpdk` needs a dpdk block with `eal` and
// `address`, and IPv4 listen addresses that are 0.0.0.0 or the dpdk address. A dpdk block with `network
// kernel` is an error too (it would be silently ignored otherwise).
//
// worker_processes N: each worker is one core of the stack with its own RX/TX queue pair (as many as the
// port has; the others get their frames and send through a core that has one) and its own TCP/IP stack.
// With several queues and RSS, the port hashes flows with a symmetric key onto the workers; otherwise
// (net_tap, one-queue virtio) the worker that receives a frame steers it to the worker owning its 4-tuple
// over a lock-free ring. Outgoing connections (proxy_pass) pick source ports that land on their own worker.
// The EAL `-l` list may stay `-l 0`: workers register as DPDK threads themselves (rte_thread_register), and
// are pinned by worker_cpu_affinity like with the kernel backend. The error log says at start which mode
// runs ("network dpdk: port 0 (net_tap): 2 core(s) on 2 queue pair(s), software flow steering ...").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kosoku::config {

/// Where a directive was written (conf.hh's SourceLoc, which this header cannot include: conf.hh includes it).
struct NetworkConfPos {
  std::string file;
  int line = 0;
  int col = 0;
};

enum class NetworkBackend : uint8_t {
  kKernel,  // io_uring sockets (core/net/kernel_stack.hh)
  kDpdk,    // DPDK port + kosoku's own TCP/IP stack (kernel-bypass/)
};

/// `congestion_control cubic|reno;` in the dpdk block (Linux net.ipv4.tcp_congestion_control).
enum class TcpCongestionControl : uint8_t { kCubic, kReno };

struct DpdkConf {
  bool present = false;              // a dpdk block was given
  std::vector<std::string> eal;      // `eal ARG...;` rte_eal_init argv[1..], in order (repeatable)
  uint32_t address = 0;              // `address A.B.C.D/N;` host byte order
  uint8_t prefix_len = 24;
  uint32_t gateway = 0;              // `gateway A.B.C.D;` 0: none (on-link peers only)
  NetworkConfPos loc;                // the `dpdk` block
  std::vector<NetworkConfPos> eal_loc;  // where each `eal` argument was written (same order as `eal`)
  uint32_t idle_sleep_us = 200;      // `idle_sleep 200us|Nms|off;` longest idle back-off sleep; 0 (off):
                                     // pure busy-poll (kernel-bypass/dpdk/idle_backoff.hh)
  // The TCP stack's tunables (kernel-bypass/tcpip/tcp_stack.hh TcpConfig), named as Linux names them:
  TcpCongestionControl congestion_control = TcpCongestionControl::kCubic;  // `congestion_control cubic|reno;`
  uint32_t rto_min_ms = 200;         // `rto_min 200ms;` RFC 6298 §2.4 floor on the RTO (Linux route rto_min),
                                     // 1 ms .. 60 s
  // Zero-copy TX (kernel-bypass/dpdk/queue.hh, dma_buffers.hh):
  bool tx_zero_copy = true;            // `tx_zero_copy on|off;` file payloads by reference where the port can
  uint32_t tx_zero_copy_buffers = 16;  // `tx_zero_copy_buffers N;` DMA-able 256 KiB buffers per core on a port
                                       // that fetches by IOVA (a PCI NIC), 1..4096 (hugepage memory: N × 256 KiB)
};

struct NetworkConf {
  NetworkBackend backend = NetworkBackend::kKernel;  // `network kernel|dpdk;` (default kernel)
  NetworkConfPos loc;                                // the `network` directive (errors point here)
  DpdkConf dpdk;
};

}  // namespace kosoku::config
