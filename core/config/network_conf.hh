// `network kernel|dpdk;` and `dpdk { ... }` (main context, config/directives_dpdk.cc): which network backend
// the workers run on. Plain C++: nothing here depends on DPDK, so core/ and `kosoku -t` can read it.
//
//   network dpdk;
//   dpdk {
//       eal -l 0 --no-huge --no-shconf --no-pci --no-telemetry --vdev=net_tap0,iface=dtap0;
//       address 10.99.0.2/24;     # the stack's IPv4 address and prefix length
//       gateway 10.99.0.1;        # optional: next hop for off-link destinations
//   }
//
// Limits checked at configuration time (finalize_dpdk): `network dpdk` needs a dpdk block with `eal` and
// `address`, exactly one worker (one port queue: no RSS/flow steering across cores yet), and IPv4 listen
// addresses that are 0.0.0.0 or the dpdk address. A dpdk block with `network kernel` is an error too (it
// would be silently ignored otherwise).
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

struct DpdkConf {
  bool present = false;              // a dpdk block was given
  std::vector<std::string> eal;      // `eal ARG...;` rte_eal_init argv[1..], in order (repeatable)
  uint32_t address = 0;              // `address A.B.C.D/N;` host byte order
  uint8_t prefix_len = 24;
  uint32_t gateway = 0;              // `gateway A.B.C.D;` 0: none (on-link peers only)
  NetworkConfPos loc;                // the `dpdk` block
};

struct NetworkConf {
  NetworkBackend backend = NetworkBackend::kKernel;  // `network kernel|dpdk;` (default kernel)
  NetworkConfPos loc;                                // the `network` directive (errors point here)
  DpdkConf dpdk;
};

}  // namespace kosoku::config
