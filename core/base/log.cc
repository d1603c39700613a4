#include "core/base/log.hh"

#include <fcntl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

namespace kosoku::base {

namespace {

constexpr std::string_view kLevelNames[] = {"emerg", "alert", "crit", "error", "warn", "notice", "info", "debug"};

std::atomic<uint64_t> g_reopen_generation{0};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "request_log_reopen must be async-signal-safe");

thread_local int t_core = -1;

// Per-thread cache of the "YYYY/MM/DD HH:MM:SS" prefix for the current second.
struct TimeCache {
  int64_t second = -1;
  char text[64] = {};  // 19 used; room for out-of-range years keeps -Wformat-truncation quiet
};
thread_local TimeCache t_time;

std::string_view local_time_prefix() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  if (ts.tv_sec != t_time.second) {
    t_time.second = ts.tv_sec;
    time_t t = ts.tv_sec;
    tm lt;
    localtime_r(&t, &lt);
    snprintf(t_time.text, sizeof(t_time.text), "%04d/%02d/%02d %02d:%02d:%02d", lt.tm_year + 1900, lt.tm_mon + 1,
             lt.tm_mday, lt.tm_hour, lt.tm_min, lt.tm_sec);
  }
  return std::string_view(t_time.text, 19);
}

int open_append(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  return fd >= 0 ? fd : -errno;
}

// One write(2) for the whole line; retried only for EINTR and for short writes (pipes, ttys).
bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

constexpr char kHex[] = "0123456789ABCDEF";

void append_hex_escape(std::string& out, unsigned char c) {
  const char e[4] = {'\\', 'x', kHex[c >> 4], kHex[c & 15]};
  out.append(e, 4);
}

}  // namespace

void append_log_escaped(std::string& out, std::string_view s) {
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (log_escapes(c)) {
      append_hex_escape(out, c);
    } else {
      out.push_back(ch);
    }
  }
}

std::string log_escaped(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  append_log_escaped(out, s);
  return out;
}

std::string_view log_level_name(LogLevel level) {
  int i = static_cast<int>(level);
  return (i >= 0 && i < 8) ? kLevelNames[i] : std::string_view("unknown");
}

std::optional<LogLevel> parse_log_level(std::string_view name) {
  for (int i = 0; i < 8; ++i) {
    if (kLevelNames[i] == name) return static_cast<LogLevel>(i);
  }
  return std::nullopt;
}

void set_log_core(int core) { t_core = core; }
int log_core() { return t_core; }

void request_log_reopen() noexcept { g_reopen_generation.fetch_add(1, std::memory_order_release); }
uint64_t log_reopen_generation() noexcept { return g_reopen_generation.load(std::memory_order_acquire); }

uint64_t coarse_monotonic_ms() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000u + static_cast<uint64_t>(ts.tv_nsec) / 1000000u;
}

namespace internal {
std::string suppressed_suffix(uint64_t n) {
  if (n == 0) return std::string();
  return absl::StrCat(", ", n, n == 1 ? " similar message suppressed" : " similar messages suppressed");
}
}  // namespace internal

ErrorLog::ErrorLog() { seen_generation_.store(log_reopen_generation(), std::memory_order_relaxed); }

ErrorLog::~ErrorLog() {
  if (own_fd_ >= 0) ::close(own_fd_);
}

ErrorLog& ErrorLog::global() {
  static ErrorLog* log = new ErrorLog();  // never destroyed: loops may still log during static destruction
  return *log;
}

