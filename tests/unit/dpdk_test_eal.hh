// DPDK's EAL for unit tests that need a real PMD (net_ring over rte_rings, mempools): rte_eal_init may run
// only once per process, so every such test calls test_eal() and shares the one initialisation (through
// dpdk::init_eal, which refuses a second call). No hugepages, no PCI scan, no shared config, no telemetry:
// `-l 0 --no-huge --no-pci --no-shconf --no-telemetry -m 128` (eal.hh: --in-memory is refused together with
// --no-huge). The calling thread's CPU affinity is restored afterwards (EAL pins it to lcore 0), so the other
// tests in the binary keep running on every CPU.
#pragma once

#include <sched.h>

#include <string>
#include <vector>

#include "kernel-bypass/dpdk/eal.hh"

namespace kosoku::dpdk::testing {

/// Initialises EAL on the first call; true if it is up. *err (may be null): why not.
inline bool test_eal(std::string* err = nullptr) {
  static std::string error;
  static const bool up = [] {
    cpu_set_t before;
    bool have_before = sched_getaffinity(0, sizeof(before), &before) == 0;
    std::vector<std::string> args = {"-l", "0", "--no-huge", "--no-pci", "--no-shconf", "--no-telemetry",
                                     "-m", "128", "--log-level=lib.eal:error"};
    int rc = init_eal(args, &error);
    if (have_before) sched_setaffinity(0, sizeof(before), &before);
    return rc >= 0;
  }();
  if (err != nullptr) *err = error;
  return up;
}

}  // namespace kosoku::dpdk::testing
