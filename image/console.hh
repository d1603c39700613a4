// The appliance's serial console (ttyS0): a line-oriented operator interface served by its own thread, which
// only reads the per-core counters (architecture.md "Observability"), so it never stalls a worker loop and
// stays responsive while the loops are saturated.
//
// Commands (one per line; `help` lists them):
//   help                 this list
//   stats [json|prom]    stats/export.hh render_text / render_json / render_prometheus of all cores
//   cores                one line of counters per core
//   conns                connections: totals and per core (active, reading, writing, waiting, accepted, rejected)
//   disk                 data disk mount and space, then per disk_queue: submitted, inline, completed,
//                        in_flight, waiting, overflows, errors, latency p50/p99 (µs), totals and per core
//   config               the flashed configuration text with its SHA-256 (computed over the text kosoku
//                        loaded, compared with the digest `make image` stored in /etc/kosoku.conf.sha256)
//   log [N]              the last N (default 20) error_log lines from the in-memory ring (base/log.hh)
//   uptime               time since boot, since the loops started, and how long PID 1's init took
//   version              kosoku version and build options, kernel release, NIC mode, CPUs
//   poweroff | reboot    clean stop (pid1.hh power_off): sync, unmount the data disk, power off / reboot
//   ...                  commands added by other subsystems with add_command() (e.g. `rules`)
//
// Line discipline (the tty is in raw mode, so the kernel does no editing or echo): a line ends at CR or LF
// (CR LF counts once). Echo follows the terminal: a raw terminal (QEMU's stdio, screen, minicom, `socat
// -,raw`) sends CR for Enter and shows nothing by itself, so after a CR-terminated line the console echoes
// what is typed; a script or a line-mode client with local echo ends lines with a bare LF, after which the
// console echoes nothing. Echo starts on. Backspace/DEL erase, Ctrl-U clears the line, Ctrl-C drops it.
// Output lines end in CR LF. After each command's output the console prints the prompt "kosoku> ", which
// scripted clients can use as the end-of-response marker.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/config/conf.hh"
#include "core/stats/counters.hh"

namespace kosoku::appliance {

inline constexpr std::string_view kConsolePrompt = "kosoku> ";

/// Returns the current per-core stats blocks (pointers stay valid while the loops run). Called from the
/// console thread for each stats command.
using CoreStatsSource = std::function<std::vector<const stats::CoreStats*>()>;

/// Assembles lines from raw tty bytes and decides what to echo (see the header comment). Pure; tested alone.
class LineEditor {
 public:
  static constexpr size_t kMaxLine = 256;  // longer input is ignored until the line ends

  struct Output {
    std::vector<std::string> lines;  // complete lines, terminator removed
    std::string echo;                // bytes to write back to the terminal now
  };
  /// Feeds bytes as read from the tty; appends to *out.
  void feed(std::string_view bytes, Output* out);
  bool echo() const { return echo_; }

 private:
  std::string line_;
  bool echo_ = true;
  bool after_cr_ = false;
};

class Console {
 public:
  /// `conf` (for `config` and `version`) must outlive the console. `cores` may return an empty vector
  /// before the loops exist.
  Console(const config::MainConf& conf, CoreStatsSource cores);
  ~Console();
  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;

  /// Adds a command served by another subsystem, e.g. `rules` (core/rules/console.hh): a line whose first
  /// word is `name` is passed whole to `handler`, whose return value is printed. `help` is one line for the
  /// `help` list ("rules get|set|del|count ..."). Call before start(); a built-in name cannot be replaced.
  /// Returns false if the name is taken.
  bool add_command(std::string name, std::string help, std::function<std::string(std::string_view line)> handler);

  /// What `poweroff` (reboot=false) and `reboot` (true) do after printing their reply; default
  /// appliance::power_off. main() may pass a function that stops the loops first.
  void set_power_action(std::function<void(bool reboot)> action) { power_action_ = std::move(action); }

  /// Opens `device` (e.g. "/dev/ttyS0", from `console ttyS0 115200;`), puts it in raw mode at `baud`, prints
  /// a banner and the prompt, and starts the console thread. Returns "" or an error ("open /dev/ttyS1: No
  /// such file or directory").
  std::string start(const std::string& device, uint32_t baud);
  /// The same on an already-open descriptor (tests: a socketpair or pty). The console owns `fd` from now
  /// on. `is_tty` false skips termios.
  std::string start_fd(int fd, bool is_tty);
  /// Stops the thread and closes the descriptor. Idempotent.
  void stop();

  /// The reply to one command line, '\n'-separated, without the prompt (any thread). `poweroff`/`reboot`
  /// return their reply and set *power (when non-null) to 1 (off) / 2 (reboot) instead of acting.
  std::string execute(std::string_view line, int* power = nullptr);

 private:
  void run();
  bool write_all(std::string_view bytes);  // converts '\n' to "\r\n"; gives up after 5 s without progress
  std::string cmd_config() const;
  std::string cmd_disk(const std::vector<const stats::CoreStats*>& cores) const;
  std::string cmd_uptime(const std::vector<const stats::CoreStats*>& cores) const;
  std::string cmd_version() const;

  const config::MainConf& conf_;
  CoreStatsSource cores_;
  std::function<void(bool)> power_action_;
  struct Extra {
    std::string name;
    std::string help;
    std::function<std::string(std::string_view)> handler;
  };
  std::vector<Extra> extra_;  // fixed once start() ran: the console thread reads it without a lock
  int fd_ = -1;
  int wake_fd_ = -1;  // eventfd: stop() wakes the thread's poll()
  std::atomic<bool> stop_{false};
  std::thread thread_;
  LineEditor editor_;
};

/// The network line of `version`: "network kernel (io_uring sockets)" or, for `network dpdk`,
/// "network dpdk 10.0.2.15/24 via 10.0.2.2 on 0000:00:03.0 (DPDK PMD, kosoku's TCP/IP stack)" — the dpdk block's
/// address and gateway (no "via" without one) and the PCI devices PID 1 bound for it (`bound_nics`, omitted
/// when empty, e.g. a vdev).
std::string network_line(const config::NetworkConf& net, const std::vector<std::string>& bound_nics);

}  // namespace kosoku::appliance
