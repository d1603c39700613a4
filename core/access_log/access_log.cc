#include "core/access_log/access_log.hh"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kosoku::access_log {

namespace {

constexpr int kOpenFlags = O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC;
constexpr unsigned kReapBatch = 64;

}  // namespace

AccessLogFile::AccessLogFile(reactor::Reactor& reactor, std::string path, size_t buffer_bytes,
                             uint64_t flush_interval_ms)
    : reactor_(reactor),
      path_(std::move(path)),
      cap_(buffer_bytes > 0 ? buffer_bytes : 1),
      flush_interval_ms_(flush_interval_ms) {
  buf_[0] = std::make_unique<char[]>(cap_);
  buf_[1] = std::make_unique<char[]>(cap_);
}

AccessLogFile::~AccessLogFile() {
  if (inflight_ >= 0 || len_[active_] > 0) flush_sync();
  if (inflight_ >= 0) {
    // The ring could not be driven to the write's completion: keep its buffer alive rather than let the
    // kernel read freed memory (a leak at shutdown only).
    (void)buf_[inflight_].release();
  }
  if (fd_ >= 0) ::close(fd_);
}

int AccessLogFile::open() {
  if (fd_ >= 0) return 0;
  reopen_generation_ = base::log_reopen_generation();
  int fd = ::open(path_.c_str(), kOpenFlags, 0644);
  if (fd < 0) return -errno;
  fd_ = fd;
  return 0;
}

int AccessLogFile::reopen() {
  reopen_generation_ = base::log_reopen_generation();
  int fd = ::open(path_.c_str(), kOpenFlags, 0644);
  if (fd < 0) {
    int e = errno;
    KOSOKU_LOG(kError, "reopen of access log \"%s\" failed (%d: %s), keeping the old file", path_, e,
               std::strerror(e));
    return -e;
  }
  if (fd_ < 0) {
    fd_ = fd;
  } else {
    // Same fd number, new file; the old file is closed by dup3 (a write already in the kernel holds its own
    // reference and completes into the old file).
    int rc = ::dup3(fd, fd_, O_CLOEXEC);
    int e = errno;
    ::close(fd);
    if (rc < 0) {
      KOSOKU_LOG(kError, "dup3() for access log \"%s\" failed (%d: %s)", path_, e, std::strerror(e));
      return -e;
    }
  }
  ++stats_.reopens;
  return 0;
}

bool AccessLogFile::append(std::string_view line) {
  bool has_nl = !line.empty() && line.back() == '\n';
  size_t need = line.size() + (has_nl ? 0 : 1);
  if (need > cap_) {
    ++stats_.dropped_lines;
    return false;
  }
  if (len_[active_] + need > cap_) {
    if (inflight_ >= 0) {
      // Both buffers busy: drop, and write the full one as soon as the other is free.
      ++stats_.dropped_lines;
      flush_wanted_ = true;
      return false;
    }
    start_write(active_);  // switches active_ to the empty buffer
  }
  if (len_[active_] == 0) first_line_ms_ = reactor_.now_ms();
  char* dst = buf_[active_].get() + len_[active_];
  std::memcpy(dst, line.data(), line.size());
  if (!has_nl) dst[line.size()] = '\n';
  len_[active_] += need;
  ++lines_in_[active_];
  ++stats_.lines;
  return true;
}

void AccessLogFile::flush_if_due(uint64_t now_ms) {
  if (reopen_generation_ != base::log_reopen_generation()) reopen();
  if (len_[active_] > 0 && now_ms >= first_line_ms_ && now_ms - first_line_ms_ >= flush_interval_ms_) flush();
}

void AccessLogFile::flush() {
  if (len_[active_] == 0) return;
  if (inflight_ >= 0) {
    flush_wanted_ = true;
    return;
  }
  start_write(active_);
}

void AccessLogFile::start_write(int idx) {
  flush_wanted_ = false;
  if (fd_ < 0) {  // never opened (open() failed): nothing can be written
    stats_.dropped_lines += lines_in_[idx];
    len_[idx] = 0;
    lines_in_[idx] = 0;
    return;
  }
  inflight_ = idx;
  inflight_off_ = 0;
  if (active_ == idx) active_ = 1 - idx;
  ++stats_.writes;
  submit_current();
}

void AccessLogFile::submit_current() {
  io_uring_sqe* sqe = reactor_.sqe(this);
  // Offset -1: the file position; with O_APPEND each write goes to the end of the file.
  io_uring_prep_write(sqe, fd_, buf_[inflight_].get() + inflight_off_,
                      static_cast<unsigned>(len_[inflight_] - inflight_off_), static_cast<uint64_t>(-1));
}

