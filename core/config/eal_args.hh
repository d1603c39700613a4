// What `kosoku -t` can check in the dpdk block's `eal` arguments without starting DPDK's EAL (which would take
// the devices, hugepages and lcores of a running instance). Plain C++, no DPDK header: the rules below follow
// DPDK 22.11's EAL option table (lib/eal/common/eal_common_options.c, the version Debian 12 ships and kosoku
// links). Long options may be abbreviated to a unique prefix, as getopt_long (which rte_eal_init calls) allows:
// "--no-hu" is --no-huge, "--vd=..." --vdev; an exact name wins over longer ones ("--trace"); a prefix of several
// ("--no-h": --no-hpet, --no-huge) is refused as ambiguous, as EAL refuses it. Messages name the full option.
//
//   - option names: the short options -a -b -c -d -l -m -n -r -s -S (with a value, `-l0` or `-l 0`) and -h -v;
//     the long options of that table (`--opt=value` or `--opt value` when the value is required; --huge-unlink,
//     --syslog and --huge-worker-stack take their optional value only as `--opt=value`); anything else, and a
//     non-option argument, is an error;
//   - -l LIST: comma-separated lcore ids and ranges "0-3,5"; -c MASK: hex ("0x3" or "3"); --lcores: digits
//     , - @ ( ) with balanced parentheses; every lcore id < kMaxLcores (RTE_MAX_LCORE); -l/-c/--lcores at most
//     once; the lcores they name plus worker_processes (each worker registers an lcore of its own,
//     rte_thread_register) must fit in kMaxLcores; --main-lcore must be one of those lcores (without -l/-c/
//     --lcores: a CPU of the process's affinity), as EAL refuses it otherwise;
//   - --vdev=NAME[,key=value...]: NAME starts with a driver kosoku links (net_tap, net_tun, net_af_packet,
//     net_memif, net_ring, net_null, net_virtio_user and their eth_ aliases), keys are non-empty; net_tap and
//     net_tun's iface= and remote= are Linux interface names (1..15 bytes, not "." or "..", no '/', ':' or
//     white space: dev_valid_name);
//   - -a/-b/--allow/--block PCI[,key=value...]: a PCI address DDDD:BB:DD.F or BB:DD.F (hex);
//   - -m/-n/-r, --socket-mem/--socket-limit: decimal numbers (comma-separated for the socket ones);
//     --proc-type primary|secondary|auto; --iova-mode pa|va|dc.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>

namespace kosoku::config {

/// RTE_MAX_LCORE of Debian's DPDK build (rte_build_config.h).
inline constexpr int kMaxLcores = 128;

struct EalArgError {
  size_t arg = 0;        // index into the checked arguments (the value's own index when it is the culprit)
  std::string message;   // e.g. "unknown EAL option \"--no-hugepages\""
};

/// Checks `args` (rte_eal_init's argv[1..]) as described above for a configuration running
/// `worker_processes` workers. nullopt: nothing wrong was found (EAL may still refuse at start, e.g. a device
/// that cannot be opened).
std::optional<EalArgError> check_eal_args(std::span<const std::string> args, int worker_processes);

}  // namespace kosoku::config
