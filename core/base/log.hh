// The error log: nginx's `error_log FILE [LEVEL]` (https://nginx.org/en/docs/ngx_core_module.html#error_log).
//
// Levels are nginx's eight, numbered as in src/core/ngx_log.h: emerg 0 .. debug 7. A line is written when its
// level is <= the configured one. KOSOKU_LOG tests the level BEFORE evaluating or formatting its arguments
// (absl::StrFormat, checked at compile time), so a filtered debug line costs one relaxed atomic load.
//
// Line format (nginx's, with the core id where nginx prints the thread id):
//   2026/11/29 19:31:19 [error] 1234#3: message
//   local time, [level], pid#core, ": ", the message. Threads that are not a loop (set_log_core() never
//   called: main, console) print their kernel thread id instead of a core id, as nginx prints its tid; the
//   main thread therefore prints pid#pid.
//
// Output: a file opened O_WRONLY|O_APPEND|O_CREAT, or fd 2 for the path "stderr". Each line is ONE write(2)
// call, so lines from several loops never interleave (O_APPEND on a local file makes each write atomic with
// respect to the file end). Writing is synchronous on the calling loop: a buffered append to a local file
// costs a few µs and error-level events are rare; this is nginx's choice too. Hot, repetitive events must go
// through a LogRateLimiter (one line per interval per core) so an attack cannot turn the log into a
// bottleneck. Lines longer than kMaxLine bytes are truncated (nginx: NGX_MAX_ERROR_STR, 2048).
//
// Reopen (SIGUSR1, logrotate): request_log_reopen() is async-signal-safe and only bumps a process-wide
// generation counter; the error log reopens on its next write (or when someone calls reopen_if_requested()),
// and every http::AccessLogFile reopens from its own core's flush timer. The reopen opens the path again and
// installs the new file on the SAME fd number with dup3(2), which atomically closes the old file: a writer on
// another thread that already loaded the fd number writes either to the old or to the new file, never to an
// unrelated file that reused a closed fd number.
//
// Control bytes: write() turns every byte < 0x20 and 0x7f of a message into `\xHH` (upper-case hex), so one
// call is one line whatever the message carries: a decoded URI holding CR LF cannot start a forged line or
// move the terminal. Values a line quotes that come from a client (paths, request targets, Host) go through
// log_escaped() as well, nginx's access-log escaping, so `"` and `\` in them cannot forge the line's own
// quoting either.
//
// Recent lines: the last kRingLines lines (without the trailing newline) are kept in memory for the serial
// console's `log N`. The ring is guarded by a small mutex (held for one string copy): it is taken only when a
// line is actually written, never on the request path's fast path.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/optimization.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kosoku::base {

/// nginx's levels (src/core/ngx_log.h): NGX_LOG_EMERG 1 .. NGX_LOG_DEBUG 8 there, 0..7 here (conf.hh's
/// MainConf::error_log_level uses the same numbers).
enum class LogLevel : int { kEmerg = 0, kAlert, kCrit, kError, kWarn, kNotice, kInfo, kDebug };

/// "emerg", "alert", "crit", "error", "warn", "notice", "info", "debug".
std::string_view log_level_name(LogLevel level);
/// Inverse of log_level_name (exact, lower case, as in the error_log directive); nullopt if unknown.
std::optional<LogLevel> parse_log_level(std::string_view name);

/// nginx's access-log escaping (ngx_http_log_escape, log_format escape=default): `"`, `\`, bytes < 0x20 and
/// bytes >= 0x7f become `\xHH` (upper-case hex).
constexpr bool log_escapes(unsigned char c) { return c == '"' || c == '\\' || c < 0x20 || c >= 0x7f; }
/// Appends `s` to `out` escaped as log_escapes() says.
void append_log_escaped(std::string& out, std::string_view s);
/// `s` escaped as log_escapes() says: for client-supplied values an error-log line quotes.
std::string log_escaped(std::string_view s);

/// The core id printed after the pid by lines written from the calling thread. Each loop thread calls this
/// once at start with its core id (0..workers-1); -1 (the default) prints the kernel thread id instead.
void set_log_core(int core);
int log_core();

