// DPDK's Environment Abstraction Layer, initialised once per process (kernel-bypass/ only; nothing in core/
// includes DPDK headers: this header is plain C++). DPDK is linked statically from Debian's archives with the
// buses, mempool driver and PMDs under --whole-archive (CMakeLists.txt, ../shared/notes/appliance-recipe.md Q1):
// their constructors register them before main(), which linked_buses() shows.
//
// Host flags that work without hugepages (recipe Q2): `-l 0 --no-huge --no-shconf --no-pci --no-telemetry
// --vdev=net_tap0,iface=dtap0`. `--no-huge --in-memory` is refused by EAL (legacy memory).
#pragma once

#include <span>
#include <string>
#include <vector>

namespace kosoku::dpdk {

/// "DPDK 22.11.11" (rte_version()).
std::string version();

/// Names of the buses registered by static constructors ("pci", "vdev", ...). Empty means the link line
/// lost the --whole-archive bus objects: EAL would then fail with "failed to parse device".
std::vector<std::string> linked_buses();

/// rte_eal_init with `args` as argv[1..] (argv[0] is "kosoku"). Once per process: a second call returns
/// -EALREADY. Returns the number of available ethdev ports (>= 0), or -errno with *err =
/// "rte_eal_init failed: <rte_strerror>".
int init_eal(std::span<const std::string> args, std::string* err);

}  // namespace kosoku::dpdk
