// Per-core buffered access-log writer: nginx's `access_log PATH [FORMAT]` with its `buffer=` and `flush=`
// behaviour always on (https://nginx.org/en/docs/http/ngx_http_log_module.html#access_log). Lines arrive
// already formatted (config/variables.hh expands the log_format); this file only buffers and writes them.
//
// One AccessLogFile per (path, core): each core opens the path itself (O_WRONLY|O_APPEND|O_CREAT), so cores
// share no buffer and no lock. Every write(2) the kernel sees holds whole lines only, so with O_APPEND the
// lines of different cores never interleave inside a line (one write on a local file is appended atomically).
//
// Buffering (bounded, never blocks the loop): lines are copied into the active buffer (64 KiB by default).
// The buffer is written through the core's io_uring (IORING_OP_WRITE, offset -1 = the file position, which
// O_APPEND makes the end of the file) when the next line does not fit, when flush_if_due() finds its oldest
// line older than the flush interval (1 s by default), or on flush(). While that write is in flight, new
// lines go to the second buffer. If the second buffer fills up too, further lines are dropped and counted
// (stats().dropped_lines); memory never grows. A line longer than the buffer is dropped as well.
//
// Errors: a failed write drops that buffer's lines (counted in dropped_lines and write_errors) and logs a
// rate-limited line to the error log; a short write (disk full) resubmits the remainder.
//
// Reopen (SIGUSR1 / logrotate): reopen() opens the path again and installs the new file on the same fd
// number with dup3(2), which closes the old one. A write already in the kernel finishes into the old
// (renamed) file; a write still queued goes to the new file: either way whole lines land in one file, and the
// fd number never refers to an unrelated file. The open itself is a blocking openat(2) on the loop, once per
// signal (nginx's ngx_reopen_files does the same). flush_if_due() performs the reopen on its core when
// base::request_log_reopen() was called (the SIGUSR1 handler's only action).
//
// Threading: every method runs on the owning core's thread (the one running the Reactor).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "core/base/log.hh"
#include "core/reactor/reactor.hh"

namespace kosoku::access_log {

struct AccessLogStats {
  uint64_t lines = 0;          // lines accepted into a buffer
  uint64_t bytes_written = 0;  // bytes the kernel reported written
  uint64_t writes = 0;         // write submissions (io_uring) and synchronous writes (flush_sync)
  uint64_t dropped_lines = 0;  // both buffers full, line longer than the buffer, or lost in a failed write
  uint64_t write_errors = 0;   // writes that completed with an error
  uint64_t reopens = 0;        // successful reopen() calls
};

class AccessLogFile final : private reactor::IoOp {
 public:
  static constexpr size_t kDefaultBufferBytes = 64 * 1024;
  static constexpr uint64_t kDefaultFlushIntervalMs = 1000;

  /// Nothing is opened yet: call open(). buffer_bytes: size of EACH of the two buffers (nginx `buffer=`);
  /// flush_interval_ms: the longest a line waits in a buffer, given a flush_if_due() call at least that often
  /// (nginx `flush=`).
  AccessLogFile(reactor::Reactor& reactor, std::string path, size_t buffer_bytes = kDefaultBufferBytes,
                uint64_t flush_interval_ms = kDefaultFlushIntervalMs);
  /// Writes what is still buffered (flush_sync()) and closes the fd. Destroy before the Reactor.
  ~AccessLogFile();
  AccessLogFile(const AccessLogFile&) = delete;
  AccessLogFile& operator=(const AccessLogFile&) = delete;

  /// Opens the path (O_WRONLY|O_APPEND|O_CREAT|O_CLOEXEC, 0644; blocking: at core setup, before serving).
  /// Returns 0 or -errno. Idempotent.
  int open();

  /// Copies one line into the active buffer, adding '\n' if `line` does not end with one. `line` must not
  /// contain other newlines (the format expansion escapes them, as nginx does). Returns false if the line
  /// was dropped (counted). Never blocks, never allocates.
  bool append(std::string_view line);

  /// Timer hook: reopens if base::request_log_reopen() was called since the last (re)open, then starts a
  /// write if the oldest buffered line was appended at least flush_interval_ms before now_ms
  /// (Reactor::now_ms() clock).
  void flush_if_due(uint64_t now_ms);
  /// Starts a write of the active buffer now (if non-empty); if a write is in flight, it starts as soon as
  /// that one completes.
  void flush();
  /// Shutdown: waits for the in-flight write (driving the core's ring: CQEs reaped meanwhile are dispatched
  /// to their IoOp exactly as the loop would), then writes the rest with blocking write(2). Call on the
  /// owning thread while the Reactor exists (from the loop, or after Reactor::run() returned). Returns 0 or
  /// the first -errno.
  int flush_sync();
  /// Opens the path again and swaps the file in on the same fd number (see the header comment). Returns 0
  /// or -errno (the old file stays in use on error).
  int reopen();

  const std::string& path() const { return path_; }
  int fd() const { return fd_; }
  const AccessLogStats& stats() const { return stats_; }
  bool write_in_flight() const { return inflight_ >= 0; }
  /// Bytes waiting in buffers, including the one being written.
  size_t buffered_bytes() const { return len_[0] + len_[1]; }
  size_t buffer_bytes() const { return cap_; }

 private:
  void complete(int32_t res, uint32_t cqe_flags) override;
  void start_write(int idx);
  void submit_current();
  bool wait_inflight();
  int write_sync(int idx);

  reactor::Reactor& reactor_;
  std::string path_;
  size_t cap_;
  uint64_t flush_interval_ms_;
  int fd_ = -1;
  std::unique_ptr<char[]> buf_[2];
  size_t len_[2] = {0, 0};
  uint64_t lines_in_[2] = {0, 0};
  int active_ = 0;            // buffer receiving appends
  int inflight_ = -1;         // buffer being written, or -1
  size_t inflight_off_ = 0;   // bytes of the in-flight buffer already written (short writes)
  bool flush_wanted_ = false; // write the active buffer as soon as the in-flight write completes
  bool syncing_ = false;      // inside flush_sync(): completions start no new write
  uint64_t first_line_ms_ = 0;
  uint64_t reopen_generation_ = 0;
  base::LogRateLimiter error_limiter_{1000};
  AccessLogStats stats_;
};

/// The access logs of one core: one AccessLogFile per distinct path, and the timer that flushes them.
class AccessLogs final : private reactor::Timer {
 public:
  /// tick_ms: period of the flush timer (each file writes lines older than its flush interval).
  explicit AccessLogs(reactor::Reactor& reactor, uint64_t tick_ms = 250);
  /// flush_sync()s and closes every file.
  ~AccessLogs();

  /// The file for `path` on this core, opened on first use (blocking open: call during core setup). Null if
  /// the open failed (errno in *err when given; the error is also logged at kError).
  AccessLogFile* get(std::string_view path, size_t buffer_bytes = AccessLogFile::kDefaultBufferBytes,
                     uint64_t flush_interval_ms = AccessLogFile::kDefaultFlushIntervalMs, int* err = nullptr);
  /// Arms the periodic flush timer on the core's wheel (re-armed every tick_ms until destruction).
  void start();
  void flush_sync_all();
  void reopen_all();
  size_t size() const { return files_.size(); }

 private:
  void fire() override;

  reactor::Reactor& reactor_;
  uint64_t tick_ms_;
  absl::flat_hash_map<std::string, std::unique_ptr<AccessLogFile>> files_;
};

}  // namespace kosoku::access_log