/// Ask every log (error log and access logs) to reopen its file: async-signal-safe (one lock-free atomic
/// increment), callable from a SIGUSR1 handler or any thread. Logs compare log_reopen_generation() with the
/// value they saw at their last (re)open.
void request_log_reopen() noexcept;
uint64_t log_reopen_generation() noexcept;

/// CLOCK_MONOTONIC_COARSE in ms (vDSO, no syscall): for rate limiting outside a loop.
uint64_t coarse_monotonic_ms() noexcept;

class ErrorLog {
 public:
  static constexpr size_t kRingLines = 256;
  static constexpr size_t kMaxLine = 2048;  // bytes, including the newline

  /// A log writing to stderr at kWarn (conf.hh's default level) until open() is called.
  ErrorLog();
  ~ErrorLog();
  ErrorLog(const ErrorLog&) = delete;
  ErrorLog& operator=(const ErrorLog&) = delete;

  /// The process-wide error log used by KOSOKU_LOG.
  static ErrorLog& global();

  /// Directs the log to `path` ("stderr" → fd 2) and sets the level. Opens O_WRONLY|O_APPEND|O_CREAT|
  /// O_CLOEXEC, mode 0644 (blocking: call at startup, before the loops, or from a non-loop thread).
  /// Returns 0, or -errno with the previous target and level kept.
  int open(std::string_view path, LogLevel level);
  void set_level(LogLevel level) { level_.store(static_cast<int>(level), std::memory_order_relaxed); }
  LogLevel level() const { return static_cast<LogLevel>(level_.load(std::memory_order_relaxed)); }
  /// The cheap filter test KOSOKU_LOG does before anything else.
  bool enabled(LogLevel level) const {
    return static_cast<int>(level) <= level_.load(std::memory_order_relaxed);
  }

  /// Writes one line (prefix + msg + '\n', control bytes as `\xHH`) with one write(2); records it in the ring.
  /// Does NOT test the level (KOSOKU_LOG does). Any thread; first reopens if request_log_reopen() was called.
  void write(LogLevel level, std::string_view msg);

  /// Opens the path again now and swaps it in (see the header comment). Any thread; a no-op returning 0 for
  /// stderr. Returns 0 or -errno (on error the old file stays in use).
  int reopen();
  /// reopen() if request_log_reopen() was called since the last open/reopen; returns true if it reopened.
  bool reopen_if_requested();

  /// The last min(n, kRingLines, lines written) lines, oldest first, without the newline. Any thread.
  std::vector<std::string> recent(size_t n) const;
  /// Lines written since construction (those that passed the level filter).
  uint64_t lines() const;
  /// write(2) calls that failed (the line is still kept in the ring).
  uint64_t write_errors() const { return write_errors_.load(std::memory_order_relaxed); }
  /// The current target path ("stderr" by default).
  std::string path() const;
  /// The fd lines are written to (for tests and for dup2 onto stderr by the appliance init).
  int fd() const { return fd_.load(std::memory_order_relaxed); }

 private:
  void remember(std::string_view line);
  int reopen_locked(uint64_t generation);  // file_mu_ held

  std::atomic<int> level_{static_cast<int>(LogLevel::kWarn)};
  std::atomic<int> fd_{2};
  std::atomic<uint64_t> seen_generation_{0};
  std::atomic<uint64_t> write_errors_{0};

  mutable std::mutex file_mu_;  // serializes open/reopen; writers never take it
  int own_fd_ = -1;             // our fd number, stable for the life of the log once created
  std::string path_ = "stderr";

  mutable std::mutex ring_mu_;
  std::array<std::string, kRingLines> ring_;
  uint64_t ring_count_ = 0;  // lines ever stored; the next slot is ring_count_ % kRingLines
};

/// Allows one line per `interval_ms` (default 1 s) and counts the ones it suppresses. Not thread-safe: each
/// core owns its own limiter (a member of its per-core object, or thread_local through KOSOKU_LOG_EVERY_MS).
class LogRateLimiter {
 public:
  constexpr explicit LogRateLimiter(uint64_t interval_ms = 1000) : interval_ms_(interval_ms) {}

