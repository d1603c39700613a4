// DPDK's Environment Abstraction Layer, initialised once per process (kernel-bypass/ only; nothing in core/
// includes DPDK headers: this header is plain C++). DPDK is linked statically from Debian's archives with the
// buses, mempool driver and PMDs under --whole-archive (CMakeLists.txt: a PMD not linked whole is never registered):
// their constructors register them before main(), which linked_buses() shows.
//
// Host flags that work without hugepages (recipe Q2): `-l 0 --no-huge --no-shconf --no-pci --no-telemetry
// --vdev=net_tap0,iface=dtap0`. `--no-huge --in-memory` is refused by EAL (legacy memory).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kosoku::dpdk {

/// "DPDK 22.11.11" (rte_version()).
std::string version();

/// Names of the buses registered by static constructors ("pci", "vdev", ...). Empty means the link line
/// lost the --whole-archive bus objects: EAL would then fail with "failed to parse device".
std::vector<std::string> linked_buses();

/// rte_eal_init with `args` as argv[1..] (argv[0] is "kosoku"). Once per process: a second call returns
/// -EALREADY. Returns the number of available ethdev ports (>= 0), or -errno with *err =
/// "rte_eal_init failed: <rte_strerror> (DPDK: <its error lines>)". DPDK's log during the call is captured
/// (and copied to stderr): a device the bus probe refused is no rte_eal_init error, only log lines and a
/// missing port, so the caller names the cause from eal_init_log().
/// With a net_tap vdev in `args`, realtime signals SIGRTMIN+1 .. SIGRTMAX-1 get a no-op handler first and
/// keep it: net_tap takes the first of them still SIG_DFL as an "RX trigger" (O_ASYNC: one queued signal per
/// frame the kernel writes to the tap, delivered to whichever thread, and rx_burst reads only after one), and
/// with none free it polls its queue on every burst instead (its own fallback, "No Rx trigger signal
/// available"). A signal per received frame cost the main thread a wake-up each and a frame could sit unread
/// until the scheduler ran the handler; the worker's idle back-off already sleeps on the queue fd.
int init_eal(std::span<const std::string> args, std::string* err);

/// DPDK's log lines written during init_eal (empty before it).
const std::string& eal_init_log();

/// " (DPDK: line | line ...)" with up to 6 lines of `log` that report a failure (fail, error, cannot,
/// unable, invalid, "not ") or mention one of `names`; "" if none.
std::string log_excerpt(std::string_view log, std::span<const std::string> names);

}  // namespace kosoku::dpdk
