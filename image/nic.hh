// The appliance's network bring-up, run by PID 1 (pid1.hh) after the "nic" phase of the module list.
//
// NIC binding is table-driven (kNicModes): the mode comes from `kosoku.nic=` on the kernel command line,
// which `image/build-image --nic MODE` writes together with the matching modules (kernel: virtio_net;
// uio: uio + uio_pci_generic; vfio: the vfio-pci stack). For a mode with an `override_driver`, every PCI
// device listed in kNicPciIds gets that driver through /sys/bus/pci/devices/BDF/driver_override and
// /sys/bus/pci/drivers_probe (appliance-recipe.md Q4), BEFORE virtio_pci is loaded so the kernel's virtio
// driver never claims it. The kernel mode binds nothing: virtio_pci + virtio_net create `eth0`, which
// configure_interface() sets up with ioctl(2) (SIOCSIFADDR/SIOCSIFNETMASK/SIOCSIFFLAGS/SIOCADDRT).
// IPv4 only.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kosoku::appliance {

struct NicMode {
  std::string_view name;             // value of kosoku.nic=
  std::string_view override_driver;  // PCI driver to bind via driver_override; empty: the kernel driver binds
  bool kernel_netdev;                // true: the kernel owns the NIC and PID 1 configures its interface
};

/// kernel: virtio_net + kosoku's io_uring socket backend (what PID 1 assumes when `kosoku.nic=` is absent);
/// uio: uio_pci_generic for the DPDK virtio PMD (IOVA=PA, no IOMMU needed; build-image's choice for
/// `network dpdk;`, the default appliance);
/// vfio: vfio-pci, only where an IOMMU exists (Debian's kernel has no no-IOMMU mode).
inline constexpr NicMode kNicModes[] = {
    {"kernel", "", true},
    {"uio", "uio_pci_generic", false},
    {"vfio", "vfio-pci", false},
};
inline constexpr std::string_view kDefaultNicMode = "kernel";

/// The mode named `name`, or null.
const NicMode* find_nic_mode(std::string_view name);

/// PCI vendor:device pairs the appliance treats as its NIC: virtio-net transitional/legacy (1af4:1000) and
/// modern (1af4:1041).
struct PciId {
  uint16_t vendor;
  uint16_t device;
};
inline constexpr PciId kNicPciIds[] = {{0x1af4, 0x1000}, {0x1af4, 0x1041}};

/// For a mode with an override driver: binds every matching device under `sysfs_pci` (default
/// /sys/bus/pci) to it and checks the `driver` link afterwards. Returns the bound PCI addresses
/// ("0000:00:03.0"), or an empty vector with `*error` set ("no virtio-net PCI device", "0000:00:03.0 is
/// bound to virtio-pci, not uio_pci_generic"). A kernel-netdev mode returns {} and leaves `*error` empty.
std::vector<std::string> bind_nics(const NicMode& mode, std::string* error,
                                   std::string_view sysfs_pci = "/sys/bus/pci");

/// An IPv4 address with its prefix length, as written in `address 10.0.2.15/24;`.
struct Ipv4Cidr {
  in_addr addr{};
  int prefix = 32;
};
/// "A.B.C.D/N" (N 0..32) or "A.B.C.D" (prefix 32); nullopt otherwise.
std::optional<Ipv4Cidr> parse_ipv4_cidr(std::string_view text);
/// "A.B.C.D"; nullopt otherwise.
std::optional<in_addr> parse_ipv4(std::string_view text);
/// The netmask for a prefix length, in network order (24 → 255.255.255.0).
in_addr prefix_to_netmask(int prefix);

/// Sets IFF_UP on `ifname`. Returns "" or "SIOCSIFFLAGS lo: strerror".
std::string interface_up(const std::string& ifname);

/// Assigns `cidr` to `ifname`, brings it up and, when `gateway` is set, adds the default route via it.
/// Returns "" or the failing step ("SIOCADDRT default via 10.0.2.2 dev eth0: Network is unreachable").
std::string configure_interface(const std::string& ifname, const Ipv4Cidr& cidr,
                                const std::optional<in_addr>& gateway);

/// "a.b.c.d".
std::string ipv4_to_string(in_addr addr);

}  // namespace kosoku::appliance
