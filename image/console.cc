// Serial console thread and commands. See console.hh.
#include "image/console.hh"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/base/log.hh"
#include "core/stats/export.hh"
#include "image/nic.hh"
#include "image/pid1.hh"
#include "image/sha256.hh"

#ifndef KOSOKU_VERSION
#define KOSOKU_VERSION "unknown"
#endif
#ifndef KOSOKU_BUILD_OPTIONS
#define KOSOKU_BUILD_OPTIONS ""
#endif

namespace kosoku::appliance {
namespace {

constexpr int kWriteStallMs = 5000;
constexpr size_t kDefaultLogLines = 20;

constexpr std::string_view kBuiltins[] = {"help", "?", "stats", "cores", "conns", "disk", "config", "log",
                                          "uptime", "version", "poweroff", "halt", "reboot"};

constexpr std::string_view kHelp =
    "commands:\n"
    "  help               this list\n"
    "  stats [json|prom]  counters of all cores: text, JSON or Prometheus\n"
    "  cores              one line per core\n"
    "  conns              connections, total and per core\n"
    "  disk               data disk and disk_queue counters (in flight, overflows, latency)\n"
    "  config             the flashed configuration and its SHA-256\n"
    "  log [N]            the last N error_log lines (default 20)\n"
    "  uptime             time since boot and since the loops started\n"
    "  version            version, build, kernel, NIC mode\n"
    "  poweroff           sync, unmount the data disk, power off\n"
    "  reboot             sync, unmount the data disk, reboot";

speed_t baud_constant(uint32_t baud) {
  switch (baud) {
    case 9600: return B9600;
    case 19200: return B19200;
    case 38400: return B38400;
    case 57600: return B57600;
    case 230400: return B230400;
    case 460800: return B460800;
    case 921600: return B921600;
    default: return B115200;
  }
}

std::string read_file(const std::string& path) {
  std::string out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

std::string responses(const stats::CoreStats& c) {
  return absl::StrCat("1xx ", c.responses[1], " 2xx ", c.responses[2], " 3xx ", c.responses[3], " 4xx ",
                      c.responses[4], " 5xx ", c.responses[5], " other ", c.responses[0]);
}

std::string conn_line(const stats::CoreStats& c) {
  return absl::StrCat("active ", c.conn_active, " reading ", c.conn_reading, " writing ", c.conn_writing,
                      " waiting ", c.conn_idle, " accepted ", c.conn_accepted, " rejected ", c.conn_rejected);
}

std::string disk_line(const stats::DiskQueueStats& q) {
  return absl::StrCat(q.name, ": submitted ", q.submitted, " inline ", q.inline_done, " completed ", q.completed,
                      " in_flight ", q.in_flight, " waiting ", q.waiting, " overflows ", q.overflows, " errors ",
                      q.errors, " latency_us p50 ", q.latency.quantile_us(0.5), " p99 ",
                      q.latency.quantile_us(0.99), " (", q.latency.count, " samples)");
}

std::string human_bytes(uint64_t b) {
  if (b >= (1ull << 30)) return absl::StrFormat("%.1f GiB", static_cast<double>(b) / (1ull << 30));
  if (b >= (1ull << 20)) return absl::StrFormat("%.1f MiB", static_cast<double>(b) / (1ull << 20));
  return absl::StrCat(b / 1024, " KiB");
}

}  // namespace

std::string network_line(const config::NetworkConf& net, const std::vector<std::string>& bound_nics) {
  if (net.backend != config::NetworkBackend::kDpdk) return "network kernel (io_uring sockets)";
  const auto dotted = [](uint32_t host_order) { return ipv4_to_string(in_addr{htonl(host_order)}); };
  std::string out = absl::StrCat("network dpdk ", dotted(net.dpdk.address), "/", net.dpdk.prefix_len);
  if (net.dpdk.gateway != 0) absl::StrAppend(&out, " via ", dotted(net.dpdk.gateway));
  if (!bound_nics.empty()) absl::StrAppend(&out, " on ", absl::StrJoin(bound_nics, " "));
  absl::StrAppend(&out, " (DPDK PMD, kosoku's TCP/IP stack)");
  return out;
}

void LineEditor::feed(std::string_view bytes, Output* out) {
  for (const char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n' && after_cr_) {  // CR LF: one terminator; a client that sends it does its own echo
      after_cr_ = false;
      echo_ = false;
      continue;
    }
    after_cr_ = false;
    if (c == '\r' || c == '\n') {
      if (c == '\r') {
        echo_ = true;  // a raw terminal's Enter
        after_cr_ = true;
        out->echo += '\n';
      } else {
        echo_ = false;  // a script or a line-mode client
      }
      out->lines.push_back(std::move(line_));
      line_.clear();
    } else if (c == 0x7f || c == 0x08) {
      if (!line_.empty()) {
        line_.pop_back();
        if (echo_) out->echo += "\b \b";
      }
    } else if (c == 0x15) {  // Ctrl-U
      if (echo_) {
        for (size_t i = 0; i < line_.size(); ++i) out->echo += "\b \b";
      }
      line_.clear();
    } else if (c == 0x03) {  // Ctrl-C
      line_.clear();
      if (echo_) out->echo += "^C\n";
      out->lines.emplace_back();
    } else if (c >= 0x20 || c == '\t') {
      if (line_.size() < kMaxLine) {
        line_ += c == '\t' ? ' ' : ch;
        if (echo_) out->echo += c == '\t' ? ' ' : ch;
      }
    }
  }
}

Console::Console(const config::MainConf& conf, CoreStatsSource cores)
    : conf_(conf), cores_(std::move(cores)), power_action_([](bool reboot) { power_off(reboot); }) {}

Console::~Console() { stop(); }

bool Console::add_command(std::string name, std::string help,
                          std::function<std::string(std::string_view line)> handler) {
  name = absl::AsciiStrToLower(name);
  if (thread_.joinable() || name.empty() || !handler) return false;
  for (std::string_view b : kBuiltins) {
    if (b == name) return false;
  }
  for (const Extra& e : extra_) {
    if (e.name == name) return false;
  }
  extra_.push_back({std::move(name), std::move(help), std::move(handler)});
  return true;
}

std::string Console::start(const std::string& device, uint32_t baud) {
  const int fd = ::open(device.c_str(), O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return absl::StrCat("open ", device, ": ", std::strerror(errno));
  termios t{};
  if (::tcgetattr(fd, &t) == 0) {
    ::cfmakeraw(&t);  // no ICANON/ECHO/ICRNL/OPOST: the console does its own line editing and CR LF
    t.c_cflag |= CLOCAL | CREAD;
    t.c_cc[VMIN] = 1;
    t.c_cc[VTIME] = 0;
    ::cfsetispeed(&t, baud_constant(baud));
    ::cfsetospeed(&t, baud_constant(baud));
    ::tcsetattr(fd, TCSANOW, &t);
  }
  return start_fd(fd, false);
}

std::string Console::start_fd(int fd, bool is_tty) {
  if (thread_.joinable()) return "console already started";
  if (is_tty) {
    termios t{};
    if (::tcgetattr(fd, &t) == 0) {
      ::cfmakeraw(&t);
      ::tcsetattr(fd, TCSANOW, &t);
    }
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  fd_ = fd;
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) return absl::StrCat("eventfd: ", std::strerror(errno));
  stop_.store(false);
  thread_ = std::thread([this] { run(); });
  return "";
}

void Console::stop() {
  if (thread_.joinable()) {
    stop_.store(true);
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  if (fd_ >= 0) ::close(fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  fd_ = wake_fd_ = -1;
}

bool Console::write_all(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() + bytes.size() / 16);
  for (const char c : bytes) {
    if (c == '\n') out += '\r';
    out += c;
  }
  std::string_view rest = out;
  while (!rest.empty()) {
    const ssize_t n = ::write(fd_, rest.data(), rest.size());
    if (n > 0) {
      rest.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN) return false;
    pollfd p{fd_, POLLOUT, 0};
    if (::poll(&p, 1, kWriteStallMs) <= 0 || stop_.load()) return false;  // nobody is draining the port
  }
  return true;
}

void Console::run() {
  ::pthread_setname_np(::pthread_self(), "console");
  write_all(absl::StrCat("\nkosoku ", KOSOKU_VERSION, " serial console: type help\n", kConsolePrompt));
  char buf[512];
  while (!stop_.load()) {
    pollfd p[2] = {{fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p[1].revents != 0 || stop_.load()) break;
    const ssize_t n = ::read(fd_, buf, sizeof(buf));
    if (n == 0) break;  // a socket peer closed (tests); a tty never returns 0 in raw mode
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      ::usleep(100 * 1000);  // e.g. EIO while the line is hung up: do not spin
      continue;
    }
    LineEditor::Output out;
    editor_.feed(std::string_view(buf, static_cast<size_t>(n)), &out);
    if (!out.echo.empty()) write_all(out.echo);
    for (const std::string& line : out.lines) {
      int power = 0;
      std::string reply = execute(line, &power);
      if (!reply.empty() && reply.back() != '\n') reply += '\n';
      // A scripted client (no echo) always gets "\nkosoku> ", so "\n" + prompt marks the end of every reply;
      // a terminal already moved to a new line with the echoed Enter.
      if (reply.empty() && !editor_.echo()) reply = "\n";
      if (power != 0) {
        write_all(reply);
        power_action_(power == 2);
        continue;
      }
      write_all(absl::StrCat(reply, kConsolePrompt));
    }
  }
}

std::string Console::execute(std::string_view line, int* power) {
  std::vector<std::string> words = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  if (words.empty()) return "";
  const std::string cmd = absl::AsciiStrToLower(words[0]);
  const std::string arg = words.size() > 1 ? absl::AsciiStrToLower(words[1]) : "";
  if (cmd == "help" || cmd == "?") {
    std::string out(kHelp);
    for (const Extra& e : extra_) absl::StrAppend(&out, "\n  ", absl::StrFormat("%-18s %s", e.name, e.help));
    return out;
  }
  for (const Extra& e : extra_) {
    if (e.name == cmd) return e.handler(line);
  }

  const bool needs_stats = cmd == "stats" || cmd == "cores" || cmd == "conns" || cmd == "disk" || cmd == "uptime";
  std::vector<const stats::CoreStats*> cores;
  if (needs_stats && cores_) cores = cores_();

  if (cmd == "stats") {
    stats::Snapshot s = stats::aggregate(cores);
    stats::add_extra(s);
    if (arg.empty() || arg == "text") return stats::render_text(s);
    if (arg == "json") return stats::render_json(s);
    if (arg == "prom" || arg == "prometheus") return stats::render_prometheus(s);
    return absl::StrCat("usage: stats [json|prom]");
  }
  if (cmd == "cores") {
    stats::Snapshot s = stats::aggregate(cores);
    stats::add_extra(s);
    if (s.cores.empty()) return "no worker loops running";
    std::string out;
    for (const stats::CoreStats& c : s.cores) {
      absl::StrAppend(&out, "core ", c.core, ": ", conn_line(c), " requests ", c.requests, " bytes_in ", c.bytes_in,
                      " bytes_out ", c.bytes_out, " ", responses(c), " ofc_hits ", c.ofc_hits, " ofc_misses ",
                      c.ofc_misses, " loop_iterations ", c.loop_iterations, "\n");
    }
    return out;
  }
  if (cmd == "conns") {
    stats::Snapshot s = stats::aggregate(cores);
    stats::add_extra(s);
    std::string out = absl::StrCat("total: ", conn_line(s.total), "\n");
    for (const stats::CoreStats& c : s.cores) absl::StrAppend(&out, "core ", c.core, ": ", conn_line(c), "\n");
    return out;
  }
  if (cmd == "disk") return cmd_disk(cores);
  if (cmd == "config") return cmd_config();
  if (cmd == "log") {
    size_t n = kDefaultLogLines;
    if (!arg.empty() && (!absl::SimpleAtoi(arg, &n) || n == 0)) return "usage: log [N]  (N > 0)";
    const std::vector<std::string> lines = base::ErrorLog::global().recent(n);
    if (lines.empty()) return "(no error_log lines yet)";
    std::string out;
    for (const std::string& l : lines) absl::StrAppend(&out, l, "\n");
    return out;
  }
  if (cmd == "uptime") return cmd_uptime(cores);
  if (cmd == "version") return cmd_version();
  if (cmd == "poweroff" || cmd == "halt" || cmd == "reboot") {
    const bool reboot = cmd == "reboot";
    if (power != nullptr) *power = reboot ? 2 : 1;
    return reboot ? "rebooting: syncing and unmounting the data disk" : "powering off: syncing and unmounting the data disk";
  }
  return absl::StrCat("unknown command \"", words[0], "\": type help");
}

std::string Console::cmd_config() const {
  std::string text = conf_.text;
  if (text.empty() && !conf_.file.empty()) text = read_file(conf_.file);
  const std::string digest = sha256_hex(text);
  std::string flashed = read_file(kFlashedConfigShaPath);
  flashed = std::string(absl::StripAsciiWhitespace(flashed).substr(0, 64));
  std::string verdict;
  if (flashed.empty()) {
    verdict = "no flashed digest found (not an appliance image?)";
  } else if (flashed == digest) {
    verdict = "matches the digest flashed by make image";
  } else {
    verdict = absl::StrCat("DIFFERS from the flashed digest ", flashed);
  }
  std::string out = absl::StrCat("# config ", conf_.file, " (", text.size(), " bytes)\n# sha256 ", digest, "  ",
                                 verdict, "\n", text);
  if (!out.empty() && out.back() != '\n') out += '\n';
  absl::StrAppend(&out, "# end of config, sha256 ", digest);
  return out;
}

std::string Console::cmd_disk(const std::vector<const stats::CoreStats*>& cores) const {
  const BootReport& boot = boot_report();
  std::string out = absl::StrCat("data disk: ", boot.data.empty() ? "not mounted (not running as PID 1)" : boot.data);
  struct statvfs v {};
  if (!conf_.appliance.data_mount.empty() && !boot.data.empty() && boot.data != "none" &&
      ::statvfs(conf_.appliance.data_mount.c_str(), &v) == 0) {
    const uint64_t total = uint64_t{v.f_blocks} * v.f_frsize;
    const uint64_t avail = uint64_t{v.f_bavail} * v.f_frsize;
    absl::StrAppend(&out, ", size ", human_bytes(total), ", used ", human_bytes(total - uint64_t{v.f_bfree} * v.f_frsize),
                    ", available ", human_bytes(avail), ", inodes used ", v.f_files - v.f_ffree, "/", v.f_files);
  }
  out += "\n";
  const stats::Snapshot s = stats::aggregate(cores);
  if (s.total.disk.empty()) return absl::StrCat(out, "no disk_queue counters yet");
  for (const stats::DiskQueueStats& q : s.total.disk) absl::StrAppend(&out, "queue ", disk_line(q), "\n");
  if (s.cores.size() > 1) {
    for (const stats::CoreStats& c : s.cores) {
      for (const stats::DiskQueueStats& q : c.disk) absl::StrAppend(&out, "  core ", c.core, " ", disk_line(q), "\n");
    }
  }
  return out;
}

std::string Console::cmd_uptime(const std::vector<const stats::CoreStats*>& cores) const {
  const double up = uptime_s();
  std::string out = absl::StrFormat("up %.1f s", up);
  const BootReport& boot = boot_report();
  if (boot.init_done_s > 0) {
    absl::StrAppend(&out, absl::StrFormat(", PID 1 started at %.3f s, init took %.0f ms", boot.init_start_s,
                                          (boot.init_done_s - boot.init_start_s) * 1000));
  }
  const stats::Snapshot s = stats::aggregate(cores);
  if (s.total.start_time_s != 0) absl::StrAppend(&out, ", serving for ", s.uptime_s, " s");
  return out;
}

std::string Console::cmd_version() const {
  utsname u{};
  ::uname(&u);
  const BootReport& boot = boot_report();
  std::string out = absl::StrCat("kosoku ", KOSOKU_VERSION, " (", KOSOKU_BUILD_OPTIONS, ")\nLinux ", u.release, " ",
                                 u.machine, ", ", ::sysconf(_SC_NPROCESSORS_ONLN), " CPUs online, ",
                                 conf_.worker_processes, " worker loops");
  if (!boot.nic_mode.empty()) absl::StrAppend(&out, "\nNIC mode ", boot.nic_mode);
  if (!boot.interface.empty()) absl::StrAppend(&out, ", ", boot.interface);
  absl::StrAppend(&out, "\n", network_line(conf_.network, boot.bound_nics));
  return out;
}

}  // namespace kosoku::appliance
