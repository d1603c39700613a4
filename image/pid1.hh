// kosoku as PID 1 of the appliance image: everything init does, in one place (architecture.md "Appliance").
//
// The image (image/build-image) is a kernel plus an initramfs whose /init is the static kosoku binary. The
// kernel starts it as PID 1 with /dev/console (ttyS0) on fds 0-2. main() (core/main.cc) then calls, in order:
//
//   if (appliance::is_pid1()) {
//     appliance::early_init();                       // /proc /sys /dev /run /tmp, signals, crash → fatal()
//     conf = load(appliance::kFlashedConfigPath);    // the flashed config, never `-c`; error → fatal(msg)
//     appliance::init_system(conf.appliance);        // modules, NIC, network, hugepages, data disk
//     ... start the loops and the serial console (console.hh) ...
//     ... if the loops ever return: appliance::fatal("worker loops exited") — PID 1 must never exit.
//   }
//
// Boot sequence of init_system (each step prints one `[ uptime] kosoku: ...` line on the console; any failure
// is fatal):
//   1. /proc/sys/kernel/panic from `on_fatal` (reboot: 1 s; halt: never), hugepages (`hugepages N;`);
//   2. modules of phase "nic" from /lib/modules/load.order (kmod.hh), then the NIC binding step of the mode
//      given by `kosoku.nic=` on the kernel command line (nic.hh kNicModes; default "kernel"), then every
//      other module in list order;
//   3. lo up; for a kernel-netdev mode: wait for `interface` (eth0) and give it `address`/`gateway`
//      (default 10.0.2.15/24 via 10.0.2.2, QEMU user networking);
//   4. wait for `data_disk` (default /dev/vda; an empty device means none) and mount it on `mount=` (/data),
//      read-only unless `rw`.
// Children: SIGCHLD is ignored with SA_NOCLDWAIT, so the kernel reaps anything that exits under PID 1 (there
// are no other programs in the image, and no signal ever interrupts a loop for it). SIGTERM/SIGPWR power
// off, SIGINT (Ctrl-Alt-Del) reboots, SIGSEGV/SIGBUS/SIGILL/SIGFPE/SIGABRT and std::terminate call fatal().
//
// Safety on a host: fatal() and power_off() only halt/reboot the machine when is_pid1() is true; otherwise
// they print the reason and _exit(1) / _exit(0).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/config/conf.hh"

namespace kosoku::appliance {

inline constexpr char kFlashedConfigPath[] = "/etc/kosoku.conf";
/// 64 hex digits + '\n', written by image/build-image from the host's copy of the config.
inline constexpr char kFlashedConfigShaPath[] = "/etc/kosoku.conf.sha256";
inline constexpr char kDefaultAddress[] = "10.0.2.15/24";
inline constexpr char kDefaultGateway[] = "10.0.2.2";

/// True when the process is PID 1, or the kernel command line has `kosoku.pid1=1` (a kosoku started by
/// another init that should still act as the appliance's init). Computed once.
bool is_pid1();

/// The value of `key=` in a kernel command line ("console=ttyS0 kosoku.nic=uio" , "kosoku.nic" → "uio");
/// "" if absent; a bare `key` yields "1".
std::string cmdline_value(std::string_view cmdline, std::string_view key);
/// cmdline_value over /proc/cmdline (read once).
std::string kernel_cmdline_param(std::string_view key);

/// Mounts proc, sysfs, devtmpfs, /run, /tmp and hugetlbfs on /dev/hugepages (each skipped if already
/// mounted), makes sure fds 0-2 are /dev/console, installs the signal handlers described above and sets the
/// host name "kosoku". Idempotent; call before anything reads /proc or /sys. Fatal on a failed mount.
void early_init();

/// Steps 1-4 above. Calls early_init() first if needed. Never returns on failure (fatal()).
void init_system(const config::ApplianceConf& conf);

/// What init_system did, for the console (`disk`, `version`).
struct BootReport {
  std::string nic_mode;                 // "kernel", "uio", "vfio"
  std::vector<std::string> bound_nics;  // PCI addresses given to the override driver
  std::string interface;                // "eth0 10.0.2.15/24 via 10.0.2.2", or "" in a bypass mode
  std::string data;                     // "/dev/vda on /data (ext4, ro)", or "none"
  int modules_loaded = 0;
  double init_start_s = 0;              // CLOCK_BOOTTIME at early_init(), seconds
  double init_done_s = 0;               // at the end of init_system()
};
const BootReport& boot_report();

/// Prints "kosoku: fatal: REASON" on the console and then, as PID 1, syncs, unmounts the data disk and
/// reboots (`on_fatal reboot`) or halts (`on_fatal halt`, the default: the machine stays on with the
/// reason on screen). Async-signal-safe (no allocation) so the crash handlers can use it.
[[noreturn]] void fatal(std::string_view reason);

/// A clean stop: sync, unmount the data disk (or, if busy, remount it read-only and detach it), sync, then
/// reboot(RB_POWER_OFF) or reboot(RB_AUTOBOOT). QEMU started with -no-reboot exits with status 0 either way.
/// Async-signal-safe. Not PID 1: prints and _exit(0).
[[noreturn]] void power_off(bool reboot);

/// Seconds since boot (CLOCK_BOOTTIME), as in the kernel's log timestamps.
double uptime_s();

}  // namespace kosoku::appliance
