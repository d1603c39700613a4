// PID 1 duties of the appliance. See pid1.hh for the sequence and the contract with main().
#include "image/pid1.hh"

#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>

#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "image/kmod.hh"
#include "image/nic.hh"

namespace kosoku::appliance {
namespace {

constexpr int kDevWaitMs = 10000;  // module probing is synchronous; this only covers slow firmware

std::atomic<bool> g_on_fatal_reboot{false};
std::atomic<bool> g_early_done{false};
std::atomic<bool> g_stopping{false};
// The data mount point, for fatal()/power_off() (signal handlers may call them: no std::string there).
char g_data_mount[256] = "";
BootReport g_report;

// Async-signal-safe output to the console (fd 2 is /dev/console under PID 1).
void put(std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::write(2, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    s.remove_prefix(static_cast<size_t>(n));
  }
}

// One progress line, "[  1.234] kosoku: MSG", timestamped like the kernel's log.
void say(std::string_view msg) {
  put(absl::StrFormat("[%8.3f] kosoku: %s\n", uptime_s(), msg));
}

std::string read_file(const char* path) {
  std::string out;
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

int write_file(const char* path, std::string_view data) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  const ssize_t n = ::write(fd, data.data(), data.size());
  const int err = n < 0 ? errno : 0;
  ::close(fd);
  return -err;
}

bool wait_for_path(const std::string& path, int timeout_ms) {
  for (int waited = 0;; waited += 10) {
    if (::access(path.c_str(), F_OK) == 0) return true;
    if (waited >= timeout_ms) return false;
    ::usleep(10 * 1000);
  }
}

// mount(2), creating the mount point; EBUSY (already mounted there) counts as success.
void must_mount(const char* source, const char* target, const char* type, unsigned long flags, const char* data) {
  ::mkdir(target, 0755);
  if (::mount(source, target, type, flags, data) != 0 && errno != EBUSY) {
    fatal(absl::StrCat("mount ", type, " on ", target, ": ", std::strerror(errno)));
  }
}

// Copies `s` into a fixed buffer (for signal-safe use later).
void set_cstr(char* dst, size_t cap, std::string_view s) {
  const size_t n = s.size() < cap - 1 ? s.size() : cap - 1;
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

// Unmounts the data disk for a stop; if it is busy (open files), remounts it read-only so nothing is left
// dirty, then detaches it. Async-signal-safe.
void release_data_disk() {
  ::sync();
  if (g_data_mount[0] == '\0') return;
  if (::umount2(g_data_mount, 0) == 0) {
    put("kosoku: data disk unmounted\n");
  } else {
    ::mount(nullptr, g_data_mount, nullptr, MS_REMOUNT | MS_RDONLY, nullptr);
    ::umount2(g_data_mount, MNT_DETACH);
    put("kosoku: data disk busy: remounted read-only and detached\n");
  }
  g_data_mount[0] = '\0';
  ::sync();
}

void on_stop_signal(int sig) { power_off(sig == SIGINT); }

void on_crash_signal(int sig) {
  const char* name = sigabbrev_np(sig);
  char buf[64] = "signal SIG";
  std::strncat(buf, name != nullptr ? name : "?", sizeof(buf) - std::strlen(buf) - 1);
  fatal(buf);
}

void install_signal_handlers() {
  struct sigaction sa {};
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = SIG_IGN;
  sa.sa_flags = SA_NOCLDWAIT;  // the kernel reaps children (and orphans reparented to PID 1)
  ::sigaction(SIGCHLD, &sa, nullptr);

  sa = {};
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = on_stop_signal;
  for (int sig : {SIGTERM, SIGPWR, SIGINT}) ::sigaction(sig, &sa, nullptr);
  ::reboot(RB_DISABLE_CAD);  // Ctrl-Alt-Del → SIGINT to PID 1 → clean reboot

  sa = {};
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = on_crash_signal;
  sa.sa_flags = SA_RESETHAND;
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) ::sigaction(sig, &sa, nullptr);
  std::set_terminate([] { fatal("std::terminate (uncaught exception)"); });
}

std::string mount_options(const config::ApplianceConf& conf) { return conf.data_rw ? "rw" : "ro"; }

}  // namespace

double uptime_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

std::string cmdline_value(std::string_view cmdline, std::string_view key) {
  for (std::string_view item : absl::StrSplit(cmdline, absl::ByAnyChar(" \t\n"), absl::SkipEmpty())) {
    if (item == key) return "1";
    if (item.size() > key.size() && item.substr(0, key.size()) == key && item[key.size()] == '=') {
      return std::string(item.substr(key.size() + 1));
    }
  }
  return "";
}

std::string kernel_cmdline_param(std::string_view key) {
  static const std::string cmdline = read_file("/proc/cmdline");
  return cmdline_value(cmdline, key);
}

bool is_pid1() {
  static const bool pid1 = ::getpid() == 1 || kernel_cmdline_param("kosoku.pid1") == "1";
  return pid1;
}

const BootReport& boot_report() { return g_report; }

void early_init() {
  if (g_early_done.exchange(true)) return;
  // /dev first: if the initramfs lacked /dev/console, fds 0-2 are closed and the mounts' errors go nowhere.
  must_mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755");
  if (::fcntl(2, F_GETFD) < 0) {
    const int fd = ::open("/dev/console", O_RDWR | O_NOCTTY);
    for (int i = 0; fd >= 0 && i < 3; ++i) {
      if (fd != i) ::dup2(fd, i);
    }
    if (fd > 2) ::close(fd);
  }
  g_report.init_start_s = uptime_s();
  must_mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr);
  must_mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr);
  must_mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
  must_mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
  must_mount("hugetlbfs", "/dev/hugepages", "hugetlbfs", MS_NOSUID | MS_NODEV, nullptr);
  ::symlink("/run", "/var/run");  // the initramfs ships it; harmless if present
  ::sethostname("kosoku", 6);
  install_signal_handlers();
  utsname u{};
  ::uname(&u);
  say(absl::StrCat("PID 1 on Linux ", u.release, " (", KOSOKU_VERSION, ")"));
}