void AccessLogFile::complete(int32_t res, uint32_t) {
  int idx = inflight_;
  if (idx < 0) return;
  if (res == -EINTR || res == -EAGAIN) {
    submit_current();
    return;
  }
  if (res > 0) {
    stats_.bytes_written += static_cast<uint64_t>(res);
    inflight_off_ += static_cast<size_t>(res);
    if (inflight_off_ < len_[idx]) {  // short write (e.g. disk full): write the rest
      submit_current();
      return;
    }
  } else {
    int e = res < 0 ? -res : EIO;
    ++stats_.write_errors;
    stats_.dropped_lines += lines_in_[idx];
    KOSOKU_LOG_LIMITED(error_limiter_, reactor_.now_ms(), kError,
                       "write() to access log \"%s\" failed (%d: %s), %d lines lost", path_, e, std::strerror(e),
                       lines_in_[idx]);
  }
  len_[idx] = 0;
  lines_in_[idx] = 0;
  inflight_ = -1;
  if (syncing_ || len_[active_] == 0) return;
  // Write the other buffer right away if asked to, if it is at least half full, or if it is due.
  uint64_t now = reactor_.now_ms();
  if (flush_wanted_ || len_[active_] >= cap_ / 2 || (now >= first_line_ms_ && now - first_line_ms_ >= flush_interval_ms_)) {
    start_write(active_);
  }
}

bool AccessLogFile::wait_inflight() {
  struct Done {
    reactor::IoOp* op;
    int32_t res;
    uint32_t flags;
  };
  io_uring* ring = reactor_.ring();
  while (inflight_ >= 0) {
    int rc = io_uring_submit_and_wait(ring, 1);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) return false;
    // Same dispatch as Reactor::run() step 2: copy, advance, then run completions.
    Done batch[kReapBatch];
    for (;;) {
      unsigned n = 0;
      unsigned head;
      io_uring_cqe* cqe;
      io_uring_for_each_cqe(ring, head, cqe) {
        batch[n++] = Done{static_cast<reactor::IoOp*>(io_uring_cqe_get_data(cqe)), cqe->res, cqe->flags};
        if (n == kReapBatch) break;
      }
      if (n == 0) break;
      io_uring_cq_advance(ring, n);
      for (unsigned i = 0; i < n; ++i) {
        if (batch[i].op != nullptr) batch[i].op->complete(batch[i].res, batch[i].flags);
      }
      if (n < kReapBatch) break;
    }
  }
  return true;
}

int AccessLogFile::write_sync(int idx) {
  if (fd_ < 0) {
    stats_.dropped_lines += lines_in_[idx];
    len_[idx] = 0;
    lines_in_[idx] = 0;
    return -EBADF;
  }
  ++stats_.writes;
  const char* p = buf_[idx].get();
  size_t left = len_[idx];
  int rc = 0;
  while (left > 0) {
    ssize_t w = ::write(fd_, p, left);
    if (w < 0) {
      if (errno == EINTR) continue;
      rc = -errno;
      ++stats_.write_errors;
      stats_.dropped_lines += lines_in_[idx];
      break;
    }
    stats_.bytes_written += static_cast<uint64_t>(w);
    p += w;
    left -= static_cast<size_t>(w);
  }
  len_[idx] = 0;
  lines_in_[idx] = 0;
  return rc;
}

int AccessLogFile::flush_sync() {
  syncing_ = true;
  int rc = 0;
  if (inflight_ >= 0 && !wait_inflight()) rc = -EIO;
  if (inflight_ < 0 && len_[active_] > 0) {
    int r = write_sync(active_);
    if (rc == 0) rc = r;
  }
  flush_wanted_ = false;
  syncing_ = false;
  return rc;
}

AccessLogs::AccessLogs(reactor::Reactor& reactor, uint64_t tick_ms) : reactor_(reactor), tick_ms_(tick_ms) {}

AccessLogs::~AccessLogs() { flush_sync_all(); }

AccessLogFile* AccessLogs::get(std::string_view path, size_t buffer_bytes, uint64_t flush_interval_ms, int* err) {
  auto it = files_.find(absl::string_view(path.data(), path.size()));
  if (it != files_.end()) return it->second.get();
  auto file = std::make_unique<AccessLogFile>(reactor_, std::string(path), buffer_bytes, flush_interval_ms);
  int rc = file->open();
  if (rc < 0) {
    if (err != nullptr) *err = -rc;
    KOSOKU_LOG(kError, "open() \"%s\" failed (%d: %s)", path, -rc, std::strerror(-rc));
    return nullptr;
  }
  AccessLogFile* p = file.get();
  files_.emplace(std::string(path), std::move(file));
  return p;
}

void AccessLogs::start() { reactor_.timers().arm(*this, reactor_.now_ms() + tick_ms_); }

void AccessLogs::fire() {
  uint64_t now = reactor_.now_ms();
  for (auto& [path, file] : files_) file->flush_if_due(now);
  reactor_.timers().arm(*this, now + tick_ms_);
}

void AccessLogs::flush_sync_all() {
  for (auto& [path, file] : files_) file->flush_sync();
}

void AccessLogs::reopen_all() {
  for (auto& [path, file] : files_) file->reopen();
}

}  // namespace kosoku::access_log