  /// True if a line may be written at now_ms (a monotonic ms clock, e.g. Reactor::now_ms()); the first call
  /// is always allowed. When true, suppressed_before() tells how many lines were refused since the
  /// previous allowed one.
  bool allow(uint64_t now_ms) {
    if (has_last_ && now_ms >= last_ms_ && now_ms - last_ms_ < interval_ms_) {
      ++pending_;
      ++total_suppressed_;
      return false;
    }
    has_last_ = true;
    last_ms_ = now_ms;
    suppressed_before_ = pending_;
    pending_ = 0;
    return true;
  }
  uint64_t suppressed_before() const { return suppressed_before_; }
  uint64_t total_suppressed() const { return total_suppressed_; }
  uint64_t interval_ms() const { return interval_ms_; }

 private:
  uint64_t interval_ms_;
  uint64_t last_ms_ = 0;
  uint64_t pending_ = 0;
  uint64_t suppressed_before_ = 0;
  uint64_t total_suppressed_ = 0;
  bool has_last_ = false;
};

namespace internal {
/// ", N similar messages suppressed" when n > 0, else "".
std::string suppressed_suffix(uint64_t n);
}  // namespace internal

}  // namespace kosoku::base

/// KOSOKU_LOG_TO(log, level, format, args...): log is a kosoku::base::ErrorLog&, level a LogLevel value. The
/// arguments are evaluated and formatted only if the level passes the filter.
#define KOSOKU_LOG_TO(logger, level, ...)                                                  \
  do {                                                                                     \
    ::kosoku::base::ErrorLog& kosoku_log_ref_ = (logger);                                  \
    const ::kosoku::base::LogLevel kosoku_log_level_ = (level);                            \
    if (ABSL_PREDICT_FALSE(kosoku_log_ref_.enabled(kosoku_log_level_))) {                  \
      kosoku_log_ref_.write(kosoku_log_level_, ::absl::StrFormat(__VA_ARGS__));            \
    }                                                                                      \
  } while (0)

/// KOSOKU_LOG(kError, "open() \"%s\" failed (%d)", path, err): the global error log; the first argument is a
/// LogLevel enumerator name (kEmerg .. kDebug).
#define KOSOKU_LOG(level, ...) \
  KOSOKU_LOG_TO(::kosoku::base::ErrorLog::global(), ::kosoku::base::LogLevel::level, __VA_ARGS__)

/// KOSOKU_LOG_LIMITED(limiter, now_ms, kError, format, args...): like KOSOKU_LOG, through a caller-owned
/// per-core LogRateLimiter; an allowed line after suppressed ones ends with ", N similar messages suppressed".
#define KOSOKU_LOG_LIMITED(limiter, now_ms, level, ...)                                                \
  do {                                                                                                 \
    ::kosoku::base::ErrorLog& kosoku_log_ref_ = ::kosoku::base::ErrorLog::global();                    \
    if (ABSL_PREDICT_FALSE(kosoku_log_ref_.enabled(::kosoku::base::LogLevel::level)) &&                \
        (limiter).allow(now_ms)) {                                                                     \
      kosoku_log_ref_.write(::kosoku::base::LogLevel::level,                                           \
                            ::absl::StrCat(::absl::StrFormat(__VA_ARGS__),                             \
                                           ::kosoku::base::internal::suppressed_suffix(                \
                                               (limiter).suppressed_before())));                       \
    }                                                                                                  \
  } while (0)

/// KOSOKU_LOG_EVERY_MS(1000, kWarn, format, args...): at most one line per interval per call site per thread
/// (= per core), using a thread_local limiter and the coarse monotonic clock.
#define KOSOKU_LOG_EVERY_MS(interval_ms, level, ...)                                                   \
  do {                                                                                                 \
    static thread_local ::kosoku::base::LogRateLimiter kosoku_log_limiter_(interval_ms);              \
    KOSOKU_LOG_LIMITED(kosoku_log_limiter_, ::kosoku::base::coarse_monotonic_ms(), level, __VA_ARGS__); \
  } while (0)