void init_system(const config::ApplianceConf& conf) {
  early_init();
  g_on_fatal_reboot.store(conf.on_fatal_reboot);
  // A kernel panic (e.g. PID 1 killed by a signal it could not handle) follows on_fatal too.
  write_file("/proc/sys/kernel/panic", conf.on_fatal_reboot ? "1" : "0");
  if (conf.hugepages > 0) {
    if (int rc = write_file("/proc/sys/vm/nr_hugepages", absl::StrCat(conf.hugepages)); rc != 0) {
      fatal(absl::StrCat("hugepages ", conf.hugepages, ": ", std::strerror(-rc)));
    }
    const std::string got = read_file("/proc/sys/vm/nr_hugepages");
    say(absl::StrCat("hugepages: ", conf.hugepages, " requested, ", absl::StripTrailingAsciiWhitespace(got),
                     " reserved"));
  }

  // Modules and NIC binding.
  std::string nic_name = kernel_cmdline_param("kosoku.nic");
  if (nic_name.empty()) nic_name = std::string(kDefaultNicMode);
  const NicMode* nic = find_nic_mode(nic_name);
  if (nic == nullptr) fatal(absl::StrCat("kosoku.nic=", nic_name, ": unknown NIC mode (kernel, uio, vfio)"));
  g_report.nic_mode = nic_name;
  std::vector<ModuleEntry> modules;
  std::string err;
  const std::string order = read_file(kLoadOrderPath);
  if (!parse_load_order(order, &modules, &err)) fatal(err);
  const double t_mod = uptime_s();
  std::vector<std::string> warnings;
  err = load_modules(modules, "nic", kModuleDir, &g_report.modules_loaded, &warnings);
  if (!err.empty()) fatal(err);
  g_report.bound_nics = bind_nics(*nic, &err);
  if (!err.empty()) fatal(absl::StrCat("NIC binding (kosoku.nic=", nic_name, "): ", err));
  err = load_modules(modules, "", kModuleDir, &g_report.modules_loaded, &warnings);
  if (!err.empty()) fatal(err);
  for (const std::string& w : warnings) say(w);
  say(absl::StrFormat("%d modules loaded in %.0f ms; NIC mode %s%s", g_report.modules_loaded,
                      (uptime_s() - t_mod) * 1000, nic_name,
                      g_report.bound_nics.empty() ? ""
                                                  : absl::StrCat(", bound ", absl::StrJoin(g_report.bound_nics, " "),
                                                                 " to ", nic->override_driver)));

  // Network.
  if (err = interface_up("lo"); !err.empty()) fatal(err);
  if (nic->kernel_netdev) {
    const std::string address = conf.address.empty() ? kDefaultAddress : conf.address;
    const std::string gateway = conf.address.empty() && conf.gateway.empty() ? kDefaultGateway : conf.gateway;
    const auto cidr = parse_ipv4_cidr(address);
    if (!cidr) fatal(absl::StrCat("address ", address, ": not an IPv4 address/prefix"));
    std::optional<in_addr> gw;
    if (!gateway.empty()) {
      gw = parse_ipv4(gateway);
      if (!gw) fatal(absl::StrCat("gateway ", gateway, ": not an IPv4 address"));
    }
    if (!wait_for_path(absl::StrCat("/sys/class/net/", conf.interface), kDevWaitMs)) {
      fatal(absl::StrCat("interface ", conf.interface, " did not appear (no NIC, or its driver is missing)"));
    }
    if (err = configure_interface(conf.interface, *cidr, gw); !err.empty()) fatal(err);
    g_report.interface = absl::StrCat(conf.interface, " ", ipv4_to_string(cidr->addr), "/", cidr->prefix,
                                      gw ? absl::StrCat(" via ", ipv4_to_string(*gw)) : "");
    say(absl::StrCat("network: ", g_report.interface));
  }

  // Data disk.
  g_report.data = "none";
  if (!conf.data_device.empty()) {
    if (!wait_for_path(conf.data_device, kDevWaitMs)) {
      fatal(absl::StrCat("data disk ", conf.data_device, " not found (QEMU: -drive if=virtio,file=data.img)"));
    }
    ::mkdir(conf.data_mount.c_str(), 0755);
    unsigned long flags = MS_NOSUID | MS_NODEV | MS_NOATIME;
    if (!conf.data_rw) flags |= MS_RDONLY;
    if (::mount(conf.data_device.c_str(), conf.data_mount.c_str(), conf.data_fstype.c_str(), flags, nullptr) != 0) {
      fatal(absl::StrCat("mount ", conf.data_device, " on ", conf.data_mount, " (", conf.data_fstype, ", ",
                         mount_options(conf), "): ", std::strerror(errno)));
    }
    set_cstr(g_data_mount, sizeof(g_data_mount), conf.data_mount);
    g_report.data = absl::StrCat(conf.data_device, " on ", conf.data_mount, " (", conf.data_fstype, ", ",
                                 mount_options(conf), ")");
    say(absl::StrCat("data disk: ", g_report.data));
  }
  g_report.init_done_s = uptime_s();
}

void fatal(std::string_view reason) {
  put("kosoku: fatal: ");
  put(reason);
  put("\n");
  if (!is_pid1()) ::_exit(1);
  if (g_stopping.exchange(true)) {
    for (;;) ::pause();  // a second fatal error while stopping: the first one finishes the job
  }
  release_data_disk();
  if (g_on_fatal_reboot.load()) {
    put("kosoku: rebooting (on_fatal reboot)\n");
    ::reboot(RB_AUTOBOOT);
  } else {
    put("kosoku: halted (on_fatal halt)\n");
    ::reboot(RB_HALT_SYSTEM);
  }
  for (;;) ::pause();
}

void power_off(bool reboot) {
  put(reboot ? "kosoku: rebooting\n" : "kosoku: powering off\n");
  if (!is_pid1()) ::_exit(0);
  if (g_stopping.exchange(true)) {
    for (;;) ::pause();
  }
  release_data_disk();
  ::reboot(reboot ? RB_AUTOBOOT : RB_POWER_OFF);
  for (;;) ::pause();
}

}  // namespace kosoku::appliance