int ErrorLog::open(std::string_view path, LogLevel level) {
  std::lock_guard<std::mutex> lock(file_mu_);
  std::string p(path);
  uint64_t gen = log_reopen_generation();
  if (p == "stderr") {
    if (own_fd_ >= 0) {
      // Keep our fd number (other threads may hold it) and point it at stderr.
      if (::dup3(2, own_fd_, O_CLOEXEC) < 0) return -errno;
    } else {
      fd_.store(2, std::memory_order_relaxed);
    }
  } else {
    int fd = open_append(p);
    if (fd < 0) return fd;
    if (own_fd_ < 0) {
      own_fd_ = fd;
      fd_.store(fd, std::memory_order_release);
    } else {
      int rc = ::dup3(fd, own_fd_, O_CLOEXEC);
      int e = errno;
      ::close(fd);
      if (rc < 0) return -e;
    }
  }
  path_ = std::move(p);
  seen_generation_.store(gen, std::memory_order_relaxed);
  set_level(level);
  return 0;
}

int ErrorLog::reopen() {
  std::lock_guard<std::mutex> lock(file_mu_);
  return reopen_locked(log_reopen_generation());
}

int ErrorLog::reopen_locked(uint64_t generation) {
  seen_generation_.store(generation, std::memory_order_relaxed);
  if (path_ == "stderr" || own_fd_ < 0) return 0;
  int fd = open_append(path_);
  if (fd < 0) return fd;
  int rc = ::dup3(fd, own_fd_, O_CLOEXEC);  // atomically closes the old file, keeps the number
  int e = errno;
  ::close(fd);
  return rc < 0 ? -e : 0;
}

bool ErrorLog::reopen_if_requested() {
  uint64_t gen = log_reopen_generation();
  if (seen_generation_.load(std::memory_order_relaxed) == gen) return false;
  std::lock_guard<std::mutex> lock(file_mu_);
  if (seen_generation_.load(std::memory_order_relaxed) == gen) return false;  // another thread just did it
  reopen_locked(gen);
  return true;
}

void ErrorLog::write(LogLevel level, std::string_view msg) {
  reopen_if_requested();

  thread_local std::string line;
  line.clear();
  if (line.capacity() < kMaxLine) line.reserve(kMaxLine);
  int core = t_core >= 0 ? t_core : static_cast<int>(::syscall(SYS_gettid));
  std::string_view prefix = local_time_prefix();
  std::string_view name = log_level_name(level);
  line.append(prefix).append(" [").append(name).append("] ");
  absl::StrAppend(&line, ::getpid(), "#", core, ": ");
  // The message, its control bytes as \xHH (never cut inside an escape), up to kMaxLine with the newline.
  const size_t limit = kMaxLine - 1;
  for (char ch : msg) {
    const auto c = static_cast<unsigned char>(ch);
    const bool control = c < 0x20 || c == 0x7f;
    if (line.size() + (control ? 4 : 1) > limit) break;
    if (control) {
      append_hex_escape(line, c);
    } else {
      line.push_back(ch);
    }
  }
  line.push_back('\n');

  if (!write_all(fd_.load(std::memory_order_acquire), line.data(), line.size())) {
    write_errors_.fetch_add(1, std::memory_order_relaxed);
  }
  remember(std::string_view(line.data(), line.size() - 1));
}

void ErrorLog::remember(std::string_view line) {
  std::lock_guard<std::mutex> lock(ring_mu_);
  ring_[ring_count_ % kRingLines].assign(line.data(), line.size());
  ++ring_count_;
}

std::vector<std::string> ErrorLog::recent(size_t n) const {
  std::lock_guard<std::mutex> lock(ring_mu_);
  uint64_t avail = ring_count_ < kRingLines ? ring_count_ : kRingLines;
  if (n > avail) n = avail;
  std::vector<std::string> out;
  out.reserve(n);
  for (uint64_t i = ring_count_ - n; i < ring_count_; ++i) out.push_back(ring_[i % kRingLines]);
  return out;
}

uint64_t ErrorLog::lines() const {
  std::lock_guard<std::mutex> lock(ring_mu_);
  return ring_count_;
}

std::string ErrorLog::path() const {
  std::lock_guard<std::mutex> lock(file_mu_);
  return path_;
}

}  // namespace kosoku::base
